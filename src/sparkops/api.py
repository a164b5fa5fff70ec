"""The library API: collect -> judge -> report. The CLI and other front ends call only this."""

from __future__ import annotations

import importlib
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

from sparkops import __version__
from sparkops.facts.model import Facts, ProbeRecord, implausible_readings
from sparkops.facts.reading import known
from sparkops.facts.snapshot import load_facts, save_facts, write_atomic
from sparkops.knowledge import Gotcha, Knowledge, load, load_matrix_file
from sparkops.probes import CollectOptions
from sparkops.probes import collect as _collect
from sparkops.workload import Workload

if TYPE_CHECKING:  # imported lazily at run time: judging modules load while the probes run
    from sparkops.report.model import Report

__all__ = ["CollectOptions", "collect", "preflight", "plan", "serve_plan", "build_report", "exit_code", "explain", "triage_gpu", "stack",
           "knowledge", "load_facts", "save_facts", "write_report", "Facts", "Workload", "container_options", "diagnose",
           "target_label"]


def knowledge(matrix: Path | None = None) -> Knowledge:
    """The packaged knowledge, optionally with a user-supplied newer stack matrix."""
    kb = load()
    if matrix is not None:
        kb = kb.model_copy(update={"matrix": load_matrix_file(matrix)})
    return kb


def container_options(opts: CollectOptions | None, image: str, kb: Knowledge | None = None,
                      lock: Path | None = None) -> CollectOptions:
    """``opts`` whose target probe runs inside ``image`` (``--container``): an alias (ngc, unsloth)
    or a tag pinned in the lock file resolves as in ``spark-ops setup docker-run``."""
    from dataclasses import replace

    from sparkops import setup
    from sparkops.errors import InputError

    try:
        resolved, ref, _pinned = setup.run_ref(image, lock, (kb or load()).matrix)
    except setup.SetupError as exc:
        raise InputError(str(exc)) from exc
    base = opts or CollectOptions()
    return replace(base, container_image=resolved, container_ref=ref)


def _live_opts(facts: Facts | Path | None, opts: CollectOptions | None, container: str | None,
               kb: Knowledge | None) -> CollectOptions | None:
    """The options for a live collection, in ``container`` when given (a snapshot cannot be)."""
    if container is None:
        return opts
    if facts is not None:
        from sparkops.errors import InputError

        raise InputError("--container probes an image now; it cannot be combined with --facts")
    return container_options(opts, container, kb)


def target_label(facts: Facts) -> str:
    """The judged interpreter, and the image and digest when it ran in a container."""
    t = facts.target
    if not t.container_ref:
        return t.python
    digest = t.container_digest if isinstance(t.container_digest, str) else None
    if digest is None and t.container_digest is not None:
        digest = f"digest unavailable: {t.container_digest}"
    label = f"{t.python or 'python'} in container {t.container_ref}" + (f" ({digest})" if digest else "")
    return label + (f" via {t.container_engine}" if t.container_engine else "")


def _container_json(facts: Facts) -> dict | None:
    t = facts.target
    if not t.container_ref:
        return None
    digest = t.container_digest
    return {"image": t.container_image, "ref": t.container_ref, "engine": t.container_engine,
            "digest": digest if isinstance(digest, str) or digest is None else digest.model_dump(mode="json")}


JUDGING_MODULES = ("sparkops.checks", "sparkops.report.model")


def collect(opts: CollectOptions | None = None, also_import: tuple[str, ...] = ()) -> Facts:
    """Probe this machine (concurrently, each probe bounded) into one snapshot.

    While the probes wait on their subprocesses, the judging modules (and ``also_import``, e.g.
    the table renderer) are imported on this thread, so their import cost hides behind the probes.
    """
    def warm() -> None:
        for name in (*JUDGING_MODULES, *also_import):
            importlib.import_module(name)

    facts = _collect(opts, while_waiting=warm)
    if opts is not None and opts.measure_bandwidth:  # after the probes: its refusal rules read their facts
        from sparkops.bandwidth.probe import attach

        facts = attach(facts, opts)
    return redacted(facts)


