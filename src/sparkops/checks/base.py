"""What a check returns, and what it is given.

A check is a pure function ``check(ctx) -> Finding``: no I/O, no clock, no environment. It always
answers with exactly one finding; "could not check" is a ``skip``/``unknown`` finding, never an
empty result. A check *decides* (stable sub-codes such as ``G3.page-cache`` with their values); the
catalog (``knowledge/gotchas.yaml``) *words* each decision: its status, its line, its fix and where
the fix must run, as templates rendered here from the values. One owner per gotcha: diagnose,
monitor and fleet call the same check functions instead of re-deriving them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkops.core.findings import Evidence, Finding, Status
from sparkops.core.modeling import BaseModel
from sparkops.facts.model import Facts
from sparkops.facts.workload import Workload
from sparkops.knowledge import Knowledge, Profile


@dataclass(frozen=True)
class Reason:
    """One decision of a gotcha's owner: a sub-code from the catalog and the values its templates
    are rendered from. Checks decide; the catalog words the decision."""

    code: str
    values: Mapping[str, Any] = field(default_factory=dict)


def reason(code: str, **values: Any) -> Reason:
    return Reason(code, values)


class _Values(dict):
    """Template values; a missing one is a catalog/code mismatch and must fail loudly in tests."""

    def __missing__(self, key: str) -> Any:
        raise KeyError(f"template value {key!r} not given")


def render(template: str, values: Mapping[str, Any]) -> str:
    return string.Formatter().vformat(template, (), _Values(values)) if template else ""


def template_fields(template: str) -> set[str]:
    """The value names a template uses (for the catalog's consistency test)."""
    return {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(template) if f}


@dataclass(frozen=True)
class CheckContext:
    """Everything a check may look at. Built once by :func:`sparkops.checks.judge`."""

    facts: Facts
    kb: Knowledge
    workload: Workload
    platform: str  # "dgx-spark" | "nvidia" | "none"
    profile: Profile | None  # the GPU's profile, None when unknown or no GPU
    headroom_gib: float | None  # GiB: MemAvailable (or CUDA free on discrete GPUs) minus the reserve

    def line(self, r: Reason) -> str:
        return render(self.kb.subcode(r.code).line, r.values)

    def conclude(self, gotcha: str, reasons: Sequence[Reason], **kw: Any) -> Finding:
        """See :func:`conclude`."""
        return conclude(self.kb, gotcha, reasons, **kw)

    def decide(self, gotcha: str, code: str, *, status: Status | None = None, reading: str = "",
               evidence: list[Evidence] | None = None, notes: list[str] | None = None, detail: str = "",
               **values: Any) -> Finding:
        """One decision as a finding (see :func:`conclude`)."""
        return conclude(self.kb, gotcha, [Reason(code, values)], status=status, reading=reading, evidence=evidence,
                        notes=notes, detail=detail)


def conclude(kb: Knowledge, gotcha: str, reasons: Sequence[Reason], *, status: Status | None = None,
             reading: str = "", evidence: list[Evidence] | None = None, notes: list[str] | None = None,
             detail: str = "") -> Finding:
    """A finding from an owner's decisions, worded by the catalog: the leading reason gives the status
    (unless given), the summary line, the fix and where it runs; the others follow in the detail, and
    any fix of theirs that differs is appended."""
    if not reasons:
        raise ValueError(f"{gotcha}: a finding needs at least one decision")
    lead = reasons[0]
    entry = kb.subcode(lead.code)
    st = status or Status(entry.status)
    lines = [render(kb.subcode(r.code).line, r.values) for r in reasons]
    summary = lines[0] + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "")
    fixes: list[str] = []
    if st in (Status.fail, Status.warn, Status.unknown):
        for r in reasons:
            sub = kb.subcode(r.code)
            text = render(sub.fix, r.values)
            if text and text not in fixes and Status(sub.status) in (Status.fail, Status.warn, Status.unknown):
                fixes.append(text)
    parts = [*lines[1:], reading, detail]
    return Finding(gotcha=gotcha, status=st, summary=summary, detail="; ".join(p for p in parts if p),
                   evidence=evidence or [], notes=notes or [], fix=" Also: ".join(fixes),
                   code=lead.code, codes=[r.code for r in reasons],
                   values={k: _plain(v) for k, v in lead.values.items()},
                   fix_where=entry.where if fixes else "")


def _plain(v: Any) -> Any:
    """A value as JSON can hold it (tuples become lists, models dicts, the rest text)."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, BaseModel):
        return v.model_dump(mode="json")
    return str(v)


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name (``Flash_Attn`` -> ``flash-attn``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(facts: Facts) -> dict[str, str]:
    """The target environment's distributions by canonical name; empty when they were not read."""
    dists = facts.target.distributions
    if isinstance(dists, dict):
        return {canonical_name(k): v for k, v in dists.items()}
    return {}


def ev(fact: str, value: Any) -> Evidence:
    """Shorthand for an evidence entry."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return Evidence(fact=fact, value=value)
