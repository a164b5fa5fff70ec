"""One memory budget for several jobs on one pool (issue 20, item 3), from facts.

The arithmetic lives in the checks layer (:mod:`sparkops.checks.pool_budget`), which preflight's
G6/G3 call too; this module is the planner's view of it: :func:`serving_budget` puts planned jobs
(a server's start-up reservation, a trainer's planned peak) beside the running neighbours' real
reservations (a capped server's cap x total, not its resident memory) and returns the decision with
its values; :func:`start_decision` says whether a vLLM start-up check passes now (the G3 owner's).

Codes: ``G6.budget_ok`` / ``G6.budget_tight`` / ``G6.budget_over`` / ``G6.budget_unknown`` (the
pool budget's ok/tight/over/unknown; preflight words the same decisions as G6.plan-plus-reservations
and G6.plan-tight-beside-reservations), ``G3.start_ok`` / ``G3.start_after_flush`` /
``G3.start_fails`` / ``G3.start_unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkops.checks import pool_budget
from sparkops.checks.pool_budget import SERVER_KINDS, PoolLine  # noqa: F401 - re-exported for callers

if TYPE_CHECKING:
    from sparkops.facts.model import Facts

BudgetLine = PoolLine  # the planner's old name for one claim on the pool


@dataclass(frozen=True)
class BudgetJob:
    """A job planned on the pool: a server (``reserve_gib``: what it takes at start-up, e.g. vLLM's
    share x total) or a trainer (its planned peak)."""

    name: str
    reserve_gib: float
    kind: str = "server"  # server | trainer | other


@dataclass
class ServingBudget:
    code: str
    values: dict[str, Any]
    pool_gib: float | None
    os_reserve_gib: float
    neighbours: list[PoolLine]
    planned: list[PoolLine]

    @property
    def committed_gib(self) -> float:
        return round(sum(x.gib for x in self.neighbours) + sum(x.gib for x in self.planned), 2)


def pool_total_gib(facts: Facts) -> float | None:
    """The whole pool: MemTotal on unified memory (GB10), the device's memory on a discrete GPU (the
    G3 owner's reading, which the start-up decision uses too)."""
    from sparkops.checks.g03_unified_memory import pool_total_gib as owner_pool

    return owner_pool(facts)


def neighbours(facts: Facts, total_gib: float) -> list[PoolLine]:
    """What each process already running takes from the pool, one per server tree (the checks
    layer's :func:`sparkops.checks.pool_budget.neighbour_lines`)."""
    return pool_budget.neighbour_lines(facts, total_gib)


def machine_and_running(facts: Facts, source: str, os_reserve_gib: float):  # noqa: ANN201 - (serve.Machine, [serve.BesideJob])
    """The machine a server meets in these facts and the jobs already running on it (a capped server by its
    reservation): what ``plan --serve`` and preflight's serving plan both start from."""
    from sparkops.planner import serve

    machine = serve.machine_from_facts(facts, source, os_reserve_gib)
    return machine, [serve.BesideJob(name=n.name, gib=n.gib, how=n.how) for n in neighbours(facts, machine.total_gib)]


def serving_budget(facts: Facts, jobs: list[BudgetJob], *, os_reserve_gib: float = 4.0,
                   fit_margin: float = 0.10) -> ServingBudget:
    """Planned jobs plus the running neighbours against one pool. Pure (reads only ``facts``)."""
    total = pool_total_gib(facts)
    if total is None:
        return ServingBudget(code="G6.budget_unknown", values={"reason": "no MemTotal or device memory in the facts"},
                             pool_gib=None, os_reserve_gib=os_reserve_gib, neighbours=[], planned=[])
    planned = [PoolLine(name=j.name, gib=round(j.reserve_gib, 2),
                        how="reserved at start-up" if j.kind == "server" else "planned peak", kind=j.kind)
               for j in jobs]
    b = pool_budget.judge(total, neighbours(facts, total), planned, os_reserve_gib=os_reserve_gib,
                          fit_margin=fit_margin)
    return ServingBudget(code=f"G6.budget_{b.code}", values=b.values(), pool_gib=b.pool_gib,
                         os_reserve_gib=os_reserve_gib, neighbours=b.neighbours, planned=b.planned)


def start_decision(facts: Facts, gpu_memory_utilization: float,
                   engine_version: str | None = None) -> tuple[str, dict[str, Any]]:
    """vLLM's start-up check on these facts (the G3 owner decides it; see
    :func:`sparkops.checks.g03_unified_memory.vllm_start_decision`)."""
    from sparkops.checks.g03_unified_memory import vllm_start_decision

    return vllm_start_decision(facts, gpu_memory_utilization, engine_version)
