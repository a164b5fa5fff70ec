"""G3 — unified-memory OOM below 128 GB.

On a unified device CPU and GPU share one pool, and CUDA's free memory tracks ``MemFree``, not
``MemAvailable``: page cache counts as used until it is dropped. So the budget is MemAvailable minus
an OS/driver reserve, and a large page cache is a warning even though the kernel would reclaim it.
NVML's memory query is never used on a unified device (GB10 answers NOT_SUPPORTED).
"""

from __future__ import annotations

import math
from typing import Any

from sparkops.checks import container, g03_fragmentation, identity, pool_budget
from sparkops.checks.base import CheckContext, Reason, ev, installed, reason
from sparkops.core.findings import Evidence, Finding
from sparkops.core.releases import OLD_ENGINE, at_least, release
from sparkops.core.units import GIB, gb_to_gib
from sparkops.facts.model import Facts, PsiFacts, TorchLive
from sparkops.facts.reading import known
from sparkops.knowledge import engines_data

GID = "G3"


def _gib(b: float) -> float:
    return b / GIB


def _fit(ctx: CheckContext, budget: float | None, fails: list[Reason], warns: list[Reason]) -> None:
    """The planned workload's estimated peak (load transient included upstream) against the budget; a server the
    serving planner says its engine refuses as launched fails whatever the budget (ServePlanResult.refusals)."""
    for why in ctx.workload.serve_refusals:
        fails.append(reason("G3.serve-launch-refused", why=why))
    peak_gb = ctx.workload.estimated_peak_gb  # GB = 1e9 bytes (the planner's unit); the budget is GiB
    if peak_gb is None or budget is None:
        return
    peak = gb_to_gib(peak_gb)
    margin = ctx.kb.thresholds.g3.fit_margin_fraction
    values = {"peak_gib": peak, "peak_gb": peak_gb, "budget_gib": budget, "margin": margin}
    if peak > budget and ctx.workload.serve_verdict == "tight":
        # the serving planner's own verdict (one owner of a server's fit): a share past the budget whose start-up
        # check passes starts, and leaves the OS less than its reserve: a warning there, so a warning here
        warns.append(reason("G3.serve-over-reserve", **values))
    elif peak > budget and ctx.workload.method == "inference":
        # a server's fix is its share or its neighbours, not the fine-tune ladder (and on a Spark vLLM reads
        # MemAvailable, where a page-cache flush frees nothing it does not already count)
        fails.append(reason("G3.serve-exceeds-budget", **values))
    elif peak > budget:
        fails.append(reason("G3.plan-exceeds-budget", **values))
    elif peak > budget * (1 - margin):
        warns.append(reason("G3.plan-tight", **values))


def _psi(psi: object, warns: list[Reason], evidence: list[Evidence], threshold: float) -> None:
    if isinstance(psi, PsiFacts):
        evidence.append(ev("memory.psi", psi))
        if psi.full_avg10 >= threshold:
            warns.append(reason("G3.psi-pressure", full_avg10=psi.full_avg10))


def _fragmentation(ctx: CheckContext, warns: list[Reason], evidence: list[Evidence]) -> None:
    """Free memory that is there but not in large blocks (``/proc/buddyinfo``): the driver's large
    allocations fail while MemAvailable looks fine. Judged against the planned peak when there is one."""
    frag = ctx.facts.memory.fragmentation
    if frag is None:
        return
    peak = ctx.workload.estimated_peak_gb
    th = g03_fragmentation.thresholds(ctx.kb)
    d = g03_fragmentation.judge(frag, int(peak * 1e9) if peak else None, th)
    v = d.values
    if v:
        evidence.append(ev("memory.fragmentation", {k: v.get(k) for k in (
            "free_bytes", "free_large_bytes", "large_block_bytes", "largest_free_block_bytes",
            "unmovable_pageblock_share")}))
    if d.code is None:
        return
    share = v.get("unmovable_pageblock_share")
    unmovable = (f"{share:.0%} of the pageblocks are Unmovable (kernel and driver memory), which compaction "
                 "cannot move: expect to need the reboot. ") if share is not None and \
        share >= th["unmovable_share_reboot"] else ""
    block = v["large_block_bytes"]
    values = {"free_gib": _gib(v["free_bytes"]), "large_gib": _gib(v["free_large_bytes"]),
              "block": f"{block / GIB:.0f} GiB" if block >= GIB else f"{block // 1024 // 1024} MiB",
              "share": v["free_large_bytes"] / v["free_bytes"] if v["free_bytes"] else 0.0, "unmovable": unmovable}
    if peak:
        warns.append(reason("G3.fragmented-for-plan", need_gib=gb_to_gib(peak), **values))
    else:
        warns.append(reason("G3.fragmented", **values))


