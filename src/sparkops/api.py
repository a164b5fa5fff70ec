"""The library API: collect -> judge -> report. The CLI and other front ends call only this."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from sparkops.facts.model import Facts
from sparkops.facts.reading import known
from sparkops.facts.redact import redact_model
from sparkops.facts.snapshot import load_facts, save_facts, write_atomic
from sparkops.facts.workload import Workload
from sparkops.knowledge import Gotcha, Knowledge, load, load_with_matrix
from sparkops.probes import CollectOptions
from sparkops.probes import collect as _collect

if TYPE_CHECKING:  # imported lazily at run time: judging modules load while the probes run
    from collections.abc import Iterable

    from sparkops.diagnose.model import Diagnosis
    from sparkops.planner.plan import PlanResult
    from sparkops.planner.serve import LogCalibration, Machine, ServePlanResult
    from sparkops.planner.serve_engines import ServeSpec
    from sparkops.planner.serve_shape import ServeShape
    from sparkops.report.model import Report
    from sparkops.report.views import StackView, TriageView

__all__ = ["CollectOptions", "collect", "preflight", "plan", "serve_plan", "build_report", "exit_code", "explain", "triage_gpu", "stack",
           "knowledge", "load_facts", "save_facts", "write_report", "Facts", "Workload", "container_options", "diagnose",
           "target_label", "collect_options"]


def knowledge(matrix: Path | None = None) -> Knowledge:
    """The packaged knowledge, optionally with a user-supplied newer stack matrix."""
    return load_with_matrix(matrix)


def collect_options(*, quick: bool = False, python: str | Path | None = None, config_paths: Iterable[Path] = (),
                    offline: bool = False, budget_s: float | None = None, container: str | None = None,
                    engine: str | None = None, kb: Knowledge | None = None) -> CollectOptions:
    """A front end's live collection (the CLI's preflight, collect, stack and triage; the MCP tools):
    the one place for its defaults. ``budget_s`` None: thresholds.yaml's whole-collection deadline
    (``setup.container_budget_s`` with a ``container``: starting one costs seconds); GPU counters
    watched 0.1 s when ``quick``, 1 s in full (hidden behind the torch import); ``engine`` docker |
    podman | None (the first on PATH). The container itself is resolved by :func:`preflight` & co."""
    from sparkops.probes import live_options

    return live_options(quick=quick, python=python, config_paths=config_paths, offline=offline, budget_s=budget_s,
                        container=bool(container), engine=engine, kb=kb)


def container_options(opts: CollectOptions | None, image: str, kb: Knowledge | None = None,
                      lock: Path | None = None) -> CollectOptions:
    """``opts`` whose target probe runs inside ``image`` (``--container``): an alias (ngc, unsloth)
    or a tag pinned in the lock file resolves as in ``spark-ops setup docker-run``."""
    from sparkops import setup

    return setup.container_options(opts, image, (kb or load()).matrix, lock)


def _live_opts(facts: Facts | Path | None, opts: CollectOptions | None, container: str | None,
               kb: Knowledge | None) -> CollectOptions | None:
    """The options for a live collection, in ``container`` when given (a snapshot cannot be)."""
    if container is None:
        return opts
    if facts is not None:
        from sparkops.core.errors import InputError

        raise InputError("--container probes an image now; it cannot be combined with --facts")
    return container_options(opts, container, kb)


def target_label(facts: Facts) -> str:
    """The judged interpreter, and the image and digest when it ran in a container."""
    from sparkops.report.build import target_label as label

    return label(facts)


JUDGING_MODULES = ("sparkops.checks", "sparkops.report.model", "sparkops.report.build")


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
    return redact_model(facts)


def hub_access(offline: bool = False):  # noqa: ANN201 - sparkops.planner.hub.HubAccess, imported on use
    """How a front end reads a Hugging Face id that is in no catalog or local cache: from the Hub, as the
    user's huggingface_hub would (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE); ``offline``: from the tool's cache only."""
    import os

    from sparkops.planner.hub import access_from_env

    return access_from_env(os.environ, offline=offline)


def build_report(facts: Facts, workload: Workload | None = None, kb: Knowledge | None = None,
                 facts_source: str = "live", offline: bool = False) -> Report:
    """Judge a snapshot: the planner sizes a fine-tune, or ``plan --serve`` a server, first (its peak or footprint
    feeds G3), then identity,
    G1..G10, verdict and blocking list (:func:`sparkops.checks.judge`), assembled into the report.
    ``offline``: a model named by the workload is not read from the Hugging Face Hub."""
    from sparkops.report.build import build_report as assemble
    from sparkops.report.model import PlanSummary

    kb = kb or load()
    workload, plan_summary = workload or Workload(), None
    if workload.needs_planning:
        from sparkops.planner.preflight import plan_for_preflight

        workload, plan_summary = plan_for_preflight(facts, workload, kb, hub=hub_access(offline))
    return assemble(facts, workload, kb, facts_source, PlanSummary(**plan_summary) if plan_summary else None)


def plan(*, model: str | None = None, config: str | None = None, workload: str | Workload | None = None,
         target: str | None = None, budget_gb: float | None = None, facts: Facts | Path | None = None,
         opts: CollectOptions | None = None, kb: Knowledge | None = None, offline: bool = False,
         **run_flags: object) -> PlanResult:
    """The memory planner: estimate a fine-tune's peak and judge it against a budget.

    The model: a catalog name, a config.json or model folder, an HF id in the local cache, else (unless
    ``offline`` or HF_HUB_OFFLINE) the Hub's config.json and safetensors headers, read by range.

    Budget, first that applies: ``budget_gb``; ``target`` (a profile's idle budget: plan for a Spark
    from anywhere); ``facts`` (a snapshot); else this machine's memory and GPU, collected now.
    Returns a :class:`sparkops.planner.plan.PlanResult`; bad input raises an ``InputError``.
    """
    from sparkops.facts.workload import parse_workload
    from sparkops.planner import plan as planner

    kb = kb or load()
    wl = workload if isinstance(workload, Workload) else parse_workload(workload or "")
    if wl.method == "inference" and run_flags.get("method") is None:
        # a server ("serve qwen3-8b with sglang ...", a pasted launch line) is not a fine-tune: planning it as one (the
        # fine-tune planner's default method, LoRA) answers a question nobody asked; the serving plan is another
        # result (schema "serve", its own verdict), asked for, not switched to silently. One rule for CLI and MCP.
        raise planner.PlanInputError("this workload describes a server (inference), not a fine-tune: plan it with "
                                     "`plan --serve` (MCP: plan_serve) for its weights, KV cache and the engine's "
                                     "start-up check, or name --method full|lora|qlora to plan a fine-tune")
    arch, assumed = planner.arch_for(wl, model=model, config=config, hub=hub_access(offline))
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
                   opts: CollectOptions | None, kb: Knowledge, python: str | Path | None = None):
    """The machine a server meets (a target profile, an explicit size, a snapshot, or this box now), what already
    runs on it (from the facts, when there are facts), and the engine's environment: (interpreter, its
    distributions or None, why not read), from ``python`` (read now) or a snapshot's target; None: neither."""
    machine, running, used = _serve_machine_facts(target, budget_gb, facts, opts, kb, python)
    collected_with_it = target is None and budget_gb is None and facts is None and opts is None
    if python is not None and not collected_with_it:  # a profile, a size or a snapshot: read the interpreter now
        used = collect(CollectOptions(depth="quick", python=str(python), only=("target",)))
    if used is None:
        return machine, running, None
    t = used.target
    where = t.python or str(python or "the snapshot's target python")
    if isinstance(t.distributions, dict):
        return machine, running, (where, dict(t.distributions), "")
    if python is None:
        return machine, running, None  # a snapshot's target that was not read: nothing was asked of it here
    return machine, running, (where, None, getattr(t.distributions, "detail", "") or "not collected")


