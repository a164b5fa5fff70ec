"""What a check returns, and what it is given.

A check is a pure function ``check(ctx) -> Finding``: no I/O, no clock, no environment. It always
answers with exactly one finding; "could not check" is a ``skip``/``unknown`` finding, never an
empty result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sparkops.facts.model import Facts
from sparkops.knowledge import Knowledge, Profile
from sparkops.workload import Workload


class Status(str, Enum):
    """One status per check (shared/spec/gotchas.md vocabulary)."""

    passed = "pass"
    fail = "fail"
    warn = "warn"
    skip = "skip"
    info = "info"
    unknown = "unknown"


class Evidence(BaseModel):
    """A fact the judgment used: its path in the snapshot and its value as read."""

    model_config = ConfigDict(extra="forbid")

    fact: str
    value: Any = None


class Finding(BaseModel):
    """The judgment of one gotcha (or of the identity check)."""

    model_config = ConfigDict(extra="forbid")

    gotcha: str  # "identity", "G1".."G10"
    status: Status
    summary: str  # one line with the actual values
    detail: str = ""  # the reasoning, when the summary cannot hold it
    evidence: list[Evidence] = Field(default_factory=list)
    fix: str = ""  # imperative; empty on pass/info
    notes: list[str] = Field(default_factory=list)  # secondary observations (e.g. harmless warnings)

    @field_validator("summary")
    @classmethod
    def _one_line(cls, v: str) -> str:
        """Error texts copied into a summary (tracebacks, torch's multi-line RuntimeErrors) would
        break the one-line-per-result contract; collapse all whitespace runs to one space."""
        return " ".join(v.split())


@dataclass(frozen=True)
class CheckContext:
    """Everything a check may look at. Built once by :func:`sparkops.checks.judge`."""

    facts: Facts
    kb: Knowledge
    workload: Workload
    platform: str  # "dgx-spark" | "nvidia" | "none"
    profile: Profile | None  # the GPU's profile, None when unknown or no GPU
    headroom_gb: float | None  # MemAvailable (or CUDA free on discrete GPUs) minus the reserve

    def finding(self, gotcha: str, status: Status, summary: str, **kw: Any) -> Finding:
        """Build a finding; a non-pass status gets the catalog fix unless one is given."""
        if status in (Status.fail, Status.warn) and "fix" not in kw:
            kw["fix"] = self.kb.gotcha(gotcha).fix if gotcha in self.kb.gotchas else ""
        return Finding(gotcha=gotcha, status=status, summary=summary, **kw)


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
