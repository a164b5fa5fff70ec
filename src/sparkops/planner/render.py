"""The plan as a readable breakdown: verdict, the binding phase's terms, all phases, the ladder."""

from __future__ import annotations

from sparkops.planner.plan import TERM_TEXT, PlanResult

MARK = {"fits": "FITS", "tight": "TIGHT", "does-not-fit": "DOES NOT FIT"}


def render_plan(res: PlanResult) -> str:
    r = res.run
    lines = [f"{res.model.name} ({res.model.params_b:g}B params, {res.model.source}) — {r.method}"
             + (f" r={r.lora.r} {','.join(r.lora.targets)}" if r.lora else "")
             + f", batch {r.batch} x seq {r.seq_len}, {'gradient checkpointing' if r.grad_checkpointing else 'no checkpointing'}"
             + f", {r.attention} attention, {r.optimizer}, framework {r.framework}"
             + (" (Trainer path: autocast)" if r.loop == "trainer" else " (plain loop)")
             + (f", gradient accumulation {r.grad_accum}" if r.grad_accum > 1 else "")]
    if res.model.assumed:
        lines.append(f"note: {res.model.assumed}")
    lines.append(f"trainable parameters: {res.model.trainable_params:,}")
    lines.append("")
    lines.append(f"{MARK[res.verdict]}: peak {res.peak_gb:g} GB against a budget of {res.budget_gb:g} GB "
                 f"({res.budget.detail}); headroom {res.headroom_gb:g} GB")
    lines.append(f"binding phase: {res.binding_phase} · torch max_memory_allocated ≈ {res.peak_allocated_gb:g} GB")
    lines.append("")
    binding = res.phase_terms[res.binding_phase]
    width = max(len(k) for k in res.terms) + 2
    lines.append(f"{'term':<{width}}{'GB':>9}  in peak  what")
    for k, gb in res.terms.items():
        mark = "   *   " if k in binding or k in ("allocator_slack", "cuda_context", "host_process") else "       "
        lines.append(f"{k:<{width}}{gb:>9.2f}  {mark}  {TERM_TEXT.get(k, '')}")
    lines.append("")
    lines.append("phases (tensors only): " + " · ".join(f"{p} {gb:g} GB" for p, gb in res.phases.items()))
    if res.anchor:
        a = res.anchor
        lines.append(f"nearest sizing anchor on one Spark: {a.params_b:g}B {a.method} — {a.observed} ({a.note})")
    if res.ladder:
        lines.append("")
        lines.append("OOM ladder, in order:")
        for s in res.ladder:
            lines.append(f"  {s.step}. {s.action}: {s.detail}")
    for n in res.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"
