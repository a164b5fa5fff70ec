"""Plan a fine-tune against a budget: estimate, verdict, nearest anchor, and the OOM ladder.

The budget is explicit (``--budget-gb``), a target profile's typical budget (``--target
dgx-spark``: plan for a Spark from any machine), or the machine's own facts (live or a snapshot):
on unified memory MemAvailable minus the OS/driver reserve, as G3 computes it. On unified memory
the trainer's CPU-side process shares the pool, so it counts; on a discrete GPU it does not.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops.core.units import GIB
from sparkops.planner.estimate import GB, Estimate, estimate
from sparkops.planner.run import PlanInputError, RunSpec, build_run, planner_knowledge, run_words

if TYPE_CHECKING:
    from sparkops.facts.model import Facts
    from sparkops.facts.workload import Workload
    from sparkops.knowledge import Knowledge
    from sparkops.planner.architecture import ModelArch
    from sparkops.planner.hub import HubAccess

Verdict = Literal["fits", "tight", "does-not-fit"]

TERM_TEXT = {
    "weights": "model weights as stored on the device",
    "adapters": "LoRA adapter weights",
    "gradients": "gradients of the trainable parameters",
    "optimizer_states": "optimizer states",
    "optimizer_step_temp": "optimizer step temporaries (foreach AdamW: one parameter-sized copy)",
    "autocast_weight_copies": "bf16 copies of fp32 weights kept by autocast matmuls for backward",
    "activations_layers": "saved activations, all decoder layers",
    "activations_checkpoints": "checkpointed layer inputs (gradient checkpointing)",
    "activations_one_layer": "one layer's activations re-materialized in backward",
    "activations_outside_layers": "final norm and lm_head inputs",
    "backward_transient": "one layer's gradient buffers during backward",
    "logits_loss": "logits and cross-entropy buffers",
    "early_gradients": "lm_head gradient at the start of backward",
    "dequant_transient": "bitsandbytes 4-bit dequantization buffers",
    "cuda_workspaces": "cuBLAS workspaces",
    "load_inflight": "tensors in flight while loading and quantizing",
    "allocator_slack": "caching-allocator slack (reserved minus allocated)",
    "cuda_context": "CUDA context and kernels (outside torch's counters)",
    "host_process": "the trainer's CPU-side process (same pool on unified memory)",
}


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ModelInfo(_M):
    id: str
    name: str
    source: str
    params_b: float
    trainable_params: int
    assumed: str | None = None  # set when no model was named and a catalog proxy was used


class Budget(_M):
    gb: float
    source: str  # explicit | target:<profile> | live | facts
    unified: bool
    detail: str = ""
    reclaimable_cache_gb: float | None = None  # MemAvailable - MemFree (flushable page cache)


class LadderStep(_M):
    step: int
    action: str
    detail: str
    peak_gb: float | None = None
    fits: bool | None = None


class Anchor(_M):
    params_b: float
    method: str
    observed: str
    note: str


class PlanResult(_M):
    """The planner's answer (``spark-ops plan --json``). Sizes in GB = 10^9 bytes."""

    schema_version: int = 1
    unit: str = "GB (10^9 bytes)"
    model: ModelInfo
    run: RunSpec
    verdict: Verdict
    peak_gb: float  # what the pool must hold: tensors + slack + CUDA context (+ host process on unified)
    peak_allocated_gb: float  # what torch.cuda.max_memory_allocated would show
    budget_gb: float
    headroom_gb: float
    budget: Budget
    binding_phase: str
    phases: dict[str, float]
    phase_terms: dict[str, dict[str, float]]
    terms: dict[str, float]
    anchor: Anchor | None = None
    max_seq_len: int | None = None  # the largest sequence length that fits (when this one does not)
    max_batch: int | None = None  # the largest batch that fits at this sequence length
    ladder: list[LadderStep] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _gb(b: float) -> float:
    return round(b / GB, 2)


# ------------------------------------------------------------------ budget

def budget_from_target(target: str, kb: Knowledge) -> Budget:
    key = target.lower().replace("_", "-")
    key = {"spark": "gb10", "dgx-spark": "gb10", "dgx_spark": "gb10"}.get(key, key)
    prof = next((p for p in kb.profiles if p.key == key), None)
    if prof is None or prof.typical_available_gb is None:
        known = ["dgx-spark"] + [p.key for p in kb.profiles if p.typical_available_gb is not None and p.key != "gb10"]
        raise PlanInputError(f"no planning budget for target {target!r}; known targets: {', '.join(known)}")
    reserve = kb.thresholds.g3.os_reserve_gb * GIB / GB if prof.unified_memory else 0.0
    gb = round(prof.typical_available_gb - reserve, 1)
    what = "typical MemAvailable of an idle box minus the OS/driver reserve" if prof.unified_memory \
        else "device memory of an idle GPU"
    return Budget(gb=gb, source=f"target:{prof.key}", unified=prof.unified_memory,
                  detail=f"{prof.key}: {what} ({prof.typical_available_gb:g} GB - {reserve:.1f} GB)")


