"""The memory planner as preflight's G3 needs it: a sized fine-tune's peak against the snapshot's
budget. Preflight, fleet and the API call this before judging; the checks then read the peak
from the workload (``estimated_peak_gb``) and never import the planner."""

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
