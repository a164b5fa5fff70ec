"""G10 — two Sparks: DDP/FSDP for training, never tensor parallel; for serving, a trade-off.

ConnectX-7 between two Sparks carries DDP/FSDP gradient and parameter sync, but is far too thin for
tensor parallelism's per-layer traffic (two-node all-gather ≈ 23 GB/s): a *training* job with TP
across nodes hangs or crawls, so it blocks. A *serving* engine (vLLM, SGLang, TensorRT-LLM) with TP
across two Sparks is the usual way to hold a model one Spark cannot: it works, with every decoded
token paying the all-reduce, so it warns with that trade-off. What decides serve or train is the
job's launcher and keys (knowledge ``g10.serve_launchers`` ...), else the workload's method; a job
nothing identifies is judged as training, and the line says so.

A TP value is paired only with a node count of the same job (one config file, or one launch
command); the process environment (``WORLD_SIZE > LOCAL_WORLD_SIZE``: this launch spans nodes)
applies to every job. A config that was not read is reported, never read as "no TP".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkops.checks.base import CheckContext, Reason, ev, reason
from sparkops.core.findings import Evidence, Finding
from sparkops.facts.model import ConfigJob

GID = "G10"
WORKLOAD_JOB = "workload"


@dataclass
class Job:
    """One job's parallel settings, gathered from the facts."""

    id: str
    where: str  # what the user reads: "serve.yaml", "run.sh:12", "the workload description"
    launcher: str = ""
    keys: set[str] = field(default_factory=set)
    tp: list[tuple[int | None, str, str]] = field(default_factory=list)  # (value, raw, "file:line")
    nodes: list[tuple[int | None, str, str]] = field(default_factory=list)


def _int(text: str) -> int | None:
    """A plain number, or the upper end of torchrun's elastic ``1:4``; None for a reference."""
    t = text.strip().strip("\"'").strip()
    if re.fullmatch(r"[0-9]{1,9}", t):
        return int(t)
    m = re.fullmatch(r"[0-9]{1,9}:([0-9]{1,9})", t)
    return int(m.group(1)) if m else None


def _jobs(ctx: CheckContext) -> list[Job]:
    cfg = ctx.facts.configs
    described = {j.id: j for j in cfg.jobs}
    jobs: dict[str, Job] = {}
    wl = ctx.workload
    if wl.tensor_parallel is not None or (wl.nodes or 0) > 1:
        w = jobs.setdefault(WORKLOAD_JOB, Job(WORKLOAD_JOB, "the workload description"))
        if wl.tensor_parallel is not None:
            w.tp.append((wl.tensor_parallel, f"tensor parallel {wl.tensor_parallel}", "workload"))
        if wl.nodes:
            w.nodes.append((wl.nodes, f"{wl.nodes} nodes", "workload"))
    if not cfg.scanned:
        return list(jobs.values())
    for h in cfg.hits:
        jid = h.job or h.file  # snapshots before jobs existed: one job per file
        d: ConfigJob | None = described.get(jid)
        job = jobs.get(jid)
        if job is None:
            where = f"{h.file}:{d.line}" if d is not None and d.line else h.file
            job = jobs[jid] = Job(jid, where, d.launcher if d else "", set(d.keys) if d else set())
        entry = (_int(h.value), f"{h.key}: {h.value}", f"{h.file}:{h.line}")
        if h.kind == "tensor_parallel":
            job.tp.append(entry)
        elif h.kind == "nodes":
            job.nodes.append(entry)
    return list(jobs.values())


def role(ctx: CheckContext, job: Job) -> tuple[str, str]:
    """("serve" | "train", why) for a job: its launcher first, then its keys, then the workload's method;
    a job nothing identifies is judged as training (the seeds' rule), and ``why`` says so."""
    g10 = ctx.kb.thresholds.g10
    norm = {k.lower().replace("-", "_") for k in job.keys}
    launcher = job.launcher.lower()
    serve_l = {x.lower() for x in g10.serve_launchers}
    train_l = {x.lower() for x in g10.train_launchers}
    if launcher in serve_l:
        return "serve", f"launched by {job.launcher}"
    if launcher in train_l:
        return "train", f"launched by {job.launcher}"
    words_serve = sorted(norm & ({x.replace("-", "_") for x in serve_l} | set(g10.serve_keys)))
    words_train = sorted(norm & ({x.replace("-", "_") for x in train_l} | set(g10.train_keys)))
    if words_serve and not words_train:
        return "serve", f"serving settings ({', '.join(words_serve[:3])})"
    if words_train and not words_serve:
        return "train", f"training settings ({', '.join(words_train[:3])})"
    method = ctx.workload.method
    if method == "inference":
        return "serve", "the workload is inference"
    if method:
        return "train", f"the workload's method is {method}"
    return "train", "nothing in it says it serves, so it is judged as training"


def _env_multi(ctx: CheckContext) -> str:
    env = ctx.facts.host.env
    world, local = _int(env.get("WORLD_SIZE", "")), _int(env.get("LOCAL_WORLD_SIZE", ""))
    if world is not None and local is not None and world > local:
        return f"WORLD_SIZE={world} > LOCAL_WORLD_SIZE={local}"
    return ""


