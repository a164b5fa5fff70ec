"""Identity: which platform is this? Runs first; every other check is judged against its answer.

``dgx-spark`` for a GB10; ``nvidia`` (generic, the GPU's own profile) for any other NVIDIA GPU;
``none`` when no NVIDIA GPU is visible, which fails and blocks the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkops.checks import container, gpu_visibility
from sparkops.checks.base import conclude, ev, reason
from sparkops.core.findings import Evidence, Finding
from sparkops.core.units import GIB
from sparkops.facts.model import Facts, GpuDevice, TorchLive
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.knowledge import Knowledge, Profile


@dataclass(frozen=True)
class Identity:
    platform: str
    profile: Profile | None
    device: GpuDevice | None
    gpu_name: str | None
    capability: tuple[int, int] | None
    unified_memory: bool | None


def identify(facts: Facts, kb: Knowledge) -> Identity:
    """Decide the platform from NVML/nvidia-smi facts, falling back to what live torch saw."""
    dev = facts.gpu.devices[0] if facts.gpu.devices else None
    name = dev.name if dev else None
    cap = dev.capability if dev and known(dev.capability) else None
    live = facts.target.live
    if name is None and known(live) and live.device_name:  # type: ignore[union-attr]
        name = live.device_name  # type: ignore[union-attr]
        cap = live.capability  # type: ignore[union-attr]
    if cap is None and known(live) and live.capability:  # type: ignore[union-attr]
        cap = live.capability  # type: ignore[union-attr]
    if name is None:
        return Identity("none", None, None, None, None, None)
    profile = kb.profile_for(name)
    unified: bool | None = None
    if profile is not None and profile.unified_memory:
        unified = True  # GB10/Thor: one pool, whatever a driver's memory query claims
    elif dev is not None:
        mem = dev.memory_total_bytes
        if isinstance(mem, Unavailable) and mem.unavailable is Why.not_supported:
            unified = True  # NVML NOT_SUPPORTED is the unified-memory signature
        elif known(dev.addressing_mode) and str(dev.addressing_mode).upper() in ("ATS", "HMM"):
            unified = True
        elif known(mem):
            unified = False
    if unified is None and profile is not None:
        unified = profile.unified_memory
    platform = "dgx-spark" if profile is not None and profile.key == "gb10" else "nvidia"
    return Identity(platform, profile, dev, name, tuple(cap) if cap else None, unified)  # type: ignore[arg-type]


def headroom_gib(facts: Facts, ident: Identity, kb: Knowledge) -> float | None:
    """The memory budget the verdict uses.

    Unified memory (GB10, or NVML memory NOT_SUPPORTED): MemAvailable minus the OS/driver
    reserve. Discrete GPU: the device's free memory. No GPU: None.
    """
    reserve = kb.thresholds.g3.os_reserve_gb
    mi = facts.memory.meminfo_bytes
    if ident.platform == "none":
        return None
    if ident.unified_memory:
        if known(mi) and "MemAvailable" in mi:  # type: ignore[operator]
            return round(max(0.0, mi["MemAvailable"] / GIB - reserve), 1)  # type: ignore[index]
        return None
    if ident.device is None:
        return None  # a discrete GPU whose memory nobody read: host RAM is not its budget
    free = ident.device.memory_free_bytes
    if known(free):
        return round(free / GIB, 1)  # type: ignore[operator]
    return None


def check(facts: Facts, kb: Knowledge, ident: Identity) -> Finding:
    evidence: list[Evidence] = [
        ev("gpu.source", facts.gpu.source),
        ev("gpu.devices[0].name", ident.gpu_name),
        ev("gpu.devices[0].capability", list(ident.capability) if ident.capability else None),
        ev("host.arch", facts.host.arch if known(facts.host.arch) else str(facts.host.arch)),
        ev("gpu.driver_version", str(facts.gpu.driver_version)),
        ev("gpu.cuda_driver_version", str(facts.gpu.cuda_driver_version)),
    ]
    rec = facts.probes.get("gpu")
    if ident.platform == "none" and rec is not None and not rec.ok:
        # the probe itself failed or overran: that is not evidence of "no GPU"
        return conclude(kb, "identity", [reason("identity.probe-unfinished", why=rec.reason)], evidence=evidence)
    if ident.platform == "none":
        why = facts.gpu.nvml_error or "NVML not usable"
        smi = facts.gpu.smi_host_error or facts.gpu.smi_error or "nvidia-smi gave no device"
        tri = gpu_visibility.triage(facts, kb)
        evidence.append(ev("host.dev_nvidia", facts.host.dev_nvidia))
        evidence.append(ev("host.container.markers", container.classify(facts.host.container).markers))
        return conclude(kb, "identity", [reason(tri.code, what="no NVIDIA GPU visible", nvml=why, smi=smi,
                                                **tri.values())], evidence=evidence)
    live = facts.target.live
    if isinstance(live, TorchLive) and live.import_ok and live.cuda_available is False and live.cuda:
        tri = gpu_visibility.triage(facts, kb)
        if tri.fired is not None and tri.fired < 5:  # the build is fine; something hides the GPU from it
            evidence.append(ev("target.live.cuda_error", live.cuda_error))
            evidence.append(ev("host.env.CUDA_VISIBLE_DEVICES", facts.host.env.get("CUDA_VISIBLE_DEVICES")))
            what = f"the driver sees {ident.gpu_name}, but torch in {facts.target.python or 'the target'} sees no GPU"
            return conclude(kb, "identity", [reason(tri.code, what=what, nvml="ok", smi="ok",
                                                    **tri.values())], evidence=evidence)
    cap = f"({ident.capability[0]}, {ident.capability[1]})" if ident.capability else "unknown capability"
    arch = facts.host.arch if known(facts.host.arch) else "unknown arch"
    mem = {True: "unified memory", False: "discrete memory", None: "memory kind unknown"}[ident.unified_memory]
    if ident.platform == "dgx-spark":
        notes = []
        p = ident.profile
        if p and p.capability and ident.capability and tuple(p.capability) != ident.capability:
            notes.append(f"GB10 expected capability {tuple(p.capability)}, saw {ident.capability}")
        if arch not in ("aarch64", "unknown arch"):
            notes.append(f"GB10 expected aarch64, host reports {arch}")
        code = "identity.dgx-spark-unexpected" if notes else "identity.dgx-spark"
        return conclude(kb, "identity", [reason(code, gpu=ident.gpu_name, cap=cap, arch=arch, mem=mem,
                                                unexpected="; ".join(notes))], evidence=evidence, notes=notes)
    prof = ident.profile.key if ident.profile else "no profile for this model"
    return conclude(kb, "identity", [reason("identity.generic", gpu=ident.gpu_name, cap=cap, arch=arch, mem=mem,
                                            profile=prof)], evidence=evidence)