def _serve_machine_facts(target: str | None, budget_gb: float | None, facts: Facts | Path | None,
                         opts: CollectOptions | None, kb: Knowledge, python: str | Path | None):
    """:func:`_serve_machine`'s machine and running jobs, and the facts they came from (None: no facts)."""
    from sparkops.core.units import gb_to_gib
    from sparkops.planner import serve
    from sparkops.planner.serve_budget import machine_and_running

    reserve = kb.thresholds.g3.os_reserve_gb
    if budget_gb is not None:
        if not 0 < budget_gb < 100_000:
            raise serve.ServeInputError(f"--budget-gb must be a positive number of GB (got {budget_gb})")
        gib = gb_to_gib(budget_gb)
        return serve.Machine(source="explicit", total_gib=round(gib, 2), free_gib=round(gib, 2),
                             available_gib=round(gib, 2), detail="given with --budget-gb (free = total)"), [], None
    if target is not None:
        return serve.machine_from_target(target, reserve), [], None
    if isinstance(facts, (str, Path)):
        source, facts = str(facts), load_facts(Path(facts))
    elif facts is None:
        source = "live"
        sections = ("gpu", "memory", "host", "processes") + (("target",) if python is not None else ())
        facts = collect(opts or CollectOptions(depth="quick", python=None if python is None else str(python),
                                               only=sections))
    else:
        source = "given"
    machine, running = machine_and_running(facts, source, reserve)
    return machine, running, facts


