"""One memory budget for several jobs on one pool (issue 20): pure arithmetic, no I/O.

Owned by the checks layer so that preflight's G6 (and G3 for inference workloads) and
``spark-ops plan --serve --beside`` (the planner, a feature above this layer) judge with one set of
numbers. What a neighbour takes from the pool is its *reservation*, not its resident memory: a
server whose cap is a share of TOTAL memory (vLLM ``--gpu-memory-utilization``, SGLang
``--mem-fraction-static``) holds cap x total from start-up on, whether its KV cache is used or not,
and on a GB10 its CUDA allocations do not show in its RSS at all. Anything else counts by what it
holds. The engines' accounting (which caps are shares of total) is data in ``knowledge/engines.yaml``;
this module only adds and compares.

Decisions (``code``): ``ok`` (fits with the fit margin to spare), ``tight`` (fits, within the
margin), ``over`` (does not fit), ``unknown`` (no pool size). The checks turn them into their own
sub-codes (G6.plan-plus-reservations, G6.plan-tight-beside-reservations, G3.serve-share-over-reservations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkops.core.units import GIB

if TYPE_CHECKING:
    from sparkops.facts.model import Facts

SERVER_KINDS = frozenset({"vllm", "sglang", "ollama", "llama.cpp", "tgi", "trtllm"})
# engines whose cap is a share of TOTAL memory, reserved at start-up (vllm/v1/worker/utils.py
# request_memory; SGLang profile_max_num_token). TensorRT-LLM's free_gpu_memory_fraction is a share
# of the memory FREE after its weights and activations, so its reservation is what it holds.
SHARE_OF_TOTAL = frozenset({"vllm", "sglang"})


@dataclass(frozen=True)
class PoolLine:
    """One job's claim on the pool: a running neighbour (by its reservation) or a planned job."""

    name: str
    gib: float
    how: str  # "cap 0.5 x 121.69 GiB (cmdline)", "held", "planned peak"
    pid: int | None = None
    kind: str = "other"


@dataclass
class PoolBudget:
    code: str  # ok | tight | over | unknown
    pool_gib: float | None
    os_reserve_gib: float
    neighbours: list[PoolLine] = field(default_factory=list)
    planned: list[PoolLine] = field(default_factory=list)
    fit_margin: float = 0.10

    @property
    def reserved_gib(self) -> float:
        """What the running neighbours take, by their reservations."""
        return round(sum(x.gib for x in self.neighbours), 2)

    @property
    def committed_gib(self) -> float:
        return round(self.reserved_gib + sum(x.gib for x in self.planned), 2)

    @property
    def usable_gib(self) -> float | None:
        return None if self.pool_gib is None else round(self.pool_gib - self.os_reserve_gib, 2)

    @property
    def left_gib(self) -> float | None:
        return None if self.usable_gib is None else round(self.usable_gib - self.committed_gib, 2)

    def values(self) -> dict[str, Any]:
        return {"pool_gib": self.pool_gib, "usable_gib": self.usable_gib, "os_reserve_gib": self.os_reserve_gib,
                "reserved_gib": self.reserved_gib, "committed_gib": self.committed_gib, "left_gib": self.left_gib,
                "neighbours": [(x.name, x.gib, x.how) for x in self.neighbours],
                "planned": [(x.name, x.gib, x.how) for x in self.planned]}


def reservation_gib(kind: str, fraction: float | None, held_gib: float | None, total_gib: float) -> tuple[float, str]:
    """What one running process takes from a pool of ``total_gib``: a share-of-total server its cap x
    total (or what it holds, when that is more: CUDA graphs outside the budget in older vLLM);
    anything else what it holds (0 when that is unknown)."""
    if kind in SHARE_OF_TOTAL and fraction:
        cap = fraction * total_gib
        if held_gib is not None and held_gib > cap:
            return held_gib, f"holds {held_gib:.2f} GiB, more than its cap {fraction:g} x {total_gib:.2f} GiB"
        return cap, f"cap {fraction:g} x {total_gib:.2f} GiB"
    if held_gib is None:
        return 0.0, "memory unknown"
    return held_gib, "held"


def neighbour_lines(facts: Facts, total_gib: float, *, kb: Any = None, min_other_gib: float = 1.0) -> list[PoolLine]:
    """The running processes of the facts' process table as claims on the pool, one per server tree
    (an engine child of a server of the same kind is its parent's reservation); servers and trainers
    always, other processes from ``min_other_gib`` of RSS on. What each process is and its cap are
    the classification owner's (:func:`sparkops.checks.processes.table`)."""
    from sparkops.checks.processes import table

    rows = table(facts, kb)
    by_pid = {p.pid: c for p, c in rows}
    out: list[PoolLine] = []
    for p, c in rows:
        parent = by_pid.get(p.ppid) if p.ppid is not None else None
        if parent is not None and parent.kind == c.kind and c.kind in SERVER_KINDS:
            continue  # an engine child of a server already counted
        rss = p.rss_bytes / GIB
        if c.kind not in SERVER_KINDS and c.kind != "trainer" and rss < min_other_gib:
            continue
        gib, how = reservation_gib(c.kind, c.fraction, rss, total_gib)
        if how == "held":
            how = "resident memory (RSS)"
        elif c.fraction:
            how += f" ({c.cap_source or 'cmdline'})"
        name = p.name if p.name.lower().startswith(c.kind.lower()) else f"{c.kind} {p.name}".strip()
        out.append(PoolLine(name=name, gib=round(gib, 2), how=how, pid=p.pid, kind=c.kind))
    return out


def judge(pool_gib: float | None, neighbours: list[PoolLine], planned: list[PoolLine], *,
          os_reserve_gib: float, fit_margin: float) -> PoolBudget:
    """The planned jobs plus the neighbours' reservations against the pool less the OS reserve."""
    b = PoolBudget(code="unknown", pool_gib=None if pool_gib is None else round(pool_gib, 2),
                   os_reserve_gib=os_reserve_gib, neighbours=list(neighbours), planned=list(planned),
                   fit_margin=fit_margin)
    if pool_gib is None:
        return b
    left, usable = b.left_gib, b.usable_gib
    assert left is not None and usable is not None
    b.code = "over" if left < 0 else "tight" if left < usable * fit_margin else "ok"
    return b


def os_reserve_for(unified: bool, reserve_gib: float) -> float:
    """The part of the pool kept for the OS, desktop and driver: on unified memory they live in the pool, so the
    reserve applies; a discrete GPU's memory holds none of them (``plan --serve``'s machine gives 0 there too), and a
    reserve there would call a server that leaves its engine's own margin free a blocker."""
    return float(reserve_gib) if unified else 0.0


def largest_share(pool_gib: float, committed_gib: float, os_reserve_gib: float) -> float:
    """The largest share-of-total cap (two decimals, rounded down) a new server can take beside what
    is committed, leaving the OS reserve: 0.0 when nothing is left."""
    return max(0.0, math.floor((pool_gib - os_reserve_gib - committed_gib) / pool_gib * 100) / 100)
