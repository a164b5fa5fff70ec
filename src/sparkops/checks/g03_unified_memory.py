"""G3 — unified-memory OOM below 128 GB.

On a unified device CPU and GPU share one pool, and CUDA's free memory tracks ``MemFree``, not
``MemAvailable``: page cache counts as used until it is dropped. So the budget is MemAvailable minus
an OS/driver reserve, and a large page cache is a warning even though the kernel would reclaim it.
NVML's memory query is never used on a unified device (GB10 answers NOT_SUPPORTED).
"""

from __future__ import annotations

from sparkops.checks import identity
from sparkops.checks.base import CheckContext, Evidence, Finding, Status, ev
from sparkops.facts.model import PsiFacts, TorchLive
from sparkops.facts.reading import known

GID = "G3"
GIB = 1024**3


def _gib(b: float) -> float:
    return b / GIB


def _fit(ctx: CheckContext, budget: float | None, fails: list[str], warns: list[str]) -> None:
    """The planned workload's estimated peak (load transient included upstream) against the budget."""
    peak_gb = ctx.workload.estimated_peak_gb  # GB = 1e9 bytes (the planner's unit); the budget is GiB
    if peak_gb is None or budget is None:
        return
    peak = peak_gb * 1e9 / GIB
    margin = float(ctx.kb.t("g3.fit_margin_fraction"))
    if peak > budget:
        fails.append(f"planned peak {peak:.1f} GiB ({peak_gb:g} GB) exceeds the {budget:.1f} GiB budget")
    elif peak > budget * (1 - margin):
        warns.append(f"planned peak {peak:.1f} GiB ({peak_gb:g} GB) is within {margin:.0%} of the "
                     f"{budget:.1f} GiB budget")


def _psi(psi: object, warns: list[str], evidence: list[Evidence], threshold: float) -> None:
    if isinstance(psi, PsiFacts):
        evidence.append(ev("memory.psi", psi))
        if psi.full_avg10 >= threshold:
            warns.append(f"memory pressure: all tasks stalled {psi.full_avg10:.2f}% of the last 10 s (PSI full avg10)")


def _unified(ctx: CheckContext, mi: dict[str, int], evidence: list[Evidence]) -> Finding:
    kb = ctx.kb
    total, free, avail = mi.get("MemTotal"), mi.get("MemFree"), mi.get("MemAvailable")
    if total is None or free is None or avail is None:
        return ctx.finding(GID, Status.skip, "/proc/meminfo lacks MemTotal/MemFree/MemAvailable",
                           evidence=evidence)
    cache = mi.get("Cached", 0) + mi.get("Buffers", 0) + mi.get("SReclaimable", 0) - mi.get("Shmem", 0)
    gap = max(avail - free, 0)  # what the kernel would give back that CUDA does not count as free
    swap_used = mi.get("SwapTotal", 0) - mi.get("SwapFree", 0)
    live = ctx.facts.target.live
    cuda_free = None
    if isinstance(live, TorchLive) and live.mem_get_info_bytes:
        cuda_free = live.mem_get_info_bytes[0]
        evidence.append(ev("target.live.mem_get_info_bytes", list(live.mem_get_info_bytes)))
    fails: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    visible = cuda_free if cuda_free is not None else free
    visible_what = "cudaMemGetInfo free" if cuda_free is not None else "CUDA-visible free ≈ MemFree"
    if _gib(gap) >= float(kb.t("g3.page_cache_warn_gb")):
        warns.append(f"{_gib(gap):.1f} GiB held as reclaimable cache: {visible_what} {_gib(visible):.1f} GiB vs "
                     f"MemAvailable {_gib(avail):.1f} GiB")
    if _gib(avail) < float(kb.t("g3.low_available_warn_gb")):
        warns.append(f"only {_gib(avail):.1f} GiB available of {_gib(total):.1f} GiB")
    if _gib(swap_used) >= float(kb.t("g3.swap_used_warn_gb")):
        warns.append(f"{_gib(swap_used):.1f} GiB of swap in use")
    _psi(ctx.facts.memory.psi, warns, evidence, float(kb.t("g3.psi_full_avg10_warn")))
    budget = round(max(0.0, _gib(avail) - float(kb.t("g3.os_reserve_gb"))), 1)
    _fit(ctx, budget, fails, warns)
    cg = ctx.facts.memory.cgroup
    if known(cg.limit_bytes) and cg.limit_bytes is not None:
        evidence.append(ev("memory.cgroup.limit_bytes", cg.limit_bytes))
        notes.append(f"a cgroup memory limit of {_gib(cg.limit_bytes):.1f} GiB is set; on unified memory it does "  # type: ignore[arg-type]
                     "not bound the driver's GPU allocations, so do not rely on it to protect the host")
    if ctx.headroom_gb is not None and abs(ctx.headroom_gb - budget) > 0.05:
        notes.append(f"the verdict's headroom ({ctx.headroom_gb:.1f} GiB) differs from this unified-memory "
                     f"budget ({budget:.1f} GiB): NVML answered a memory query on a unified device")
    reading = (f"free {_gib(free):.1f} / available {_gib(avail):.1f} / page cache {_gib(cache):.1f} GiB "
               f"of {_gib(total):.1f} GiB unified")
    reading += f"; budget {budget:.1f} GiB"
    if cuda_free is not None:
        reading += f"; cudaMemGetInfo free {_gib(cuda_free):.1f} GiB"
    return _judge(ctx, reading, fails, warns, notes, evidence)