def _beside_job(text: str, machine, kb: Knowledge, hub=None):  # noqa: ANN001, ANN202 - serve.Machine, HubAccess -> serve.BesideJob
    """Another job on the same pool: a server line (its footprint) or a fine-tune (its planned peak)."""
    from sparkops.facts.workload import parse_workload
    from sparkops.planner import plan as planner
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import looks_like_command, spec_from_text

    name = " ".join(text.split())
    name = name if len(name) <= 100 else name[:99] + "…"  # a long launch line is cut visibly, never mid-flag silently
    w = parse_workload(text)
    if looks_like_command(text) or w.method == "inference" or any(c in ("vllm", "sglang", "ollama", "llama.cpp")
                                                                   for c in w.components):
        spec = spec_from_text(text)
        res = serve.plan_serve(serve.resolve_shape(spec.model, gguf=_existing(spec.gguf_path), hub=hub), spec, machine)
        return serve.BesideJob(name=name, gib=res.footprint_gib, how=f"{spec.engine} server footprint",
                               start_ask_gib=None if res.start.passes is None or serve.vllm_extensible_kv_cache(spec)
                               else res.start.requested_gib)  # 0.34's extensible cache makes no start-up check
    arch, _ = planner.arch_for(w, hub=hub)
    run = planner.run_for(w)
    est = planner.estimate(arch, run)
    return serve.BesideJob(name=name, gib=round(est.peak_total / serve.GIB, 2),
                           how=f"planned peak of a {run.method} fine-tune (spark-ops plan)")


def _existing(path: str | None) -> str | None:
    return path if path and Path(path).expanduser().is_file() else None


def serve_plan(*, workload: str | None = None, model: str | None = None, config: str | None = None,
               gguf: str | None = None, engine: str | None = None, beside: list[str] | tuple[str, ...] = (),
               target: str | None = None, budget_gb: float | None = None, facts: Facts | Path | None = None,
               opts: CollectOptions | None = None, kb: Knowledge | None = None, python: str | Path | None = None,
               offline: bool = False, from_log: str | Path | None = None, from_log_line: str | None = None,
               from_log_same_machine: bool = False, **flags: object) -> ServePlanResult:
    """Will this model serve here: weights, KV cache, the engine's own start-up check and the verdict.

    ``workload`` is a pasted launch line (``vllm serve MODEL --max-model-len 32k ...``) or free text;
    ``flags`` are :class:`~sparkops.planner.serve_engines.ServeSpec` fields and win over the text.
    ``python``: the interpreter the engine runs in; its installed vLLM version and FlashInfer (or, without it, a
    snapshot's target environment) decide vLLM's version-bound terms.
    The machine, first that applies: ``budget_gb``, ``target`` (dgx-spark, h200, h100), ``facts``
    (a snapshot), else this machine now. ``beside``: other jobs on the same pool (launch lines or
    fine-tune descriptions). A model in no catalog or local cache is read from the Hub unless ``offline``.
    ``from_log``: a real vLLM start-up log of this model on this machine (a file, or its text): the plan carries what
    that start measured (planner/serve_calibrate.py; ``calibration`` in the result says how, or why not). The log's
    launch line is ``from_log_line`` (a ``vllm serve`` line: an input error otherwise), else its printed
    ``non-default args`` (a cut dict is refused). ``from_log_same_machine``: the user says the log is of this machine
    where the log prints neither the GPU's device total nor its name (else refused).
    Returns a :class:`sparkops.planner.serve.ServePlanResult`.
    """
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import (
        ServeSpec,
        engine_fields,
        spec_from_text,
        with_installed,
    )

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
    # context per request and KV cache type land in the engine's own fields (llama.cpp/Ollama: -c, -ctk/-ctv)
    updates.update(engine_fields(updates.get("engine", spec.engine), context=updates.pop("max_model_len", None),
                                 cache_type=updates.pop("kv_cache_dtype", None),
                                 slots=updates.get("parallel", spec.parallel), kv_unified=spec.kv_unified))
    spec = ServeSpec(**{**spec.model_dump(), **updates})
    hub = hub_access(offline)
    shape = serve.resolve_shape(spec.model, config=config, gguf=_existing(spec.gguf_path) or gguf, hub=hub)
    machine, running, env_facts = _serve_machine(target, budget_gb, facts, opts, kb, python)
    said: list[str] = []
    if env_facts is not None:
        where, dists, why = env_facts
        if dists is None:
            said.append(f"the packages of {where} could not be read ({why}): vLLM's version and FlashInfer not read")
        else:
            spec, note = with_installed(spec, where, dists)
            said += [note] if note and python is not None else []  # a snapshot's training python: silent
    jobs = [_beside_job(t, machine, kb, hub) for t in beside]
    drafter = serve.hub_drafter(spec, hub)  # None unless a drafter outside the catalog is named by a Hub id
    calibration = None
    if from_log is not None:
        spec, calibration = _log_calibration(from_log, from_log_line, spec, shape, machine, hub,
                                             same_machine=from_log_same_machine)
    res = serve.plan_serve(shape, spec, machine, fit_margin=kb.thresholds.g3.fit_margin_fraction, beside=jobs,
                           running=running, calibration=calibration,
                           **({"drafter": drafter} if drafter is not None else {}))
    return res.model_copy(update={"notes": [*res.notes, *said]}) if said else res


