"""Facts that confirm or rule out what the text suggests (``--facts FILE`` or ``--live``).

Pure: a snapshot in, per-gotcha effects and ``fact.*`` signals out (context rules in symptoms.yaml
may read the signals, e.g. a CUDA 13 torch turns an `undefined symbol` from G1 into drift, G9).
Only readings that decide something are used; a missing reading says nothing. State that drifts
between the failure and the collection (free memory, temperature) may confirm, never rule out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkops.diagnose.model import FactEffect
from sparkops.facts.model import Facts
from sparkops.facts.reading import known
from sparkops.knowledge import Knowledge
from sparkops.knowledge import load as load_catalog

_SERVERS = ("vllm", "sglang", "ollama", "llama.cpp", "tgi", "trtllm", "comfyui", "trainer")


@dataclass
class FactJudgement:
    signals: set[str] = field(default_factory=set)
    effects: dict[str, list[FactEffect]] = field(default_factory=dict)
    hints: list[tuple[str, str]] = field(default_factory=list)  # (gotcha, what the facts say on their own)

    def add(self, gotcha: str, fact: str, value: object, effect: str) -> None:
        self.effects.setdefault(gotcha, []).append(FactEffect(fact=fact, value=value, effect=effect))


def _torch_cuda(facts: Facts) -> tuple[str, object, bool] | None:
    """(fact path, torch.version.cuda, torch present) from the live probe, else from torch's files."""
    live = facts.target.live
    if known(live) and live.import_ok and live.version:
        return "target.live.cuda", live.cuda, True
    torch = facts.target.torch
    if known(torch):
        return "target.torch.cuda", torch.cuda, True
    return None


def judge(facts: Facts, catalog: Knowledge | None = None) -> FactJudgement:
    kb = catalog or load_catalog()
    out = FactJudgement()
    t = facts.target

    # G1: the torch build's CUDA major is authoritative
    tc = _torch_cuda(facts)
    if tc is not None:
        path, cuda, _present = tc
        if cuda is None:
            out.signals.add("fact.torch-cpu")
            out.add("G1", path, None, "confirms")
            out.hints.append(("G1", "facts: torch is a CPU-only build (torch.version.cuda is None) — G1"))
        elif str(cuda).startswith("12") or str(cuda).split(".")[0] in {"10", "11", "12"}:
            out.signals.add("fact.torch-cuda12")
            out.add("G1", path, cuda, "confirms")
            out.hints.append(("G1", f"facts: torch is built for CUDA {cuda} on a CUDA 13 platform — G1"))
        elif str(cuda).startswith("13"):
            out.signals.add("fact.torch-cuda13")
            out.add("G1", path, cuda, "rules-out")
    if known(t.extensions):
        for ext in t.extensions:
            old = [n for n in ext.needed if n.endswith(".so.12") or n.endswith(".so.11")]
            if old:
                out.signals.add("fact.extension-needs-cuda12")
                out.add("G1", f"target.extensions[{ext.package}]", ", ".join(old), "confirms")
                break

    # G2: flash-attn and Unsloth together, or a flash-attn that does not import
    dists = t.distributions if known(t.distributions) else None
    if dists is not None:
        fa = dists.get("flash-attn") or dists.get("flash_attn")
        if fa:
            out.signals.add("fact.flash-attn-installed")
            if dists.get("unsloth"):
                out.add("G2", "target.distributions", f"flash-attn {fa}, unsloth {dists['unsloth']}", "confirms")
    live = t.live
    if known(live) and live.flash_attn_import is False:
        out.add("G2", "target.live.flash_attn_import", False, "confirms")

    # G3: page cache that CUDA counts as used, or little memory available now
    mi = facts.memory.meminfo_bytes
    if known(mi) and mi.get("MemTotal"):
        gib = 1024**3
        cache = mi.get("Cached", 0) + mi.get("SReclaimable", 0) - mi.get("Shmem", 0)
        if cache / gib >= float(kb.t("g3.page_cache_warn_gb")):
            out.add("G3", "memory.meminfo_bytes.Cached", round(cache / gib, 1), "confirms")
        avail = mi.get("MemAvailable")
        if avail is not None and avail / gib < float(kb.t("g3.low_available_warn_gb")):
            out.add("G3", "memory.meminfo_bytes.MemAvailable", round(avail / gib, 1), "confirms")

    # G4: hot now, or thermal clock-event reasons active
    for d in facts.gpu.devices:
        if known(d.temperature_c) and d.temperature_c >= float(kb.t("g4.hot_c")):
            out.add("G4", f"gpu.devices[{d.index}].temperature_c", d.temperature_c, "confirms")
        if known(d.clock_event_reasons) and d.clock_event_reasons & int(kb.t("g4.thermal_reason_mask")):
            out.add("G4", f"gpu.devices[{d.index}].clock_event_reasons", hex(d.clock_event_reasons), "confirms")

    # G6: an uncapped or near-capacity neighbour in the pool
    procs = facts.processes.processes
    if known(procs):
        near = float(kb.t("g6.near_capacity_fraction"))
        caps = kb.t("g6.default_caps")
        heavy = [p for p in procs if p.kind in _SERVERS and p.kind != "trainer"
                 and (p.memory_fraction if p.memory_fraction is not None else caps.get(p.kind, 1.0)) >= near]
        if heavy:
            out.signals.add("fact.heavy-neighbour")
            out.add("G6", "processes.processes", ", ".join(sorted({p.kind for p in heavy})), "confirms")

    # G7: FP4 hardware at all, and kernels built for sm_121a
    caps_seen = [d.capability for d in facts.gpu.devices if known(d.capability)]
    min_major = int(kb.t("g7.nvfp4_min_capability_major"))
    if caps_seen and all(tuple(c)[0] < min_major for c in caps_seen):
        out.add("G7", "gpu.devices[0].capability", list(caps_seen[0]), "rules-out")
    arch = facts.host.env.get("TORCH_CUDA_ARCH_LIST", "")
    if arch and any(mk in arch for mk in kb.t("g7.sm121a_markers")):
        out.add("G7", "host.env.TORCH_CUDA_ARCH_LIST", arch, "rules-out")

    # G9: inside a pinned container, or a bare environment
    ct = facts.host.container
    if known(ct.image_kind) and ct.image_kind in ("ngc-pytorch", "unsloth"):
        out.signals.add("fact.in-container")
        out.add("G9", "host.container.image_kind", ct.image_kind, "rules-out")
    elif not ct.markers and t.env.kind in ("venv", "uv", "conda"):
        out.signals.add("fact.bare-env")
        out.add("G9", "target.env.kind", t.env.kind, "confirms")

    # G10: tensor parallelism configured, or more than one node
    tp = [h for h in facts.configs.hits if h.kind == "tensor_parallel" and h.value.strip().isdigit()
          and int(h.value) > 1]
    if tp:
        out.signals.add("fact.tp-config")
        out.add("G10", "configs.hits", f"{tp[0].key}={tp[0].value} ({tp[0].file}:{tp[0].line})", "confirms")
    ws, lws = facts.host.env.get("WORLD_SIZE", ""), facts.host.env.get("LOCAL_WORLD_SIZE", "")
    if ws.isdigit() and lws.isdigit() and int(ws) > int(lws):
        out.signals.add("fact.multi-node")
        out.add("G10", "host.env.WORLD_SIZE", f"{ws} (local {lws})", "confirms")
    return out
