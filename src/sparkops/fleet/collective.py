"""The collective-bandwidth probe: all-reduce and all-gather bus bandwidth across the ranks.

Bandwidths follow nccl-tests (its PERFORMANCE.md), so numbers compare with ``all_gather_perf``:
``algbw = size / time``; ``busbw = algbw x 2(n-1)/n`` for all-reduce and ``x (n-1)/n`` for
all-gather, whose size is the gathered (output) buffer. The time of one size is the slowest rank's
mean over the timed iterations, after warm-up. Buffers are bounded (a size whose buffers do not fit
in the free memory minus a reserve is skipped on every rank: unified memory has frozen a Spark when a
16 GB test buffer met a desktop session), and every wait is bounded: a collective that does not
complete in time ends the probe with the ranks named, never a hang.

Timing: CUDA events on NCCL (the GPU's own clock, launch gaps included as in nccl-tests), and
``time.perf_counter`` on gloo. torch is passed in, never imported here at module level.

Also here: :func:`parse_nccl_debug`, which reads NCCL's ``NCCL_DEBUG=INFO`` output for the transport
(NET/IB or sockets, GPU Direct RDMA) — pure, and never raises on any text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkops.fleet.model import BandwidthRow, TransportInfo
from sparkops.fleet.settings import SizePlan

OPS = ("all_reduce", "all_gather")


# --------------------------------------------------------------------------- the math (pure)
def busbw_factor(op: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor: what each rank's link carries relative to algbw.

    One rank moves nothing over a link, so its factor (and busbw) is 0, as nccl-tests prints.
    """
    if world_size < 1:
        raise ValueError(f"world size must be at least 1 (got {world_size})")
    n = world_size
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "all_gather":
        return (n - 1) / n
    raise ValueError(f"unknown collective {op!r}")