def _log_calibration(log: str | Path, log_line: str | None, spec: ServeSpec, shape: ServeShape, machine: Machine,
                     hub: object, same_machine: bool = False) -> tuple[ServeSpec, LogCalibration]:
    """Read the user's start-up log (collect), then decide the correction (judge: serve_calibrate.calibrate). The
    plan's vLLM version defaults to the log's where the launch line names none (the owner plans on that build)."""
    from sparkops.core.errors import InputError
    from sparkops.planner import serve
    from sparkops.planner.serve_calibrate import calibrate, with_log_values
    from sparkops.planner.serve_engines import spec_from_text
    from sparkops.planner.serve_log import launch_line, read_vllm_log

    if isinstance(log, Path):
        try:
            text, source = log.read_text(errors="replace"), str(log)
        except OSError as exc:
            raise InputError(f"--from-log {log}: cannot read it ({exc.strerror or exc})") from None
    else:
        text, source = log, "the log's text"
    given = _from_log_line(log_line) if log_line else None
    reading = read_vllm_log(text, engine_version=(given.engine_version if given else None) or spec.engine_version,
                            enforce_eager=bool(given and given.enforce_eager))
    printed = None if reading.launch_args_cut else launch_line(reading.launch_args)
    line = log_line if log_line else printed
    if not spec.engine_version and reading.version and spec.engine == "vllm":
        spec = spec.model_copy(update={"engine_version": reading.version})

    def refused(why: str) -> LogCalibration:
        return serve.LogCalibration(
            applied=False, source=source, log_version=reading.version, log_kv_gib=reading.kv_gib,
            log_tokens=reading.kv_tokens, log_compile_state=reading.compile_state, refused=why)

    if not line:
        if reading.launch_args_cut:  # a cut dict drops flags that size the pool: never planned as the launch line
            return spec, refused("the log's 'non-default args' is cut short ('...'): the flags it does not show may "
                                 "size the pool; pass the whole launch line with --from-log-line")
        return spec, refused("the log prints no launch line ('non-default args: {...}'): pass it with --from-log-line")
    log_spec = given if given is not None else spec_from_text(line, engine="vllm")
    log_spec = with_log_values(reading, log_spec)
    if not log_spec.engine_version and reading.version:
        log_spec = log_spec.model_copy(update={"engine_version": reading.version})
    try:
        log_shape = serve.resolve_shape(log_spec.model, hub=hub)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a model the log names that no catalog or Hub resolves: refused below, by name
        log_shape = None
    return spec, calibrate(reading, log_spec, spec, machine, log_shape=log_shape, shape=shape, source=source,
                           log_launch=line, same_machine=same_machine)