def budget_from_facts(facts: Facts, kb: Knowledge, source: str) -> Budget:
    from sparkops.checks import identity
    from sparkops.facts.reading import known

    ident = identity.identify(facts, kb)
    head = identity.headroom_gib(facts, ident, kb)
    if head is None:
        raise PlanInputError("no memory budget in these facts (no GPU, or its memory was not read); "
                             "give --budget-gb N or --target dgx-spark")
    unified = bool(ident.unified_memory)
    mi = facts.memory.meminfo_bytes
    cache = None
    if unified and known(mi) and "MemAvailable" in mi and "MemFree" in mi:  # type: ignore[operator]
        cache = round(max(0, mi["MemAvailable"] - mi["MemFree"]) / GB, 1)  # type: ignore[index]
    detail = ("MemAvailable minus the OS/driver reserve (unified memory)" if unified
              else "free memory of GPU 0")
    return Budget(gb=round(head * GIB / GB, 1), source=source, unified=unified, detail=detail,
                  reclaimable_cache_gb=cache)


# ------------------------------------------------------------------ the plan

def _pool(est: Estimate, unified: bool) -> float:
    """Peak the budget must cover: on a discrete GPU the host process is not in the pool."""
    return est.peak_total - (0.0 if unified else est.terms.get("host_process", 0.0))


def _verdict(peak: float, budget_gb: float, margin: float) -> Verdict:
    if peak <= budget_gb * GB * (1 - margin):
        return "fits"
    if peak <= budget_gb * GB:
        return "tight"
    return "does-not-fit"


def _largest(lo: int, hi: int, ok: Any) -> int | None:
    """Largest n in [lo, hi] with ok(n), assuming ok is monotone (bigger never fits better)."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan(arch: ModelArch, run: RunSpec, budget: Budget, kb: Knowledge, *, assumed: str | None = None) -> PlanResult:
    pk = planner_knowledge()
    margin = kb.thresholds.g3.fit_margin_fraction
    est = estimate(arch, run, pk)
    peak = _pool(est, budget.unified)
    verdict = _verdict(peak, budget.gb, margin)

    def fits(r: RunSpec) -> bool:
        return _pool(estimate(arch, r, pk), budget.unified) <= budget.gb * GB * (1 - margin)

    max_seq = max_batch = None
    ladder: list[LadderStep] = []
    if verdict != "fits":
        step = 0
        if budget.unified:
            step += 1
            cache = f" ({budget.reclaimable_cache_gb:g} GB is page cache now)" if budget.reclaimable_cache_gb else ""
            ladder.append(LadderStep(step=step, action="flush caches",
                                     detail="sync; echo 3 > /proc/sys/vm/drop_caches (as root, between runs): CUDA "
                                            f"counts page cache as used on unified memory{cache}"))
        seq_ok = _largest(1, run.seq_len // 64, lambda n: fits(run.model_copy(update={"seq_len": n * 64})))
        if seq_ok:
            max_seq = seq_ok * 64
        step += 1
        ladder.append(LadderStep(
            step=step, action="shorter packing / sequence",
            detail=(f"--seq-len {max_seq} fits" if max_seq else "no sequence length fits at this batch size"),
            peak_gb=_gb(_pool(estimate(arch, run.model_copy(update={"seq_len": max_seq}), pk), budget.unified))
            if max_seq else None, fits=bool(max_seq)))
        if run.batch > 1:
            max_batch = _largest(1, run.batch - 1, lambda n: fits(run.model_copy(update={"batch": n})))
            step += 1
            ladder.append(LadderStep(step=step, action="smaller batch",
                                     detail=(f"--batch {max_batch} fits (raise gradient accumulation to keep the "
                                             "effective batch)" if max_batch else "no batch size fits at this length"),
                                     fits=bool(max_batch)))
        for alt in _lighter_methods(run):
            step += 1
            alt_est = _pool(estimate(arch, alt, pk), budget.unified)
            ladder.append(LadderStep(step=step, action=f"{'bf16 LoRA' if alt.method == 'lora' else 'QLoRA'} instead",
                                     detail=f"{alt.method} r={alt.lora.r if alt.lora else '-'} at the same length "
                                            f"and batch: peak {_gb(alt_est):g} GB",
                                     peak_gb=_gb(alt_est), fits=alt_est <= budget.gb * GB * (1 - margin)))
        step += 1
        ladder.append(LadderStep(step=step, action="smaller model or two Sparks",
                                 detail="a smaller model of the same family, or shard across two Sparks "
                                        "with FSDP (DDP/FSDP only: never tensor parallel across nodes, G10)"))
    notes = list(est.notes)
    if run.grad_checkpointing and run.framework == "unsloth":
        notes.append("Unsloth's offloaded checkpointing moves checkpoints to 'CPU' memory: on a Spark that is the "
                      "same pool, so they are counted here")
    if budget.unified and any(w in run.optimizer for w in ("paged",)):
        notes.append("paged optimizers page to host memory, which on a Spark is the same pool: nothing is freed")
    model = ModelInfo(id=arch.id, name=arch.name, source=arch.source, params_b=round(arch.params_total / 1e9, 3),
                      trainable_params=est.trainable_params, assumed=assumed)
    return PlanResult(
        model=model, run=run, verdict=verdict, peak_gb=_gb(peak), peak_allocated_gb=_gb(est.peak_allocated),
        budget_gb=budget.gb, headroom_gb=round(budget.gb - peak / GB, 2), budget=budget,
        binding_phase=est.binding_phase,
        phases={p: _gb(est.phase_total(p)) for p in est.phases},
        phase_terms={p: {k: _gb(v) for k, v in terms.items() if v} for p, terms in est.phases.items()},
        terms={k: _gb(v) for k, v in est.terms.items() if v and (budget.unified or k != "host_process")},
        anchor=nearest_anchor(arch.params_total / 1e9, run.method), max_seq_len=max_seq, max_batch=max_batch,
        ladder=ladder, notes=notes)


def _lighter_methods(run: RunSpec) -> list[RunSpec]:
    """The ladder's method steps, in order: bf16 LoRA before QLoRA."""
    out = []
    if run.method == "full":
        out.append(build_run(method="lora", framework=run.framework, batch=run.batch, seq_len=run.seq_len,
                             grad_checkpointing=run.grad_checkpointing, attention=run.attention, loss=run.loss))
    if run.method in ("full", "lora"):
        out.append(build_run(method="qlora", framework=run.framework, batch=run.batch, seq_len=run.seq_len,
                             grad_checkpointing=run.grad_checkpointing, attention=run.attention, loss=run.loss,
                             lora_r=run.lora.r if run.lora else None,
                             lora_targets=run.lora.targets if run.lora else None))
    return out


