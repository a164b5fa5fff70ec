"""Playbook-issue probe (G8): gh CLI, REST fallback, on-disk cache, offline, hostile sources."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from sparkops.facts.model import PlaybookIssuesFacts
from sparkops.facts.reading import Unavailable, Why
from sparkops.probes import CollectOptions, playbooks
from sparkops.probes.playbooks import (
    CACHE_FILE,
    FetchError,
    fetch,
    fetch_rest,
    parse_issues,
    read_cache,
    write_cache,
)

GITHUB = FIXTURES / "raw" / "github"
BIN = FIXTURES / "bin"
UTC = timezone.utc  # noqa: UP017
NOW = datetime(2026, 9, 4, 12, 0, tzinfo=UTC)
TOKEN = "ghp_" + "T0k3n" * 8
REST_ALL = json.loads((GITHUB / "rest_issues_all.json").read_text())
REAL_ISSUES = sorted(i["number"] for i in REST_ALL if "pull_request" not in i)


# --------------------------------------------------------------------------- a fake GitHub API
class FakeGitHub(BaseHTTPRequestHandler):
    mode = "ok"  # "ok" | "500" | "hang" | "garbage"
    requests: list[dict[str, str]] = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization", ""),
                                    "ua": self.headers.get("User-Agent", "")})
        if self.mode == "500":
            self.send_error(500, "Internal Server Error")
            return
        if self.mode == "hang":
            time.sleep(3)
        if self.mode == "garbage":
            body = b"<html>rate limited</html>"
            link = None
        elif "page=2" in self.path:
            body = (GITHUB / "rest_issues_page2.json").read_bytes()
            link = None
        else:
            body = (GITHUB / "rest_issues_page1.json").read_bytes()
            # page 2 is announced on "localhost", a different host name than the API base (127.0.0.1)
            port = self.server.server_address[1]
            link = (f'<http://localhost:{port}/repos/NVIDIA/dgx-spark-playbooks/issues?state=open&per_page=100'
                    f'&page=2>; rel="next", <http://localhost:{port}/x?page=2>; rel="last"')
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            if link:
                self.send_header("Link", link)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):  # keep pytest output clean
        pass


def _serve(handler: type) -> Iterator[tuple[str, type]]:
    """Serve ``handler`` on a loopback port for one test; yields (base URL, handler class)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def api() -> Iterator[tuple[str, type[FakeGitHub]]]:
    yield from _serve(type("Handler", (FakeGitHub,), {"mode": "ok", "requests": []}))