def _discrete(ctx: CheckContext, evidence: list[Evidence]) -> Finding:
    kb = ctx.kb
    fails: list[str] = []
    warns: list[str] = []
    parts: list[str] = []
    for dev in ctx.facts.gpu.devices:
        if known(dev.memory_free_bytes) and known(dev.memory_total_bytes):
            parts.append(f"GPU{dev.index} free {_gib(dev.memory_free_bytes):.1f} of "  # type: ignore[arg-type]
                         f"{_gib(dev.memory_total_bytes):.1f} GiB")  # type: ignore[arg-type]
            evidence.append(ev(f"gpu.devices[{dev.index}].memory_free_bytes", dev.memory_free_bytes))
    if not parts:
        return ctx.finding(GID, Status.skip, "discrete GPU memory was not read (NVML gave no free/total)",
                           evidence=evidence)
    mi = ctx.facts.memory.meminfo_bytes
    if known(mi) and "MemAvailable" in mi:  # type: ignore[operator]
        parts.append(f"host available {_gib(mi['MemAvailable']):.1f} GiB")  # type: ignore[index]
    _psi(ctx.facts.memory.psi, warns, evidence, float(kb.t("g3.psi_full_avg10_warn")))
    _fit(ctx, ctx.headroom_gb, fails, warns)
    notes = []
    if ctx.workload.estimated_peak_gb is not None and ctx.headroom_gb is None:
        notes.append("the workload's peak was not tested: GPU 0's free memory was not read")
    return _judge(ctx, "; ".join(parts) + " (discrete memory: page cache does not reduce it)", fails, warns, notes,
                  evidence)


def _judge(ctx: CheckContext, reading: str, fails: list[str], warns: list[str], notes: list[str],
           evidence: list[Evidence]) -> Finding:
    w = ctx.workload
    untested = w.estimated_peak_gb is None and bool(w.method or w.params_b or w.model)
    if untested:
        reading = ("the planned workload's fit was not tested (no peak estimate: give --peak-gb); "
                   + reading)
    if fails:
        return ctx.finding(GID, Status.fail, "; ".join(fails), detail=reading + ("; " + "; ".join(warns) if warns else ""),
                           evidence=evidence, notes=notes)
    if warns:
        return ctx.finding(GID, Status.warn, warns[0] + (f" (+{len(warns) - 1} more)" if len(warns) > 1 else ""),
                           detail="; ".join([reading, *warns[1:]]), evidence=evidence, notes=notes)
    # a workload was named but its fit could not be judged: checked, undecided -> unknown, not info
    return ctx.finding(GID, Status.unknown if untested else Status.info, reading, evidence=evidence, notes=notes,
                       fix="Estimate the run's peak (weights + optimizer + activations + the ~2x load transient) "
                           "and pass it with --peak-gb." if untested else "")


def check(ctx: CheckContext) -> Finding:
    ident = identity.identify(ctx.facts, ctx.kb)
    mi = ctx.facts.memory.meminfo_bytes
    evidence: list[Evidence] = [ev("headroom_gb", ctx.headroom_gb)]
    if ctx.platform == "none":
        host = ""
        if known(mi) and "MemAvailable" in mi:  # type: ignore[operator]
            host = f" (host: {_gib(mi['MemAvailable']):.1f} GiB available)"  # type: ignore[index]
        return ctx.finding(GID, Status.skip, f"no NVIDIA GPU visible: no GPU memory budget to judge{host}",
                           evidence=evidence)
    # the profile wins over a contradictory NVML answer (some GB10 reports claim memory "success")
    unified = ident.unified_memory is not False or bool(ctx.profile and ctx.profile.unified_memory)
    if not unified:
        return _discrete(ctx, evidence)
    if not known(mi):
        return ctx.finding(GID, Status.skip, f"/proc/meminfo was not read: {mi}",
                           detail="On unified memory the budget comes from MemAvailable; NVML's memory query "
                                  "is not used here (it is NOT_SUPPORTED or misleading).", evidence=evidence)
    evidence.append(ev("memory.meminfo_bytes", {k: v for k, v in mi.items() if k in (  # type: ignore[union-attr]
        "MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SReclaimable", "Shmem", "SwapTotal", "SwapFree")}))
    return _unified(ctx, mi, evidence)  # type: ignore[arg-type]
