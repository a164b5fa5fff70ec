"""``spark-ops postmortem``: what ended the last run? Read-only: collect, classify, report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sparkops.postmortem import classify, collect
from sparkops.postmortem.classify import Cause, Finding

MAX_FINDINGS = 40
MAX_TIMELINE = 15


class SourceStatus(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str
    status: str  # read | empty | unreadable | absent
    reason: str = ""
    lines: int = 0


class PostmortemReport(BaseModel):
    """What ``spark-ops postmortem --json`` prints."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    cause: Cause
    unclean_end: bool | None = None  # from last -x: True no shutdown record, False orderly, None unknown
    findings: list[Finding] = Field(default_factory=list)  # the most recent, at most MAX_FINDINGS
    finding_counts: dict[str, int] = Field(default_factory=dict)
    timeline: list[str] = Field(default_factory=list)  # the previous boot's last recognised lines
    own_log: dict[str, Any] | None = None
    sources: list[SourceStatus] = Field(default_factory=list)
    could_not_read: list[str] = Field(default_factory=list)
    exit_code: int = 0


class XidEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: Literal["application", "driver", "hardware"]  # the finding's code is xid.<kind>
    name: str


class XidFile(BaseModel):
    """``knowledge/xid.yaml``: the Xid numbers postmortem names, and the fix each cause names."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    version: int
    last_verified: date
    source: str
    xids: dict[int, XidEntry]
    fixes: dict[str, str]

    @field_validator("fixes")
    @classmethod
    def _every_cause(cls, v: dict[str, str]) -> dict[str, str]:
        if set(v) != classify.FIX_KEYS:
            missing, unknown = sorted(classify.FIX_KEYS - set(v)), sorted(set(v) - classify.FIX_KEYS)
            raise ValueError(f"want exactly the causes {sorted(classify.FIX_KEYS)}; missing {missing}, unknown {unknown}")
        return v


@lru_cache(maxsize=1)
def xid_table() -> dict[int, dict[str, str]]:
    from sparkops.knowledge import load_file

    return {k: v.model_dump() for k, v in load_file("xid.yaml", XidFile).xids.items()}


def cause_fixes() -> dict[str, str]:
    """The fix each postmortem cause names (``knowledge/xid.yaml`` ``fixes:``)."""
    from sparkops.knowledge import load_file

    return load_file("xid.yaml", XidFile).fixes


def judge(sources: Sequence[collect.Source], hot_c: float = 85.0) -> PostmortemReport:
    """Pure over what was collected."""
    from sparkops.monitor.csvlog import read_log

    xids = xid_table()
    findings: list[Finding] = []
    journal_read = False
    seen: set[str] = set()
    for s in sources:
        if s.status != "read" or not s.name.startswith("journal"):
            continue
        journal_read = True
        fresh = [ln for ln in s.lines if ln not in seen]
        seen.update(fresh)
        findings += classify.scan(fresh, s.name, xids)
    kern_read = False
    if not journal_read:  # the classic files hold several boots: only the one before the last counts
        order = sorted((s for s in sources if s.name.startswith("/var/log/kern.log") and s.status == "read"),
                       key=lambda s: s.name, reverse=True)  # kern.log.1 (older) before kern.log
        kern = [ln for s in order for ln in s.lines]
        if kern:
            segment, _bounded = classify.previous_boot(kern)
            findings += classify.scan(segment, "kern.log", xids)
            kern_read = True
    for s in sources:
        if s.name == "pstore" and s.status == "read":
            findings += classify.scan(s.lines, "pstore", xids)
    last = next((s for s in sources if s.name == "last -x"), None)
    unclean = classify.unclean_from_last(last.lines) if last and last.status == "read" else None
    own = None
    for s in sources:
        if s.name.startswith("log ") and s.status == "read":
            rows, _notes = read_log("\n".join(s.lines))
            own = classify.own_log_tail(rows, hot_c)
            if own is not None:
                own["log"] = s.path
                break
    cause = classify.verdict(findings, unclean=unclean, log_read=journal_read or kern_read, own=own,
                             fixes=cause_fixes())
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.code] = counts.get(f.code, 0) + 1
    rep = PostmortemReport(
        cause=cause, unclean_end=unclean, findings=findings[-MAX_FINDINGS:], finding_counts=counts,
        timeline=[f"{f.time or '?'} {f.code}: {f.line[-140:]}" for f in findings[-MAX_TIMELINE:]], own_log=own,
        sources=[SourceStatus(name=s.name, status=s.status, reason=s.reason, lines=len(s.lines)) for s in sources],
        could_not_read=[f"{s.name}: {s.reason}" for s in sources if s.status == "unreadable"])
    rep.exit_code = 3 if cause.code == "unknown" else (0 if cause.code == "orderly_end" else 1)
    return rep


def postmortem(env: Mapping[str, str] | None = None, root: Path = Path("/"),
               log_paths: Sequence[Path] = (Path.cwd(),), *, kb: Any) -> PostmortemReport:
    """Collect and judge now (read-only, bounded), against ``kb`` (the loaded knowledge: G4's hot_c)."""
    return judge(collect.gather(env, root, log_paths), kb.thresholds.g4.hot_c)


def render(rep: PostmortemReport) -> str:
    c = rep.cause
    lines = [f"previous boot: {c.summary}",
             f"  cause {c.code}" + (f" ({c.gotcha})" if c.gotcha else " (none of the ten gotchas)")
             + f", {c.confidence}"]
    if c.fix:
        lines.append(f"  fix: {c.fix}")
    if rep.timeline:
        lines.append("  last recognised lines:")
        lines += [f"    {t}" for t in rep.timeline[-8:]]
    lines.append("  sources: " + "; ".join(f"{s.name} {s.status}" + (f" ({s.lines} lines)" if s.lines else "")
                                         for s in rep.sources))
    lines += [f"  could not read {r}" for r in rep.could_not_read]
    return "\n".join(lines) + "\n"
