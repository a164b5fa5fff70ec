"""Open issues of the official DGX Spark playbooks (G8).

Order of sources: a fresh on-disk cache (within ``g8.cache_ttl_s``), then the ``gh`` CLI when it
is installed and logged in, then the GitHub REST API over ``urllib``; on failure a stale cache is
used and says how old it is. ``--offline`` never touches the network but still reports a cache.
A token from ``GITHUB_TOKEN``/``GH_TOKEN`` is sent only to the API origin (scheme, host and port),
never along a redirect or a pagination link to anywhere else, and never stored. The REST fetch,
name lookup included, stays within one deadline.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sparkops.facts.model import PlaybookIssue, PlaybookIssuesFacts
from sparkops.facts.reading import Why, missing
from sparkops.facts.redact import redact_text
from sparkops.facts.snapshot import write_atomic
from sparkops.probes._run import run, which

SECTION = "playbooks"

REPO = "NVIDIA/dgx-spark-playbooks"
DEFAULT_API = "https://api.github.com"
CACHE_FILE = "playbook-issues.json"
MAX_ISSUES = 200
_UTC = timezone.utc  # noqa: UP017 - the project still supports Python 3.10


@dataclass(frozen=True)
class Cached:
    issues: list[PlaybookIssue]
    fetched_at: datetime
    source: str


class FetchError(Exception):
    """A source could not deliver the issue list (the message says why, for the report)."""

    def __init__(self, message: str, why: Why = Why.error) -> None:
        super().__init__(message)
        self.why = why


# --------------------------------------------------------------------------- parsing
def _labels(raw: Any) -> list[str]:
    out: list[str] = []
    for lab in raw if isinstance(raw, list) else []:
        name = lab.get("name") if isinstance(lab, Mapping) else lab if isinstance(lab, str) else None
        if isinstance(name, str):
            out.append(name)
    return out


def parse_issues(data: Any) -> list[PlaybookIssue]:
    """Issues from a ``gh issue list --json`` or REST ``/issues`` list; pull requests dropped."""
    if not isinstance(data, list):
        raise FetchError(f"expected a JSON list, got {type(data).__name__}")
    out: list[PlaybookIssue] = []
    for item in data:
        if not isinstance(item, Mapping) or "pull_request" in item:
            continue
        number, title = item.get("number"), item.get("title")
        if not isinstance(number, int) or isinstance(number, bool) or not isinstance(title, str):
            continue
        updated = item.get("updatedAt") or item.get("updated_at") or ""
        out.append(PlaybookIssue(number=number, title=title[:300], labels=_labels(item.get("labels")),
                                 updated_at=str(updated)))
    return out


# --------------------------------------------------------------------------- cache
def default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "dgx-spark-ops"


def read_cache(cache_dir: Path) -> Cached | None:
    """The cached list, or ``None`` when there is none or it is unreadable."""
    try:
        data = json.loads((cache_dir / CACHE_FILE).read_text(encoding="utf-8"))
        if data.get("repo") != REPO:
            return None
        fetched = datetime.fromisoformat(data["fetched_at"])
        if fetched.tzinfo is None:
            fetched = fetched.replace(tzinfo=_UTC)
        return Cached(parse_issues(data["issues"]), fetched, str(data.get("source", "")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, FetchError):
        return None


def write_cache(cache_dir: Path, issues: list[PlaybookIssue], fetched_at: datetime, source: str) -> str:
    """Store the list; returns "" or why it could not be stored (a cache failure is not fatal)."""
    doc = {"repo": REPO, "fetched_at": fetched_at.isoformat(), "source": source,
           "issues": [{"number": i.number, "title": i.title, "labels": i.labels, "updated_at": i.updated_at}
                      for i in issues]}
    try:
        write_atomic(cache_dir / CACHE_FILE, json.dumps(doc, indent=1))
        return ""
    except OSError as exc:
        return f"cache not written: {exc.strerror or exc}"


# --------------------------------------------------------------------------- sources
def fetch_gh(env: Mapping[str, str], timeout_s: float) -> list[PlaybookIssue]:
    """``gh issue list`` when gh is installed and logged in."""
    if not which("gh", env):
        raise FetchError("gh not installed", Why.not_found)
    gh_env = {**env, "GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1", "NO_COLOR": "1"}
    deadline = time.monotonic() + timeout_s
    auth = run(["gh", "auth", "status"], timeout=timeout_s, env=gh_env)
    if not auth.ok:
        why = Why.timeout if auth.error == "timeout" else Why.no_permission
        raise FetchError(f"gh auth status: {redact_text(auth.describe())}", why)
    res = run(["gh", "issue", "list", "-R", REPO, "--state", "open", "--limit", str(MAX_ISSUES),
               "--json", "number,title,labels,updatedAt"],
              timeout=max(0.1, deadline - time.monotonic()), env=gh_env)
    if not res.ok:
        raise FetchError(f"gh issue list: {redact_text(res.describe())}",
                         Why.timeout if res.error == "timeout" else Why.error)
    try:
        return parse_issues(json.loads(res.stdout))
    except ValueError as exc:
        raise FetchError(f"gh issue list printed no JSON ({exc})") from None


def _timed_out(timeout_s: float) -> FetchError:
    return FetchError(f"GitHub API did not answer within {timeout_s:g} s (timed out)", Why.timeout)


def fetch_rest(env: Mapping[str, str], timeout_s: float) -> list[PlaybookIssue]:
    """GitHub REST ``/repos/{repo}/issues`` (two pages at most), token from the environment if set.

    Socket timeouts do not cover the name lookup (``getaddrinfo`` blocks as long as the resolver
    does), so the fetch runs in a daemon thread and is abandoned at the deadline: a stalled resolver
    costs ``timeout_s``, not the resolver's own retries. An abandoned worker only finishes its lookup
    and exits; it writes nothing.
    """
    deadline = time.monotonic() + timeout_s
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            from sparkops.probes.playbooks_rest import fetch_pages  # urllib, http, ssl: only when online

            outcome["issues"] = fetch_pages(env, timeout_s, deadline)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="sparkops-github-rest", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise _timed_out(timeout_s)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["issues"]


# --------------------------------------------------------------------------- the probe
def _age(now: datetime, then: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _from_cache(cached: Cached, note: str) -> PlaybookIssuesFacts:
    return PlaybookIssuesFacts(repo=REPO, issues=cached.issues, fetched_at=cached.fetched_at, source="cache",
                               note=note[:500])


def fetch(env: Mapping[str, str], cache_dir: Path, offline: bool, timeout_s: float, ttl_s: float,
          now: datetime | None = None) -> PlaybookIssuesFacts:
    """The playbook issues with every source's failure turned into a reason. Never raises."""
    now = now or datetime.now(_UTC)
    cached = read_cache(cache_dir)
    if offline:
        if cached:
            return _from_cache(cached, f"offline: --offline given; cache from {_age(now, cached.fetched_at)} ago")
        return PlaybookIssuesFacts(repo=REPO, issues=missing(Why.not_collected, "offline: --offline given"),
                                   note="offline: --offline given; no cache")
    if cached and 0 <= (now - cached.fetched_at).total_seconds() < ttl_s:
        return _from_cache(cached, f"cache fresh ({_age(now, cached.fetched_at)} old, ttl {ttl_s:g} s)")
    failures: list[str] = []
    last_why = Why.error
    deadline = time.monotonic() + 2 * timeout_s  # gh and REST together stay within two timeouts
    for source, fn in (("gh", fetch_gh), ("rest", fetch_rest)):
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            failures.append(f"{source}: not tried, time budget spent")
            continue
        try:
            issues = fn(env, min(timeout_s, remaining))
        except FetchError as exc:
            failures.append(f"{source}: {exc}")
            last_why = exc.why
            continue
        except Exception as exc:  # an unexpected failure of one source must not hide the other
            failures.append(f"{source}: {type(exc).__name__}: {exc}"[:300])
            continue
        problem = write_cache(cache_dir, issues, now, source)
        note = "; ".join([*failures, problem]) if failures or problem else ""
        return PlaybookIssuesFacts(repo=REPO, issues=issues, fetched_at=now, source=source, note=note[:500])
    reason = "; ".join(failures)
    if cached:
        return _from_cache(cached, f"offline: {reason}; using cache from {_age(now, cached.fetched_at)} ago")
    return PlaybookIssuesFacts(repo=REPO, issues=missing(last_why, f"offline: {reason}"), note=reason[:500])


def collect(opts) -> PlaybookIssuesFacts:
    """The playbooks section for the runner."""
    kb = opts.knowledge()
    cache_dir = opts.cache_dir or default_cache_dir(opts.env)
    return fetch(opts.env, Path(cache_dir), opts.offline, kb.thresholds.g8.timeout_s, kb.thresholds.g8.cache_ttl_s)


def unavailable(why: Why, detail: str) -> PlaybookIssuesFacts:
    return PlaybookIssuesFacts(repo=REPO, issues=missing(why, detail))
