"""G6 — global unified-memory contention.

Every process draws on the one pool, so an uncapped or near-capacity neighbour (vLLM's default
``--gpu-memory-utilization`` is 0.9) can evict a run's KV cache or weights with no OOM in either
log. A small capped neighbour is fine: judge by the neighbour's cap, not its mere presence.
Processes stuck in uninterruptible sleep (D) hold memory that cannot be reclaimed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkops.checks import identity, pool_budget
from sparkops.checks.base import CheckContext, Reason, ev, reason
from sparkops.checks.processes import ProcessClass, classify_all, kind_from_name
from sparkops.core.findings import Evidence, Finding
from sparkops.core.units import GIB, MIB, gb_to_gib
from sparkops.facts.model import HostProcess
from sparkops.facts.reading import known

GID = "G6"

SERVER_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "ollama": "Ollama", "llama.cpp": "llama.cpp server",
                "tgi": "TGI", "trtllm": "TensorRT-LLM", "comfyui": "ComfyUI", "trainer": "trainer"}


@dataclass
class Neighbour:
    pid: int
    name: str
    kind: str
    mem_bytes: int | None
    mem_source: str  # "GPU" (NVML per-process) or "RSS"
    fraction: float | None = None
    cap_source: str = ""

    def label(self) -> str:
        what = SERVER_NAMES.get(self.kind, "")
        return f"{what} ({self.name} pid {self.pid})" if what else f"{self.name} (pid {self.pid})"

    def mem(self) -> str:
        if self.mem_bytes is None:
            return "memory unknown"
        return f"{self.mem_bytes / GIB:.1f} GiB {self.mem_source}" if self.mem_bytes >= GIB else \
            f"{self.mem_bytes / MIB:.0f} MiB {self.mem_source}"


def _neighbours(ctx: CheckContext, host: dict[int, HostProcess], cls: dict[int, ProcessClass]) -> list[Neighbour]:
    """GPU processes first (their memory is what competes), then servers seen only in the process table."""
    defaults: dict[str, float] = ctx.kb.thresholds.g6.default_caps
    out: list[Neighbour] = []
    seen: set[int] = set()
    for dev in ctx.facts.gpu.devices:
        if not known(dev.processes):
            continue
        for gp in dev.processes:  # type: ignore[union-attr]
            hp = host.get(gp.pid)
            hc = cls[gp.pid] if hp else None
            kind = hc.kind if hc and hc.kind != "other" else kind_from_name(gp.name or (hp.name if hp else ""))
            mem = gp.used_memory_bytes if known(gp.used_memory_bytes) else (hp.rss_bytes if hp else None)
            src = "GPU" if known(gp.used_memory_bytes) else "RSS"
            n = Neighbour(gp.pid, gp.name or (hp.name if hp else "?"), kind, mem, src)  # type: ignore[arg-type]
            if hc and hc.fraction is not None:
                n.fraction, n.cap_source = hc.fraction, hc.cap_source or "cmdline"
            out.append(n)
            seen.add(gp.pid)
    # a server's front process (``vllm serve``) and its engine child (``VLLM::EngineCore``) are one
    # neighbour: count the one holding GPU memory, lend it the front's cap
    by_gpu_pid = {n.pid: n for n in out}
    front_of: dict[int, Neighbour] = {}
    for pid in list(by_gpu_pid):
        hp, hops = host.get(pid), 0
        while hp is not None and hp.ppid is not None and hops < 4:
            front_of.setdefault(hp.ppid, by_gpu_pid[pid])
            hp, hops = host.get(hp.ppid), hops + 1
    have_ppids = any(hp.ppid is not None for hp in host.values())
    gpu_kinds = {n.kind for n in out}
    for hp in host.values():
        hc = cls[hp.pid]
        if hp.pid in seen or hc.kind == "other":
            continue
        child = front_of.get(hp.pid)
        if child is None and not have_ppids and hc.kind in gpu_kinds:
            child = next(n for n in out if n.kind == hc.kind)  # no parent links: match by kind
        if child is not None:
            if hc.fraction is not None and (child.fraction is None or child.cap_source == "default"):
                child.fraction, child.cap_source = hc.fraction, hc.cap_source or "cmdline"
            continue
        n = Neighbour(hp.pid, hp.name, hc.kind, hp.rss_bytes or None, "RSS")
        if hc.fraction is not None:
            n.fraction, n.cap_source = hc.fraction, hc.cap_source or "cmdline"
        out.append(n)
    for n in out:
        if n.fraction is None and n.kind in defaults:
            n.fraction, n.cap_source = float(defaults[n.kind]), "default"
    return out


def _reservations_budget(neighbours: list[Neighbour], pool_gib: float, peak_gib: float, kb,  # noqa: ANN001
                         unified: bool) -> pool_budget.PoolBudget:
    """The planned peak beside each neighbour's reservation (a share-of-total server's cap x pool); the OS reserve
    only where the OS shares the pool (unified memory)."""
    lines = []
    for n in neighbours:
        gib, how = pool_budget.reservation_gib(n.kind, n.fraction, None if n.mem_bytes is None else n.mem_bytes / GIB,
                                               pool_gib)
        lines.append(pool_budget.PoolLine(n.label(), round(gib, 2), how, pid=n.pid, kind=n.kind))
    return pool_budget.judge(pool_gib, lines, [pool_budget.PoolLine("planned run", round(peak_gib, 2), "planned peak")],
                             os_reserve_gib=pool_budget.os_reserve_for(unified, kb.thresholds.g3.os_reserve_gb),
                             fit_margin=float(kb.thresholds.g3.fit_margin_fraction))


def _budget_values(b: pool_budget.PoolBudget, peak_gb: float) -> dict[str, object]:
    top = sorted(b.neighbours, key=lambda x: -x.gib)[:3]
    return {"peak_gib": gb_to_gib(peak_gb), "reserved_gib": b.reserved_gib, "usable_gib": b.usable_gib,
            "pool_gib": b.pool_gib, "os_reserve_gib": b.os_reserve_gib, "left_gib": b.left_gib,
            "margin": b.fit_margin, "largest": "; ".join(f"{x.name}: {x.gib:.1f} GiB ({x.how})" for x in top) or "none"}


def _pool_is_unified(ctx: CheckContext) -> bool:
    """One pool for CPU and GPU (a GB10), or not known to be otherwise."""
    ident = identity.identify(ctx.facts, ctx.kb)
    return ident.unified_memory is not False or bool(ctx.profile is not None and ctx.profile.unified_memory)


def _pool_bytes(ctx: CheckContext, unified: bool) -> int | None:
    if unified:
        mi = ctx.facts.memory.meminfo_bytes
        return mi.get("MemTotal") if known(mi) else None  # type: ignore[union-attr]
    dev = ctx.facts.gpu.devices[0] if ctx.facts.gpu.devices else None
    return dev.memory_total_bytes if dev and known(dev.memory_total_bytes) else None  # type: ignore[return-value]


def check(ctx: CheckContext) -> Finding:
    if ctx.platform == "none":
        return ctx.decide(GID, "G6.no-gpu")
    table = ctx.facts.processes.processes
    gpu_lists = [d.processes for d in ctx.facts.gpu.devices if known(d.processes)]
    if not known(table) and not gpu_lists:
        return ctx.decide(GID, "G6.unread", table=str(table), source=str(ctx.facts.gpu.source))
    host = {p.pid: p for p in table} if known(table) else {}  # type: ignore[union-attr]
    kb = ctx.kb
    near = kb.thresholds.g6.near_capacity_fraction
    heavy_b = kb.thresholds.g6.heavy_neighbour_gb * GIB
    cls = classify_all(host.values(), kb)
    neighbours = _neighbours(ctx, host, cls)
    evidence: list[Evidence] = [ev("neighbours", [n.__dict__ for n in neighbours])]
    warns: list[Reason] = []
    notes: list[str] = []
    unified = _pool_is_unified(ctx)
    pool = _pool_bytes(ctx, unified)
    pool_txt = f" of the {pool / GIB:.1f} GiB pool" if pool else ""
    for n in neighbours:
        big = n.mem_bytes is not None and n.mem_bytes >= heavy_b
        if n.fraction is not None:
            how = "default, no cap given" if n.cap_source == "default" else n.cap_source
            if n.fraction >= near:
                warns.append(reason("G6.uncapped-server" if n.cap_source == "default" else "G6.near-capacity",
                                    who=n.label(), cap=n.fraction, how=how, mem=n.mem(), pool=pool_txt))
            else:
                notes.append(f"{n.label()} capped at {n.fraction:g} ({how}), holds {n.mem()}")
        elif big:
            warns.append(reason("G6.heavy-uncapped", who=n.label(), mem=n.mem(), pool=pool_txt))
        elif n.mem_bytes:
            notes.append(f"small neighbour {n.label()}: {n.mem()}")
    dstate_min = ctx.kb.thresholds.g6.dstate_min_gb * GIB
    for hp in host.values():
        if hp.state in ("disk-sleep", "D") and (hp.rss_bytes >= dstate_min or cls[hp.pid].engine):
            warns.append(reason("G6.dstate", who=f"{hp.name} (pid {hp.pid})", rss_gib=hp.rss_bytes / GIB))
    if not known(table):
        notes.append(f"process table not read ({table}): servers without a GPU context and D-state holders "
                     "were not checked")
    else:
        pf = ctx.facts.processes
        if pf.denied:
            notes.append(f"{pf.denied} process(es) could not be read (other users or hidepid)")
        if pf.truncated:
            notes.append("the process scan stopped at its time budget: the table is incomplete")
    held = sum(n.mem_bytes or 0 for n in neighbours)
    # contention in total: capped neighbours that are each "fine" can still fill the pool together
    capped = [n for n in neighbours if n.fraction is not None and n.fraction < near]
    caps = sum(n.fraction or 0.0 for n in capped)
    if pool and len(neighbours) > 1 and (held >= near * pool or caps >= near):
        evidence.append(ev("pool_bytes", pool))
        mi = ctx.facts.memory.meminfo_bytes
        extra = ""
        if known(mi):
            swap = (mi.get("SwapTotal", 0) - mi.get("SwapFree", 0)) / GIB  # type: ignore[union-attr]
            avail = mi.get("MemAvailable", 0) / GIB  # type: ignore[union-attr]
            extra = f"; {avail:.1f} GiB available" + (f", {swap:.1f} GiB swapped" if swap >= 1 else "")
        warns.insert(0, reason("G6.total-contention", count=len(neighbours), held_gib=held / GIB,
                               pool_gib=pool / GIB, share=held / pool, caps=caps,
                               caps_txt=f"; their caps add up to {caps:.2f} of the pool" if capped else "",
                               extra=extra))
    peak = ctx.workload.estimated_peak_gb
    if peak is not None and pool:
        evidence.append(ev("pool_bytes", pool))
        if peak * 1e9 + held > pool:  # the planned peak is in GB (1e9 bytes)
            return ctx.conclude(GID, [reason("G6.plan-plus-neighbours", peak_gib=gb_to_gib(peak),
                                             held_gib=held / GIB, pool_gib=pool / GIB), *warns],
                                evidence=evidence, notes=notes)
        # the one budget (checks/pool_budget.py, which `plan --serve --beside` uses too): a capped
        # server takes its cap x total from start-up on, whatever it holds now
        budget = _reservations_budget(neighbours, pool / GIB, gb_to_gib(peak), kb, unified)
        evidence.append(ev("pool budget", budget.values()))
        if budget.code in ("over", "tight"):
            v = _budget_values(budget, peak)
            if budget.code == "over":
                return ctx.conclude(GID, [reason("G6.plan-plus-reservations", **v), *warns], evidence=evidence,
                                    notes=notes)
            warns.append(reason("G6.plan-tight-beside-reservations", **v))
    elif peak is not None:
        notes.append("the pool size was not read, so the workload plus neighbours was not tested against it")
    if warns:
        return ctx.conclude(GID, warns, evidence=evidence, notes=notes)
    scanned = ctx.facts.processes.scanned
    seen = f"{len(neighbours)} GPU/server process(es)" + (f" among {scanned} scanned" if scanned else "")
    if not gpu_lists:  # only the host table: a plain `python train.py` holding GPU memory is invisible there
        return ctx.decide(GID, "G6.no-per-process", source=str(ctx.facts.gpu.source), seen=seen, evidence=evidence,
                          notes=notes)
    return ctx.decide(GID, "G6.ok", seen=seen, held_gib=held / GIB, pool=pool_txt, evidence=evidence, notes=notes)