def meminfo_gib(facts: Facts, key: str) -> float | None:
    """One /proc/meminfo reading in GiB, None when it was not read."""
    mi = facts.memory.meminfo_bytes
    return mi[key] / GIB if known(mi) and key in mi else None  # type: ignore[index, operator]


def pool_is_unified(facts: Facts) -> bool:
    """The serving engines' view: one pool (GB10, or no device memory reading) or the device's own memory."""
    dev = facts.gpu.devices[0] if facts.gpu.devices else None
    return dev is None or not known(dev.memory_total_bytes) or "GB10" in (dev.name or "")


def pool_total_gib(facts: Facts) -> float | None:
    """The whole pool: MemTotal on unified memory (GB10), the device's memory on a discrete GPU."""
    if pool_is_unified(facts):
        return meminfo_gib(facts, "MemTotal")
    return facts.gpu.devices[0].memory_total_bytes / GIB  # type: ignore[operator]


def vllm_reads_mem_available(version: str | None) -> bool:
    """Whether this vLLM release reads free memory on an integrated GPU as MemAvailable (engines.yaml
    vllm.unified_memory.since; None, a release not read, is the current one, which does; "V0" is older)."""
    return at_least(release(version), engines_data()["engines"]["vllm"]["unified_memory"]["since"])


def vllm_extensible_kv_cache(version: str | None, *, pinned_pool: bool = False, flag: bool | None = None) -> bool:
    """Does this vLLM run 0.34's extensible KV cache (engines.yaml vllm.extensible_kv_cache), which sizes the pool
    from the memory free after warmup, treats the share as a cap (default 1.0) and SKIPS the start-up check? On by
    default from 0.34.0; off with --kv-cache-memory / --num-gpu-blocks-override (``pinned_pool``) or
    --no-enable-extensible-kv-cache (``flag`` False). A release not named is NOT taken to be 0.34 (every recorded
    start predates it), nor is a number that is no vLLM release (a major above 0: "Llama3.3_Hopper.yaml")."""
    if pinned_pool or flag is False:
        return False
    if flag:
        return True
    v = release(version)
    if v is None or v == OLD_ENGINE or v[0] != 0:
        return False
    return at_least(v, str(engines_data()["engines"]["vllm"]["extensible_kv_cache"]["since"]))


def vllm_default_share(version: str | None, *, extensible: bool = False) -> float:
    """vLLM's default --gpu-memory-utilization in this release (engines.yaml vllm.default_gpu_memory_utilization and
    _by_release: 0.9, 0.92 since the CUDA-graph estimate entered the budget; 1.0, a cap, with 0.34's extensible KV
    cache); None is the current release."""
    vllm = engines_data()["engines"]["vllm"]
    if extensible:
        return float(vllm["extensible_kv_cache"]["default_share"])
    rows = [r for r in vllm.get("default_gpu_memory_utilization_by_release", []) if at_least(release(version), r["since"])]
    return float(max(rows, key=lambda r: release(str(r["since"])))["share"] if rows else vllm["default_gpu_memory_utilization"])


def vllm_free_reading(unified: bool, cuda_free_gib: float | None, mem_available_gib: float | None,
                      version: str | None) -> tuple[float | None, bool]:
    """The free memory vLLM's start-up check compares (GiB) and whether it is MemAvailable: on unified memory a
    release that reads MemAvailable sees it less its own context (engines.yaml vllm.unified_memory.context_gib),
    otherwise CUDA's free (MemFree on unified memory). The one rule for preflight's G3 and ``plan --serve``."""
    if unified and mem_available_gib is not None and vllm_reads_mem_available(version):
        um = engines_data()["engines"]["vllm"]["unified_memory"]
        return mem_available_gib - float(um["context_gib"]), True
    return cuda_free_gib, False