def gh_path(tmp_path: Path, which: str | None) -> str:
    """A PATH with the fake gh ``which`` linked as ``gh`` (or no gh at all) plus the system tools."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    if which:
        (d / "gh").symlink_to(BIN / which)
    system = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":") if p and not (Path(p) / "gh").exists()]
    return ":".join([str(d), *system])


def env_for(tmp_path: Path, gh: str | None, api_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {"PATH": gh_path(tmp_path, gh), "HOME": str(tmp_path / "home")}
    env["SPARKOPS_GITHUB_API"] = api_url or "http://127.0.0.1:9"  # discard port: connection refused
    env.update(extra)
    return env


def _fetch(env, cache, offline=False, timeout=3.0, ttl=21600.0, now=NOW) -> PlaybookIssuesFacts:
    return fetch(env, cache, offline=offline, timeout_s=timeout, ttl_s=ttl, now=now)


# --------------------------------------------------------------------------- parsing
def test_parse_gh_and_rest_shapes_agree():
    gh = parse_issues(json.loads((GITHUB / "gh_issue_list.json").read_text()))
    rest = parse_issues(REST_ALL)
    assert [i.number for i in gh] == [i.number for i in rest]  # REST's pull requests dropped
    assert sorted(i.number for i in rest) == REAL_ISSUES
    assert {i.number: (i.title, i.labels, i.updated_at) for i in gh} == \
           {i.number: (i.title, i.labels, i.updated_at) for i in rest}
    vllm = next(i for i in rest if i.number == 109)
    assert vllm.title == "nvidia/vllm is wrong missing Ray" and vllm.updated_at == "2026-08-26T09:13:44Z"
    assert next(i for i in rest if i.number == 112).labels == ["bug"]


def test_parse_rejects_non_lists():
    with pytest.raises(FetchError):
        parse_issues({"message": "Not Found"})


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from(["number", "title", "labels", "name", "updatedAt", "pull_request"]), c,
                        max_size=5), max_leaves=25))
def test_parse_never_crashes(data):
    try:
        issues = parse_issues(data)
    except FetchError:
        assert not isinstance(data, list)
        return
    assert all(isinstance(i.number, int) for i in issues)


# --------------------------------------------------------------------------- sources
def test_gh_ok_is_used_first(tmp_path, api):
    url, handler = api
    env = env_for(tmp_path, "gh-ok", url)
    f = _fetch(env, tmp_path / "cache")
    assert f.source == "gh" and f.fetched_at == NOW and f.note == ""
    assert sorted(i.number for i in f.issues) == REAL_ISSUES
    assert handler.requests == []  # REST not touched
    assert read_cache(tmp_path / "cache").source == "gh"


def test_gh_unauthenticated_falls_back_to_rest_with_pagination(tmp_path, api):
    url, handler = api
    env = env_for(tmp_path, "gh-unauthenticated", url, GITHUB_TOKEN=TOKEN)
    f = _fetch(env, tmp_path / "cache")
    assert f.source == "rest"
    assert sorted(i.number for i in f.issues) == REAL_ISSUES  # both pages, pull requests dropped
    assert "gh auth status" in f.note and "not logged" in f.note
    assert [r["path"].endswith("page=2") for r in handler.requests] == [False, True]
    # the token goes to the API host only, never to the other host named in the Link header
    assert handler.requests[0]["auth"] == f"Bearer {TOKEN}"
    assert handler.requests[1]["auth"] == ""
    assert handler.requests[0]["ua"].startswith("dgx-spark-ops/")
    # ... and is stored nowhere
    assert TOKEN not in (tmp_path / "cache" / CACHE_FILE).read_text()
    assert TOKEN not in f.model_dump_json()


def test_no_gh_and_no_token_uses_anonymous_rest(tmp_path, api):
    url, handler = api
    f = _fetch(env_for(tmp_path, None, url), tmp_path / "cache")
    assert f.source == "rest" and "gh not installed" in f.note
    assert all(r["auth"] == "" for r in handler.requests)


def test_gh_hang_is_killed_and_rest_still_answers(tmp_path, api):
    url, _ = api
    t0 = time.monotonic()
    f = _fetch(env_for(tmp_path, "gh-hang", url), tmp_path / "cache", timeout=1.0)
    assert time.monotonic() - t0 < 4
    assert f.source == "rest"
    assert "gh issue list" in f.note and "did not answer" in f.note


def test_rest_500_without_cache_is_unavailable_with_reason(tmp_path, api):
    url, handler = api
    handler.mode = "500"
    f = _fetch(env_for(tmp_path, None, url), tmp_path / "cache")
    assert isinstance(f.issues, Unavailable) and f.issues.unavailable == Why.error
    assert f.issues.detail.startswith("offline:") and "HTTP 500" in f.issues.detail
    assert f.source == "" and f.fetched_at is None


def test_rest_timeout_is_bounded(tmp_path, api):
    url, handler = api
    handler.mode = "hang"
    t0 = time.monotonic()
    f = _fetch(env_for(tmp_path, None, url), tmp_path / "cache", timeout=0.5)
    assert time.monotonic() - t0 < 2.5
    assert isinstance(f.issues, Unavailable) and f.issues.unavailable == Why.timeout
    assert "did not answer" in f.issues.detail


def test_rest_garbage_is_an_error(tmp_path, api):
    url, handler = api
    handler.mode = "garbage"
    f = _fetch(env_for(tmp_path, None, url), tmp_path / "cache")
    assert isinstance(f.issues, Unavailable) and "not JSON" in f.issues.detail


def test_connection_refused(tmp_path):
    f = _fetch(env_for(tmp_path, None), tmp_path / "cache")
    assert isinstance(f.issues, Unavailable) and "unreachable" in f.issues.detail


# --------------------------------------------------------------------------- redirects and the token
class Redirector(BaseHTTPRequestHandler):
    """Answers every request with a redirect to ``target`` (a URL prefix) and records what it saw."""

    target = ""
    code = 301
    requests: list[dict[str, str]] = []

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization", "")})
        self.send_response(self.code)
        self.send_header("Location", self.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def redirector() -> Iterator[tuple[str, type[Redirector]]]:
    yield from _serve(type("RedirectHandler", (Redirector,), {"target": "", "requests": []}))


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_token_is_not_forwarded_on_a_redirect_to_another_origin(tmp_path, api, redirector, code):
    """The API answers with a redirect to a second server (another port, so another origin)."""
    other_url, other = api
    api_url, first = redirector
    first.target, first.code = other_url, code
    issues = fetch_rest(env_for(tmp_path, None, api_url, GITHUB_TOKEN=TOKEN), 3.0)
    assert sorted(i.number for i in issues) == REAL_ISSUES  # the redirect was followed
    assert [r["auth"] for r in first.requests] == [f"Bearer {TOKEN}"]
    assert other.requests and all(TOKEN not in r["auth"] for r in other.requests)
    assert all(r["auth"] == "" for r in other.requests)


@pytest.mark.parametrize(("target_host", "token_follows"), [("127.0.0.1", True), ("localhost", False)])
def test_a_redirect_keeps_the_token_only_within_the_api_origin(tmp_path, target_host, token_follows):
    """GitHub moves a renamed repository with a redirect on the same host: the token follows it there,
    and only there (same port, but the host name "localhost" is not the configured "127.0.0.1")."""
    seen: list[str] = []

    class Moved(Redirector):
        def do_GET(self):  # noqa: N802
            if self.path.startswith("/moved/"):
                seen.append(self.headers.get("Authorization", ""))
                body = (GITHUB / "rest_issues_page2.json").read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), type("M", (Moved,), {"target": "", "requests": []}))
    server.daemon_threads = True
    port = server.server_address[1]
    base = f"http://127.0.0.1:{port}"
    server.RequestHandlerClass.target = f"http://{target_host}:{port}/moved"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        issues = fetch_rest(env_for(tmp_path, None, base, GITHUB_TOKEN=TOKEN), 3.0)
        assert issues
        assert seen == [f"Bearer {TOKEN}" if token_follows else ""]
        # ... and without a token the same redirect is simply followed anonymously
        seen.clear()
        assert fetch_rest(env_for(tmp_path, None, base), 3.0)
        assert seen == [""]
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- a stalled resolver
@pytest.fixture
def stalled_dns(monkeypatch) -> Iterator[list[str]]:
    """socket.getaddrinfo blocks (as a dead resolver does) until the test ends."""
    release = threading.Event()
    calls: list[str] = []

    def slow_getaddrinfo(host, *args, **kwargs):
        calls.append(str(host))
        release.wait(10)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", slow_getaddrinfo)
    try:
        yield calls
    finally:
        release.set()  # let the abandoned worker thread finish


def test_rest_deadline_covers_the_name_lookup(tmp_path, stalled_dns):
    env = env_for(tmp_path, None, "http://api.github.invalid", GITHUB_TOKEN=TOKEN)
    t0 = time.monotonic()
    with pytest.raises(FetchError) as err:
        fetch_rest(env, 1.0)
    assert time.monotonic() - t0 < 1.8
    assert stalled_dns == ["api.github.invalid"]
    assert err.value.why == Why.timeout and "timed out" in str(err.value)


def test_stalled_resolver_falls_back_to_the_stale_cache(tmp_path, stalled_dns):
    _seed_cache(tmp_path / "cache", timedelta(days=2))
    t0 = time.monotonic()
    f = _fetch(env_for(tmp_path, None, "http://api.github.invalid"), tmp_path / "cache", timeout=1.0)
    assert time.monotonic() - t0 < 1.8
    assert f.source == "cache" and len(f.issues) == 3
    assert f.note.startswith("offline:") and "timed out" in f.note and "2.0 days" in f.note


def test_stalled_resolver_without_cache_is_unavailable(tmp_path, stalled_dns):
    f = _fetch(env_for(tmp_path, None, "http://api.github.invalid"), tmp_path / "cache", timeout=1.0)
    assert isinstance(f.issues, Unavailable) and f.issues.unavailable == Why.timeout
    assert "timed out" in f.issues.detail


# --------------------------------------------------------------------------- cache and offline
def _seed_cache(cache: Path, age: timedelta) -> None:
    issues = parse_issues(json.loads((GITHUB / "gh_issue_list.json").read_text()))[:3]
    assert write_cache(cache, issues, NOW - age, "gh") == ""


def test_fresh_cache_is_reused_without_network(tmp_path, api):
    url, handler = api
    _seed_cache(tmp_path / "cache", timedelta(hours=1))
    f = _fetch(env_for(tmp_path, "gh-ok", url), tmp_path / "cache")
    assert f.source == "cache" and f.fetched_at == NOW - timedelta(hours=1)
    assert len(f.issues) == 3 and "fresh" in f.note
    assert handler.requests == []


def test_stale_cache_is_refreshed_when_online(tmp_path, api):
    url, _ = api
    _seed_cache(tmp_path / "cache", timedelta(days=2))
    f = _fetch(env_for(tmp_path, None, url), tmp_path / "cache")
    assert f.source == "rest" and len(f.issues) == len(REAL_ISSUES)
    assert read_cache(tmp_path / "cache").fetched_at == NOW


def test_stale_cache_is_used_when_the_network_fails(tmp_path, api):
    url, handler = api
    handler.mode = "500"
    _seed_cache(tmp_path / "cache", timedelta(days=2))
    f = _fetch(env_for(tmp_path, "gh-unauthenticated", url), tmp_path / "cache")
    assert f.source == "cache" and f.fetched_at == NOW - timedelta(days=2)
    assert len(f.issues) == 3
    assert f.note.startswith("offline:") and "HTTP 500" in f.note and "2.0 days" in f.note


def test_offline_with_cache_reports_it_and_its_age(tmp_path, api):
    url, handler = api
    _seed_cache(tmp_path / "cache", timedelta(days=9))
    f = _fetch(env_for(tmp_path, "gh-ok", url), tmp_path / "cache", offline=True)
    assert f.source == "cache" and len(f.issues) == 3
    assert f.note.startswith("offline: --offline given") and "9.0 days" in f.note
    assert handler.requests == []


def test_offline_without_cache(tmp_path):
    f = _fetch(env_for(tmp_path, "gh-ok"), tmp_path / "cache", offline=True)
    assert isinstance(f.issues, Unavailable)
    assert (f.issues.unavailable, f.issues.detail) == (Why.not_collected, "offline: --offline given")


def test_corrupt_or_foreign_cache_is_ignored(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / CACHE_FILE).write_text("{not json")
    assert read_cache(cache) is None
    (cache / CACHE_FILE).write_text(json.dumps({"repo": "someone/else", "fetched_at": NOW.isoformat(),
                                                "issues": []}))
    assert read_cache(cache) is None


def test_unwritable_cache_is_a_note_not_a_failure(tmp_path, api):
    url, _ = api
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory should be")
    f = _fetch(env_for(tmp_path, "gh-ok", url), blocker)
    assert f.source == "gh" and "cache not written" in f.note


def test_collect_uses_opts_and_thresholds(tmp_path, api):
    url, _ = api
    opts = CollectOptions(env=env_for(tmp_path, "gh-ok", url), cache_dir=tmp_path / "c", offline=False)
    f = playbooks.collect(opts)
    assert f.source == "gh" and f.repo == "NVIDIA/dgx-spark-playbooks"
    assert (tmp_path / "c" / CACHE_FILE).exists()
    # default cache location follows XDG_CACHE_HOME / HOME from opts.env, never the real home
    g = playbooks.collect(CollectOptions(env={**opts.env, "XDG_CACHE_HOME": str(tmp_path / "xdg")}, offline=True))
    assert isinstance(g.issues, Unavailable)
    assert playbooks.default_cache_dir({"HOME": "/h"}) == Path("/h/.cache/dgx-spark-ops")


def test_unavailable_section():
    f = playbooks.unavailable(Why.timeout, "late")
    assert isinstance(f.issues, Unavailable) and f.issues.unavailable == Why.timeout
