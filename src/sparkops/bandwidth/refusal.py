"""Should the bandwidth measurement run now? Pure rules over the facts (G5: it is intrusive).

The measurement allocates device memory and saturates the memory bus for a moment. On a Spark the
pool is shared with every other job, so it is refused (a skip with the reason) when another GPU job
runs or free memory is short, unless the user forces it. Free memory is unified-aware: on GB10
NVML's memory query is NOT_SUPPORTED, so MemAvailable from /proc/meminfo is the pool's free memory;
on a discrete GPU it is NVML's free memory of the device measured.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from sparkops.checks import identity
from sparkops.facts.model import Facts
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.knowledge import Knowledge
from sparkops.knowledge.bandwidth import GIB, BandwidthSettings

COMPUTE_KINDS = ("compute", "unknown")  # a graphics client (Xorg, gnome-shell) does not load the memory bus


@dataclass(frozen=True)
class Neighbour:
    """Another job on the GPU, as the facts saw it."""

    pid: int
    name: str
    seen_as: str  # "GPU compute process" or the server/trainer kind from the process table
    memory_bytes: int | None = None

    def label(self) -> str:
        mem = f", {self.memory_bytes / GIB:.1f} GiB" if self.memory_bytes else ""
        return f"{self.name or '?'} (pid {self.pid}, {self.seen_as}{mem})"


@dataclass(frozen=True)
class Assessment:
    """What the rules found; ``reasons`` empty means safe to measure."""

    neighbours: tuple[Neighbour, ...]
    free_bytes: int | None  # None: the facts do not say (the child then checks cudaMemGetInfo itself)
    free_source: str  # "MemAvailable (unified memory)", "NVML free of GPU0", "unknown: ..."
    reasons: tuple[str, ...]
    # the facts show no NVIDIA GPU at all (the GPU probe finished and found none): there is no GPU for other
    # jobs to share, so they refuse nothing; the measuring child says whether torch sees a device anyway
    no_gpu: str = ""

    def refused(self, force: bool) -> bool:
        return bool(self.reasons) and not force

    def summary(self) -> str:
        return "; ".join(self.reasons)


def free_memory(facts: Facts, kb: Knowledge, device_index: int = 0) -> tuple[int | None, str]:
    """The free memory that bounds the measurement, and where it came from."""
    ident = identity.identify(facts, kb)
    mi = facts.memory.meminfo_bytes
    if ident.unified_memory:
        if known(mi) and "MemAvailable" in mi:  # type: ignore[operator]
            return int(mi["MemAvailable"]), "MemAvailable (unified memory: NVML has no memory reading)"  # type: ignore[index]
        return None, f"unknown: unified memory and /proc/meminfo was not read ({mi})"
    dev = next((d for d in facts.gpu.devices if d.index == device_index), None)
    if dev is not None and known(dev.memory_free_bytes):
        return int(dev.memory_free_bytes), f"NVML free of GPU{device_index}"  # type: ignore[arg-type]
    if dev is None:
        return None, "unknown: no GPU in the facts (the measuring child checks cudaMemGetInfo)"
    return None, f"unknown: GPU{device_index} free memory not read ({dev.memory_free_bytes})"


def neighbours(facts: Facts, kinds: Collection[str], alive: Callable[[int], bool] = lambda pid: True,
               own_pids: Collection[int] = ()) -> tuple[list[Neighbour], list[str]]:
    """Other GPU jobs (NVML compute processes, then servers/trainers from the process table) still
    alive, and what could not be listed. ``alive`` lets the caller drop processes that ended since
    the facts were taken (the target probe's own torch child among them)."""
    found: dict[int, Neighbour] = {}
    unlisted: list[str] = []
    for dev in facts.gpu.devices:
        procs = dev.processes
        if isinstance(procs, Unavailable):
            if _tried(procs):
                unlisted.append(f"GPU{dev.index} processes could not be listed ({procs})")
            continue
        for p in procs:
            if p.kind in COMPUTE_KINDS and p.pid not in own_pids and p.pid not in found and alive(p.pid):
                mem = p.used_memory_bytes if known(p.used_memory_bytes) else None
                found[p.pid] = Neighbour(p.pid, p.name, "GPU compute process", mem)  # type: ignore[arg-type]
    host = facts.processes.processes
    if isinstance(host, Unavailable):
        if _tried(host):
            unlisted.append(f"the process table was not read ({host})")
    else:
        from sparkops.checks.processes import classify_all

        classes = classify_all(host)
        for hp in host:
            kind = classes[hp.pid].kind
            if kind in kinds and hp.pid not in own_pids and hp.pid not in found and alive(hp.pid):
                found[hp.pid] = Neighbour(hp.pid, hp.name, f"{kind} process", None)
    return list(found.values()), unlisted


def no_gpu_seen(facts: Facts, kb: Knowledge) -> str:
    """Why the facts show no NVIDIA GPU ("" when they show one, or when the GPU probe failed or overran:
    an unfinished probe is not evidence of no GPU, the identity check's own rule)."""
    if identity.identify(facts, kb).platform != "none":
        return ""
    rec = facts.probes.get("gpu")
    if rec is not None and not rec.ok:
        return ""
    why = facts.gpu.nvml_error or "NVML not usable"
    smi = facts.gpu.smi_host_error or facts.gpu.smi_error or "nvidia-smi gave no device"
    return f"no NVIDIA GPU visible ({why}; {smi})"


def _tried(reading: Unavailable) -> bool:
    """A listing that was attempted and failed (not one the caller chose not to collect)."""
    return reading.unavailable is not Why.not_collected or bool(reading.detail)


def assess(facts: Facts, kb: Knowledge, settings: BandwidthSettings | None = None,
           alive: Callable[[int], bool] = lambda pid: True, own_pids: Collection[int] = (),
           device_index: int = 0) -> Assessment:
    """Apply the refusal rules to ``facts``."""
    settings = settings or kb.thresholds.bandwidth
    free, source = free_memory(facts, kb, device_index)
    no_gpu = no_gpu_seen(facts, kb)
    if no_gpu:  # checked first: "other GPU jobs running" on a box without a GPU would send the user the wrong way
        return Assessment((), free, source, (), no_gpu)
    found, unlisted = neighbours(facts, settings.neighbour_kinds, alive, own_pids)
    reasons: list[str] = []
    if found:
        shown = ", ".join(n.label() for n in found[:4]) + (f" (+{len(found) - 4} more)" if len(found) > 4 else "")
        reasons.append(f"{len(found)} other GPU job(s) running: {shown}; the measurement would slow them and "
                       "read low")
    reasons += [f"{u}: cannot tell whether another job runs" for u in unlisted]
    if free is not None and free < settings.min_free_bytes:
        reasons.append(f"memory is short: {free / GIB:.1f} GiB free ({source}), below the "
                       f"{settings.min_free_gb:g} GiB minimum")
    return Assessment(tuple(found), free, source, tuple(reasons))
