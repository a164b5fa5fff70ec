"""What every judgment is made of: a status, evidence, a finding.

Neutral ground: the checks produce these, the reports carry them, every feature (monitor, fleet,
diagnose, the planner) speaks them. This module imports nothing of the tool.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from sparkops.core.modeling import BaseModel, ConfigDict, Field, field_validator


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

    model_config = ConfigDict(extra="forbid", defer_build=True)

    fact: str
    value: Any = None


class Finding(BaseModel):
    """The judgment of one gotcha (or of the identity check)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    gotcha: str  # "identity", "G1".."G10"
    status: Status
    summary: str  # one line with the actual values
    detail: str = ""  # the reasoning, when the summary cannot hold it
    evidence: list[Evidence] = Field(default_factory=list)
    fix: str = ""  # imperative; empty on pass/info
    notes: list[str] = Field(default_factory=list)  # secondary observations (e.g. harmless warnings)
    code: str = ""  # the leading decision as a stable sub-code ("G10.train-tp-across-nodes")
    codes: list[str] = Field(default_factory=list)  # every decision behind this finding, leading first
    values: dict[str, Any] = Field(default_factory=dict)  # the leading decision's values
    fix_where: str = ""  # where the fix must run: host | container | target-env | anywhere

    @field_validator("summary")
    @classmethod
    def _one_line(cls, v: str) -> str:
        """Error texts copied into a summary (tracebacks, torch's multi-line RuntimeErrors) would
        break the one-line-per-result contract; collapse all whitespace runs to one space."""
        return " ".join(v.split())
