"""One memory budget for several jobs on one pool (issue 20, item 3). Pure functions of facts.

For the lead to wire into preflight's G3/G6 (their owners): :func:`serving_budget` sums what
each neighbour really reserves (a capped server's cap x total, not its resident memory; an
uncapped process its RSS) and what each planned job will hold, against the pool, and returns a
sub-code with its values; :func:`start_decision` says whether a vLLM start-up check passes now.

Sub-codes (the decision, the values ride in a dict):
- ``G6.budget_ok``      everything planned plus the neighbours fits with the fit margin to spare
- ``G6.budget_tight``   it fits, within the margin
- ``G6.budget_over``    it does not fit the pool
- ``G6.budget_unknown`` the pool could not be read from the facts
- ``G3.start_ok`` / ``G3.start_after_flush`` / ``G3.start_fails`` / ``G3.start_unknown``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkops.core.units import GIB

if TYPE_CHECKING:
    from sparkops.facts.model import Facts

SERVER_KINDS = {"vllm", "sglang", "ollama", "llama.cpp", "tgi", "trtllm"}
# a server that reserves a share of TOTAL memory at start-up (its pool is held whether used or not)
SHARE_KINDS = {"vllm", "sglang", "trtllm"}


@dataclass(frozen=True)
class BudgetJob:
    """A job planned on the pool: a server (``reserve_gib``: what it takes at start-up, e.g. vLLM's
    share x total) or a trainer (its planned peak)."""

    name: str
    reserve_gib: float
    kind: str = "server"  # server | trainer | other


@dataclass
class BudgetLine:
    name: str
    gib: float
    how: str  # "cap 0.50 x 121.69 GiB", "RSS", "planned peak"
    pid: int | None = None


@dataclass
class ServingBudget:
    code: str
    values: dict[str, Any]
    pool_gib: float | None
    os_reserve_gib: float
    neighbours: list[BudgetLine] = field(default_factory=list)
    planned: list[BudgetLine] = field(default_factory=list)

    @property
    def committed_gib(self) -> float:
        return round(sum(x.gib for x in self.neighbours) + sum(x.gib for x in self.planned), 2)


def pool_total_gib(facts: Facts) -> float | None:
    """The whole pool: MemTotal on unified memory (GB10), the device's memory on a discrete GPU (the
    G3 owner's reading, which the start-up decision uses too)."""
    from sparkops.checks.g03_unified_memory import pool_total_gib as owner_pool

    return owner_pool(facts)


def neighbours(facts: Facts, total_gib: float) -> list[BudgetLine]:
    """What each process already running holds from the pool, counted once per server tree:
    a capped vLLM/SGLang reserves cap x total at start-up (its real reservation, not its RSS);
    anything else its resident memory."""
    from sparkops.facts.reading import known

    procs = facts.processes.processes
    if not known(procs):
        return []
    by_pid = {p.pid: p for p in procs}  # type: ignore[union-attr]
    out: list[BudgetLine] = []
    for p in procs:  # type: ignore[union-attr]
        parent = by_pid.get(p.ppid) if p.ppid is not None else None
        if parent is not None and parent.kind == p.kind and p.kind in SERVER_KINDS:
            continue  # an engine child of a server already counted
        if p.kind in SHARE_KINDS and p.memory_fraction:
            gib = p.memory_fraction * total_gib
            how = f"cap {p.memory_fraction:g} x {total_gib:.2f} GiB ({p.memory_cap_source or 'cmdline'})"
        elif p.kind in SERVER_KINDS or p.kind == "trainer" or p.rss_bytes >= GIB:
            gib = p.rss_bytes / GIB
            how = "resident memory (RSS)"
        else:
            continue
        name = p.name if p.name.lower().startswith(p.kind.lower()) else f"{p.kind} {p.name}".strip()
        out.append(BudgetLine(name=name, gib=round(gib, 2), how=how, pid=p.pid))
    return out


def serving_budget(facts: Facts, jobs: list[BudgetJob], *, os_reserve_gib: float = 4.0,
                   fit_margin: float = 0.10) -> ServingBudget:
    """Planned jobs plus the running neighbours against one pool. Pure (reads only ``facts``)."""
    total = pool_total_gib(facts)
    if total is None:
        return ServingBudget(code="G6.budget_unknown", values={"reason": "no MemTotal or device memory in the facts"},
                             pool_gib=None, os_reserve_gib=os_reserve_gib)
    near = neighbours(facts, total)
    planned = [BudgetLine(name=j.name, gib=round(j.reserve_gib, 2),
                          how="reserved at start-up" if j.kind == "server" else "planned peak") for j in jobs]
    usable = total - os_reserve_gib
    committed = sum(x.gib for x in near) + sum(x.gib for x in planned)
    left = usable - committed
    if left < 0:
        code = "G6.budget_over"
    elif left < usable * fit_margin:
        code = "G6.budget_tight"
    else:
        code = "G6.budget_ok"
    values = {"pool_gib": round(total, 2), "usable_gib": round(usable, 2), "committed_gib": round(committed, 2),
              "left_gib": round(left, 2), "neighbours": [(x.name, x.gib, x.how) for x in near],
              "planned": [(x.name, x.gib, x.how) for x in planned]}
    return ServingBudget(code=code, values=values, pool_gib=round(total, 2), os_reserve_gib=os_reserve_gib,
                         neighbours=near, planned=planned)


def start_decision(facts: Facts, gpu_memory_utilization: float) -> tuple[str, dict[str, Any]]:
    """vLLM's start-up check on these facts (the G3 owner decides it; see
    :func:`sparkops.checks.g03_unified_memory.vllm_start_decision`)."""
    from sparkops.checks.g03_unified_memory import vllm_start_decision

    return vllm_start_decision(facts, gpu_memory_utilization)
