"""env-report.json: the public output contract (shared/spec/report.md).

The minimal shape (``platform``, ``checks`` G1..G10 -> "status: detail", ``headroom_gb``,
``verdict``) is kept verbatim for old consumers; richer fields sit beside it, never instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from sparkops.core.findings import Finding, Status
from sparkops.core.modeling import BaseModel, ConfigDict, Field
from sparkops.facts.model import ProbeRecord
from sparkops.facts.workload import Workload

REPORT_SCHEMA_VERSION = 1
GOTCHA_IDS = tuple(f"G{i}" for i in range(1, 11))


class Identity(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    platform: Literal["dgx-spark", "nvidia", "none"]
    profile: str | None = None  # profile key, e.g. "gb10", "h200"
    gpu_name: str | None = None
    capability: tuple[int, int] | None = None
    arch: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    unified_memory: bool | None = None
    note: str = ""


class BlockingItem(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    gotcha: str
    summary: str
    fix: str
    code: str = ""  # the blocking decision's sub-code ("G1.wheel-cuda12")
    fix_where: str = ""  # where the fix must run: host | container | target-env | anywhere


class PlanSummary(BaseModel):
    """The memory planner's answer for preflight's workload (``spark-ops plan`` has the full breakdown)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    peak_gb: float | None = None  # GB = 1e9 bytes; G3 compares it with the budget
    budget_gb: float | None = None
    verdict: Literal["fits", "tight", "does-not-fit"] | None = None
    model: str | None = None
    assumed: str | None = None  # set when no model was named and a catalog proxy was planned
    binding_phase: str | None = None
    max_seq_len: int | None = None
    run: str | None = None
    note: str | None = None
    error: str | None = None  # why the planner could not run (unknown model, ...)


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    # ---- the original minimal contract
    platform: Literal["dgx-spark", "nvidia", "none"]
    checks: dict[str, str] = Field(description="G1..G10 -> 'pass' | 'fail: ...' | 'warn: ...' | "
                                   "'skip: ...' | 'info: ...' | 'unknown: ...'")
    headroom_gb: float | None = Field(description="GB (1e9 bytes): the memory budget the verdict used")
    verdict: Literal["ready", "ready-with-warnings", "blocked"]
    # ---- richer fields
    headroom_gib: float | None = None  # the same budget in GiB (2^30 bytes), as the text output shows it
    schema_version: int = REPORT_SCHEMA_VERSION
    tool_version: str
    generated_at: datetime
    facts_collected_at: datetime | None = None
    facts_source: str = ""  # "live" or the snapshot path
    depth: Literal["quick", "full"] = "full"
    identity: Identity
    workload: Workload
    findings: list[Finding]  # identity first, then G1..G10
    blocking: list[BlockingItem] = Field(default_factory=list)
    probe_notes: list[ProbeRecord] = Field(default_factory=list)  # probes that failed or fell back
    target_python: str = ""
    plan: PlanSummary | None = None  # the memory planner, when the workload is a sized fine-tune


def check_string(f: Finding) -> str:
    """The minimal-contract string for one finding."""
    if f.status is Status.passed:
        return "pass"
    return f"{f.status.value}: {f.summary}"