def nearest_anchor(params_b: float, method: str) -> Anchor | None:
    """The sizing anchor on one Spark closest in size (log scale), preferring the same method."""
    anchors = planner_knowledge().anchors
    if not anchors:
        return None
    best = min(anchors, key=lambda a: (a.method != method, abs(math.log(a.params_b / max(params_b, 0.01)))))
    return Anchor(**best.model_dump())


# ------------------------------------------------------------------ from a workload

FRAMEWORK_COMPONENTS = {"unsloth": "unsloth", "trl": "trl", "axolotl": "axolotl", "torchtune": "torchtune",
                        "llama-factory": "llama-factory", "peft": "hf", "transformers": "hf"}


def arch_for(workload: Workload, *, model: str | None = None, config: str | None = None,
             env: Any = None, hub: HubAccess | None = None) -> tuple[ModelArch, str | None]:
    """The architecture the workload names; with only a size, the nearest catalog entry (said so).
    ``hub``: how to read a Hugging Face id from the Hub (None: the Hub is not read)."""
    from sparkops.planner import architecture

    if config:
        return architecture.from_path(config, env=env, hub=hub), None
    name = model or workload.model
    if name:
        try:
            return architecture.resolve(name, env=env, hub=hub), None
        except architecture.ArchitectureError:
            if workload.params_b is None or model:
                raise
    if workload.params_b:
        return proxy_for_size(workload.params_b)
    raise PlanInputError("no model given: name one (--model llama-3.1-8b), give --config PATH, or a size (\"70b\")")


def proxy_for_size(params_b: float) -> tuple[ModelArch, str]:
    from sparkops.planner import architecture

    dense = [e for e in architecture.load_catalog()
             if e.config.get("model_type") in ("llama", "qwen2", "qwen3", "gemma2", "gemma3_text")
             and not any(w in e.id for w in ("distill", "nemotron"))]
    best = min(dense, key=lambda e: (abs(math.log(e.params_b / params_b)), e.id))
    arch = architecture.resolve(best.id)
    return arch, (f"no model named: planned with {best.name} ({best.params_b:g}B), the catalog's nearest dense "
                  f"model to {params_b:g}B; name the model for its real shapes")


def run_for(workload: Workload, **flags: Any) -> RunSpec:
    """Run spec from the workload text's words plus explicit flags (flags win)."""
    words, _rest = run_words(workload.unparsed)
    fw = next((FRAMEWORK_COMPONENTS[c] for c in workload.components if c in FRAMEWORK_COMPONENTS), None)
    opts: dict[str, Any] = {"method": workload.method if workload.method in ("full", "lora", "qlora") else None,
                            "framework": fw, "batch": workload.batch_size, "seq_len": workload.seq_len}
    if workload.precision in ("bf16", "fp16", "fp32"):
        opts["dtype"] = workload.precision
    opts.update(words)
    opts.update({k: v for k, v in flags.items() if v is not None})
    return build_run(**opts)