def vllm_start_decision(facts: Facts, gpu_memory_utilization: float,
                        engine_version: str | None = None) -> tuple[str, dict[str, Any]]:
    """vLLM's start-up check on these facts: the free memory it reads >= ceil(total x share). On unified memory
    vLLM (vllm/utils/mem_utils.py MemorySnapshot; engines.yaml vllm.unified_memory) reads psutil's MemAvailable
    once its own context is up, so the page cache does not refuse the start; releases before that read CUDA's
    free = MemFree, where the page cache counts as used. ``engine_version``: the release to judge (default: the
    one installed in the target, else the current one). One owner: ``plan --serve`` (planner/serve_budget.py)
    calls this too."""
    dev = facts.gpu.devices[0] if facts.gpu.devices else None
    unified = pool_is_unified(facts)
    total = pool_total_gib(facts)
    free = meminfo_gib(facts, "MemFree") if unified else (
        dev.memory_free_bytes / GIB if dev is not None and known(dev.memory_free_bytes) else None)  # type: ignore[operator, union-attr]
    avail = meminfo_gib(facts, "MemAvailable") if unified else None
    free, reads_available = vllm_free_reading(unified, free, avail, engine_version or installed(facts).get("vllm"))
    if total is None or free is None:
        return "G3.start_unknown", {"reason": "total or free memory not in the facts"}
    requested = math.ceil(total * gpu_memory_utilization * GIB) / GIB
    cache = None
    if unified and avail is not None and not reads_available:
        cache = max(0.0, avail - free)
    values = {"total_gib": round(total, 2), "free_gib": round(free, 2), "requested_gib": round(requested, 2),
              "share": gpu_memory_utilization, "page_cache_gib": None if cache is None else round(cache, 2),
              "largest_share_now": max(0.0, math.floor(free / total * 100) / 100),
              "reads": "MemAvailable" if reads_available else ("MemFree" if unified else "CUDA free")}
    if free >= requested:
        return "G3.start_ok", values
    if cache is not None and free + cache >= requested:
        return "G3.start_after_flush", values
    return "G3.start_fails", values


def _serving_start(ctx: CheckContext, warns: list[Reason], evidence: list[Evidence]) -> None:
    """For a serving workload on a share-of-total engine (vLLM): would its start-up check pass now?
    vLLM asks for share x TOTAL memory and compares it with the free memory it reads: MemAvailable less its own
    context on unified memory since 0.11, CUDA's MemFree before, where page cache alone can refuse the start
    (engine accounting: knowledge/engines.yaml vllm.unified_memory)."""
    w = ctx.workload
    if w.method != "inference" or "vllm" not in w.components:
        return
    # the release the launch line names (an image tag), else the one installed in the target: the plan's own rule
    version = w.serve_engine_version or installed(ctx.facts).get("vllm")
    extensible = w.serve_extensible_kv if w.serve_extensible_kv is not None else vllm_extensible_kv_cache(version)
    share = w.serve_share or vllm_default_share(version, extensible=extensible)  # the launch line's, else the default
    if extensible:  # 0.34's request_memory skips the check; the share is a cap the budget below still weighs
        code, v = "G3.start_skipped", {"share": share, "why": "vLLM >= 0.34's extensible KV cache skips the start-up "
                                       "check and sizes its pool from the memory free after warmup"}
    else:
        code, v = vllm_start_decision(ctx.facts, share, version)
    evidence.append(ev("vllm start-up check", {"share": share, **v}))
    if code == "G3.start_after_flush":  # the most specific consequence for a server: it leads
        warns.insert(0, reason("G3.serve-start-after-flush", **v))
    elif code == "G3.start_fails":
        warns.insert(0, reason("G3.serve-start-refused", **v))
    # the one budget (checks/pool_budget.py): the share asked for beside what the running servers
    # have reserved (a capped server's cap x total), not only what is free at this instant
    total = pool_total_gib(ctx.facts)
    if total is None:
        return
    near = pool_budget.neighbour_lines(ctx.facts, total, kb=ctx.kb)
    b = pool_budget.judge(total, near, [pool_budget.PoolLine("vllm (planned)", round(share * total, 2),
                                                             f"share {share:g} x {total:.2f} GiB")],
                          os_reserve_gib=pool_budget.os_reserve_for(pool_is_unified(ctx.facts),
                                                                    ctx.kb.thresholds.g3.os_reserve_gb),
                          fit_margin=0.0)
    evidence.append(ev("pool budget", b.values()))
    if b.code == "over" and near:
        top = sorted(near, key=lambda x: -x.gib)[:3]
        warns.append(reason("G3.serve-share-over-reservations", share=share, requested_gib=share * total,
                            reserved_gib=b.reserved_gib, usable_gib=b.usable_gib, os_reserve_gib=b.os_reserve_gib,
                            over_gib=-(b.left_gib or 0.0),
                            fits=pool_budget.largest_share(total, b.reserved_gib, b.os_reserve_gib),
                            largest="; ".join(f"{x.name}: {x.gib:.1f} GiB ({x.how})" for x in top)))


