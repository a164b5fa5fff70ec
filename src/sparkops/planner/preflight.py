"""The memory planners as preflight's G3 needs them: a sized fine-tune's peak, or a server's footprint
(``plan --serve``: what the engine holds once started), against the snapshot's budget. Preflight, fleet
and the API call this before judging; the checks then read the peak from the workload
(``estimated_peak_gb``) and never import the planner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkops.core.errors import InputError
from sparkops.facts.model import Facts
from sparkops.facts.workload import Workload
from sparkops.knowledge import Knowledge

if TYPE_CHECKING:
    from sparkops.planner.hub import HubAccess


def plan_for_preflight(facts: Facts, workload: Workload, kb: Knowledge,
                       hub: HubAccess | None = None) -> tuple[Workload, dict[str, Any] | None]:
    """The workload with its planned peak, and the planner's summary (None when nothing to plan).

    A planner failure (unknown model, no budget) never fails preflight: G3 then says the fit was
    not tested, and the report carries the planner's reason.
    """
    if not workload.needs_planning:
        return workload, None
    if workload.method == "inference":
        return _serve_for_preflight(facts, workload, kb, hub)
    from sparkops.planner import plan as planner

    try:
        arch, assumed = planner.arch_for(workload, hub=hub)
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


def _serve_for_preflight(facts: Facts, workload: Workload, kb: Knowledge,
                         hub: HubAccess | None) -> tuple[Workload, dict[str, Any] | None]:
    """A serving workload's footprint, planned by ``plan --serve`` on the same facts (their machine, the
    jobs already on it, the target's installed engine version): what the engine holds once it has
    started (vLLM: its share of TOTAL memory, the whole of it from the start), which G3 tests against
    the budget as it tests a fine-tune's peak. vLLM's own start-up check stays G3's (one owner)."""
    from sparkops.core.units import GB, GIB
    from sparkops.planner import serve
    from sparkops.planner.serve_budget import machine_and_running
    from sparkops.planner.serve_engines import looks_like_command, spec_from_text, with_installed

    try:
        spec = spec_from_text(workload.text or str(workload.model or ""))
    except InputError as exc:
        return workload, {"error": str(exc)}
    if looks_like_command(workload.text):  # the engine's own parser read the line: its model, and what it could not read
        workload = workload.model_copy(update={"model": workload.model or spec.model, "unparsed": list(spec.ignored)})
    if spec.gpu_memory_utilization is not None:  # the share G3's start-up check judges, whether or not the plan runs
        workload = workload.model_copy(update={"serve_share": spec.gpu_memory_utilization})
    if spec.engine_version:  # the release the line names (an image tag) before the installed one fills it in
        workload = workload.model_copy(update={"serve_engine_version": spec.engine_version})
    try:
        if isinstance(facts.target.distributions, dict):
            spec, _ = with_installed(spec, facts.target.python or "the target python", dict(facts.target.distributions))
        if spec.engine == "vllm":  # the launch line's flags and the installed release decide G3's start-up check too
            workload = workload.model_copy(update={"serve_extensible_kv": serve.vllm_extensible_kv_cache(spec)})
        shape = serve.resolve_shape(spec.model, hub=hub)
        machine, running = machine_and_running(facts, "facts", kb.thresholds.g3.os_reserve_gb)
        res = serve.plan_serve(shape, spec, machine, fit_margin=kb.thresholds.g3.fit_margin_fraction, running=running)
    except InputError as exc:
        return workload, {"error": str(exc)}

    peak_gb = round(res.footprint_gib * GIB / GB, 2)
    kv = res.kv
    summary = {"peak_gb": peak_gb, "budget_gb": round(res.budget_gib * GIB / GB, 2), "verdict": res.verdict,
               "model": res.model.name,
               "run": f"{spec.engine} server, {spec.max_model_len or 'default'} tokens per request"
                      + (f", share {spec.gpu_memory_utilization}" if spec.gpu_memory_utilization else ""),
               "note": "peak = the server's footprint once started (plan --serve): KV cache "
                       + ("none (encoder-only)" if kv.none or kv.available_gib is None else f"{kv.available_gib:.2f} GiB")
                       + ", start-up check "
                       + ("passes" if res.start.passes else "fails" if res.start.passes is False else "not judged")}
    return workload.model_copy(update={"estimated_peak_gb": peak_gb, "serve_refusals": list(res.refusals),
                                       "serve_verdict": res.verdict}), summary