def _from_log_line(line: str) -> ServeSpec:
    """``--from-log-line``: the ``vllm serve ...`` line the log's start ran (a launch line, not a description: free
    text would drop its flags); its errors are named as that option's."""
    from sparkops.core.errors import InputError
    from sparkops.planner.serve_engines import looks_like_command, spec_from_text

    if not looks_like_command(line):
        raise InputError(f"--from-log-line {line!r} is not a launch line: give the 'vllm serve MODEL ...' command "
                         "(or docker run vllm/vllm-openai ...) that started the log's server")
    try:
        spec = spec_from_text(line, engine="vllm")
    except InputError as exc:
        raise InputError(f"--from-log-line: {exc}") from None
    if spec.engine != "vllm":
        raise InputError(f"--from-log-line is a {spec.engine} launch line: only a vLLM start-up log calibrates")
    return spec


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
    return build_report(facts, workload, kb, facts_source=source, offline=bool(opts is not None and opts.offline))


def triage_gpu(facts: Facts | Path | None = None, opts: CollectOptions | None = None,
               container: str | None = None) -> TriageView:
    """The GPU-visibility triage (five hypotheses, in order) on this machine, inside ``container``,
    or on a snapshot: whether torch sees the GPU, each hypothesis's status, the one that fired, its fix."""
    from sparkops.checks import gpu_visibility
    from sparkops.facts.model import TorchLive

    opts = _live_opts(facts, opts, container, None)
    if isinstance(facts, (str, Path)):
        facts = load_facts(Path(facts))
    elif facts is None:
        facts = collect(opts)
    from sparkops.report.build import container_json
    from sparkops.report.views import TriageView

    kb = load()
    tri = gpu_visibility.triage(facts, kb)
    live = facts.target.live
    sees = live.cuda_available if isinstance(live, TorchLive) and live.import_ok else None
    return TriageView.model_validate({
        "torch_sees_gpu": sees,
        "target_python": target_label(facts),
        "container": container_json(facts),
        "live_unavailable": "" if isinstance(live, TorchLive) else str(live),
        "hypotheses": [{"number": n, "hypothesis": h, "status": st} for n, h, st in tri.steps()],
        "fired": tri.fired,
        "reason": tri.reason,
        "fix": tri.fix(kb),
    })


def stack(facts: Facts | Path | None = None, opts: CollectOptions | None = None,
          kb: Knowledge | None = None, container: str | None = None) -> StackView:
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
    from sparkops.report.build import container_json
    from sparkops.report.views import StackView

    g9 = g09_container_first.check(context(facts, kb))
    mx = kb.matrix
    age = (facts.collected_at.date() - mx.last_verified).days if facts.collected_at else None
    return StackView.model_validate({
        "target_python": target_label(facts),
        "container": container_json(facts),
        "matrix": {"version": mx.version, "last_verified": mx.last_verified.isoformat(), "age_days": age,
                   "refresh_horizon_days": mx.refresh_horizon_days,
                   "stale": age is not None and age > mx.refresh_horizon_days},
        "packages": g09_container_first.matrix_rows(kb, installed(facts)),
        "packages_read": known(facts.target.distributions),
        "packages_unavailable": None if known(facts.target.distributions) else str(facts.target.distributions),
        "components": mx.component_status,
        "G9": g9,
    })


def write_report(report: Report, path: Path) -> None:
    """env-report.json, atomically."""
    write_atomic(path, report.model_dump_json(indent=2) + "\n")


def exit_code(report: Report) -> int:
    """0 ready, 1 ready with warnings, 2 blocked (3 is the CLI's: the tool itself failed)."""
    from sparkops.core.verdict import exit_code as _exit_code

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


def diagnose(text: str, source: str = "-", facts: Facts | Path | None = None) -> Diagnosis:
    """Which gotcha an error log, traceback or pasted report points at (``spark-ops diagnose``):
    findings best first with evidence lines and fixes; ``facts`` (a snapshot or its path) confirm
    or rule out. The matcher lives in :mod:`sparkops.diagnose`; this is its library entry."""
    from sparkops.diagnose import diagnose_text

    if isinstance(facts, (str, Path)):
        facts = load_facts(Path(facts))
    return diagnose_text(text, source=source, facts=facts)