def _gpu_held(ctx: CheckContext) -> float | None:
    """GiB held by GPU processes (NVML's per-process list), None when the list was not read."""
    lists = [d.processes for d in ctx.facts.gpu.devices if known(d.processes)]
    if not lists:
        return None
    return sum(p.used_memory_bytes for lst in lists for p in lst  # type: ignore[union-attr]
               if known(p.used_memory_bytes)) / GIB


def _unified(ctx: CheckContext, mi: dict[str, int], evidence: list[Evidence]) -> Finding:
    kb = ctx.kb
    total, free, avail = mi.get("MemTotal"), mi.get("MemFree"), mi.get("MemAvailable")
    if total is None or free is None or avail is None:
        return ctx.decide(GID, "G3.meminfo-incomplete", evidence=evidence)
    cache = mi.get("Cached", 0) + mi.get("Buffers", 0) + mi.get("SReclaimable", 0) - mi.get("Shmem", 0)
    gap = max(avail - free, 0)  # what the kernel would give back that CUDA does not count as free
    swap_used = mi.get("SwapTotal", 0) - mi.get("SwapFree", 0)
    live = ctx.facts.target.live
    cuda_free = None
    if isinstance(live, TorchLive) and live.mem_get_info_bytes:
        cuda_free = live.mem_get_info_bytes[0]
        evidence.append(ev("target.live.mem_get_info_bytes", list(live.mem_get_info_bytes)))
    fails: list[Reason] = []
    warns: list[Reason] = []
    notes: list[str] = []
    visible = cuda_free if cuda_free is not None else free
    visible_what = "cudaMemGetInfo free" if cuda_free is not None else "CUDA-visible free ≈ MemFree"
    in_container = container.classify(ctx.facts.host.container).in_container
    cache_big = _gib(gap) >= kb.thresholds.g3.page_cache_warn_gb
    low = _gib(avail) < kb.thresholds.g3.low_available_warn_gb
    swapping = _gib(swap_used) >= kb.thresholds.g3.swap_used_warn_gb
    held = _gpu_held(ctx)
    # the cause decides the fix: a big page cache is flushed (on the host); memory held by processes or
    # pushed to swap is not freed by a flush, so those lead when the cache is small
    if low and not cache_big:
        by_gpu = held is not None and held >= _gib(total - avail) / 2
        warns.append(reason("G3.neighbours" if by_gpu else "G3.low-available", avail_gib=_gib(avail),
                            total_gib=_gib(total), cache_gib=_gib(gap),
                            held=f"; GPU processes hold {held:.1f} GiB" if held is not None else ""))
    if swapping:
        warns.append(reason("G3.swap-pressure", swap_gib=_gib(swap_used), avail_gib=_gib(avail)))
    if cache_big:
        code = "G3.page-cache-container" if in_container else "G3.page-cache"
        warns.append(reason(code, cache_gib=_gib(gap), visible_what=visible_what, visible_gib=_gib(visible),
                            avail_gib=_gib(avail), low=f"; only {_gib(avail):.1f} GiB available" if low else ""))
    _psi(ctx.facts.memory.psi, warns, evidence, kb.thresholds.g3.psi_full_avg10_warn)
    _fragmentation(ctx, warns, evidence)
    _serving_start(ctx, warns, evidence)
    budget = round(max(0.0, _gib(avail) - kb.thresholds.g3.os_reserve_gb), 1)
    _fit(ctx, budget, fails, warns)
    cg = ctx.facts.memory.cgroup
    if known(cg.limit_bytes) and cg.limit_bytes is not None:
        evidence.append(ev("memory.cgroup.limit_bytes", cg.limit_bytes))
        notes.append(f"a cgroup memory limit of {_gib(cg.limit_bytes):.1f} GiB is set; on unified memory it does "  # type: ignore[arg-type]
                     "not bound the driver's GPU allocations, so do not rely on it to protect the host")
    if ctx.headroom_gib is not None and abs(ctx.headroom_gib - budget) > 0.05:
        notes.append(f"the verdict's headroom ({ctx.headroom_gib:.1f} GiB) differs from this unified-memory "
                     f"budget ({budget:.1f} GiB): NVML answered a memory query on a unified device")
    reading = (f"free {_gib(free):.1f} / available {_gib(avail):.1f} / page cache {_gib(cache):.1f} GiB "
               f"of {_gib(total):.1f} GiB unified")
    reading += f"; budget {budget:.1f} GiB"
    if cuda_free is not None:
        reading += f"; cudaMemGetInfo free {_gib(cuda_free):.1f} GiB"
    return _judge(ctx, reading, fails, warns, notes, evidence)


