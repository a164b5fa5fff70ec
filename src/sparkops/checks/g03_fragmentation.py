"""G3.fragmented (part of the G3 owner): free memory that is there but not in large contiguous blocks. Pure.

``judge(frag, need_bytes=..., th=...)`` takes the raw readings of
:mod:`sparkops.probes.fragmentation` (and optionally the planned job's peak) and returns a
:class:`Decision`: the sub-code when it fires, the values it judged, the message and the fix. The
G3 owner wires it in; ``watch``, ``thermal``, the exporter and ``fix G3`` use :func:`summary`.

The judgment counts only what the buddy allocator itself reports free (``/proc/buddyinfo``), block
by block: ``free_bytes`` is its total, ``free_large_bytes`` the part in blocks of at least
``large_block_bytes``. It fires when a planned job needs more than the large blocks hold while the
buddy allocator's total would cover it, or, without a plan, when at least ``min_free_gb`` is free
and less than ``large_fraction_warn`` of it lies in large blocks. Compaction can regroup movable
pages only; when most pageblocks are Unmovable (``/proc/pagetypeinfo``, root-only) the fix says a
reboot is what regroups them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkops.facts.model import BuddyZone, FragmentationFacts
from sparkops.facts.reading import known

SUBCODE = "G3.fragmented"

# Defaults mirror knowledge/thresholds.yaml `fragmentation:`; callers pass the loaded values.
DEFAULTS: dict[str, float] = {
    "large_block_bytes": 2 * 1024 * 1024,
    "min_free_gb": 4.0,
    "large_fraction_warn": 0.25,
    "unmovable_share_reboot": 0.5,
}

COMPACT_CMD = "echo 1 | sudo tee /proc/sys/vm/compact_memory"


@dataclass(frozen=True)
class Decision:
    """What the fragmentation judgment found. ``code`` is :data:`SUBCODE` when it fires, else None."""

    status: str  # "warn" | "pass" | "skip"
    code: str | None
    message: str
    values: dict[str, Any] = field(default_factory=dict)
    fix: str = ""


def thresholds(kb) -> dict[str, float]:  # noqa: ANN001 - a Knowledge
    """The packaged ``fragmentation:`` thresholds from a loaded knowledge base."""
    return {k: float(v) for k, v in kb.thresholds.fragmentation.model_dump().items()}


def _order_for(block_bytes: float, page: int) -> int:
    """The smallest order whose blocks are at least ``block_bytes``."""
    order = 0
    while page * (1 << order) < block_bytes:
        order += 1
    return order


def summary(frag: FragmentationFacts | None, large_block_bytes: float = DEFAULTS["large_block_bytes"]
            ) -> dict[str, Any] | None:
    """Buddy totals: free bytes, free bytes in large blocks, the largest free block. None when the
    readings are missing."""
    if frag is None or not known(frag.buddyinfo) or not known(frag.page_size_bytes):
        return None
    page: int = frag.page_size_bytes  # type: ignore[assignment]
    zones: list[BuddyZone] = frag.buddyinfo  # type: ignore[assignment]
    large_order = _order_for(large_block_bytes, page)
    free = large = 0
    largest = -1
    per_order: dict[int, int] = {}
    for z in zones:
        for order, count in enumerate(z.free_blocks):
            size = count * page * (1 << order)
            free += size
            per_order[order] = per_order.get(order, 0) + size
            if order >= large_order:
                large += size
            if count > 0:
                largest = max(largest, order)
    return {
        "page_size_bytes": page,
        "large_block_bytes": page * (1 << large_order),
        "large_order": large_order,
        "free_bytes": free,
        "free_large_bytes": large,
        "large_share": round(large / free, 4) if free else None,
        "largest_free_block_bytes": page * (1 << largest) if largest >= 0 else 0,
        "free_bytes_by_order": {str(k): v for k, v in sorted(per_order.items())},
    }


def free_large_from_text(buddyinfo: str, page: int, large_block_bytes: float = DEFAULTS["large_block_bytes"]
                         ) -> int | None:
    """Free bytes in blocks of ``large_block_bytes`` or more, straight from /proc/buddyinfo's text: the
    sampler's per-row reading (no models: it runs every few seconds for hours). Same arithmetic as
    :func:`summary`; None when no zone line parses."""
    large_order = _order_for(large_block_bytes, page)
    total, seen = 0, False
    for line in buddyinfo.splitlines():
        _head, sep, counts = line.partition("zone")
        if not sep:
            continue
        fields = counts.split()[1:]  # the zone's name, then one count per order
        try:
            nums = [int(x) for x in fields]
        except ValueError:
            continue
        seen = True
        total += sum(n * page << order for order, n in enumerate(nums) if order >= large_order and n > 0)
    return total if seen else None


def unmovable_share(frag: FragmentationFacts | None) -> float | None:
    """Share of pageblocks typed Unmovable (all zones), from pagetypeinfo; None when unreadable."""
    if frag is None or not known(frag.pagetypeinfo):
        return None
    total = unmov = 0
    for z in frag.pagetypeinfo:  # type: ignore[union-attr]
        total += sum(z.pageblocks.values())
        unmov += z.pageblocks.get("Unmovable", 0)
    return round(unmov / total, 4) if total else None


def _gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB"


def fix_text(share: float | None, reboot_share: float) -> str:
    """Compaction first; a reboot when unmovable pageblocks make compaction unlikely to help."""
    base = (f"Between runs, compact memory on the host as root: `{COMPACT_CMD}` (or `spark-ops fix G3 "
            "--compact --apply`), then re-check /proc/buddyinfo's high orders.")
    if share is not None and share >= reboot_share:
        return (base + f" {share:.0%} of the pageblocks are Unmovable (kernel and driver memory), which "
                "compaction cannot move: if the large blocks stay empty, only a reboot regroups them.")
    return base + " If the large blocks stay empty after compaction, a reboot regroups them."


def judge(frag: FragmentationFacts | None, need_bytes: int | None = None,
          th: dict[str, float] | None = None) -> Decision:
    """G3.fragmented or not, from the buddy allocator's counters (and the planned peak, when given)."""
    t = {**DEFAULTS, **(th or {})}
    if frag is None:
        return Decision("skip", None, "no buddyinfo reading in this snapshot (taken before it existed)")
    s = summary(frag, t["large_block_bytes"])
    if s is None:
        why = frag.buddyinfo if not known(frag.buddyinfo) else frag.page_size_bytes
        return Decision("skip", None, f"free blocks by size unknown: {why}")
    share = unmovable_share(frag)
    values = {k: v for k, v in s.items() if k != "free_bytes_by_order"}
    values.update(need_bytes=need_bytes, unmovable_pageblock_share=share)
    free, large = s["free_bytes"], s["free_large_bytes"]
    blk = _gib(s["large_block_bytes"]) if s["large_block_bytes"] >= 1024**3 else \
        f"{s['large_block_bytes'] // 1024} KiB"
    if need_bytes is not None and need_bytes > 0:
        if large >= need_bytes:
            return Decision("pass", None, f"{_gib(large)} free in blocks of {blk} or more covers the planned "
                            f"{_gib(need_bytes)}", values)
        if free < need_bytes:  # short of free memory altogether: G3's budget judgment, not fragmentation
            return Decision("pass", None, f"free memory ({_gib(free)}) is below the planned {_gib(need_bytes)} "
                            "in any block size: not a fragmentation question", values)
        return Decision("warn", SUBCODE, f"{_gib(free)} is free but only {_gib(large)} in blocks of {blk} or "
                        f"more, below the planned {_gib(need_bytes)}: large allocations may fail while "
                        "free memory looks sufficient", values, fix_text(share, t["unmovable_share_reboot"]))
    if free < t["min_free_gb"] * 1e9:
        return Decision("pass", None, f"only {_gib(free)} free: too little to judge fragmentation", values)
    if large / free < t["large_fraction_warn"]:
        return Decision("warn", SUBCODE, f"{_gib(free)} is free but only {large / free:.0%} of it ({_gib(large)}) "
                        f"in blocks of {blk} or more (threshold {t['large_fraction_warn']:.0%}): large "
                        "allocations may fail while free memory looks sufficient", values,
                        fix_text(share, t["unmovable_share_reboot"]))
    return Decision("pass", None, f"{large / free:.0%} of {_gib(free)} free lies in blocks of {blk} or more",
                    values)