def algbw_gbs(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive (got {seconds})")
    return size_bytes / seconds / 1e9


def busbw_gbs(op: str, size_bytes: int, seconds: float, world_size: int) -> float:
    return algbw_gbs(size_bytes, seconds) * busbw_factor(op, world_size)


def allreduce_seconds(nbytes: float, busbw: float, world_size: int) -> float | None:
    """How long an all-reduce of ``nbytes`` takes at bus bandwidth ``busbw`` GB/s (None: cannot say)."""
    factor = busbw_factor("all_reduce", world_size)
    if busbw <= 0 or factor == 0:
        return None
    return nbytes * factor / (busbw * 1e9)


def aligned_size(size_bytes: int, world_size: int, dtype_bytes: int) -> int:
    """The largest size <= ``size_bytes`` that splits into ``world_size`` whole-element shards
    (all-gather's input is size / n), never below one element per rank."""
    unit = world_size * dtype_bytes
    return max(unit, (size_bytes // unit) * unit)


def probe_bytes(size_bytes: int, world_size: int) -> int:
    """Peak bytes one rank holds for one size: all-gather's output plus its input shard (the
    all-reduce buffer of the same size is freed before the all-gather is allocated)."""
    return size_bytes + size_bytes // max(world_size, 1)


def plan_sizes(plan: SizePlan, world_size: int, dtype_bytes: int, affordable_bytes: int | None
               ) -> tuple[list[tuple[int, int]], list[str]]:
    """The (size, iterations) pairs to measure and the sizes left out with why. ``affordable_bytes``
    is the smallest budget over all ranks (every rank must run the same collectives)."""
    keep: list[tuple[int, int]] = []
    skipped: list[str] = []
    for size, iters in zip(plan.sizes, plan.iterations, strict=True):
        s = aligned_size(size, world_size, dtype_bytes)
        need = probe_bytes(s, world_size)
        if affordable_bytes is not None and need > affordable_bytes:
            skipped.append(f"{human_bytes(s)}: needs {human_bytes(need)} per rank, the tightest rank can spare "
                           f"{human_bytes(max(affordable_bytes, 0))}")
            continue
        keep.append((s, iters))
    return keep, skipped


def human_bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            v = n / div
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def rows_from_times(world_size: int, rank_times: dict[int, dict[str, float]], sizes: list[tuple[int, int]],
                    warmup: int, dtype: str = "float32") -> list[BandwidthRow]:
    """Combine each rank's mean seconds per ``"op:size"`` into rows; the slowest rank sets the time.
    A size some rank did not report is left out (the caller says which ranks stalled)."""
    rows: list[BandwidthRow] = []
    for op in OPS:
        for size, iters in sizes:
            key = f"{op}:{size}"
            per = {r: t[key] for r, t in rank_times.items() if key in t}
            if len(per) < world_size or not per or min(per.values()) <= 0:
                continue
            worst = max(per.values())
            rows.append(BandwidthRow(
                op=op, size_bytes=size, dtype=dtype, iterations=iters, warmup=warmup,
                time_us=round(worst * 1e6, 2), algbw_gbs=round(algbw_gbs(size, worst), 3),
                busbw_gbs=round(busbw_gbs(op, size, worst, world_size), 3),
                rank_time_us=[round(per[r] * 1e6, 2) for r in sorted(per)]))
    return rows


def step_label(step: int, sizes: list[tuple[int, int]]) -> str:
    """What the probe's ``step``-th collective is (steps count from 1, all-reduce sizes first)."""
    plan = [(op, size) for op in OPS for size, _ in sizes]
    if 1 <= step <= len(plan):
        op, size = plan[step - 1]
        return f"{op.replace('_', '-')} of {human_bytes(size)}"
    return "ready to start" if step == 0 else f"step {step}"


# --------------------------------------------------------------------------- the measurement (impure)
class CollectiveTimeout(Exception):
    """A collective did not complete within its deadline on this rank."""

    def __init__(self, op: str, size: int, waited_s: float):
        super().__init__(f"{op} of {human_bytes(size)} did not complete within {waited_s:g} s")
        self.op, self.size, self.waited_s = op, size, waited_s


@dataclass
class LocalMeasurement:
    """One rank's own timings, sent to rank 0."""

    times_s: dict[str, float] = field(default_factory=dict)  # "op:size" -> mean seconds per iteration
    error: str = ""
    timed_out_at: str = ""  # "all_reduce:1048576" when a collective did not complete in time

    def to_json(self) -> dict[str, Any]:
        return {"times_s": self.times_s, "error": self.error, "timed_out_at": self.timed_out_at}


def wait_bounded(work: Any, deadline: float, op: str, size: int, started: float, poll_s: float = 0.0002) -> None:
    """Wait for an async collective without trusting the backend's own timeout: poll until done or
    past ``deadline`` (monotonic). ``work.wait()`` then surfaces a backend error, if any."""
    while not work.is_completed():
        if time.monotonic() > deadline:
            raise CollectiveTimeout(op, size, round(time.monotonic() - started, 1))
        time.sleep(poll_s)
    work.wait()


def wait_event(event: Any, deadline: float, op: str, size: int, started: float, poll_s: float = 0.0002) -> None:
    """Wait for a CUDA event without blocking in the driver: poll ``query()`` until done or past ``deadline``."""
    while not event.query():
        if time.monotonic() > deadline:
            raise CollectiveTimeout(op, size, round(time.monotonic() - started, 1))
        time.sleep(poll_s)


def measure(torch: Any, dist: Any, group: Any, backend: str, sizes: list[tuple[int, int]], warmup: int,
            timeout_s: float, on_stage: Callable[[str], None] | None = None) -> LocalMeasurement:
    """Time every (op, size) on this rank; each size's buffers are allocated, used, and freed.

    The same sizes and iteration counts run on every rank (they come from rank 0's plan). A collective
    that does not complete within ``timeout_s`` stops the probe on this rank (``timed_out_at``).
    """
    out = LocalMeasurement()
    n = dist.get_world_size(group)
    cuda = backend == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    step = 0
    for op in OPS:
        for size, iters in sizes:
            step += 1
            if on_stage:
                on_stage(f"bandwidth {step}")
            try:
                out.times_s[f"{op}:{size}"] = _time_one(torch, dist, group, op, size, n, iters, warmup, timeout_s,
                                                        device, cuda)
            except CollectiveTimeout:
                out.timed_out_at = f"{op}:{size}"
                return out
            except Exception as exc:  # a backend error: say which collective, stop (the group may be broken)
                out.error = f"{op} of {human_bytes(size)}: {type(exc).__name__}: {exc}"[:500]
                return out
    return out


def _time_one(torch: Any, dist: Any, group: Any, op: str, size: int, n: int, iters: int, warmup: int,
              timeout_s: float, device: Any, cuda: bool) -> float:
    count = size // 4  # float32 elements
    if op == "all_reduce":
        buf = torch.ones(count, dtype=torch.float32, device=device)

        def launch() -> Any:
            return dist.all_reduce(buf, group=group, async_op=True)
    else:
        shard = torch.ones(count // n, dtype=torch.float32, device=device)
        if cuda:
            gathered = torch.empty(count, dtype=torch.float32, device=device)

            def launch() -> Any:
                return dist.all_gather_into_tensor(gathered, shard, group=group, async_op=True)
        else:  # gloo: the list form is the one every gloo build has
            parts = list(torch.empty(count, dtype=torch.float32, device=device).chunk(n))

            def launch() -> Any:
                return dist.all_gather(parts, shard, group=group, async_op=True)
    timed_out = False
    try:
        started = time.monotonic()
        deadline = started + timeout_s
        if cuda:
            # NCCL runs on its own stream; work.wait() makes the current stream wait for it (no CPU
            # block), so events recorded on the current stream bracket the collectives
            for _ in range(warmup):
                launch().wait()
            ready = torch.cuda.Event()
            ready.record()
            wait_event(ready, deadline, op, size, started)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                work = launch()
            work.wait()
            end.record()
            wait_event(end, deadline, op, size, started)
            return start.elapsed_time(end) / 1e3 / iters
        for _ in range(warmup):
            wait_bounded(launch(), deadline, op, size, started)
        t0 = time.perf_counter()
        for _ in range(iters):  # one at a time: gloo's worker threads would otherwise overlap them
            wait_bounded(launch(), deadline, op, size, started)
        return (time.perf_counter() - t0) / iters
    except CollectiveTimeout:
        timed_out = True  # the stream may still hold the buffers: never synchronize on it
        raise
    finally:
        if cuda and not timed_out:
            torch.cuda.empty_cache()


def affordable_bytes(torch: Any, backend: str, reserve_gb: float, mem_available_bytes: int | None) -> int | None:
    """What this rank can spare for the probe's buffers: device free memory (NCCL) or MemAvailable
    (gloo, host buffers), minus the reserve. None when neither can be read (sizes are then not cut)."""
    free: int | None = None
    if backend == "nccl":
        try:
            free = int(torch.cuda.mem_get_info()[0])
        except Exception:
            free = None
        if mem_available_bytes is not None:  # unified memory: CUDA's free tracks MemFree; take the smaller
            free = min(free, mem_available_bytes) if free is not None else mem_available_bytes
    else:
        free = mem_available_bytes
    if free is None:
        return None
    return max(0, free - int(reserve_gb * 1e9))


# --------------------------------------------------------------------------- NCCL's debug output (pure)
_VERSION = re.compile(r"NCCL version ([0-9][0-9A-Za-z.+_-]*)")
_NETWORK = re.compile(r"Using network (\S+)")
_NET_USING = re.compile(r"NET/([A-Za-z0-9_]+) ?: Using (.+?)\s*(?:; OOB .*)?$")
_GDR_HCA = re.compile(r"GPU Direct RDMA (?:\([A-Za-z]+\) )?(enabled|disabled) for HCA (\d+)(?: '([^']*)')?", re.I)
_VIA = re.compile(r"\bChannel \d+(?:/\d+)? : .*?\bvia (\S+)")
_RING_GDR = re.compile(r"use ring PXN \d+ GDR (\d)")


def parse_nccl_debug(text: str, rank: int, source: str = "") -> TransportInfo:
    """What NCCL_DEBUG=INFO output says about one rank's transport. Never raises; unknowns stay empty."""
    info = TransportInfo(rank=rank, source=source)
    channels: list[str] = []
    gdr_votes: list[tuple[int, bool, str]] = []  # (strength, value, evidence): channel > ring > HCA line
    lines = text.splitlines()
    info.lines_read = len(lines)
    for line in lines:
        if not info.nccl_version and (m := _VERSION.search(line)):
            info.nccl_version = m.group(1)
        if m := _NETWORK.search(line):
            info.network = m.group(1)
        m = _NET_USING.search(line)
        if m and m.group(1) != "Plugin":
            info.devices = m.group(2)[:300]
            if not info.network:
                info.network = "Socket" if m.group(1) == "Socket" else m.group(1)
        if m := _VIA.search(line):
            via = m.group(1)
            if via not in channels:
                channels.append(via)
            if via.startswith("NET/") and via.endswith("/GDRDMA"):
                gdr_votes.append((3, True, f"channel via {via}"))
        if m := _RING_GDR.search(line):
            gdr_votes.append((2, m.group(1) == "1", f"rings connected with GDR {m.group(1)}"))
        if m := _GDR_HCA.search(line):
            on = m.group(1).lower() == "enabled"
            name = f" '{m.group(3)}'" if m.group(3) else ""
            gdr_votes.append((1, on, f"GPU Direct RDMA {m.group(1).lower()} for HCA {m.group(2)}{name}"))
    info.channels = channels[:20]
    if gdr_votes:
        best = max(v[0] for v in gdr_votes)
        top = [v for v in gdr_votes if v[0] == best]
        value = any(v[1] for v in top)  # one channel using GDRDMA is GDR in use
        info.gdr = value
        info.gdr_evidence = next(v[2] for v in top if v[1] == value)
    return info
