"""Checks judge facts: one module per gotcha, one registry, pure functions.

``CHECKS`` maps each G-number (the stable id) to its module; every module exposes
``check(ctx: CheckContext) -> Finding``. :func:`judge` runs identity first, then G1..G10, and
turns a check that raises into an ``unknown`` finding naming the error (a bug in one rule
must not hide the other nine); it returns the whole :class:`Judgment` (identity, findings,
verdict, what blocks). Rendering it into a report is the report layer's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from sparkops.checks import (
    g01_cuda_abi,
    g02_flash_attn,
    g03_unified_memory,
    g04_thermal_power,
    g05_bandwidth,
    g06_memory_contention,
    g07_nvfp4,
    g08_stale_playbooks,
    g09_container_first,
    g10_tensor_parallel,
    identity,
)
from sparkops.checks.base import CheckContext
from sparkops.core.findings import Finding, Status
from sparkops.core.verdict import Verdict, verdict
from sparkops.facts.model import Facts
from sparkops.facts.workload import Workload
from sparkops.knowledge import Knowledge

CHECKS: dict[str, ModuleType] = {
    "G1": g01_cuda_abi,
    "G2": g02_flash_attn,
    "G3": g03_unified_memory,
    "G4": g04_thermal_power,
    "G5": g05_bandwidth,
    "G6": g06_memory_contention,
    "G7": g07_nvfp4,
    "G8": g08_stale_playbooks,
    "G9": g09_container_first,
    "G10": g10_tensor_parallel,
}


def context(facts: Facts, kb: Knowledge, workload: Workload | None = None) -> CheckContext:
    ident = identity.identify(facts, kb)
    return CheckContext(facts=facts, kb=kb, workload=workload or Workload(), platform=ident.platform,
                        profile=ident.profile, headroom_gib=identity.headroom_gib(facts, ident, kb))


@dataclass(frozen=True)
class Judgment:
    """Everything the checks concluded about one snapshot and workload."""

    ctx: CheckContext  # what the checks were given (platform, profile, headroom)
    identity: identity.Identity  # what this machine is (platform, profile, capability)
    findings: list[Finding]  # identity first, then G1..G10: always eleven
    verdict: Verdict

    @property
    def blocking(self) -> list[Finding]:
        """The failing findings, in order: what must be fixed before the job."""
        return [f for f in self.findings if f.status is Status.fail]


def judge(facts: Facts, kb: Knowledge, workload: Workload | None = None) -> Judgment:
    """Identity then G1..G10, and the verdict over them."""
    ctx = context(facts, kb, workload)
    ident = identity.identify(facts, kb)
    findings = [identity.check(facts, kb, ident)]
    for gid, mod in CHECKS.items():
        try:
            f = mod.check(ctx)
            if f.gotcha != gid:
                raise ValueError(f"check module returned {f.gotcha} for {gid}")
        except Exception as exc:  # a rule bug becomes a visible unknown, never a crash
            f = Finding(gotcha=gid, status=Status.unknown,
                        summary=f"internal error in the {gid} check: {type(exc).__name__}: {exc}"[:300],
                        detail="This is a bug in dgx-spark-ops; please report it with the facts snapshot.",
                        code="internal-error", codes=["internal-error"])
        findings.append(f)
    return Judgment(ctx=ctx, identity=ident, findings=findings, verdict=verdict(findings))
