"""G8 — stale official playbooks.

Official DGX Spark playbooks have shipped broken and the stack moves faster than the docs, so the
open issues of NVIDIA/dgx-spark-playbooks are matched (case-insensitive, whole words) against the
playbook and components the workload names. Offline, this is a ``skip`` with the age of any cache.
"""

from __future__ import annotations

import re
from datetime import datetime

from sparkops.checks.base import CheckContext, canonical_name, ev, installed
from sparkops.core.findings import Finding
from sparkops.facts.model import PlaybookIssue
from sparkops.facts.reading import known

GID = "G8"


def term_pattern(term: str) -> re.Pattern[str]:
    """A whole-word, case-insensitive pattern; ``-``, ``_`` and spaces inside the term are interchangeable
    (``connect-two-sparks`` matches "connect two sparks")."""
    words = [re.escape(w) for w in re.split(r"[-_\s]+", term.strip()) if w]
    return re.compile(r"(?<![a-z0-9])" + r"[-_\s]?".join(words) + r"(?![a-z0-9])", re.IGNORECASE)


def matches(issue: PlaybookIssue, terms: list[str]) -> list[str]:
    """The terms that occur in the issue's title or labels."""
    text = " ".join([issue.title, *issue.labels])
    return [t for t in terms if term_pattern(t).search(text)]


def _seconds(now: datetime | None, then: datetime | None) -> float | None:
    """Seconds from ``then`` to ``now``; None when either is missing or they cannot be compared."""
    if now is None or then is None:
        return None
    try:
        secs = (now - then).total_seconds()
    except TypeError:  # naive vs aware timestamps
        return None
    return secs if secs >= 0 else None


def _age(now: datetime | None, then: datetime | None) -> str:
    secs = _seconds(now, then)
    if secs is None:
        return ""
    if secs < 3600:
        return f"{secs / 60:.0f} min"
    if secs < 172800:
        return f"{secs / 3600:.1f} h"
    return f"{secs / 86400:.0f} days"


def installed_terms(ctx: CheckContext) -> list[str]:
    """Components installed in the target environment, as the words playbook issues use."""
    table: dict[str, str] = ctx.kb.thresholds.g8.installed_components
    dists = installed(ctx.facts)
    return [word for dist, word in table.items() if canonical_name(dist) in dists]


def check(ctx: CheckContext) -> Finding:
    pb = ctx.facts.playbooks
    now = ctx.facts.collected_at
    age = _age(now, pb.fetched_at)
    evidence = [ev("playbooks.repo", pb.repo), ev("playbooks.source", pb.source),
                ev("playbooks.fetched_at", pb.fetched_at.isoformat() if pb.fetched_at else None)]
    if not known(pb.issues):
        cache = f"; last successful fetch {age} ago" if age else "; no cache"
        return ctx.decide(GID, "G8.not-fetched", repo=pb.repo, why=str(pb.issues), cache=cache,
                          detail=(f"{pb.note}. " if pb.note else "")
                          + f"Check https://github.com/{pb.repo}/issues by hand before an expensive run.",
                          evidence=evidence)
    issues: list[PlaybookIssue] = pb.issues  # type: ignore[assignment]
    when = pb.fetched_at.strftime("%Y-%m-%d %H:%M %Z").strip() if pb.fetched_at else "an unknown time"
    via = f" via {pb.source}" if pb.source else ""
    notes: list[str] = []
    ttl = ctx.kb.thresholds.g8.cache_ttl_s
    if pb.source == "cache" and (_seconds(now, pb.fetched_at) or 0) > ttl:
        notes.append(f"the cached issue list is {age} old (older than the {ttl / 3600:.0f} h refresh interval)")
    named = [*ctx.workload.components, *([ctx.workload.playbook] if ctx.workload.playbook else [])]
    present = installed_terms(ctx)
    terms = list(dict.fromkeys([*named, *present]))
    if present:
        evidence.append(ev("installed components", present))
    if not terms:
        return ctx.decide(GID, "G8.nothing-to-match", count=len(issues), repo=pb.repo, when=when, via=via,
                          detail="Pass --workload (e.g. 'qlora 70b unsloth') to match issues against it.",
                          evidence=evidence, notes=notes)
    hits = [(i, m) for i in issues if (m := matches(i, terms))]
    evidence.append(ev("matched terms", terms))
    if hits:
        listed = "; ".join(f"#{i.number} {i.title}" for i, _ in hits)
        evidence.append(ev("playbooks.issues[matched]", [{"number": i.number, "title": i.title, "matched": m}
                                                        for i, m in hits]))
        matched = sorted({t for _, m in hits for t in m})
        return ctx.decide(GID, "G8.open-issues", n=len(hits), terms=", ".join(matched), listed=listed, repo=pb.repo,
                          detail=f"{len(issues)} open issues fetched at {when}{via}; matched against "
                                 f"{', '.join(terms)} (installed: {', '.join(present) or 'none'})",
                          evidence=evidence, notes=notes)
    return ctx.decide(GID, "G8.no-match", terms=", ".join(terms), count=len(issues), repo=pb.repo, when=when, via=via,
                      evidence=evidence, notes=notes)