def _judge_job(ctx: CheckContext, job: Job, gpus: int | None, env_multi: str, other_nodes: str) -> list[Reason]:
    out: list[Reason] = []
    spans = [f"{raw} ({where})" for v, raw, where in job.nodes if v is not None and v > 1]
    if env_multi:
        spans.append(env_multi)
    unresolved_nodes = [(raw, where) for v, raw, where in job.nodes if v is None]
    for value, raw, where in job.tp:
        if value is None:
            out.append(reason("G10.tp-unresolved", setting=raw, where=where))
            continue
        if value <= 1:
            continue
        what, why = role(ctx, job)
        if spans:
            code = "G10.serve-tp-across-nodes" if what == "serve" else "G10.train-tp-across-nodes"
            out.append(reason(code, tp=value, where=where, spans="; ".join(spans), role_why=why))
        elif gpus is not None and value > gpus:
            node = "a DGX Spark has 1 GPU" if ctx.platform == "dgx-spark" else f"this node has {gpus} GPU(s)"
            if what == "serve":
                out.append(reason("G10.serve-tp-across-nodes", tp=value, where=where, role_why=why,
                                  spans=f"TP {value} needs {value} GPUs and {node}, so it spans nodes"))
            else:
                out.append(reason("G10.train-tp-exceeds-node", tp=value, where=where, node=node, role_why=why))
        elif unresolved_nodes:
            raw_n, where_n = unresolved_nodes[0]
            out.append(reason("G10.nodes-unresolved", tp=value, where=where, nodes=raw_n, nodes_where=where_n))
        elif gpus is None:
            out.append(reason("G10.tp-topology-unknown", tp=value, where=where))
        elif other_nodes:
            out.append(reason("G10.tp-maybe-across-nodes", tp=value, where=where, other=other_nodes))
        else:
            out.append(reason("G10.tp-within-node", tp=value, where=where, gpus=gpus))
    return out


def check(ctx: CheckContext) -> Finding:
    cfg = ctx.facts.configs
    wl = ctx.workload
    evidence: list[Evidence] = [ev("configs.roots", cfg.roots), ev("configs.scope", cfg.scope),
                                ev("configs.files_read", cfg.files_read),
                                ev("configs.skipped", [s.model_dump() for s in cfg.skipped]),
                                ev("host.env.WORLD_SIZE", ctx.facts.host.env.get("WORLD_SIZE")),
                                ev("host.env.LOCAL_WORLD_SIZE", ctx.facts.host.env.get("LOCAL_WORLD_SIZE")),
                                ev("workload.tensor_parallel", wl.tensor_parallel), ev("workload.nodes", wl.nodes)]
    jobs = _jobs(ctx)
    if cfg.scanned:
        evidence.append(ev("configs.hits", [h.model_dump() for h in cfg.hits]))
    elif not any(j.tp for j in jobs):
        rec = ctx.facts.probes.get("configs")
        why = rec.reason if rec and rec.reason else "no config paths given"
        return ctx.decide(GID, "G10.not-scanned", why=why, evidence=evidence)
    gpus = 1 if ctx.platform == "dgx-spark" else (len(ctx.facts.gpu.devices) or None)
    env_multi = _env_multi(ctx)
    workload_nodes = f"the workload names {wl.nodes} nodes" if (wl.nodes or 0) > 1 else ""
    decisions: list[Reason] = []
    for job in jobs:
        other = workload_nodes if job.id != WORKLOAD_JOB else ""
        decisions += _judge_job(ctx, job, gpus, env_multi, other)
    unread = [f"{s.path} ({s.reason})" for s in cfg.skipped if s.unread] + \
             [f"{p} (unreadable)" for p in cfg.unreadable]
    scope = (f"{cfg.files_read} files read under {', '.join(cfg.roots) or 'no root'}"
             + (" (the working directory's own files; name the job's configs with --config)"
                if cfg.scope == "default" else ""))
    excluded = [s.path for s in cfg.skipped if not s.unread]
    reading = scope + (f"; not configs: {', '.join(excluded)}" if excluded else "")
    incomplete = unread + (["the scan stopped at its file/time limit"] if cfg.truncated else [])
    if cfg.scanned and incomplete:
        decisions.append(reason("G10.unread-config", paths="; ".join(incomplete[:5])
                                + (f" (+{len(incomplete) - 5} more)" if len(incomplete) > 5 else "")))
    order = {"fail": 0, "warn": 1, "unknown": 2, "pass": 3, "info": 4, "skip": 5}
    decisions.sort(key=lambda r: order[ctx.kb.subcode(r.code).status])
    notes = list(cfg.notes) if cfg.scanned else ["configs were not scanned: only the workload description was judged"]
    if decisions:
        return ctx.conclude(GID, decisions, reading=reading, evidence=evidence, notes=notes)
    multi = [s for s in (env_multi, workload_nodes) if s]
    multi += [f"{raw} ({where})" for j in jobs for v, raw, where in j.nodes if v is not None and v > 1]
    if multi:
        return ctx.decide(GID, "G10.ddp-across-nodes", spans="; ".join(multi), scope=scope, reading=reading,
                          evidence=evidence, notes=notes)
    what = "no tensor-parallel setting above 1" if any(j.tp for j in jobs) else "no tensor-parallel setting"
    return ctx.decide(GID, "G10.no-tp", what=what, scope=scope if cfg.scanned else "the workload description",
                      reading=reading if cfg.scanned else "", evidence=evidence, notes=notes)
