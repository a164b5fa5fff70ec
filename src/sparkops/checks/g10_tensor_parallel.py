"""G10 — two Sparks: DDP/FSDP only, never tensor parallel.

ConnectX-7 between two Sparks carries DDP/FSDP gradient and parameter sync, but is far too thin for
tensor parallelism's per-layer traffic (two-node all-gather ≈ 23 GB/s). TP larger than one across
nodes, or larger than the GPUs of one node (one, on a Spark), fails. The settings come from the
workload description, the scanned configs and launch scripts, and WORLD_SIZE/LOCAL_WORLD_SIZE. A path
that could not be read is reported, never read as "no TP".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkops.checks.base import CheckContext, Evidence, Finding, Status, ev

GID = "G10"


@dataclass(frozen=True)
class Setting:
    value: int | None  # None: present but not a plain number ("${TP}")
    raw: str
    where: str  # "configs/serve.yaml:7" or "workload"


def _int(text: str) -> int | None:
    t = text.strip().strip("\"'").strip()
    return int(t) if re.fullmatch(r"[0-9]{1,9}", t) else None


def _multi_node(ctx: CheckContext, node_settings: list[Setting]) -> list[str]:
    """Evidence that the job spans more than one node."""
    out: list[str] = []
    env = ctx.facts.host.env
    world, local = _int(env.get("WORLD_SIZE", "")), _int(env.get("LOCAL_WORLD_SIZE", ""))
    if world is not None and local is not None and world > local:
        out.append(f"WORLD_SIZE={world} > LOCAL_WORLD_SIZE={local}")
    if ctx.workload.nodes and ctx.workload.nodes > 1:
        out.append(f"workload names {ctx.workload.nodes} nodes")
    out += [f"{s.where} sets {s.raw}" for s in node_settings if s.value and s.value > 1]
    return out


def check(ctx: CheckContext) -> Finding:
    cfg = ctx.facts.configs
    wl = ctx.workload
    evidence: list[Evidence] = [ev("configs.roots", cfg.roots), ev("configs.files_read", cfg.files_read),
                                ev("host.env.WORLD_SIZE", ctx.facts.host.env.get("WORLD_SIZE")),
                                ev("host.env.LOCAL_WORLD_SIZE", ctx.facts.host.env.get("LOCAL_WORLD_SIZE")),
                                ev("workload.tensor_parallel", wl.tensor_parallel), ev("workload.nodes", wl.nodes)]
    notes: list[str] = []
    tp: list[Setting] = []
    nodes: list[Setting] = []
    if wl.tensor_parallel is not None:
        tp.append(Setting(wl.tensor_parallel, f"tensor_parallel {wl.tensor_parallel}", "workload"))
    if cfg.scanned:
        for h in cfg.hits:
            s = Setting(_int(h.value), f"{h.key}: {h.value}", f"{h.file}:{h.line}")
            if h.kind == "tensor_parallel":
                tp.append(s)
            elif h.kind == "nodes":
                nodes.append(s)
            else:
                notes.append(f"{s.where} sets {s.raw}")
        evidence.append(ev("configs.hits", [h.model_dump() for h in cfg.hits]))
    elif not tp:
        rec = ctx.facts.probes.get("configs")
        why = f": {rec.reason}" if rec and rec.reason else " (no config paths given)"
        return ctx.finding(GID, Status.skip, f"configs were not scanned{why}; the workload names no tensor parallelism",
                           detail="Point --config at the training/serving configs and launch scripts to check them.",
                           evidence=evidence)
    else:
        notes.append("configs were not scanned: only the workload description was judged")

    gpus = 1 if ctx.platform == "dgx-spark" else (len(ctx.facts.gpu.devices) or None)
    multi = _multi_node(ctx, nodes)
    fails: list[str] = []
    warns: list[str] = []
    unknown_nodes = [n for n in nodes if n.value is None]  # e.g. --nnodes $NNODES
    for s in tp:
        if s.value is None:
            warns.append(f"tensor-parallel setting {s.raw} ({s.where}) is not a plain number: check it by hand")
        elif s.value > 1 and multi:
            fails.append(f"tensor parallel {s.value} ({s.where}) spans nodes: {'; '.join(multi)}")
        elif gpus is not None and s.value > gpus:
            where = "a DGX Spark has 1 GPU" if ctx.platform == "dgx-spark" else f"this node has {gpus} GPU(s)"
            fails.append(f"tensor parallel {s.value} ({s.where}) is larger than one node's GPUs: {where}")
        elif gpus is None and s.value > 1:
            warns.append(f"tensor parallel {s.value} ({s.where}) with the GPU count and node layout unknown")
        elif s.value > 1 and unknown_nodes:
            n = unknown_nodes[0]
            warns.append(f"tensor parallel {s.value} ({s.where}) with a node count that is not a plain number "
                         f"({n.raw}, {n.where}): if it is above 1, TP spans nodes")
    incomplete = [f"could not read {', '.join(cfg.unreadable)}"] if cfg.unreadable else []
    if cfg.truncated:
        incomplete.append("the scan stopped at its file/time limit")
    scope = f"{cfg.files_read} files read under {', '.join(cfg.roots) or 'no root'}"
    if fails:
        return ctx.finding(GID, Status.fail, fails[0] + (f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""),
                           detail="; ".join(fails[1:] + warns + incomplete), evidence=evidence, notes=notes)
    if warns:
        return ctx.finding(GID, Status.warn, warns[0] + (f" (+{len(warns) - 1} more)" if len(warns) > 1 else ""),
                           detail="; ".join(warns[1:] + incomplete), evidence=evidence, notes=notes)
    if incomplete and cfg.scanned:
        return ctx.finding(GID, Status.unknown, f"no tensor-parallel setting found in {scope}, but {'; '.join(incomplete)}",
                           detail="An unread path is not evidence of 'no TP'.", evidence=evidence, notes=notes)
    within = [s for s in tp if s.value and s.value > 1]
    if within:
        s = max(within, key=lambda x: x.value or 0)
        return ctx.finding(GID, Status.passed, f"tensor parallel {s.value} ({s.where}) stays within the {gpus} GPUs "
                           "of one node", evidence=evidence, notes=notes)
    ddp = f"; {'; '.join(multi)} with no TP: DDP/FSDP across nodes is the right choice" if multi else ""
    what = "no tensor-parallel setting above 1" if tp else "no tensor-parallel setting"
    return ctx.finding(GID, Status.passed, f"{what} in {scope}" + ddp if cfg.scanned else f"{what}{ddp}",
                       evidence=evidence, notes=notes)