def _discrete(ctx: CheckContext, evidence: list[Evidence]) -> Finding:
    kb = ctx.kb
    fails: list[Reason] = []
    warns: list[Reason] = []
    parts: list[str] = []
    for dev in ctx.facts.gpu.devices:
        if known(dev.memory_free_bytes) and known(dev.memory_total_bytes):
            parts.append(f"GPU{dev.index} free {_gib(dev.memory_free_bytes):.1f} of "  # type: ignore[arg-type]
                         f"{_gib(dev.memory_total_bytes):.1f} GiB")  # type: ignore[arg-type]
            evidence.append(ev(f"gpu.devices[{dev.index}].memory_free_bytes", dev.memory_free_bytes))
    if not parts:
        return ctx.decide(GID, "G3.discrete-unread", evidence=evidence)
    mi = ctx.facts.memory.meminfo_bytes
    if known(mi) and "MemAvailable" in mi:  # type: ignore[operator]
        parts.append(f"host available {_gib(mi['MemAvailable']):.1f} GiB")  # type: ignore[index]
    _psi(ctx.facts.memory.psi, warns, evidence, kb.thresholds.g3.psi_full_avg10_warn)
    _fit(ctx, ctx.headroom_gib, fails, warns)
    notes = []
    if ctx.workload.estimated_peak_gb is not None and ctx.headroom_gib is None:
        notes.append("the workload's peak was not tested: GPU 0's free memory was not read")
    return _judge(ctx, "; ".join(parts) + " (discrete memory: page cache does not reduce it)", fails, warns, notes,
                  evidence, unified=False)


def _judge(ctx: CheckContext, reading: str, fails: list[Reason], warns: list[Reason], notes: list[str],
           evidence: list[Evidence], unified: bool = True) -> Finding:
    w = ctx.workload
    untested = w.estimated_peak_gb is None and bool(w.method or w.params_b or w.model)
    if fails or warns:
        extra = [reason("G3.fit-untested", **_untested_values(w))] if untested else []
        return ctx.conclude(GID, fails + warns + extra, reading=reading, evidence=evidence, notes=notes)
    if untested:  # a workload was named but its fit could not be judged: checked, undecided -> unknown
        return ctx.decide(GID, "G3.fit-untested", reading=reading, evidence=evidence, notes=notes,
                          **_untested_values(w))
    return ctx.decide(GID, "G3.ok" if unified else "G3.discrete-ok", memory=reading, evidence=evidence, notes=notes)


def _untested_values(w) -> dict[str, str]:
    """What a peak estimate is made of, for the method named: serving has no optimizer."""
    if w.method == "inference":
        parts = "weights + KV cache for the context and concurrency you serve + activations and CUDA graphs"
        how = "`spark-ops plan --serve` sizes it for the engine and flags you start; pass its peak with --peak-gb"
    else:
        parts = "weights + gradients + optimizer + activations + the ~2x load transient"
        how = "`spark-ops plan` estimates it; or pass --peak-gb"
    return {"parts": parts, "how": how}


def check(ctx: CheckContext) -> Finding:
    ident = identity.identify(ctx.facts, ctx.kb)
    mi = ctx.facts.memory.meminfo_bytes
    evidence: list[Evidence] = [ev("headroom_gib", ctx.headroom_gib)]
    if ctx.platform == "none":
        host = ""
        if known(mi) and "MemAvailable" in mi:  # type: ignore[operator]
            host = f" (host: {_gib(mi['MemAvailable']):.1f} GiB available)"  # type: ignore[index]
        return ctx.decide(GID, "G3.no-gpu", host=host, evidence=evidence)
    # the profile wins over a contradictory NVML answer (some GB10 reports claim memory "success")
    unified = ident.unified_memory is not False or bool(ctx.profile and ctx.profile.unified_memory)
    if not unified:
        return _discrete(ctx, evidence)
    if not known(mi):
        return ctx.decide(GID, "G3.meminfo-unread", why=str(mi), evidence=evidence)
    evidence.append(ev("memory.meminfo_bytes", {k: v for k, v in mi.items() if k in (  # type: ignore[union-attr]
        "MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SReclaimable", "Shmem", "SwapTotal", "SwapFree")}))
    return _unified(ctx, mi, evidence)  # type: ignore[arg-type]