def build_report(facts: Facts, workload: Workload | None = None, kb: Knowledge | None = None,
                 facts_source: str = "live") -> Report:
    """Judge a snapshot: identity, G1..G10, verdict, blocking list. Pure given its inputs."""
    from sparkops.checks import identity as identity_check
    from sparkops.checks import judge
    from sparkops.checks.base import Status
    from sparkops.checks.verdict import verdict as _verdict
    from sparkops.report.model import GOTCHA_IDS, BlockingItem, Identity, PlanSummary, Report, check_string

    kb = kb or load()
    workload = workload or Workload()
    plan_summary = None
    if workload.estimated_peak_gb is None and _plannable(workload):
        workload, plan_summary = _plan_for_preflight(facts, workload, kb)
    ctx, findings = judge(facts, kb, workload)
    ident = identity_check.identify(facts, kb)
    by_id = {f.gotcha: f for f in findings}
    verdict = _verdict(findings)
    blocking = [BlockingItem(gotcha=f.gotcha, summary=f.summary, fix=f.fix, code=f.code, fix_where=f.fix_where)
                for f in findings if f.status is Status.fail]
    notes = [r for r in facts.probes.values() if not r.ok]
    bad = implausible_readings(facts)
    if bad:
        notes.append(ProbeRecord(name="implausible", ok=False, source="bounds",
                                 reason="readings outside physical bounds, judged as unknown: " + "; ".join(bad[:8])
                                 + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")))
    if facts.gpu.source == "nvidia-smi":
        notes.append(ProbeRecord(name="gpu", ok=True, source="nvidia-smi",
                                 reason=f"NVML unavailable ({facts.gpu.nvml_error}); used the nvidia-smi fallback"))
    return redacted(Report(
        platform=ident.platform,  # type: ignore[arg-type]
        checks={gid: check_string(by_id[gid]) for gid in GOTCHA_IDS},
        headroom_gb=round(ctx.headroom_gib * 2**30 / 1e9, 1) if ctx.headroom_gib is not None else None,
        headroom_gib=ctx.headroom_gib,
        verdict=verdict,  # type: ignore[arg-type]
        tool_version=__version__,
        generated_at=datetime.now(timezone.utc),  # noqa: UP017
        facts_collected_at=facts.collected_at,
        facts_source=facts_source,
        depth=facts.depth,
        identity=Identity(
            platform=ident.platform,  # type: ignore[arg-type]
            profile=ident.profile.key if ident.profile else None,
            gpu_name=ident.gpu_name,
            capability=ident.capability,
            arch=facts.host.arch if known(facts.host.arch) else None,  # type: ignore[arg-type]
            driver_version=facts.gpu.driver_version if known(facts.gpu.driver_version) else None,  # type: ignore[arg-type]
            cuda_driver_version=facts.gpu.cuda_driver_version if known(facts.gpu.cuda_driver_version) else None,  # type: ignore[arg-type]
            unified_memory=ident.unified_memory,
            note=by_id["identity"].summary,
        ),
        workload=workload,
        findings=findings,
        blocking=blocking,
        probe_notes=notes,
        target_python=target_label(facts),
        plan=PlanSummary(**plan_summary) if plan_summary else None,
    ))


_M = TypeVar("_M", bound=BaseModel)


def redacted(model: _M) -> _M:
    """The model with every string through the one redaction pass (facts.redact.redact_obj): what a
    check quoted from a config or a command line cannot carry a credential out."""
    from sparkops.facts.redact import redact_obj

    return type(model).model_validate(redact_obj(model.model_dump(mode="json")))


def _plannable(w: Workload) -> bool:
    """A fine-tune with a model or a size: the planner can size it (inference is not planned)."""
    return w.method in ("full", "lora", "qlora") and bool(w.model or w.params_b)


def _plan_for_preflight(facts: Facts, workload: Workload, kb: Knowledge) -> tuple[Workload, dict]:
    """Run the memory planner for preflight's workload against these facts' budget; its peak feeds G3.

    A planner failure (unknown model, no budget) never fails preflight: G3 then says the fit was
    not tested, and the report carries the planner's reason.
    """
    from sparkops.errors import InputError
    from sparkops.planner import plan as planner

    try:
        arch, assumed = planner.arch_for(workload)
        run = planner.run_for(workload)
        try:
            budget = planner.budget_from_facts(facts, kb, "facts")
        except InputError:
            budget = None
        if budget is None:
            est = planner.estimate(arch, run)
            peak = round(est.peak_total / planner.GB, 2)
            return workload.model_copy(update={"estimated_peak_gb": peak}), {
                "peak_gb": peak, "verdict": None, "model": arch.name, "assumed": assumed,
                "note": "no memory budget in the facts: the peak was estimated but not judged"}
        res = planner.plan(arch, run, budget, kb, assumed=assumed)
    except InputError as exc:
        return workload, {"error": str(exc)}
    summary = {"peak_gb": res.peak_gb, "budget_gb": res.budget_gb, "verdict": res.verdict, "model": res.model.name,
               "assumed": assumed, "binding_phase": res.binding_phase, "max_seq_len": res.max_seq_len,
               "run": f"{run.method} {run.framework} b{run.batch} s{run.seq_len}"
                      f"{' gc' if run.grad_checkpointing else ''} {run.optimizer}"}
    return workload.model_copy(update={"estimated_peak_gb": res.peak_gb}), summary


def plan(*, model: str | None = None, config: str | None = None, workload: str | Workload | None = None,
         target: str | None = None, budget_gb: float | None = None, facts: Facts | Path | None = None,
         opts: CollectOptions | None = None, kb: Knowledge | None = None, **run_flags: object):
    """The memory planner: estimate a fine-tune's peak and judge it against a budget.

    Budget, first that applies: ``budget_gb``; ``target`` (a profile's idle budget: plan for a Spark
    from anywhere); ``facts`` (a snapshot); else this machine's memory and GPU, collected now.
    Returns a :class:`sparkops.planner.plan.PlanResult`; bad input raises an ``InputError``.
    """
    from sparkops.planner import plan as planner
    from sparkops.workload import parse_workload

    kb = kb or load()
    wl = workload if isinstance(workload, Workload) else parse_workload(workload or "")
    arch, assumed = planner.arch_for(wl, model=model, config=config)
    run = planner.run_for(wl, **run_flags)
    if budget_gb is not None:
        if not 0 < budget_gb < 100_000:
            raise planner.PlanInputError(f"--budget-gb must be a positive number of GB (got {budget_gb})")
        unified = True if target is None else planner.budget_from_target(target, kb).unified
        budget = planner.Budget(gb=budget_gb, source="explicit", unified=unified, detail="given with --budget-gb")
    elif target is not None:
        budget = planner.budget_from_target(target, kb)
    else:
        if isinstance(facts, (str, Path)):
            source, facts = str(facts), load_facts(Path(facts))
        elif facts is None:
            source = "live"
            facts = collect(opts or CollectOptions(depth="quick", only=("gpu", "memory", "host")))
        else:
            source = "given"
        budget = planner.budget_from_facts(facts, kb, source)
    return planner.plan(arch, run, budget, kb, assumed=assumed)


def _serve_machine(target: str | None, budget_gb: float | None, facts: Facts | Path | None,
                   opts: CollectOptions | None, kb: Knowledge):
    """The machine a server meets (a target profile, an explicit size, a snapshot, or this box now)
    and what already runs on it (from the facts, when there are facts)."""
    from sparkops.planner import serve
    from sparkops.planner.serve_budget import neighbours

    reserve = kb.thresholds.g3.os_reserve_gb
    if budget_gb is not None:
        if not 0 < budget_gb < 100_000:
            raise serve.ServeInputError(f"--budget-gb must be a positive number of GB (got {budget_gb})")
        gib = budget_gb * 1e9 / serve.GIB
        return serve.Machine(source="explicit", total_gib=round(gib, 2), free_gib=round(gib, 2),
                             available_gib=round(gib, 2), detail="given with --budget-gb (free = total)"), []
    if target is not None:
        return serve.machine_from_target(target, reserve), []
    if isinstance(facts, (str, Path)):
        source, facts = str(facts), load_facts(Path(facts))
    elif facts is None:
        source = "live"
        facts = collect(opts or CollectOptions(depth="quick", only=("gpu", "memory", "host", "processes")))
    else:
        source = "given"
    machine = serve.machine_from_facts(facts, source, reserve)
    running = [serve.BesideJob(name=n.name, gib=n.gib, how=n.how)
               for n in neighbours(facts, machine.total_gib)]
    return machine, running


def _beside_job(text: str, machine, kb: Knowledge):  # noqa: ANN001, ANN202 - serve.Machine -> serve.BesideJob
    """Another job on the same pool: a server line (its footprint) or a fine-tune (its planned peak)."""
    from sparkops.planner import plan as planner
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import looks_like_command, spec_from_text
    from sparkops.workload import parse_workload

    name = " ".join(text.split())[:60]
    w = parse_workload(text)
    if looks_like_command(text) or w.method == "inference" or any(c in ("vllm", "sglang", "ollama", "llama.cpp")
                                                                   for c in w.components):
        spec = spec_from_text(text)
        res = serve.plan_serve(serve.resolve_shape(spec.model, gguf=_existing(spec.gguf_path)), spec, machine)
        return serve.BesideJob(name=name, gib=res.footprint_gib, how=f"{spec.engine} server footprint")
    arch, _ = planner.arch_for(w)
    run = planner.run_for(w)
    est = planner.estimate(arch, run)
    return serve.BesideJob(name=name, gib=round(est.peak_total / serve.GIB, 2),
                           how=f"planned peak of a {run.method} fine-tune (spark-ops plan)")


def _existing(path: str | None) -> str | None:
    return path if path and Path(path).expanduser().is_file() else None


def serve_plan(*, workload: str | None = None, model: str | None = None, config: str | None = None,
               gguf: str | None = None, engine: str | None = None, beside: list[str] | tuple[str, ...] = (),
               target: str | None = None, budget_gb: float | None = None, facts: Facts | Path | None = None,
               opts: CollectOptions | None = None, kb: Knowledge | None = None, **flags: object):
    """Will this model serve here: weights, KV cache, the engine's own start-up check and the verdict.

    ``workload`` is a pasted launch line (``vllm serve MODEL --max-model-len 32k ...``) or free text;
    ``flags`` are :class:`~sparkops.planner.serve_engines.ServeSpec` fields and win over the text.
    The machine, first that applies: ``budget_gb``, ``target`` (dgx-spark, h200, h100), ``facts``
    (a snapshot), else this machine now. ``beside``: other jobs on the same pool (launch lines or
    fine-tune descriptions). Returns a :class:`sparkops.planner.serve.ServePlanResult`.
    """
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import ServeSpec, spec_from_text

    kb = kb or load()
    if workload:
        spec = spec_from_text(workload, engine=engine)
    else:
        spec = ServeSpec(engine=engine or "vllm", model=model)
    updates = {k: v for k, v in flags.items() if v is not None}
    if model:
        updates["model"] = model
    if gguf:
        updates["gguf_path"] = gguf
    if engine and not workload:
        updates["engine"] = engine
    spec = ServeSpec(**{**spec.model_dump(), **updates})
    shape = serve.resolve_shape(spec.model, config=config, gguf=_existing(spec.gguf_path) or gguf)
    machine, running = _serve_machine(target, budget_gb, facts, opts, kb)
    jobs = [_beside_job(t, machine, kb) for t in beside]
    return serve.plan_serve(shape, spec, machine, fit_margin=kb.thresholds.g3.fit_margin_fraction, beside=jobs,
                            running=running)


def preflight(facts: Facts | Path | None = None, opts: CollectOptions | None = None,
              workload: Workload | None = None, kb: Knowledge | None = None,
              also_import: tuple[str, ...] = (), container: str | None = None) -> Report:
    """Collect (or load a snapshot), judge, and return the report; ``container``: the target
    probe runs inside that image, the rest on the host."""
    opts = _live_opts(facts, opts, container, kb)
    if isinstance(facts, (str, Path)):
        source = str(facts)
        facts = load_facts(Path(facts))
    elif facts is None:
        source = "live"
        facts = collect(opts, also_import)
    else:
        source = "given"
    return build_report(facts, workload, kb, facts_source=source)


def triage_gpu(facts: Facts | Path | None = None, opts: CollectOptions | None = None,
               container: str | None = None) -> dict:
    """The GPU-visibility triage (five hypotheses, in order) on this machine, inside ``container``,
    or on a snapshot, as a JSON-ready dict: whether torch sees the GPU, each hypothesis's status,
    the one that fired, its fix."""
    from sparkops.checks import gpu_visibility
    from sparkops.facts.model import TorchLive

    opts = _live_opts(facts, opts, container, None)
    if isinstance(facts, (str, Path)):
        facts = load_facts(Path(facts))
    elif facts is None:
        facts = collect(opts)
    kb = load()
    tri = gpu_visibility.triage(facts, kb)
    live = facts.target.live
    sees = live.cuda_available if isinstance(live, TorchLive) and live.import_ok else None
    return {
        "torch_sees_gpu": sees,
        "target_python": target_label(facts),
        "container": _container_json(facts),
        "live_unavailable": "" if isinstance(live, TorchLive) else str(live),
        "hypotheses": [{"number": n, "hypothesis": h, "status": st} for n, h, st in tri.steps()],
        "fired": tri.fired,
        "reason": tri.reason,
        "fix": tri.fix(kb),
    }


def stack(facts: Facts | Path | None = None, opts: CollectOptions | None = None,
          kb: Knowledge | None = None, container: str | None = None) -> dict:
    """The target environment (or ``container``'s) against the dated known-good matrix: one row per
    package, the matrix's age, hard blockers and component notes — the G9 judgment with its table."""
    from sparkops.checks import context, g09_container_first
    from sparkops.checks.base import installed

    kb = kb or load()
    opts = _live_opts(facts, opts, container, kb)
    if isinstance(facts, (str, Path)):
        facts = load_facts(Path(facts))
    elif facts is None:
        facts = collect(opts)
    g9 = g09_container_first.check(context(facts, kb))
    mx = kb.matrix
    age = (facts.collected_at.date() - mx.last_verified).days if facts.collected_at else None
    return {
        "target_python": target_label(facts),
        "container": _container_json(facts),
        "matrix": {"version": mx.version, "last_verified": mx.last_verified.isoformat(), "age_days": age,
                   "refresh_horizon_days": mx.refresh_horizon_days,
                   "stale": age is not None and age > mx.refresh_horizon_days},
        "packages": g09_container_first.matrix_rows(kb, installed(facts)),
        "packages_read": known(facts.target.distributions),
        "packages_unavailable": None if known(facts.target.distributions) else str(facts.target.distributions),
        "components": mx.component_status,
        "G9": g9.model_dump(mode="json"),
    }


def write_report(report: Report, path: Path) -> None:
    """env-report.json, atomically."""
    write_atomic(path, report.model_dump_json(indent=2) + "\n")


def exit_code(report: Report) -> int:
    """0 ready, 1 ready with warnings, 2 blocked (3 is the CLI's: the tool itself failed)."""
    from sparkops.checks.verdict import exit_code as _exit_code

    return _exit_code(report.verdict)


def explain(gid: str, kb: Knowledge | None = None) -> Gotcha:
    """A gotcha's catalog entry; accepts "G3", "g3", "3", "identity"."""
    kb = kb or load()
    key = gid.strip()
    if key.isascii() and key.isdigit():
        key = f"G{int(key)}"
    key = key.upper() if key.lower() != "identity" else "identity"
    if key.startswith("G") and key[1:].isascii() and key[1:].isdigit():
        key = f"G{int(key[1:])}"
    if key not in kb.gotchas:
        raise KeyError(f"no gotcha {gid!r}; known: {', '.join(kb.gotchas)}")
    return kb.gotchas[key]


def diagnose(text: str, source: str = "-", facts: Facts | Path | None = None):  # noqa: ANN201 - Diagnosis
    """Which gotcha an error log, traceback or pasted report points at (``spark-ops diagnose``):
    findings best first with evidence lines and fixes; ``facts`` (a snapshot or its path) confirm
    or rule out. The matcher lives in :mod:`sparkops.diagnose`; this is its library entry."""
    from sparkops.diagnose import diagnose_text

    if isinstance(facts, (str, Path)):
        facts = load_facts(Path(facts))
    return diagnose_text(text, source=source, facts=facts)
