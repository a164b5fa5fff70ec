"""Serving on a Spark: will this model serve, with how much KV cache, beside what else? (issue 20)

model shape (training catalog, serving-only entries in engines.yaml, a config.json, or a GGUF
header) -> weights as the engine holds them (bf16, FP8, NVFP4, MXFP4, AWQ/GPTQ, GGUF types) ->
KV bytes per token (GQA, head dim, sliding-window layers, MLA, fp8/q8 caches) -> the engine's own
accounting (vLLM's share of TOTAL memory and its start-up free-memory check, SGLang's
mem_fraction_static, llama.cpp's -c/-np, Ollama's num_ctx x parallel) -> the machine (total, what
CUDA calls free, page cache) -> verdict. Pure functions of their inputs; the machine comes in as
numbers (``Machine``), read from facts by :func:`machine_from_facts`.

Layout: the model's shape is ``serve_shape``, weights and the KV cache's bytes and tokens ``serve_kv``, launch lines and
engine data ``serve_engines``; this module holds the machine, the engines' own accounting and the plan, and re-exports
the shape and KV names as ``serve``'s API.

Units: GiB (2^30 bytes), as the engines print them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from sparkops.checks import pool_budget
from sparkops.checks.g03_unified_memory import vllm_default_share  # the G3 owner's default share by release
from sparkops.checks.g03_unified_memory import vllm_extensible_kv_cache as g03_extensible
from sparkops.core.releases import OLD_ENGINE, Release, at_least, release
from sparkops.core.units import GIB
from sparkops.planner.serve_engines import (
    ServeInputError,
    ServeSpec,
    _norm_flag,
    engine_value,
    engines_knowledge,
    gguf_cache_types,
    llama_cpp_build,
)
from sparkops.planner.serve_kv import (  # noqa: F401 - serve's API: weights and the KV cache
    _UNSET,
    DrafterShape,
    HybridLayout,
    VllmTokenModel,
    _ge,
    _version,
    catalog_draft_model,
    drafter_kv_layers,
    drafter_shape,
    gguf_arch,
    hub_drafter,
    hybrid_tokens_per_group,
    kv_bytes_per_token,
    kv_dtype_bytes,
    kv_layer_bytes,
    pp_stage_layers,
    request_kv_bytes,
    vllm_hybrid_layout,
    vllm_kv_tokens,
    vllm_swa_tokens,
    vllm_token_model,
    weight_format,
    weights_bytes,
)
from sparkops.planner.serve_shape import (  # noqa: F401 - serve's API: the model's shape
    ServeShape,
    VisionDims,
    hybrid_layers,
    mtp_drafting,
    mtp_layer_params,
    pixtral_params,
    resolve_shape,
    serving_entry,
    shape_from_arch,
    shape_from_config,
    shape_from_gguf,
    ssm_state_bytes,
    vision_params,
)

if TYPE_CHECKING:
    from sparkops.facts.model import Facts

Verdict = Literal["fits", "tight", "does-not-fit"]


# ------------------------------------------------------------------ the machine


class Machine(BaseModel):
    """The memory an engine meets at start-up, per GPU (GiB)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    source: str  # live | facts | target:<key> | explicit | log
    total_gib: float  # what cudaMemGetInfo calls total (GB10: MemTotal)
    free_gib: float | None = None  # what cudaMemGetInfo calls free (GB10: MemFree: page cache counts as used)
    available_gib: float | None = None  # MemAvailable (unified) / free (discrete)
    page_cache_gib: float | None = None  # MemAvailable - MemFree: what drop_caches gives back
    unified: bool = False
    os_reserve_gib: float = 0.0
    gpu_name: str = ""  # engines pick defaults by it (vLLM: A100s get the small-GPU defaults)
    gpus: int | None = None  # GPUs on this host (a DGX Spark: 1); None where the source does not say
    detail: str = ""


def machine_from_facts(facts: Facts, source: str, os_reserve_gib: float) -> Machine:
    """Total and free as CUDA reports them: on unified memory (GB10) total = MemTotal and free =
    MemFree (cudaMemGetInfo counts the page cache as used; unslothai/unsloth#10704); on a discrete
    GPU the device's own numbers."""
    from sparkops.facts.reading import known

    mi = facts.memory.meminfo_bytes
    dev = facts.gpu.devices[0] if facts.gpu.devices else None
    unified = dev is not None and (not known(dev.memory_total_bytes) or "GB10" in (dev.name or ""))
    if unified and known(mi) and "MemTotal" in mi:  # type: ignore[operator]
        total = mi["MemTotal"] / GIB  # type: ignore[index]
        free = mi.get("MemFree", 0) / GIB if "MemFree" in mi else None  # type: ignore[union-attr]
        avail = mi["MemAvailable"] / GIB if "MemAvailable" in mi else None  # type: ignore[index,operator]
        cache = (avail - free) if (avail is not None and free is not None) else None
        return Machine(source=source, total_gib=round(total, 2), free_gib=_r(free), available_gib=_r(avail),
                       page_cache_gib=_r(cache), unified=True, os_reserve_gib=os_reserve_gib,
                       gpu_name=dev.name if dev is not None else "", gpus=len(facts.gpu.devices) or None,
                       detail="unified memory: CUDA total = MemTotal, CUDA free = MemFree")
    if dev is not None and known(dev.memory_total_bytes):
        total = dev.memory_total_bytes / GIB  # type: ignore[operator]
        free = dev.memory_free_bytes / GIB if known(dev.memory_free_bytes) else None  # type: ignore[operator]
        return Machine(source=source, total_gib=round(total, 2), free_gib=_r(free), available_gib=_r(free),
                       unified=False, gpu_name=dev.name, gpus=len(facts.gpu.devices),
                       detail=f"GPU 0 ({dev.name}) device memory")
    raise ServeInputError("no GPU memory in these facts (no GPU, or its memory was not read); "
                          "give --target dgx-spark or --budget-gb")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


# dated: an idle DGX Spark (reference/gb10-readings.md: MemTotal 127600748 kB = 121.69 GiB,
# MemAvailable 118566368 kB = 113.07 GiB; vLLM saw free 110.34/121.69 on a clean boot)
# gpus: a DGX Spark has one; the h200/h100 targets describe one GPU of a host whose count they do not say
TARGETS = {"dgx-spark": {"total_gib": 121.69, "free_gib": 110.34, "available_gib": 113.07, "unified": True, "gpus": 1,
                         "gpu_name": "NVIDIA GB10"},
           "h200": {"total_gib": 139.8, "free_gib": 139.2, "available_gib": 139.2, "unified": False},
           "h100": {"total_gib": 79.19, "free_gib": 78.6, "available_gib": 78.6, "unified": False}}


def machine_from_target(target: str, os_reserve_gib: float) -> Machine:
    key = target.lower().replace("_", "-")
    key = {"spark": "dgx-spark", "gb10": "dgx-spark"}.get(key, key)
    if key not in TARGETS:
        raise ServeInputError(f"no serving target {target!r}; known: {', '.join(TARGETS)}")
    t = TARGETS[key]
    cache = round(t["available_gib"] - t["free_gib"], 2) if t["unified"] else None
    return Machine(source=f"target:{key}", total_gib=t["total_gib"], free_gib=t["free_gib"],
                   available_gib=t["available_gib"], page_cache_gib=cache, unified=bool(t["unified"]),
                   os_reserve_gib=os_reserve_gib if t["unified"] else 0.0, gpus=t.get("gpus"), gpu_name=t.get("gpu_name", ""),
                   detail=f"{key}: an idle box as recorded (gb10-readings.md / device readings)")


# ------------------------------------------------------------------ results


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ServeModelInfo(_M):
    id: str
    name: str
    source: str
    params_b: float
    format: str
    weights_detail: str


class Uncertainty(_M):
    """A term of the engine's budget the inputs cannot show: what the plan assumed, and how much the
    KV pool (GiB per rank) changes over the term's range: [smaller by, larger by]."""

    term: str  # sampler | cudagraph | compile-cache | lmcache | unified-non-torch | speculative
    assumed: str
    kv_change_gib: list[float]  # [low, high], low <= 0 <= high
    why: str


class StageKV(_M):
    """One pipeline stage's worker (vLLM): what it holds and the KV blocks its own pool would keep alone."""

    stage: int
    layers: int
    weights_gib: float
    activation_peak_gib: float
    cudagraph_gib: float
    kv_gib: float  # the pool this worker profiles ('Available KV cache memory' on its line)
    blocks: int  # that pool in pages of the stage's own layers; every worker keeps the smallest
    limiting: bool  # this stage's blocks are the smallest (the plan's weights and KV pool are its)


class KVInfo(_M):
    dtype_bytes: float
    bytes_per_token: float  # all attention layers of one rank
    available_gib: float | None  # the KV pool
    tokens: int | None  # the pool in tokens (vLLM: "GPU KV cache size")
    request_gib: float | None  # one request at max_model_len
    max_concurrency: float | None  # requests of max_model_len that fit at once
    fits_max_model_len: bool | None
    max_model_len_fitting: int | None  # the longest single request the pool holds
    available_range_gib: list[float] | None = None  # [low, high] over the named uncertainties (vLLM)
    # vLLM V0 with several ranks: the KV each non-driver rank profiles (only the driver worker runs the sampler);
    # the pool is the smallest rank's, the driver's (available_gib)
    other_ranks_gib: float | None = None
    sliding_layers: int = 0
    mla: bool = False
    # vLLM with pipeline parallel: each stage's worker (empty: one stage, or a model the stages are not sized for)
    stages: list[StageKV] = Field(default_factory=list)
    # why the server has no KV cache at all (vLLM, an encoder-only pooling model: engines.yaml
    # vllm.pooling.encoder_only); None: it has one (available_gib then says how large)
    none: str | None = None


class StartCheck(_M):
    check: str  # what the engine tests at start-up, in words
    requested_gib: float | None = None
    free_gib: float | None = None
    passes: bool | None = None  # None: the free memory is not known
    passes_after_flush: bool | None = None
    largest_share_now: float | None = None  # vLLM: the utilization that passes with today's free memory
    detail: str = ""


class BesideJob(_M):
    """Another job sharing the pool (a second server, a fine-tune): what it holds and how we know."""

    name: str
    gib: float
    how: str
    # a server's own start-up check: the free memory it asks for (vLLM: its share of the total; None: no such check)
    start_ask_gib: float | None = None


class LogCalibration(_M):
    """A correction from the user's own vLLM start-up log of this model on this machine (``plan --serve --from-log``;
    planner/serve_calibrate.py decides it, engines.yaml vllm.log_calibration): delta = the log's KV pool - the plan's
    pool for the log's own launch line here; the plan charges -delta against its pool (overheads.log_calibration)."""

    applied: bool
    refused: str | None = None  # why the log's measured basis is not carried to this launch line (applied False)
    source: str = ""  # the log file (or "the log's text")
    log_launch: str = ""  # the log's launch line as planned (its non-default args, or --from-log-line)
    log_version: str | None = None
    log_compile_state: str = "unknown"
    log_kv_gib: float | None = None  # "Available KV cache memory" in the log
    log_tokens: int | None = None  # "GPU KV cache size" in the log
    log_plan_kv_gib: float | None = None  # the plan's pool for the log's own launch line on this machine
    delta_gib: float | None = None  # log_kv_gib - log_plan_kv_gib
    carried: list[str] = Field(default_factory=list)  # the named uncertainties delta stands for (dropped from the range)
    notes: list[str] = Field(default_factory=list)


class ServePlanResult(_M):
    """``spark-ops plan --serve --json``. Sizes in GiB (2^30 bytes), per GPU."""

    schema_version: int = 1
    unit: str = "GiB (2^30 bytes), per GPU"
    engine: str
    engine_modelled_version: str
    spec: ServeSpec
    model: ServeModelInfo
    weights_gib: float  # per GPU (tensor/pipeline parallel split)
    overheads: dict[str, float]  # activation_peak, non_torch, cudagraph, compute_buffer ...
    kv: KVInfo
    footprint_gib: float  # what the engine holds from the pool once started
    machine: Machine
    start: StartCheck
    verdict: Verdict
    budget_gib: float  # what the pool can give this server now
    headroom_gib: float
    beside: list[BesideJob] = Field(default_factory=list)  # other jobs planned on the same pool
    running: list[BesideJob] = Field(default_factory=list)  # servers/trainers running now (already in free memory)
    suggestions: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    uncertainties: list[Uncertainty] = Field(default_factory=list)  # terms the inputs cannot show, with ranges
    two_sparks: dict[str, str] = Field(default_factory=dict)
    # what the engine itself refuses at start for this launch line on this machine, beside its free-memory check: a
    # context beyond the model's config, no KV memory, a pool that holds no request of max_model_len (also among the
    # notes); preflight's G3 reports them
    refusals: list[str] = Field(default_factory=list)
    # plan --serve --from-log: the correction from the user's own start-up log (None: planned from the flags alone)
    calibration: LogCalibration | None = None


# ------------------------------------------------------------------ engine accounting


def activation_bytes_per_token(s: ServeShape, tp: int, *, v0: bool = False) -> float:
    """bf16 bytes one profiled token holds at the largest layer's peak (engines.yaml
    vllm.activation_bytes_per_token): a dense MLP's gate+up and activation output beside the hidden
    state, a fused MoE's top_k intermediate caches. The V0 engine holds one more hidden state per
    token (engines.yaml vllm.v0_held_hidden, in-sample)."""
    held = (engine_value("vllm", "v0_held_hidden") if v0 else 2) * s.hidden  # residual and MLP input stay live
    if s.experts and s.top_k:
        return 2 * (s.top_k * (3 * s.expert_intermediate / tp + s.hidden) + held)
    return 2 * (3 * max(s.intermediate, s.hidden) / tp + held)


@dataclass(frozen=True)
class SamplerChoice:
    """Which top-k/top-p sampler vLLM's profile runs, and whether that hangs on an unknown install."""

    kind: str  # sort | flashinfer
    other: str | None  # the sampler it would be if FlashInfer were (not) installed; None: decided by the flags
    why: str


def vllm_pooling(spec: ServeSpec) -> str | None:
    """The pooling adapter a vLLM launch loads (engines.yaml vllm.pooling, read in config/model.py): ``embed`` or
    ``classify``; None for a generate launch. ``--runner pooling`` without ``--convert`` is embed on a *ForCausalLM
    (_get_default_convert_type); ``--convert embed|classify`` alone makes the runner pooling (_get_runner_type); the
    older ``--task embed|classify|score|reward`` stands for the same (0.11's _task_to_convert); ``reward`` is embed."""
    if spec.engine != "vllm" or spec.runner in ("generate", "draft"):
        return None
    c = engine_value("vllm", "pooling")
    conv = spec.convert if spec.convert != "none" else None
    if conv is None and spec.runner is None and spec.task:
        conv = c["task_to_convert"].get(spec.task)
    if conv is None and spec.runner != "pooling":
        return None
    conv = conv or c["default_convert"]
    return str(c["convert_aliases"].get(conv, conv))


def vllm_encoder_only(shape: ServeShape) -> str | None:
    """The vLLM family of an encoder-only pooling model (engines.yaml vllm.pooling.encoder_only, keyed by the config's
    model_type: BERT, XLM-RoBERTa, ModernBERT, NomicBERT, GTE-new), else None. Such a model has no KV cache in vLLM
    V1: its ENCODER_ONLY attention gives no KV spec, so EngineCore._initialize_kv_caches never profiles a pool."""
    return engine_value("vllm", "pooling")["encoder_only"]["model_types"].get(shape.model_type or "")


def vllm_pooling_flag_note(spec: ServeSpec) -> str | None:
    """A pooling flag the modelled release does not parse (engines.yaml vllm.pooling.flags_by_release): ``--task`` from
    0.13, ``--runner`` / ``--convert`` before 0.11, ``--convert reward`` from 0.20. None: nothing to say."""
    if spec.engine != "vllm" or not (spec.runner or spec.convert or spec.task):
        return None
    v = _version(spec)
    row = next(r for r in engine_value("vllm", "pooling")["flags_by_release"] if _ge(v, r["since"]))
    where = f"vLLM {spec.engine_version}" if spec.engine_version else "the modelled vLLM"
    if spec.task and not row["task"]:
        pooled = vllm_pooling(spec)
        use = (f"--runner pooling / --convert {pooled}" if pooled else
               f"--runner {'draft' if spec.task == 'draft' else 'generate'}")
        return f"--task is not a flag of {where} (removed in 0.13.0): use {use}; the plan reads it as that"
    if (spec.runner or spec.convert) and not row["runner"]:
        return f"--runner / --convert are not flags of {where} (before 0.11 it is --task embed|classify)"
    if spec.convert and spec.convert not in ("none", *row["converts"]):
        return f"--convert {spec.convert} is not a choice of {where} (choices: {', '.join(row['converts'])})"
    return None


def vllm_model_runner_rule(spec: ServeSpec) -> dict[str, Any]:
    """The release's Model Runner V2 rule (engines.yaml vllm.model_runner_v2_by_release: the first row whose
    ``since`` is <= the modelled version). A release not named takes the newest row before 0.34's V1 removal, as
    the extensible KV cache does (vllm_extensible_kv_cache: no recorded start is on 0.34)."""
    v = _version(spec)
    rows = engine_value("vllm", "model_runner_v2_by_release")
    return next(r for r in rows if _ge(v, r["since"]) and not (v is None and r["rule"] == "only"))


def vllm_model_runner_v2(shape: ServeShape, spec: ServeSpec) -> bool:
    """Does vLLM run this launch on Model Runner V2 (engines.yaml vllm.model_runner_v2_by_release, read in each
    release's config/vllm.py)? From 0.34 there is no other runner. Before, VLLM_USE_V2_MODEL_RUNNER on the launch line
    decides; unset, the release's rule: opt-in only (0.21 and older), a listed dense unquantized architecture
    (0.22-0.23; 0.22 not with --reasoning-parser), a listed architecture (0.24), a listed or any non-MoE, non-hybrid
    model (0.25-0.28), every model (0.29+); a speculative method V2 does not draft falls back to V1."""
    v = _version(spec)
    if v == OLD_ENGINE:
        return False
    rule = vllm_model_runner_rule(spec)
    if rule["rule"] == "only":
        return True
    env = spec.env.get("VLLM_USE_V2_MODEL_RUNNER")
    if env in ("0", "1"):
        return env == "1"
    method = (spec.speculative_method or "").lower()
    if method and ("v2_speculative_methods" in rule and method not in rule["v2_speculative_methods"]
                   or method in rule.get("v1_speculative_methods", [])):
        return False
    if rule.get("v1_with_reasoning_parser") and spec.reasoning_parser:
        return False
    kind = rule["rule"]
    if kind == "all":
        return True
    if vllm_pooling(spec) and not _ge(v, engine_value("vllm", "pooling")["model_runner_v2_from"]):
        return False  # 0.22-0.28 _is_default_v2_model_runner_model: runner_type != "generate" -> V1
    names = engine_value("vllm", "model_runner_v2_architectures")
    listed = bool(shape.model_type) and shape.model_type in {names[a] for a in rule.get("architectures", []) if a in names}
    moe = shape.experts > 0
    if kind == "listed_dense_unquantized":
        return listed and not moe and weight_format(shape, spec) in ("bf16", "fp16", "fp32")
    if kind == "listed":
        return listed
    if kind == "dense_or_listed":
        return (listed or not moe) and (not shape.linear_layers or (listed and _ge(v, "0.27")))
    return False  # opt_in


def vllm_sampler(spec: ServeSpec, gpu_name: str = "", shape: ServeShape | None = None) -> SamplerChoice:
    """The profile's sampler by version (engines.yaml vllm.sampler_by_version), the launch line's
    VLLM_USE_FLASHINFER_SAMPLER first. FlashInfer needs CUDA: AMD GPUs never use it. Without FlashInfer
    the native path sorts (``sort``), or, since the Triton top-k/top-p kernel, masks without a sort
    (``triton``). With ``shape``, a launch on Model Runner V2 profiles V2's own sampler (``v2``: an fp32 copy
    of the logits, no top-k/top-p in the dummy run), whatever FlashInfer's state."""
    env = spec.env.get("VLLM_USE_FLASHINFER_SAMPLER")
    installed = spec.flashinfer_installed
    where = f" in {spec.installed_in}" if spec.installed_in else ""
    v = _version(spec)
    if v == OLD_ENGINE:
        return SamplerChoice("sort", None, "the V0 engine samples with PyTorch ops")
    if vllm_pooling(spec):
        return SamplerChoice("none", None, "a pooling model has no sampler: the profile runs the pooler "
                             "(gpu_model_runner.py profile_run -> _dummy_pooler_run), hidden-sized rows, no logits")
    if shape is not None and vllm_model_runner_v2(shape, spec):
        return SamplerChoice("v2", None, "Model Runner V2's sampler: an fp32 copy of the logits, top-k/top-p "
                             "skipped in the profile's dummy run")
    row = next((r for r in engine_value("vllm", "sampler_by_version") if _ge(v, r["since"])), None)
    native = (row or {}).get("native", "sort")
    native_words = ("the Triton top-k/top-p kernel (no full-vocabulary sort)" if native == "triton"
                    else "the PyTorch-native sorting sampler")
    if re.search(r"\b(MI\d{3}|gfx\d+|AMD|Radeon|Instinct)\b", gpu_name, re.IGNORECASE):
        return SamplerChoice(native, None, f"FlashInfer does not run on AMD GPUs: {native_words}")
    if env == "0":
        return SamplerChoice(native, None, f"VLLM_USE_FLASHINFER_SAMPLER=0: {native_words}")
    in_wheel = bool(row and row.get("flashinfer_in_wheel"))
    if installed is not None and row is not None and row["sampler"] not in ("sort", "triton"):  # read, not assumed
        if installed:
            return SamplerChoice("flashinfer", None, f"FlashInfer is installed beside vLLM{where}: FlashInfer's sampler")
        return SamplerChoice(native, None, f"FlashInfer is not installed beside vLLM{where}: {native_words}")
    if env == "1":
        return SamplerChoice("flashinfer", None if in_wheel else native,
                             "VLLM_USE_FLASHINFER_SAMPLER=1: FlashInfer's sampler" +
                             ("" if in_wheel else " (if FlashInfer is installed; the wheel of this version does not bring it)"))
    if row is None or row["sampler"] in ("sort", "triton"):
        return SamplerChoice(native, None, f"this version's default: {native_words}")
    if in_wheel:
        return SamplerChoice("flashinfer", native, "this version's default: FlashInfer's sampler (FlashInfer comes with the "
                             f"wheel); {native_words} if FlashInfer is missing or does not support the GPU")
    return SamplerChoice(native, "flashinfer", "this version uses FlashInfer's sampler only when FlashInfer is installed, "
                         "which `pip install vllm` does not do (container images do): assumed not installed")


def sampler_gib(shape: ServeShape, seqs: int, tokens: int, kind: str) -> float:
    """The dummy sampler run's peak: min(max_num_seqs, max_num_batched_tokens) rows of vocab logits (``none``: a
    pooling model, no sampler)."""
    if kind == "none":
        return 0.0
    per = engine_value("vllm", "sampler_bytes_per_logit")[kind]
    extra = float(engine_value("vllm", "triton_sampler_buffers_gib")) if kind == "triton" else 0.0
    return min(seqs, tokens) * shape.vocab * per / GIB + extra


def cudagraph_sizes(max_num_seqs: int, query_len: int = 1) -> list[int]:
    """vLLM's default capture sizes for this max_num_seqs (engines.yaml vllm.cudagraph_capture). With
    speculative decoding a decode step holds ``query_len`` = 1 + num_speculative_tokens tokens per request:
    the ladder tops at 2 x max_num_seqs x query_len and every size is rounded up to a multiple of
    query_len, sizes above the top dropped, duplicates merged (vllm/config/vllm.py _set_cudagraph_sizes,
    vllm/config/compilation.py adjust_cudagraph_sizes_for_spec_decode)."""
    c = engine_value("vllm", "cudagraph_capture")
    q = max(1, query_len)
    top = min(c["seqs_factor"] * max_num_seqs * q, c["max_size_cap"])
    sizes = [s for s in [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16)) if s <= top]
    if q > 1:
        sizes = sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= top})
    return sizes


def vision_tower_loaded(spec: ServeSpec) -> bool:
    """vLLM skips a tower model when --limit-mm-per-prompt is 0 for all of its modalities (the vision tower's:
    image and video), which --language-model-only sets (engines.yaml vllm.multimodal)."""
    if spec.language_model_only:
        return False
    lim = spec.limit_mm_per_prompt or {}
    return not all(lim.get(m) == 0 for m in engine_value("vllm", "multimodal")["vision_modalities"])


@dataclass(frozen=True)
class EncoderProfile:
    """vLLM's dummy multimodal batch in the profile run (engines.yaml vllm.multimodal.encoder_profile)."""

    items: int  # images of the largest size
    item_tokens: int  # tokens of one (after the spatial merge)
    budget_tokens: int  # the encoder budget vLLM prints
    patches: int  # patches the encoder runs on (items x tokens x merge^2)
    peak_gib: float  # the encoder forward's peak per rank (pixel input included)
    lean_peak_gib: float  # the same without the position-embedding stage (a leaner pos_embed)
    cache_gib: float  # the encoder outputs kept through the text dummy run and the sampler


def vllm_encoder_profile(shape: ServeShape, spec: ServeSpec, tokens: int, seqs: int, tp: int) -> EncoderProfile | None:
    """The profile run's image batch (gpu_model_runner.profile_run): ``items`` images of the processor's largest
    size go through the vision encoder before the text dummy run, and their outputs stay cached through it. None
    when the model has no (known) tower, the tower is not loaded, --skip-mm-profiling is set, images are off, or
    the engine is V0."""
    v = shape.vision
    if v is None or spec.skip_mm_profiling or not vision_tower_loaded(spec) or _version(spec) == OLD_ENGINE:
        return None
    item = v.image_tokens()
    lim = (spec.limit_mm_per_prompt or {}).get("image")
    if not item or lim == 0:  # no known image size, or the tower runs for video only (not modelled)
        return None
    mml = spec.max_model_len or shape.context_train or item
    budget = max(tokens, item)  # min(compute budget, cache size): both max(max_num_batched_tokens, one item)
    per_prompt = max(1, min(lim if lim is not None else mml // item, mml // item))
    items = max(1, min(budget // item, seqs * per_prompt))
    patches = items * item * v.merge**2
    c = engine_value("vllm", "multimodal")["encoder_profile"]
    h, i = v.hidden, v.intermediate
    pos = c["pos_embed_hidden_copies"] * h
    lean = max(c["attention_hidden_copies"] * h, c["mlp_hidden_copies"] * h + c["mlp_intermediate_copies"] * i / max(1, tp))
    b = c["bytes_per_element"]
    return EncoderProfile(items=items, item_tokens=item, budget_tokens=budget, patches=patches,
                          peak_gib=patches * (max(pos, lean) + v.patch_in) * b / GIB,
                          lean_peak_gib=patches * (lean + v.patch_in) * b / GIB,
                          cache_gib=items * item * v.out_hidden * b / GIB)


def spec_query_len(spec: ServeSpec) -> int:
    """Tokens of one request in a decode step: 1, or 1 + num_speculative_tokens with a drafter."""
    return 1 + (spec.num_speculative_tokens or 0) if spec.speculative_method else 1


def cudagraph_gib(shape: ServeShape, spec: ServeSpec, seqs: int, layers: float | None = None) -> tuple[float, int]:
    """vLLM's CUDA-graph memory estimate per rank and the number of graphs it captures: the first
    capture, then every further graph at a cost per decoder layer on the rank (``layers``: a pipeline stage's
    own; default the layers over the pipeline's stages)."""
    q = spec_query_len(spec)
    sizes = cudagraph_sizes(seqs, q)
    graphs = len(sizes)
    if _ge(_version(spec), engine_value("vllm", "cudagraph_capture")["full_decode_since"]):
        graphs += len([s for s in sizes if s <= seqs * q])  # FULL decode graphs beside the PIECEWISE ones
    modes = 2 if graphs > len(sizes) else 1
    layers = shape.layers / max(1, spec.pipeline_parallel) if layers is None else layers
    per = engine_value("vllm", "cudagraph_per_graph_mib_per_layer") * layers / 1024
    return float(engine_value("vllm", "cudagraph_first_capture_gib")) + max(0, graphs - modes) * per, graphs


def vllm_profiled_batch(shape: ServeShape, spec: ServeSpec, total_gib: float, gpu_name: str = "",
                        unified: bool = False) -> tuple[int, int]:
    """The tokens and sequences vLLM's profile run batches (max_num_batched_tokens, max_num_seqs: the flags, else
    the defaults this device gets). ``unified``: a device whose NVML memory query is not supported (GB10), so
    vLLM's batch defaults see no device memory."""
    s = shape
    d_tok = engine_value("vllm", "default_max_num_batched_tokens")
    d_seq = engine_value("vllm", "default_max_num_seqs")
    large = total_gib >= d_tok["large_gpu_from_gib"] and not any(
        x.lower() in gpu_name.lower() for x in engine_value("vllm", "large_gpu_excludes"))
    if unified and engine_value("vllm", "batch_defaults_without_nvml_memory") == "small_gpu":
        large = False
    v = _version(spec)
    if v == OLD_ENGINE:  # V0 without chunked prefill profiles a whole max_model_len prompt
        c = engine_value("vllm", "v0_chunked_prefill")
        mml = spec.max_model_len or s.context_train
        chunked = bool(mml and mml > c["above_max_model_len"] and not s.sliding_layers and not s.mla_dim)
        tokens = spec.max_num_batched_tokens or (c["max_num_batched_tokens"] if chunked else max(mml or 2048, 2048))
    else:
        key = ("llm_" if (spec.entrypoint or "").lower() == "llm" else "") + ("large_gpu" if large else "small_gpu")
        tokens = spec.max_num_batched_tokens or d_tok[key]
    seqs = spec.max_num_seqs or d_seq["large_gpu" if large else "small_gpu"]
    return tokens, seqs


def vllm_overheads(shape: ServeShape, spec: ServeSpec, total_gib: float, tp: int, gpu_name: str = "",
                   unified: bool = False) -> dict[str, float]:
    """The profile run's activation peak, non-torch memory and CUDA graphs (GiB per rank), for the batch
    vllm_profiled_batch says it profiles."""
    s = shape
    tokens, seqs = vllm_profiled_batch(shape, spec, total_gib, gpu_name, unified)
    v0 = _version(spec) == OLD_ENGINE
    act = tokens * activation_bytes_per_token(s, tp, v0=v0) / GIB
    choice = vllm_sampler(spec, gpu_name, s)
    sampler = sampler_gib(s, seqs, tokens, choice.kind)
    enc = vllm_encoder_profile(s, spec, int(tokens), int(seqs), tp)
    cache = enc.cache_gib if enc else 0.0
    non_torch = engine_value("vllm", "non_torch_gib")["tp1" if tp * spec.pipeline_parallel == 1 else "tp_multi"]
    graphs, n_graphs = 0.0, 0
    if not spec.enforce_eager:
        graphs, n_graphs = cudagraph_gib(s, spec, seqs)
    fitted = vllm_fitted_terms(spec, unified)
    out = {"activation_peak": round(max(act + cache, sampler + cache, enc.peak_gib if enc else 0.0), 3),
           "non_torch": non_torch, "cudagraph": round(graphs, 3),
           "profiled_tokens": float(tokens), "profiled_seqs": float(seqs), "cudagraphs_captured": float(n_graphs),
           "sampler_gib": round(sampler, 3), "forward_gib": round(act, 3)}
    if enc:
        out.update({"mm_encoder": round(enc.peak_gib, 3), "mm_encoder_cache": round(cache, 3),
                    "mm_items": float(enc.items), "mm_item_tokens": float(enc.item_tokens),
                    "mm_lean_peak": round(max(act + cache, sampler + cache, enc.lean_peak_gib), 3)})
    if fitted:  # only where a fitted term holds: every other plan keeps its overheads as before
        out["fitted_non_kv"] = round(sum(fitted.values()), 3)
    return out


def vllm_non_kv_gib(ov: dict[str, float], weights_gib: float, graphs_gib: float,
                    activation_gib: float | None = None) -> float:
    """Everything a rank's profiled budget holds beside the KV pool (GiB): its weights, its activation peak (the
    profile's, unless ``activation_gib`` names another: a stage or rank that does not sample), the non-torch memory,
    the CUDA graphs the caller counts, and any fitted term that holds (engines.yaml vllm.fitted_non_kv). The one sum
    the pool, the pipeline stages, V0's other ranks and the share suggestions all subtract."""
    act = ov["activation_peak"] if activation_gib is None else activation_gib
    return (weights_gib + act + ov["non_torch"] + graphs_gib + ov.get("fitted_non_kv", 0.0)
            + ov.get("log_calibration", 0.0))


def vllm_fitted_term_conditions(spec: ServeSpec, unified: bool) -> dict[str, bool]:
    """Where each fitted non-KV term of vLLM's profiled budget applies (engines.yaml vllm.fitted_non_kv;
    benchmarks/results/serve-learned-terms-v1.md): ``unified_non_torch`` on unified memory, ``cold_compile`` where
    torch.compile runs in the profile run and the cache is not known to be warm; neither where the pool is not
    profiled (--kv-cache-memory, 0.34's extensible cache)."""
    profiled = not spec.kv_cache_memory_bytes and not vllm_extensible_kv_cache(spec)
    return {"unified_non_torch": profiled and unified,
            "cold_compile": profiled and _compiles_in_profile(spec) and spec.compile_state != "warm"}


def vllm_fitted_terms(spec: ServeSpec, unified: bool) -> dict[str, float]:
    """The fitted non-KV terms (GiB per rank) that hold for this launch line: sized from public logs, not read from
    vLLM's source (engines.yaml vllm.fitted_non_kv: each term's value, the records it came from, its CV numbers)."""
    terms = engines_knowledge().engines["vllm"].extra.get("fitted_non_kv") or {}
    holds = vllm_fitted_term_conditions(spec, unified)
    return {k: float(t["gib"]) for k, t in terms.items() if holds.get(k) and float(t["gib"])}


def _compiles_in_profile(spec: ServeSpec) -> bool:
    """vLLM V1 with compilation on: torch.compile's first run happens inside the profile run that sizes the pool
    (engines.yaml vllm.compile_cache_warm_gain_gib)."""
    return not spec.enforce_eager and _version(spec) != OLD_ENGINE and not spec.kv_cache_memory_bytes


def graphs_in_budget(spec: ServeSpec, shape: ServeShape | None = None) -> bool:
    """Does the plan charge its CUDA-graph estimate against the KV budget? Since the 0.19.2 line
    (engines.yaml vllm.cudagraph_in_budget_since; vllm PR #38284) vLLM subtracts its estimate
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turns it off). With ``shape``: Model Runner V2 before 0.29 estimates
    nothing (v2_graphs_outside_budget); the plan then keeps the charge for a first start, in place of the cold
    torch.compile temporaries vLLM's source does not size, and drops it only for a start known to be warm."""
    on = (not spec.enforce_eager and _ge(_version(spec), engine_value("vllm", "cudagraph_in_budget_since"))
          and spec.env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS") != "0")
    return on and not (shape is not None and spec.compile_state == "warm" and v2_graphs_outside_budget(shape, spec))


def graphs_outside_share(spec: ServeSpec, shape: ServeShape) -> bool:
    """Do the captured CUDA graphs sit beyond gpu_memory_utilization x total: before the estimate joined the
    budget, with it turned off, and on Model Runner V2 before 0.29 (whatever the plan charges for a first start)."""
    return not spec.enforce_eager and (not graphs_in_budget(spec) or v2_graphs_outside_budget(shape, spec))


def v2_graphs_outside_budget(shape: ServeShape, spec: ServeSpec) -> bool:
    """Model Runner V2 before 0.29 (engines.yaml vllm.v2_cudagraph_estimate_since): its profile_cudagraph_memory
    returns 0, so vLLM sizes the pool as requested - consumed - peak activation and captures the graphs outside it."""
    return (not spec.enforce_eager and vllm_model_runner_v2(shape, spec)
            and not _ge(_version(spec), engine_value("vllm", "v2_cudagraph_estimate_since")))


@dataclass(frozen=True)
class CompileReading:
    """What a vLLM start-up log says of its torch.compile cache (engines.yaml vllm.compile_state)."""

    state: Literal["cold", "warm", "eager", "unknown"]
    line: str  # the log line that says so ("" when unknown)


def vllm_compile_state(log: str, engine_version: str | None = None, enforce_eager: bool = False) -> CompileReading:
    """Cold, warm, eager or unknown, from a start-up log's own lines: a compile or a cache load printed by vLLM's
    compilation backend decides; else the compile time (torch.compile's total, or the engine's "(compilation: X s)"):
    an AOT load is quick, so below warm_load_max_s it is warm; above it, cold only where AOT compilation is the
    default (a warm start before it re-traces with Dynamo, which also takes seconds)."""
    c = engine_value("vllm", "compile_state")
    lines = log.splitlines()

    def first(needles: list[str]) -> str | None:
        return next((ln.strip() for ln in lines if any(n in ln for n in needles)), None)

    if (hit := first(c["eager_lines"])) is not None:
        return CompileReading("eager", hit)
    if enforce_eager:
        return CompileReading("eager", "enforce_eager on the launch line")
    if (hit := first(c["cold_lines"])) is not None:
        return CompileReading("cold", hit)
    if (hit := first(c["warm_lines"])) is not None:
        return CompileReading("warm", hit)
    for ln in lines:
        for pat in c["timed_lines"]:
            m = re.search(pat, ln)
            if not m:
                continue
            secs = float(m.group(1))
            if secs < float(c["warm_load_max_s"]):
                return CompileReading("warm", ln.strip())
            v = release(engine_version)
            if v is not None and v != OLD_ENGINE and at_least(v, str(c["aot_default_since"])):
                return CompileReading("cold", ln.strip())
            return CompileReading("unknown", "")
    return CompileReading("unknown", "")


def vllm_uncertainties(shape: ServeShape, spec: ServeSpec, ov: dict[str, float], gpu_name: str,
                       unified: bool = False, checkpoint_gib: float = 0.0) -> list[Uncertainty]:
    """Terms of vLLM's KV budget a launch line cannot show, each with the value assumed and the KV
    pool's change (GiB per rank) over its range. ``checkpoint_gib``: the weights this rank loads (the
    fastsafetensors loader on unified memory can keep about that much charged)."""
    out: list[Uncertainty] = []
    choice = vllm_sampler(spec, gpu_name, shape)
    if choice.other:
        alt = sampler_gib(shape, int(ov["profiled_seqs"]), int(ov["profiled_tokens"]), choice.other)
        cache = ov.get("mm_encoder_cache", 0.0)
        peak_alt = max(ov["forward_gib"] + cache, alt + cache, ov.get("mm_encoder", 0.0))
        delta = round(ov["activation_peak"] - peak_alt, 2)  # KV grows by what the other sampler saves
        other = {"sort": "the sorting sampler", "triton": "the Triton top-k/top-p kernel"}.get(choice.other, "FlashInfer's sampler")
        out.append(Uncertainty(
            term="sampler", assumed=f"{choice.kind} ({ov['sampler_gib']:.2f} GiB at the profile's peak)",
            kv_change_gib=[min(0.0, delta), max(0.0, delta)],
            why=f"{choice.why}; with {other} the peak is {alt:.2f} GiB"))
    v2_free_graphs = v2_graphs_outside_budget(shape, spec)
    if graphs_in_budget(spec) and not v2_free_graphs:
        lo, hi = engine_value("vllm", "cudagraph_measured_range_gib")
        g = ov["cudagraph"]
        out.append(Uncertainty(
            term="cudagraph", assumed=f"{g:.2f} GiB for {int(ov['cudagraphs_captured'])} graphs",
            kv_change_gib=[round(min(0.0, g - hi), 2), round(max(0.0, g - lo), 2)],
            why=f"vLLM measures its CUDA-graph memory at start-up and subtracts it (public logs: {lo:g}-{hi:g} GiB per "
                "rank); read 'Estimated CUDA graph memory' in the log, or pin the pool with --kv-cache-memory"))
    if _compiles_in_profile(spec) and spec.compile_state != "warm":
        lo, hi = engine_value("vllm", "compile_cache_warm_gain_gib")
        lora = ""
        if spec.enable_lora:  # engines.yaml vllm.lora.compile_cache_key (LoRAConfig.compute_hash)
            keys = ", ".join(engine_value("vllm", "lora")["compile_cache_key"])
            lora = (f"; --enable-lora puts the LoRA config ({keys}) in the compile cache's key, so the model's warm "
                    "cache without LoRA does not carry over: the first start with these LoRA flags compiles cold")
        assumed = ("a cold torch.compile cache (the start's own log)" if spec.compile_state == "cold"
                   else "a first start with these flags (a cold torch.compile cache)")
        if v2_free_graphs and graphs_in_budget(spec):
            # V2 before 0.29 subtracts no graph estimate: a warm start's pool is the plan's plus the charge it holds
            # for the cold compile; a cold one's is the warm one less the public cold/warm gap
            g = ov["cudagraph"]
            out.append(Uncertainty(
                term="compile-cache", assumed=f"{assumed}: {g:.2f} GiB held for its compile temporaries",
                kv_change_gib=[round(min(0.0, g - hi), 2), round(g, 2)],
                why="Model Runner V2 before 0.29 subtracts no CUDA-graph estimate (its profile_cudagraph_memory "
                    "returns 0): a warm restart, which loads the compiled graph, gets a "
                    f"pool {g:.2f} GiB larger than this plan's; a cold one charges torch.compile's Inductor/Triton "
                    f"temporaries to the profile's peak, {lo:g}-{hi:g} GiB per GPU in public cold/warm pairs, a size "
                    f"vLLM's source does not give; restart once to see the warm figure, or pin the pool with "
                    f"--kv-cache-memory{lora}"))
        else:
            out.append(Uncertainty(
                term="compile-cache", assumed=assumed,
                kv_change_gib=[0.0, float(hi)],
                why=f"vLLM sizes the pool from its profile run's peak, and torch.compile runs inside it: a cold compile "
                    f"cache charges Inductor/Triton temporaries to that peak, a warm restart loads the compiled graph "
                    f"and keeps {lo:g}-{hi:g} GiB more per GPU in public cold/warm pairs; restart once to see the warm "
                    f"figure, or pin the pool with --kv-cache-memory{lora}"))
    if unified:
        hi = float(engine_value("vllm", "unified_non_torch_extra_gib_max"))
        seen = engine_value("vllm", "unified_non_torch_observed_gib")
        fst = engine_value("vllm", "fastsafetensors_unified")
        loader = ""
        if (spec.load_format or "").lower() == fst["load_format"] and checkpoint_gib:
            hi = max(hi, round(checkpoint_gib, 2))
            loader = (f"; with --load-format fastsafetensors public GB10 reports (fastsafetensors#94, #109; "
                      f"sglang#40065) keep about one checkpoint ({checkpoint_gib:.1f} GiB here) out of MemAvailable "
                      "through the start, which this charge then holds (no same-flags start with the default loader is public to size it; compare one)")
        fit = vllm_fitted_terms(spec, unified).get("unified_non_torch", 0.0)
        assumed = f"{ov['non_torch']:g} GiB of non-torch memory, as on a discrete GPU"
        if fit:
            assumed += f", plus the fitted {fit:g} GiB unified-memory term (the median of public GB10 starts)"
        out.append(Uncertainty(
            term="unified-non-torch", assumed=assumed,
            kv_change_gib=[-round(max(0.0, hi - fit), 2), round(max(0.0, fit - float(seen["min"])), 2)],
            why="on unified memory vLLM reads free memory as MemAvailable (vllm/utils/mem_utils.py MemorySnapshot) and "
                "charges every fall of it between init_device and the end of the profile run that torch's pool does "
                "not hold as non-torch memory: the engine's own host heap (torch.compile/Triton during the profile "
                "run) and any other process growing on the pool meanwhile; in all "
                f"{seen['starts']} public GB10 starts read so far the logged pool came out below the discrete accounting, by "
                f"{seen['min']:g}-{seen['max']:g} GiB (median {seen['median']:g}); start from a warm compile cache with "
                "nothing else starting, or pin the pool with --kv-cache-memory" + loader))
    if "mm_encoder" in ov:
        gain = round(max(0.0, ov["activation_peak"] - ov["mm_lean_peak"]), 2)
        out.append(Uncertainty(
            term="mm-encoder",
            assumed=(f"{int(ov['mm_items'])} dummy image(s) of {int(ov['mm_item_tokens'])} tokens through the vision "
                     f"encoder: {ov['mm_encoder']:.2f} GiB at its peak, {ov['mm_encoder_cache']:.2f} GiB of outputs kept "
                     "through the text dummy run"),
            kv_change_gib=[0.0, gain],
            why="counted from vLLM's Qwen3-VL tower code: its position-embedding interpolation holds 12 hidden-size "
                "copies per patch; a leaner version of that step leaves the MLP's peak and this much more KV "
                "(--skip-mm-profiling skips the batch, --limit-mm-per-prompt '{\"image\": 0, \"video\": 0}' the tower)"))
    if spec.speculative_method:
        out.append(speculative_uncertainty(spec, ov))
    conn = spec.kv_connector or ""
    if "lmcache" in conn.lower():
        lo, hi = engine_value("vllm", "lmcache_gpu_buffer_range_gib")
        out.append(Uncertainty(
            term="lmcache", assumed="no GPU buffers", kv_change_gib=[-hi, -lo],
            why=f"the {conn} connector keeps GPU-side staging buffers its config sizes, not the launch line"))
    return out


def speculative_uncertainty(spec: ServeSpec, ov: dict[str, float]) -> Uncertainty:
    """Speculative decoding: what the plan counts (the target's CUDA graphs at the widened decode sizes)
    and what it cannot (engines.yaml vllm.speculative: the drafter's weights, its profile run and its own
    graphs come out of the KV budget; its attention layers join the KV pool's groups)."""
    s = engine_value("vllm", "speculative")
    method = spec.speculative_method or "draft_model"
    k = spec.num_speculative_tokens
    drafter = spec.speculative_model or ("the checkpoint's own MTP layers" if "mtp" in method.lower() else "not named")
    known = bool(ov.get("drafter_counted")) or ("mtp" in method.lower() and bool(ov.get("mtp_counted")))
    return Uncertainty(
        term="speculative",
        assumed=(f"{method} drafter ({drafter}), {k if k is not None else '?'} tokens per step: the target's "
                 f"{int(ov['cudagraphs_captured'])} CUDA graphs at decode sizes of {spec_query_len(spec)} tokens per "
                 "request are counted; " + ("the drafter's weights and KV layers too (sized from its config), "
                                            "its profile activations and graphs are not" if known else
                                            "the drafter's weights, profile activations and graphs are not")),
        kv_change_gib=[-float(ov.get("kv_before_speculative", 0.0)), 0.0],
        why=s["why"])


@dataclass
class _Plan:
    weights: float  # GiB per rank
    overheads: dict[str, float]
    kv_available: float | None
    tokens: int | None
    footprint: float
    start: StartCheck
    notes: list[str]
    uncertainties: list[Uncertainty] = field(default_factory=list)
    kv_other_ranks: float | None = None  # V0, several ranks: a non-driver rank's KV (no sampler in its profile)
    stages: list[StageKV] = field(default_factory=list)  # vLLM pipeline stages, sized one by one
    cell_bytes: float | None = None  # SGLang: bytes of one pool token (its own layout), what a request's tokens cost
    gguf: GgufSlots | None = None  # llama.cpp / Ollama: the cells and slots the flags lay out (read once, in _gguf)


def lora_slot_bytes(shape: ServeShape, spec: ServeSpec) -> int:
    """Bytes per tensor-parallel rank of vLLM's LoRA slots (engines.yaml vllm.lora): max_loras x max_lora_rank for
    q/k/v/o, the dense MLP and every expert of every layer, in the model dtype (2 bytes). 0 without --enable-lora."""
    if not spec.enable_lora:
        return 0
    c = engine_value("vllm", "lora")
    n, r = spec.max_loras or c["default_max_loras"], spec.max_lora_rank or c["default_max_lora_rank"]
    tp, h = max(1, spec.tensor_parallel), shape.hidden
    q = shape.q_dim or h
    kv = shape.kv_heads * shape.head_dim
    # qkv (3 slices of A over the hidden size, B over the rank's outputs) and o (A over the rank's inputs)
    attn = 3 * r * h + (q + 2 * kv) // tp * r + r * q // tp + h * r
    dense = shape.dense_mlp_layers if shape.dense_mlp_layers >= 0 else (0 if shape.experts else shape.layers)
    mlp = 2 * r * h + 2 * (shape.intermediate // tp) * r + r * (shape.intermediate // tp) + h * r
    s = int(c["moe_w13_slices"])
    ie = shape.expert_intermediate // tp
    moe_layers = (shape.moe_layers if shape.moe_layers >= 0 else shape.layers) if shape.experts else 0
    experts = shape.experts * (s * r * h + s * ie * r + r * ie + h * r)
    return 2 * n * (shape.attn_layers * attn + dense * mlp + moe_layers * experts)


def vllm_stage_weight_shifts(shape: ServeShape, fmt: str, base_bytes: int, stage_layers: tuple[int, ...],
                             tp: int, lm_head: bool = True) -> list[float]:
    """GiB each pipeline stage's rank holds above (or below) the average rank's base weights (``base_bytes``, all
    ranks, as weights_bytes counts them): its own decoder layers' share, the embedding matrix on the first stage and
    a vocabulary matrix on the last (lm_head; a tied model's last stage builds its own embed_tokens for it), engines.yaml
    vllm.pipeline_stages. Everything else the plan adds to the weights (vision tower, MTP, drafter, LoRA slots) stays
    spread evenly over the stages. ``lm_head`` False: a pooling model, whose last stage builds no vocabulary matrix."""
    c = engine_value("vllm", "pipeline_stages")
    n = len(stage_layers)
    per_param = 4 if fmt == "fp32" else 2  # embeddings / lm_head are kept in the model dtype (weights_bytes)
    vocab = shape.params_embedding * per_param
    layer = (base_bytes - vocab - shape.params_lm_head * per_param) / max(1, shape.layers)
    out = []
    for i, layers in enumerate(stage_layers):
        own = layers * layer + vocab * ((i == c["embedding_stage"] % n) + (lm_head and i == c["lm_head_stage"] % n))
        out.append((own - base_bytes / n) / max(1, tp) / GIB)
    return out


def vllm_pp_stages(shape: ServeShape, spec: ServeSpec, requested: float, stage_weights: list[float],
                   ov: dict[str, float], tm: VllmTokenModel, graphs_counted: bool) -> list[StageKV]:
    """Each pipeline stage's worker sized as vLLM sizes it (engines.yaml vllm.pipeline_stages): the same requested
    share less its own weights, its own profile peak (the dummy sampler runs on the last stage only), the non-torch
    memory and the CUDA graphs of its own layers; its blocks in pages of its own layers. The smallest block count is
    the one every worker keeps."""
    c = engine_value("vllm", "pipeline_stages")
    n = len(tm.stage_layers)
    sampler_stage = c["sampler_stage"] % n
    forward_peak = max(ov["forward_gib"] + ov.get("mm_encoder_cache", 0.0), ov.get("mm_encoder", 0.0))
    rows = []
    for i, layers in enumerate(tm.stage_layers):
        act = ov["activation_peak"] if i == sampler_stage else forward_peak
        graphs = 0.0
        if not spec.enforce_eager:
            graphs = cudagraph_gib(shape, spec, int(ov["profiled_seqs"]), layers=layers)[0]
        if spec.kv_cache_memory_bytes:
            kv = spec.kv_cache_memory_bytes / GIB
        else:
            kv = requested - vllm_non_kv_gib(ov, stage_weights[i], graphs if graphs_counted else 0.0, act)
        rows.append((i, layers, stage_weights[i], act, graphs, kv, tm.stage_blocks(kv, i)))
    least = min(r[6] for r in rows)
    lim = next(r[0] for r in rows if r[6] == least)
    return [StageKV(stage=i, layers=n_l, weights_gib=round(w, 2), activation_peak_gib=round(a, 3),
                    cudagraph_gib=round(g, 3), kv_gib=round(kv, 2), blocks=b, limiting=i == lim)
            for i, n_l, w, a, g, kv, b in rows]


def vllm_start_free(m: Machine, spec: ServeSpec) -> tuple[float | None, bool]:
    """The free memory vLLM's start-up check compares (GiB), and whether it is MemAvailable. On an integrated GPU
    vLLM reads psutil's MemAvailable, not CUDA's MemFree (engines.yaml vllm.unified_memory), at a snapshot taken
    after its own container and CUDA context are up: MemAvailable read beforehand less the assumed context."""
    from sparkops.checks.g03_unified_memory import vllm_free_reading  # the G3 owner's rule, not a copy

    free, reads_available = vllm_free_reading(m.unified, m.free_gib, m.available_gib, spec.engine_version)
    return (round(free, 2) if reads_available and free is not None else free), reads_available


def vllm_extensible_kv_cache(spec: ServeSpec) -> bool:
    """Does this vLLM size its KV pool from the memory measured after warmup and CUDA-graph capture (0.34's
    extensible KV cache)? The G3 owner's decision on this launch line's flags and release, not a copy."""
    return g03_extensible(spec.engine_version, flag=spec.enable_extensible_kv_cache,
                          pinned_pool=bool(spec.kv_cache_memory_bytes or spec.num_gpu_blocks_override))


def vllm_extensible_kv(requested: float, free: float | None, persistent: float, transient: float) -> float:
    """0.34's KV pool (GiB; vllm/v1/worker/extensible_kv_cache.py measure_kv_cache_bytes): min(requested - what the
    engine holds after capture, free at start - that - margin) - the transient peak kept free; margin = max(floor,
    fraction x transient). ``free`` None (not read): the budget alone."""
    x = engine_value("vllm", "extensible_kv_cache")
    margin = max(float(x["margin_floor_gib"]), float(x["margin_fraction"]) * transient)
    kv = requested - persistent
    if free is not None:
        kv = min(kv, free - persistent - margin)
    return kv - transient


def vllm_footprint(requested: float, kv_gib: float, ov: dict[str, float], spec: ServeSpec, shape: ServeShape,
                   weights_gib: float, extensible: bool, ext_persistent: float) -> float:
    """What the server holds from the pool once started (GiB per rank). A profiled pool fills the share (plus CUDA
    graphs where they sit outside it); 0.34's extensible pool holds what it measured; a pool pinned with
    --kv-cache-memory is not bounded by the share at all (gpu_worker.determine_available_memory returns the pinned
    bytes), so the server holds its weights, profile peak, non-torch memory, graphs and that pool, whatever the share."""
    if extensible:
        return ext_persistent + max(kv_gib, 0.0) + ov["activation_peak"]
    if spec.kv_cache_memory_bytes:
        return vllm_non_kv_gib(ov, weights_gib, 0.0 if spec.enforce_eager else ov["cudagraph"]) + kv_gib
    return requested + (ov["cudagraph"] if graphs_outside_share(spec, shape) else 0.0)


def _vllm(shape: ServeShape, spec: ServeSpec, m: Machine, weights_gib: float, tm: VllmTokenModel,
          stage_weights: list[float] | None = None, calibration: LogCalibration | None = None) -> _Plan:
    """vLLM's budget; ``tm`` is the token model plan_serve built once (its hybrid layout, drafter, MTP layers).
    ``stage_weights``: each pipeline stage's weights (GiB per rank) where tm sizes the stages one by one; the plan's
    weights, KV pool and tokens are then the limiting stage's (vllm_pp_stages)."""
    hy, drafter, mtp = tm.layout, tm.drafter, tm.mtp
    extensible = vllm_extensible_kv_cache(spec)
    util = spec.gpu_memory_utilization or vllm_default_share(spec.engine_version, extensible=extensible)
    tp = spec.tensor_parallel
    requested = math.ceil(m.total_gib * util * GIB) / GIB
    ov = vllm_overheads(shape, spec, m.total_gib, tp, m.gpu_name, m.unified)
    notes = []
    cal = calibration if calibration is not None and calibration.applied and calibration.delta_gib is not None else None
    if cal is not None:  # one named term: what the user's own log of this model here held beside the plan's terms
        ov["log_calibration"] = round(-cal.delta_gib, 3)  # type: ignore[operator]
        notes.append(f"calibrated from the start-up log {cal.source or ''} ({cal.log_launch or 'its launch line'}): it "
                     f"kept {cal.log_kv_gib:.2f} GiB of KV where the plan for that line gives {cal.log_plan_kv_gib:.2f} "
                     f"GiB, so {-cal.delta_gib:+.2f} GiB is charged here as log_calibration: it carries this machine's "
                     f"{', '.join(cal.carried)} as that start measured them (compile cache {cal.log_compile_state})")
        notes += [n for n in cal.notes if not n.startswith("delta =")]
    pooled = vllm_pooling(spec)
    if pooled:
        runner = "V2" if vllm_model_runner_v2(shape, spec) else "V1"
        kv_how = ("no KV cache (encoder-only attention)" if vllm_encoder_only(shape) else
                  "the KV pool is sized as for generation (gpu_worker.py determine_available_memory)")
        notes.append(f"pooling server ({pooled} adapter): no lm_head, no sampler in the profile run; {kv_how}; "
                     f"Model Runner {runner} (before 0.29 the default V2 runner is for generate launches only)")
    kv_other = None
    ext_free, ext_persistent = None, 0.0
    if extensible:
        # 0.34: graphs as captured (the estimate left the budget), then the measured pool
        ext_free = vllm_start_free(m, spec)[0]
        ext_persistent = weights_gib + ov["non_torch"] + (0.0 if spec.enforce_eager else ov["cudagraph"])
        kv_avail = vllm_extensible_kv(requested, ext_free, ext_persistent, ov["activation_peak"])
        notes.append(f"vLLM {spec.engine_version or '>= 0.34'} sizes the KV pool after warmup and CUDA-graph capture "
                     f"(the extensible KV cache, on by default since 0.34.0): gpu_memory_utilization {util:g}"
                     + (" (its default there)" if not spec.gpu_memory_utilization else "")
                     + " is a cap, the pool takes what is free less a margin and the activation peak"
                     + ("; on unified memory that is MemAvailable: vLLM's docs ask for a share below 1.0 on a DGX Spark"
                        if m.unified and not spec.gpu_memory_utilization else "")
                     + "; --no-enable-extensible-kv-cache or --kv-cache-memory restores the profiled budget")
    elif spec.kv_cache_memory_bytes:
        kv_avail = spec.kv_cache_memory_bytes / GIB
        notes.append("--kv-cache-memory sets the KV pool directly: no profiled budget")
    else:
        graphs = ov["cudagraph"] if graphs_in_budget(spec, shape) else 0.0
        kv_avail = requested - vllm_non_kv_gib(ov, weights_gib, graphs)
        if _version(spec) == OLD_ENGINE and tp * spec.pipeline_parallel > 1:
            # V0 (worker/model_runner.py: "Only perform sampling in the driver worker"): the other ranks profile
            # the forward pass alone and print a larger KV figure; the executor keeps the smallest rank's block
            # count (min over workers), the driver's
            other = round(requested - vllm_non_kv_gib(ov, weights_gib, graphs, ov["forward_gib"]), 2)
            if other != round(kv_avail, 2):
                kv_other = other
                notes.append(f"V0: only the driver worker samples; the other ranks profile {other:.2f} GiB of KV, "
                             f"the pool is the driver's {kv_avail:.2f} GiB (the smallest rank's)")
    for term, gib in vllm_fitted_terms(spec, m.unified).items():
        t = engine_value("vllm", "fitted_non_kv")[term]
        over = f", the median over {t['fitted_from'].split(' with ')[0]}" if t.get("fitted_from") else ""
        where = f"; it applies on {t['condition']}" if t.get("condition") else ""
        cv = f"; held out by source group: {t['cv']}" if t.get("cv") else ""
        notes.append(f"fitted term (not read from vLLM's source): {gib:g} GiB per rank of {term.replace('_', '-')} memory "
                     f"charged against the KV pool{over}{where} (engines.yaml vllm.fitted_non_kv{cv})")
    tokens = tm.tokens(kv_avail)
    stages: list[StageKV] = []
    if stage_weights and tm.stage_layers:
        stages = vllm_pp_stages(shape, spec, requested, stage_weights, ov, tm, graphs_in_budget(spec, shape))
        lim = next(s for s in stages if s.limiting)
        tokens = lim.blocks * int(engine_value("vllm", "block_size"))
        kv_avail, weights_gib = lim.kv_gib, stage_weights[lim.stage]
        notes.append(f"pipeline parallel: the stages hold {', '.join(str(s.layers) for s in stages)} layers "
                     "(vLLM's get_pp_indices), the first the embedding, the last the lm_head and the sampler's profile "
                     "peak; each sizes its KV from its own weights and layers ("
                     + ", ".join(f"{s.kv_gib:.2f} GiB = {s.blocks:,} blocks" for s in stages)
                     + f") and every worker keeps the smallest count, stage {lim.stage}'s: weights and KV pool here are "
                     "that stage's")
    if hy is not None:
        pads = hy.padding()
        notes.append(f"{shape.linear_layers} gated-DeltaNet layers keep a {hy.state_bytes / 2**20:.2f} MiB state per request "
                     f"and rank: vLLM sets the attention block to {hy.block_tokens} tokens so one page holds a state, "
                     f"{hy.attn_groups + hy.state_groups} groups of {hy.group_size} layers"
                     + (" (padding layers: " + ", ".join(f"{n}, {p:g} %" for n, p in pads) + ")" if pads else ""))
    if mtp:
        notes.append(f"MTP drafting ({spec.speculative_method}): the checkpoint's {mtp} MTP layer(s), "
                     f"{shape.mtp_layer_params * mtp / 1e9:.2f} B parameters counted in bf16, and their attention "
                     "layer(s) in the KV pool beside the target's")
    if drafter is not None:
        counted = drafter_kv_layers(shape, hy, drafter)
        size = (f"{drafter.stored_bytes / GIB:.2f} GiB of stored weights" if drafter.stored_bytes is not None
                else f"{drafter.params() / 1e9:.2f} B parameters")
        notes.append(f"{drafter.method} drafter {drafter.id} ({drafter.source}): {size} "
                     f"in the weights, {counted} of its {drafter.layers} attention layers in the KV pool"
                     + ("" if counted == drafter.layers else " (their page per token differs from the target's: left out)"))
    free, reads_available = vllm_start_free(m, spec)
    passes = None if free is None else free >= requested
    if extensible:  # request_memory skips its check with the extensible cache (v1/worker/utils.py, 0.34.0)
        passes = True
    after = None
    if passes is False and m.page_cache_gib is not None and not reads_available:
        after = free + m.page_cache_gib >= requested  # type: ignore[operator]
    largest = None if free is None else math.floor(free / m.total_gib * 100) / 100
    detail = (f"vLLM asks for gpu_memory_utilization x TOTAL = {util:g} x {m.total_gib:.2f} = {requested:.2f} GiB "
              "and refuses to start ('Free memory on device ... is less than desired GPU memory utilization') "
              "when CUDA's free memory is smaller")
    if reads_available:
        um = engine_value("vllm", "unified_memory")
        lo, hi = um["context_range_gib"]
        detail += (f"; on unified memory vLLM reads free memory as MemAvailable (vllm/utils/mem_utils.py "
                   f"MemorySnapshot), after its own container and CUDA context are up: {m.available_gib:.2f} GiB "
                   f"MemAvailable now - {um['context_gib']:g} GiB assumed = {free:.2f} GiB (public GB10 readings: "
                   f"{lo:g}-{hi:g} GiB under MemAvailable); the page cache does not refuse the start")
        if passes and not extensible and free - (hi - um["context_gib"]) < requested:
            notes.append(f"the start-up check passes by {free - requested:.2f} GiB: on kernels where vLLM's start "
                         f"costs {hi:g} GiB before its check (MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47) it fails; "
                         "vLLM prints the free memory it read ('Free memory on device ... on startup')")
    elif m.unified:
        detail += "; on a Spark CUDA's free memory is MemFree: the page cache counts as used"
    check = "free >= ceil(total x gpu_memory_utilization)"
    if extensible:
        check = "none: the extensible KV cache (vLLM >= 0.34) skips it"
        detail = (f"vLLM 0.34's request_memory does not compare free memory with gpu_memory_utilization x TOTAL = "
                  f"{util:g} x {m.total_gib:.2f} = {requested:.2f} GiB when the extensible KV cache is on: the budget is "
                  "only a cap, and the pool is sized from the memory free after warmup (engines.yaml "
                  "vllm.extensible_kv_cache)")
    start = StartCheck(check=check, requested_gib=round(requested, 2),
                       free_gib=free, passes=passes, passes_after_flush=after, largest_share_now=largest, detail=detail)
    ov["kv_before_speculative"] = round(max(0.0, kv_avail), 2)
    ov["mtp_counted"] = float(mtp)
    ov["drafter_counted"] = float(drafter is not None)
    unc = [] if spec.kv_cache_memory_bytes else vllm_uncertainties(shape, spec, ov, m.gpu_name, m.unified, weights_gib)
    if cal is not None:  # the log measured these terms: their range collapses to its value
        unc = [u for u in unc if u.term not in cal.carried]
    if shape.params_vision and vision_tower_loaded(spec):
        if "mm_encoder" in ov:
            notes.append(f"multimodal checkpoint: the vision tower's weights are counted, and the profile run's vision "
                         f"encoder pass on {int(ov['mm_items'])} dummy image(s) of {int(ov['mm_item_tokens'])} tokens "
                         f"({ov['mm_encoder']:.2f} GiB at its peak) sets the activation peak when it is the larger; "
                         "--limit-mm-per-prompt '{\"image\": 0, \"video\": 0}' (or --language-model-only) skips the "
                         "tower and that profile")
        elif not spec.skip_mm_profiling:
            notes.append("multimodal checkpoint: the vision tower's weights are counted; vLLM's profile run also encodes "
                         "its dummy images (the largest the processor allows) and keeps an encoder cache, which the plan "
                         "cannot size for this model (no image size in the catalog), so the KV pool may be smaller; "
                         "--limit-mm-per-prompt '{\"image\": 0, \"video\": 0}' (or --language-model-only) skips the "
                         "tower and that profile")
    if spec.speculative_method:
        notes.append(f"speculative decoding ({spec.speculative_method}): {engine_value('vllm', 'speculative')['note']}")
    shown = {k: v for k, v in ov.items() if k not in ("profiled_seqs", "cudagraphs_captured", "sampler_gib", "forward_gib",
                                                  "kv_before_speculative", "mm_items", "mm_item_tokens", "mm_lean_peak",
                                                  "mtp_counted", "drafter_counted")}
    if stages:  # the limiting stage's own terms (the uncertainties above keep the last stage's profile)
        lim = next(s for s in stages if s.limiting)
        shown.update(activation_peak=lim.activation_peak_gib, cudagraph=lim.cudagraph_gib)
    return _Plan(weights=weights_gib, overheads=shown, kv_available=round(kv_avail, 2), tokens=tokens,
                 footprint=vllm_footprint(requested, kv_avail, ov, spec, shape, weights_gib, extensible, ext_persistent),
                 start=start, notes=notes, uncertainties=unc, kv_other_ranks=kv_other, stages=stages)


def sglang_release(version: str | None) -> Release | None:
    """The SGLang release a spec names: a release number as everywhere (core/releases.py), or a month ("2025-08 image",
    "main of 2026-02-04") read as the newest release PyPI had by then (engines.yaml sglang.release_by_month); None = the
    newest read (engines.yaml sglang.newest_read)."""
    if not version:
        return None
    m = re.search(r"\b(20\d\d)-(\d\d)\b", version)
    if m:
        month = f"{m.group(1)}-{m.group(2)}"
        rows = [r for r in engine_value("sglang", "release_by_month") if str(r["month"]) <= month]
        return release(str(rows[-1]["release"])) if rows else OLD_ENGINE
    return release(version)


def sglang_default_fraction(spec: ServeSpec, gpu_mem_gib: float, *, mla: bool = False, multimodal: bool = False,
                            cuda_graph_max_bs: int | None = None) -> tuple[float, str]:
    """SGLang's own default --mem-fraction-static for this GPU and launch (server_args; engines.yaml sglang): round((gpu_mem
    - reserved) / gpu_mem, 3) with gpu_mem in MiB. Before 0.5.3 the reserve is a GiB constant per memory tier plus a
    share per rank; from 0.5.3 it is built from the chunked prefill size, the largest CUDA-graph batch, the ranks and
    (from 0.5.10) the piecewise prefill graphs. Returns (fraction, how it was computed)."""
    v = sglang_release(spec.engine_version)
    gpu_mib = gpu_mem_gib * 1024
    ranks = max(1, spec.tensor_parallel) * max(1, spec.pipeline_parallel)
    spec_extra = 0.0
    if spec.speculative_method:
        spec_extra = 6144.0 if spec.speculative_method.upper() == "STANDALONE" else 2048.0
    if not at_least(v, str(engine_value("sglang", "default_fraction_tiers_until"))):
        tier = next(t for t in engine_value("sglang", "default_fraction_tiers")
                    if t["below_gib"] is None or gpu_mib < t["below_gib"] * 1024)
        reserved = (float(tier["base"]) + float(tier["per_rank"]) * ranks) * 1024 + spec_extra
        frac = round((gpu_mib - reserved) / gpu_mib, 3)
        how = (f"SGLang < 0.5.3's default: ({gpu_mib:.0f} MiB - {reserved:.0f} MiB reserved for a "
               f"{tier['below_gib'] or 'large'}-GiB-tier GPU at {ranks} rank(s)) / {gpu_mib:.0f} MiB")
        if multimodal:
            frac *= float(engine_value("sglang", "tiers_multimodal_factor"))
            how += " x 0.90 (multimodal)"
        return frac, how
    f = engine_value("sglang", "reserve_formula")
    rows = [r for r in engine_value("sglang", "default_tiers_by_release") if at_least(v, str(r["since"]))]
    tiers = max(rows, key=lambda r: release(str(r["since"])))["tiers"]
    below, chunk, bs_small, bs_large = next(t for t in tiers if t[0] is None or gpu_mib < t[0] * 1024)
    chunk = spec.max_num_batched_tokens if spec.max_num_batched_tokens is not None else chunk  # 0 and -1: no chunking
    # --chunked-prefill-size <= 0 (no chunking): the activation reserve is sized from max_prefill_tokens instead (0.5.3
    # .. 0.5.10 server_args.py _handle_gpu_memory_settings; 0.5.23 arg_groups/memory_hook.py, overrides.py
    # pre_capture_activation_reserve_mb_of); before 0.5.3 the reserve did not depend on the chunk at all
    act_tokens = chunk if chunk > 0 else (spec.max_prefill_tokens or int(engine_value("sglang", "max_prefill_tokens")))
    bs = cuda_graph_max_bs or spec.cuda_graph_max_bs or (bs_small if spec.tensor_parallel < 4 else bs_large)
    reserved = (f["base_mib"] + f["activation_mib_per_token"] * max(act_tokens, f["min_activation_tokens"])
                + f["cuda_graph_mib_per_bs"] * bs + f["per_rank_mib"] * ranks)
    piecewise = 0.0
    if at_least(v, str(f["piecewise_since"])) and not spec.enforce_eager:
        sizes = [s for a, b, step in f["piecewise_sizes"] for s in range(a, (b or chunk) + 1, step) if s <= chunk]
        piecewise = float(f["piecewise_mla_mib"]) if mla else f["piecewise_mib_per_size"] * len(sizes)
    reserved += piecewise
    if gpu_mib > f["floor_above_gib"] * 1024:
        reserved = max(reserved, float(f["floor_mib"]))
    reserved += spec_extra
    frac = round((gpu_mib - reserved) / gpu_mib, 3)
    what = f"chunked prefill {chunk}" if chunk > 0 else f"unchunked prefill (max_prefill_tokens {act_tokens})"
    how = (f"SGLang's default: ({gpu_mib:.0f} MiB - {reserved:.0f} MiB reserved for {what}, CUDA graphs "
           f"to batch {bs}, {ranks} rank(s){', piecewise graphs' if piecewise else ''}) / {gpu_mib:.0f} MiB")
    return frac, how


def sglang_pre_load_free(m: Machine, spec: ServeSpec) -> tuple[float | None, str]:
    """What SGLang reads as free before loading the weights (pre_model_load_memory, GiB): its memory reading less its own
    CUDA context/NCCL (engines.yaml sglang.pre_load_context_gib). On unified memory (GB10) 0.5.9+ reads MemAvailable
    (props.is_integrated), earlier releases cudaMemGetInfo's free, which there counts the page cache as used."""
    um = engine_value("sglang", "unified_memory")
    reads = "CUDA free"
    free = m.free_gib
    if m.unified:
        if m.available_gib is not None and at_least(sglang_release(spec.engine_version), str(um["since"])):
            free, reads = m.available_gib, "MemAvailable"
        else:
            reads = "CUDA free (MemFree on unified memory)"
    if free is None:
        return None, reads
    ctx = engine_value("sglang", "pre_load_context_gib")["tp1" if spec.tensor_parallel <= 1 else "tp_multi"]
    return free - float(ctx), reads


def sglang_swa_cell(shape: ServeShape, spec: ServeSpec, kvb: float, tp: int = 1) -> tuple[float, float | None]:
    """SGLang's bytes per pool token (one max_total_num_tokens token) and the swa_full_tokens_ratio where it pools the
    model as hybrid SWA (else None: every attention layer keeps every token, sliding or not; Gemma 3 in every release)
    (engines.yaml sglang.hybrid_swa: configs/model_config.py is_hybrid_swa_model; pool_configurator.py
    HybridSWAPoolConfigurator): full layers x full bytes + ratio x sliding layers x sliding bytes."""
    per = kv_layer_bytes(shape, kvb, tp)
    full_cell = per * shape.attn_layers
    if not shape.sliding_layers or not shape.sliding_window or shape.mla_dim:
        return full_cell, None
    h = engine_value("sglang", "hybrid_swa")
    since = h["model_types"].get(shape.model_type)
    if since is None or not at_least(sglang_release(spec.engine_version), str(since)) or spec.disable_hybrid_swa_memory:
        return full_cell, None  # --disable-hybrid-swa-memory: one pool of full cells (model_config is_hybrid_swa)
    ratio = spec.swa_full_tokens_ratio or float(h["swa_full_tokens_ratio"])
    full_per = 2 * max(1, math.ceil(shape.full_kv_dim / max(1, tp))) * kvb if shape.full_kv_dim else per
    return full_per * (shape.attn_layers - shape.sliding_layers) + ratio * per * shape.sliding_layers, ratio


def sglang_mamba_state_bytes(shape: ServeShape, tp: int = 1) -> int:
    """mamba_cache_per_req (configs/mamba_utils.py): every gated-DeltaNet layer's conv state (conv_dim/tp, kernel-1)
    in bf16 and temporal state (v_heads/tp, v_dim, k_dim) in float32 (engines.yaml sglang.mamba); 0 without them."""
    if not shape.gdn or not shape.linear_layers:
        return 0
    c = engine_value("sglang", "mamba")
    nk, nv, dk, dv, ck = shape.gdn
    conv_dim = dk * nk * 2 + dv * nv
    tp = max(1, tp)
    return shape.linear_layers * ((conv_dim // tp) * (ck - 1) * int(c["conv_state_bytes"])
                                  + (nv // tp) * dv * dk * int(c["ssm_state_bytes"]))


def sglang_mamba_pool(shape: ServeShape, spec: ServeSpec, rest_gib: float) -> tuple[float, int, str, bool] | None:
    """The mamba state pool SGLang carves out of the rest before the KV tokens (engines.yaml sglang.mamba):
    (GiB, states, how, fixed). A fixed number of states (fixed True: the pool does not follow the memory) where
    --max-mamba-cache-size names it (every release), before 0.5.8 --max-running-requests or 512, from 0.5.8 with
    --disable-radix-cache --max-running-requests; else (0.5.8 on) rest x r/(1+r) (--mamba-full-memory-ratio r, 0.9)
    in whole states. None for a model without linear-attention layers."""
    per = sglang_mamba_state_bytes(shape, spec.tensor_parallel)
    if not per:
        return None
    c = engine_value("sglang", "mamba")
    ratio = at_least(sglang_release(spec.engine_version), str(c["ratio_since"]))
    if spec.max_mamba_cache_size is not None:
        states, fixed = spec.max_mamba_cache_size, True
        how = f"{states} states (--max-mamba-cache-size)"
    elif ratio and spec.disable_radix_cache and spec.max_num_seqs:
        states, fixed = spec.max_num_seqs, True
        how = f"{states} states (--disable-radix-cache with --max-running-requests)"
    elif ratio:
        r = spec.mamba_full_memory_ratio or float(c["mamba_full_memory_ratio"])
        states, fixed = int(max(rest_gib, 0.0) * r / (1 + r) * GIB // per), False
        how = f"mamba_full_memory_ratio {r:g}: {r:g}/(1 + {r:g}) of the {rest_gib:.2f} GiB left after the weights"
    else:
        states, fixed = spec.max_num_seqs or int(c["fixed_states_before"]), True
        how = (f"{states} states (--max-running-requests)" if spec.max_num_seqs else
               f"{states} states (max_mamba_cache_size default before {c['ratio_since']})")
    return states * per / GIB, states, f"{per / 2**20:.2f} MiB a request, {how}", fixed


def sglang_tower_skipped(spec: ServeSpec) -> bool:
    """Whether SGLang leaves the vision tower out of the loaded weights (engines.yaml sglang.vlm_fraction
    tower_skipped_since): --language-model-only from that release; --language-only never (0.5.10 builds and loads
    the tower under it: models/qwen3_vl.py Qwen3VLForConditionalGeneration.__init__ / load_weights)."""
    c = engine_value("sglang", "vlm_fraction")
    return spec.language_model_only and at_least(sglang_release(spec.engine_version), str(c["tower_skipped_since"]))


def sglang_vlm_factor(shape: ServeShape, spec: ServeSpec) -> tuple[float, str] | None:
    """The factor SGLang applies to its DEFAULT mem_fraction_static for a multimodal model from 0.5.3
    (adjust_mem_fraction_for_vlm; engines.yaml sglang.vlm_fraction); None where it does not apply."""
    c = engine_value("sglang", "vlm_fraction")
    v = sglang_release(spec.engine_version)
    if not shape.params_vision or not at_least(v, str(c["since"])):
        return None
    if (spec.language_model_only or spec.language_only) and at_least(v, str(c["language_only_since"])):
        return None  # adjust_mem_fraction_for_vlm is skipped under --language-only / --language-model-only
    layers = int(c["baseline_layers"])  # a Qwen-VL-style config names depth: SGLang reads num_hidden_layers' default
    hidden = shape.vision.hidden if shape.vision is not None else int(c["baseline_hidden"])
    ratio = layers * hidden ** 2 / (c["baseline_layers"] * c["baseline_hidden"] ** 2)
    lo, hi = c["clamp"]
    f = float(c["base"]) * max(float(lo), min(float(hi), 1.0 - float(c["sensitivity"]) * (ratio - 1.0)))
    return f, (f"x {f:.4f} for the vision tower (adjust_mem_fraction_for_vlm: {c['base']:g} x (1 - "
               f"{c['sensitivity']:g} x ({layers} x {hidden}^2 / ({c['baseline_layers']} x {c['baseline_hidden']}^2) - 1)))")


def _sglang(shape: ServeShape, spec: ServeSpec, m: Machine, weights_gib: float, kvb: float) -> _Plan:
    """SGLang (model_runner / kv_cache_configurator): the pool is the memory free after the weights less
    pre_model_load_memory x (1 - mem_fraction_static), where pre_model_load_memory is what it read as free before
    loading, NOT the device total: so rest = pre x mem_fraction_static - weights (engines.yaml sglang)."""
    notes: list[str] = []
    if spec.mem_fraction_static:
        msf = spec.mem_fraction_static
    else:
        msf, how = sglang_default_fraction(spec, m.total_gib, mla=bool(shape.mla_dim), multimodal=shape.params_vision > 0)
        vlm = sglang_vlm_factor(shape, spec)
        if vlm is not None:
            msf, how = msf * vlm[0], f"{how} = {msf:g}, {vlm[1]}"
        notes.append(f"--mem-fraction-static not named: {how} = {msf:g}")
    tp = spec.tensor_parallel
    pre, reads = sglang_pre_load_free(m, spec)
    known_free = pre is not None
    if pre is None:
        pre = m.total_gib - float(engine_value("sglang", "pre_load_context_gib")["tp1" if tp <= 1 else "tp_multi"])
    after_weights = pre - weights_gib
    slack = pre * (1 - msf)
    rest = after_weights - slack
    cell, swa_ratio = sglang_swa_cell(shape, spec, kvb, tp)
    if shape.sliding_layers and shape.sliding_window and not shape.mla_dim:
        notes.append(f"sliding-window layers: SGLang pools them as hybrid SWA (a full pool and an SWA pool of "
                     f"swa_full_tokens_ratio {swa_ratio:g} x its tokens; {cell:,.0f} bytes a token)" if swa_ratio else
                     f"sliding-window layers: SGLang pools {shape.model_type or shape.name} as full attention (not a "
                     "hybrid SWA model in this release): every layer keeps every token of a request")
    page = int(engine_value("sglang", "default_page_size"))
    mamba = sglang_mamba_pool(shape, spec, rest)
    mamba_gib = 0.0
    fixed_gib = 0.0  # a mamba pool of a fixed number of states: the start-up ask carries it
    if mamba is not None:
        mamba_gib = mamba[0]
        fixed_gib = mamba_gib if mamba[3] else 0.0
        notes.append(f"{shape.linear_layers} gated-DeltaNet layers: SGLang gives the mamba state pool {mamba_gib:.2f} GiB "
                     f"({mamba[1]:,} states; {mamba[2]}) before the KV tokens")
        rest -= mamba_gib

    def _tokens(left_gib: float) -> int:
        # max_total_num_tokens = int(rest x 2^30 // cell), floored to the page; <= 0 raises 'Not enough memory'
        return int(left_gib * GIB // cell) // page * page if left_gib > 0 else 0

    tokens = _tokens(rest)
    passes = tokens > 0 if known_free else None
    after = None  # a flush helps only where SGLang reads CUDA's free (MemFree on GB10 before 0.5.9)
    if passes is False and m.unified and reads.startswith("CUDA free") and m.page_cache_gib is not None:
        flushed = pre + m.page_cache_gib
        rest_after = flushed * msf - weights_gib
        mamba_after = sglang_mamba_pool(shape, spec, rest_after)
        mamba_gib_after = mamba_after[0] if mamba_after is not None else 0.0
        after = _tokens(rest_after - mamba_gib_after) > 0  # the same check, the mamba pool included
        if after:  # the pool it gets once started, after the flush the plan tells it to run first
            notes.append(f"the KV pool shown is the one SGLang sizes after the page cache is dropped "
                         f"({pre:.2f} + {m.page_cache_gib:.2f} GiB free before loading); it will not start now")
            slack = flushed * (1 - msf)
            mamba_gib = mamba_gib_after
            rest = rest_after - mamba_gib
            tokens = _tokens(rest)
    if spec.kv_max_tokens and tokens > spec.kv_max_tokens:
        # model_runner: max_total_num_tokens = min(profiled, --max-total-tokens); the pool is allocated for that many
        notes.append(f"--max-total-tokens {spec.kv_max_tokens} caps the pool below the {tokens:,} tokens "
                     f"mem_fraction_static {msf:g} leaves room for")
        tokens = spec.kv_max_tokens // page * page
        rest = tokens * cell / GIB
    # the check (kv_cache_configurator / model_runner: max_total_num_tokens > 0) is pre x msf > weights (+ a fixed mamba
    # pool): the free memory it must read before loading is (weights + that pool) / msf (what a job started first must
    # leave free); a pool that follows the memory (mamba_full_memory_ratio) takes a share of what is left, never all
    ask = (weights_gib + fixed_gib) / msf
    start = StartCheck(check="free before loading x mem_fraction_static - weights" + (" - mamba pool" if fixed_gib else "")
                       + " > 0",
                       requested_gib=round(ask, 2), free_gib=round(pre, 2) if known_free else None,
                       passes=passes, passes_after_flush=after,
                       detail=f"SGLang reads {pre:.2f} GiB free before loading ({reads}, less its own context) and keeps "
                              f"(1 - {msf:g}) of that, {slack:.2f} GiB, for activations and CUDA graphs; the rest of the "
                              "memory free after the weights becomes the KV pool (not a share of the device total); it "
                              f"starts when {msf:g} x the free memory exceeds the weights"
                              + (f" and the {fixed_gib:.2f} GiB mamba state pool" if fixed_gib else "")
                              + f", i.e. with at least {ask:.2f} GiB free"
                              + ("; on a Spark this release reads CUDA's free memory, MemFree: the page cache counts "
                                 "as used (0.5.9 reads MemAvailable)" if m.unified and reads.startswith("CUDA free")
                                 else ""))
    overheads = {"reserved_for_activations": round(slack, 2)}
    if mamba is not None:
        overheads["mamba_state_pool"] = round(mamba_gib, 2)
    return _Plan(weights=weights_gib, overheads=overheads,
                 kv_available=round(rest, 2), tokens=tokens, footprint=weights_gib + max(rest, 0.0) + mamba_gib + 0.5,
                 start=start, notes=notes, cell_bytes=cell)


def _trtllm(shape: ServeShape, spec: ServeSpec, m: Machine, weights_gib: float, kvb: float) -> _Plan:
    """TensorRT-LLM: the KV pool is free_gpu_memory_fraction of the memory FREE after the weights and
    the engine's activation/runtime buffers (cudaMemGetInfo, so on a Spark the page cache counts as
    used), capped by KvCacheConfig.max_tokens, in blocks of tokens_per_block."""
    frac = spec.free_gpu_memory_fraction or engine_value("trtllm", "default_free_gpu_memory_fraction")
    tp = spec.tensor_parallel
    block = int(engine_value("trtllm", "tokens_per_block"))
    tokens_built = spec.max_num_batched_tokens or int(engine_value("trtllm", "default_max_num_tokens"))
    act = tokens_built * activation_bytes_per_token(shape, tp) / GIB
    runtime = float(engine_value("trtllm", "runtime_buffers_gib"))
    free = m.free_gib if m.free_gib is not None else m.total_gib
    available = free - weights_gib - act - runtime
    kv = frac * available
    notes = []
    per_block = kv_layer_bytes(shape, kvb, tp) * shape.attn_layers * block
    if spec.kv_max_tokens:
        cap = math.ceil(spec.kv_max_tokens / block) * per_block / GIB
        if cap < kv:
            notes.append(f"KvCacheConfig.max_tokens {spec.kv_max_tokens} caps the pool below "
                         f"free_gpu_memory_fraction {frac:g} ({kv:.2f} GiB): the smaller one is used")
            kv = cap
    tokens = int(kv * GIB // per_block) * block if kv > 0 else 0
    passes = None if m.free_gib is None else available > 0
    detail = (f"TensorRT-LLM gives the KV cache {frac:g} x the memory free after loading "
              f"({free:.2f} free - {weights_gib:.2f} weights - {act:.2f} activations - {runtime:g} runtime buffers "
              f"= {available:.2f} GiB)")
    if m.unified:
        detail += "; on a Spark 'free' is MemFree: the page cache counts as used, drop it first for a bigger pool"
    start = StartCheck(check="memory free after loading > 0 (the KV pool is a share of it)",
                       requested_gib=round(weights_gib + act + runtime, 2), free_gib=m.free_gib, passes=passes,
                       detail=detail)
    return _Plan(weights=weights_gib, overheads={"activation_peak": round(act, 3), "runtime_buffers": runtime},
                 kv_available=round(kv, 2), tokens=tokens, footprint=weights_gib + act + runtime + max(kv, 0.0),
                 start=start, notes=notes)


def engine_max_len(shape: ServeShape, spec: ServeSpec) -> int | None:
    """The longest --max-model-len / --context-length vLLM or SGLang accepts for this model without an override
    (engines.yaml vllm.max_len_check: the config's length, scaled by its rope_scaling as vLLM scales it); None where
    the length is unknown or the line overrides the check (the env var, --hf-overrides and the like)."""
    c = engine_value("vllm", "max_len_check")
    env = c["override_env"].get(spec.engine)
    if env is None or spec.env.get(env, "").lower() in ("1", "true", "yes"):
        return None
    # --hf-overrides, --hf_overrides=..., --hf-overrides.rope_scaling.factor 4: vLLM's parser reads all of them
    written = {_norm_flag(re.split(r"[=.\s]", i, maxsplit=1)[0]) for i in spec.ignored if i.startswith("--")}
    if written & set(c["override_flags"]):
        return None
    cfg = _own_config(spec.model)
    if cfg is None:  # no config of the model's own (a Hub read, a copied shape): not judged, never a guess
        return None
    length = cfg.get("max_position_embeddings")
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not isinstance(length, int) or length <= 0:
        return None
    if isinstance(rope, dict) and not any(t in str(cfg.get("model_type", "")) for t in c["already_scaled_model_types"]):
        kind = rope.get("rope_type") or rope.get("type")
        if kind and kind not in c["unscaled_rope_types"] and isinstance(rope.get("factor"), int | float):
            if kind == "yarn" and isinstance(rope.get("original_max_position_embeddings"), int):
                length = rope["original_max_position_embeddings"]
            length = int(length * rope["factor"])
    return length


def _own_config(model: str | None) -> dict[str, Any] | None:
    """The model's own config.json as a catalog keeps it (the training catalog, or a serving entry with a config of
    its own, not one that borrows another model's shape); None otherwise."""
    if not model:
        return None
    from sparkops.planner import architecture

    cfg = getattr(architecture._lookup(model), "config", None)
    if isinstance(cfg, dict):
        return cfg
    e = serving_entry(model)
    return e.config if e is not None and isinstance(e.config, dict) and not e.same_as else None


class GgufSlots(NamedTuple):
    """How llama.cpp / Ollama lay out the KV cells of one launch line."""
    cells: int  # KV cells of a full-attention layer, all slots together (-c; Ollama num_ctx x parallel)
    swa_cells: int  # cells a sliding-window layer keeps, all streams together
    slots: int  # sequences served at once (-np; OLLAMA_NUM_PARALLEL)
    slot_cells: int  # the longest request one slot holds: all cells where the slots share one stream


def llama_server_slots(spec: ServeSpec) -> tuple[int, bool, bool]:
    """(slots, one shared stream, a slot may take every cell) as llama-server resolves -np / -kvu at this build
    (engines.yaml llama.cpp.slots): no -np is "auto" (4 slots, unified) since about b7000; an explicit -np keeps one
    stream per slot, each of -c/np cells, unless -kvu; before the split streams (about b5900) every slot shared one
    stream but the server still cut each to -c/np."""
    c = engine_value("llama.cpp", "slots")
    build = llama_cpp_build(spec)
    auto = not spec.parallel and (build is None or build >= int(c["auto_since_build"]))
    streams = build is None or build >= int(c["streams_since_build"])
    slots = spec.parallel or (int(c["auto_slots"]) if auto else int(engine_value("llama.cpp", "default_parallel")))
    unified = spec.kv_unified if spec.kv_unified is not None else auto
    if not streams:  # one stream for all; the server's slot limit was -c/np
        return slots, True, slots == 1
    return slots, unified, unified or slots == 1


def _gguf_kv_cells(shape: ServeShape, spec: ServeSpec) -> GgufSlots:
    """The KV cells of a llama.cpp / Ollama launch line. Ollama starts its runner with --ctx-size num_ctx x parallel
    and --parallel given (one stream per sequence where the runner has split streams, each num_ctx long)."""
    ub = spec.ubatch or int(engine_value("llama.cpp", "default_ubatch"))
    if spec.engine == "ollama":
        num_ctx = spec.ctx_size or int(engine_value("ollama", "default_num_ctx"))
        seqs = spec.parallel or int(engine_value("ollama", "default_num_parallel"))
        cells, one_stream, slot_cells = num_ctx * seqs, True, num_ctx
    else:
        cells = spec.ctx_size or (shape.context_train or int(engine_value("llama.cpp", "default_ctx")))
        seqs, one_stream, whole = llama_server_slots(spec)
        slot_cells = cells if whole else cells // seqs
        if slot_cells <= 0:  # llama-context.cpp throws "n_ctx_seq == 0"
            raise ServeInputError(f"-np {seqs} slots share -c {cells} cells: each gets none and llama.cpp refuses to "
                                  "start (n_ctx_seq == 0); give -c at least -np cells (or -kvu)")
    swa = cells
    if shape.sliding_layers and shape.sliding_window and not spec.swa_full:
        keep = ollama_swa_memory(shape, spec)
        if keep is not None:  # Ollama's own engine: maxSequences x memory + maxBatch, or all when memory > context
            mem, batch = keep
            swa = cells if mem > cells // max(1, seqs) else -(-(mem * seqs + batch) // 256) * 256
        elif one_stream:  # llama-kv-cache-iswa.cpp: GGML_PAD(min(size, n_swa x n_seq_max + n_ubatch), 256)
            swa = min(cells, -(-(shape.sliding_window * seqs + ub) // 256) * 256)
        else:  # one stream per slot, each GGML_PAD(min(-c/np, n_swa + n_ubatch), 256)
            swa = seqs * min(slot_cells, -(-(shape.sliding_window + ub) // 256) * 256)
    return GgufSlots(cells, swa, seqs, slot_cells)


def ollama_swa_memory(shape: ServeShape, spec: ServeSpec) -> tuple[int, int] | None:
    """(positions kept per sequence, batch) on the sliding-window layers when Ollama's own engine keeps more than
    the window for this model (engines.yaml ollama.engine_swa_memory: gpt-oss's 4096 from 0.11.0 until llama-server
    replaced the engine in 0.30.0); None when the window rules (llama.cpp, other models, other releases)."""
    if spec.engine != "ollama":
        return None
    d = engine_value("ollama", "engine_swa_memory")
    v = _version(spec)
    if not at_least(v, d["since"]) or at_least(v, d["until"]):
        return None
    family = re.sub(r"[^a-z0-9]", "", f"{shape.id} {shape.name}".lower())
    mem = next((int(n) for arch, n in d["cells"].items() if arch in family), None)
    if mem is None or mem < int(shape.sliding_window or 0):
        return None
    return mem, int(d["batch"])


def _gguf(shape: ServeShape, spec: ServeSpec, m: Machine, weights_gib: float, kvb: float) -> _Plan:
    slots = _gguf_kv_cells(shape, spec)
    cells, swa, seqs, slot_cells = slots
    notes = []
    if spec.engine == "llama.cpp" and seqs > 1:
        how = "no -np: llama-server's auto slots" if not spec.parallel else f"-np {seqs}"
        if slot_cells == cells:
            notes.append(f"{seqs} slots ({how}) share one unified KV cache of {cells:,} cells: one request may take "
                         "them all, several long ones wait for room (engines.yaml llama.cpp.slots)")
        else:
            notes.append(f"{seqs} slots ({how}, no -kvu) each hold {slot_cells:,} of the {cells:,} cells: no request "
                         "runs longer; -kvu lets one request take them all (engines.yaml llama.cpp.slots)")
    per = kv_layer_bytes(shape, kvb)
    full = shape.attn_layers - shape.sliding_layers
    kv = (full * cells + shape.sliding_layers * swa) * per / GIB
    compute = float(engine_value("llama.cpp", "compute_buffer_gib") if spec.engine == "llama.cpp"
                    else engine_value("ollama", "graph_gib"))
    need = weights_gib + kv + compute
    free = m.free_gib if not m.unified else (m.available_gib if m.available_gib is not None else m.free_gib)
    passes = None if free is None else need <= free
    if spec.engine == "ollama":
        check = "weights + KV + graph <= free GPU memory (else Ollama leaves layers on the CPU)"
    else:
        check = "weights + KV + compute buffer <= free memory (else cudaMalloc fails at load)"
    start = StartCheck(check=check, requested_gib=round(need, 2), free_gib=free, passes=passes,
                       detail=f"{cells} KV cells ({seqs} sequence{'s' if seqs != 1 else ''}), "
                              f"{shape.sliding_layers} sliding-window layers at {swa} cells")
    return _Plan(weights=weights_gib, overheads={"compute_buffer": compute}, kv_available=round(kv, 3),
                 tokens=cells, footprint=need, start=start, notes=notes, gguf=slots)


# ------------------------------------------------------------------ the plan


def plan_serve(shape: ServeShape, spec: ServeSpec, machine: Machine, *, fit_margin: float = 0.10,
               beside: list[BesideJob] | None = None, running: list[BesideJob] | None = None,
               drafter: DrafterShape | None = _UNSET, calibration: LogCalibration | None = None) -> ServePlanResult:
    """Judge one server against one machine, beside other planned jobs on the same pool. Pure. ``drafter``: a
    speculative drafter resolved by the caller (e.g. from the Hub); by default the catalog's, when it names one."""
    beside = list(beside or [])
    kbe = engines_knowledge()
    fmt = weight_format(shape, spec)
    pooled = vllm_pooling(spec)
    encoder = vllm_encoder_only(shape) if spec.engine == "vllm" else None
    if encoder and not pooled:
        # --runner auto pools an encoder-only model by itself (its registry class is a pooling model; the "Model"
        # suffix is (pooling, embed), "ForSequenceClassification" (pooling, classify): config/model.py; a catalog
        # entry's pool_task says which its architecture is)
        pooled = spec.convert or shape.pool_task or "embed"
    st_note = None
    if spec.engine == "vllm" and not pooled and not encoder and shape.pool_task:
        # a decoder published for pooling (Qwen3-Reranker / -Embedding: *ForCausalLM): --runner auto pools it only when
        # its repository has a Sentence Transformers modules.json (config/model.py _get_default_runner_type:
        # get_pooling_config first), then converts it to embed (_get_default_convert_type: no pooling suffix matches)
        if shape.st_modules:
            pooled = spec.convert or "embed"
        else:
            st_note = (f"{shape.name} is published as a{'n embedding model' if shape.pool_task == 'embed' else ' reranker'}"
                       " but " + ("its repository has no Sentence Transformers modules.json"
                                  if shape.st_modules is False else
                                  "whether its repository has a Sentence Transformers modules.json is not known here")
                       + ": vLLM's --runner auto pools a *ForCausalLM only when it has one, so this plan is of a "
                       "generation server (a KV cache sized as for chat); pass --runner pooling (and --convert "
                       f"{'embed' if shape.pool_task == 'embed' else 'classify'}) to serve it for {shape.pool_task}")
    typed = spec  # the flags as written: what vllm_pooling_flag_note judges
    auto_note = None
    if pooled and not vllm_pooling(spec):
        # --runner auto chose pooling (an encoder-only model, or a checkpoint with a modules.json): every later step
        # (the sampler, the runner, the profile) reads the same decision from the spec, not the flags as written
        spec = spec.model_copy(update={"runner": "pooling", "convert": pooled})
        auto_note = (f"vLLM's --runner auto serves {shape.name} as a pooling model ({pooled}): "
                     + ("an encoder-only architecture is a pooling model in vLLM's registry" if encoder else
                        "its repository has a Sentence Transformers modules.json") + " (config/model.py "
                     "_get_default_runner_type)")
    # a pooling adapter never builds the lm_head (engines.yaml vllm.pooling.drops_lm_head): an untied one is not loaded
    no_head = bool(pooled and shape.params_lm_head and engine_value("vllm", "pooling")["drops_lm_head"])
    wshape = replace(shape, params_total=shape.params_total - shape.params_lm_head, params_lm_head=0) if no_head else shape
    wbytes, wdetail = weights_bytes(wshape, fmt, spec.engine, max(1, spec.tensor_parallel))
    if no_head:
        wdetail += (f"; lm_head not loaded ({shape.params_lm_head / 1e9:.2f} B parameters, untied): the {pooled} pooling "
                    "adapter builds none (vLLM adapters.py _create_pooling_model_cls)")
    base_bytes = wbytes  # the checkpoint alone, before the tower, drafter, MTP and LoRA terms
    if shape.params_vision and spec.engine == "vllm":
        if vision_tower_loaded(spec):
            wbytes += shape.params_vision * 2
            wdetail += (f"; vision tower {shape.params_vision / 1e9:.2f} B parameters in bf16 (its vision_config; "
                        "vLLM loads it unless every image/video limit is 0)")
        else:
            wdetail += "; vision tower not loaded (--limit-mm-per-prompt 0 for image and video / --language-model-only)"
    elif shape.params_vision and spec.engine == "sglang" and not sglang_tower_skipped(spec):
        wbytes += shape.params_vision * 2  # SGLang builds the multimodal model whole: the tower loads with it
        wdetail += (f"; vision tower {shape.params_vision / 1e9:.2f} B parameters in bf16 (its vision_config; SGLang "
                    "loads it with the language model" + (" even under --language-only)" if spec.language_only else ")"))
    elif shape.params_vision and spec.engine == "sglang":
        wdetail += "; vision tower not loaded (--language-model-only)"
    if drafter is _UNSET:
        drafter = drafter_shape(spec) if spec.speculative_method else None
    mtp = mtp_drafting(spec, shape)
    if mtp:
        wbytes += shape.mtp_layer_params * mtp * 2
        wdetail += (f"; {mtp} MTP layer(s), {shape.mtp_layer_params * mtp / 1e9:.2f} B parameters in bf16 "
                    "(the target's config; embeddings and lm_head shared)")
    if drafter is not None:
        wbytes += drafter.weight_bytes()
        shared = ("its own embeddings and lm_head (a whole model)" if drafter.total_params is not None
                  else "embeddings and lm_head shared with the target")
        wdetail += (f"; {drafter.method} drafter {drafter.id}: {drafter.params() / 1e9:.2f} B parameters in bf16 "
                    f"(its config.json; {shared})" if drafter.stored_bytes is None else
                    f"; {drafter.method} drafter {drafter.id}: {drafter.stored_bytes / GIB:.2f} GiB, the exact bytes of "
                    "its safetensors headers (read from the Hub)")
    ranks = max(1, spec.tensor_parallel) * max(1, spec.pipeline_parallel)
    weights_gib = wbytes / GIB / ranks
    if spec.engine == "vllm" and spec.enable_lora:
        lora = lora_slot_bytes(shape, spec) / GIB / max(1, spec.pipeline_parallel)
        weights_gib += lora
        c = engine_value("vllm", "lora")
        wdetail += (f"; LoRA slots: {spec.max_loras or c['default_max_loras']} x rank "
                    f"{spec.max_lora_rank or c['default_max_lora_rank']} for every attention, MLP and expert layer, "
                    f"{lora:.2f} GiB per GPU in the model dtype (vLLM builds them at load, whatever the adapters target)")
    if fmt.startswith("gguf:") and spec.engine == "llama.cpp" and spec.n_gpu_layers is not None \
            and spec.n_gpu_layers < shape.layers:
        wdetail += f"; -ngl {spec.n_gpu_layers} of {shape.layers} layers on the GPU (same pool on a Spark)"
    kvb = kv_dtype_bytes(spec, shape)
    tp = spec.tensor_parallel if spec.engine in ("vllm", "sglang", "trtllm") else 1
    # vLLM's token model (hybrid layout, drafter, MTP layers), built once per plan and passed on
    tm = None
    if spec.engine == "vllm":
        batched, _seqs = vllm_profiled_batch(shape, spec, machine.total_gib, machine.gpu_name, machine.unified)
        tm = vllm_token_model(shape, spec, drafter, int(batched))
    hy = tm.layout if tm is not None else None
    if tm is not None:
        stage_w = None
        if tm.stage_layers and not encoder:  # an encoder-only model has no KV pool for its stages to split
            stage_w = [weights_gib + d for d in vllm_stage_weight_shifts(wshape, fmt, base_bytes, tm.stage_layers,
                                                                          max(1, spec.tensor_parallel),
                                                                          lm_head=not pooled)]
        p = _vllm(shape, spec, machine, weights_gib, tm, stage_w, calibration)
    elif spec.engine == "sglang":
        p = _sglang(shape, spec, machine, weights_gib, kvb)
    elif spec.engine == "trtllm":
        p = _trtllm(shape, spec, machine, weights_gib, kvb)
    else:
        p = _gguf(shape, spec, machine, weights_gib, kvb)

    kv_none = None
    if encoder:
        # no KV cache (engines.yaml vllm.pooling.encoder_only): no pool, no tokens; the server holds its weights, one
        # forward's activations and its CUDA graphs; the share sizes nothing and only gates the start-up check
        kv_none = (f"encoder-only model ({shape.model_type}, vLLM's {encoder} family): its attention keeps no KV cache, "
                   "so vLLM profiles no pool and allocates none (EngineCore._initialize_kv_caches: has_kv_cache False)")
        held = p.weights + sum(p.overheads.get(k, 0.0) for k in ("activation_peak", "non_torch", "cudagraph"))
        p = replace(p, kv_available=None, tokens=None, footprint=held, uncertainties=[], stages=[],
                    notes=[*p.notes, "no KV cache (encoder-only): --gpu-memory-utilization sizes nothing here, it only "
                           "gates the start-up free-memory check (and caps the server)",
                           f"profiled tokens: {p.overheads.get('profiled_tokens', 0):,.0f} as for a decoder; vLLM turns "
                           "chunked prefill off for encoder-only (MEAN/CLS) pooling, so its profile batch may be larger: "
                           "not modelled (engines.yaml vllm.pooling)"])
    d_layers = drafter_kv_layers(shape, hy, drafter)
    d_per = drafter.kv_layer_bytes(kvb, tp) if drafter is not None else 0.0
    per_tok = kv_bytes_per_token(shape, kvb, tp) + d_per * d_layers + kv_layer_bytes(shape, kvb, tp) * mtp
    mml = spec.max_model_len if spec.engine in ("vllm", "sglang", "trtllm") else None
    gguf = p.gguf  # llama.cpp / Ollama: the layout _gguf read
    if gguf is not None:
        # the longest request a slot holds (llama.cpp: all -c cells with a unified cache, else -c/np; Ollama num_ctx)
        mml = gguf.slot_cells
    mml = mml or shape.context_train

    def _req(length: int) -> float:
        if hy is not None:
            return hy.request_bytes(length)
        if spec.engine == "sglang" and p.cell_bytes:
            # SGLang's own layout: every request token takes one pool token (full attention: every layer; hybrid SWA:
            # a full token and ratio x an SWA token), so request, concurrency and longest request follow the pool
            return (p.cell_bytes + d_per * d_layers) * length
        return request_kv_bytes(shape, length, kvb, tp) + (d_per * d_layers + kv_layer_bytes(shape, kvb, tp) * mtp) * length

    req = _req(mml) / GIB if mml and not kv_none else None
    pool = p.kv_available
    conc = round(pool / req, 2) if (req and pool is not None and pool > 0) else (0.0 if req else None)
    fits_len = None if req is None or pool is None else pool >= req
    longest = None if pool is None or req is None else 0  # no pool: no request of any length (0, not unknown)
    if pool is not None and pool > 0:
        lo, hi = 0, 1 << 24
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _req(mid) / GIB <= pool:
                lo = mid
            else:
                hi = mid - 1
        longest = lo
        if spec.engine == "vllm" and p.tokens is not None and hy is None and not shape.sliding_layers:
            longest = min(longest, int(p.tokens))  # the engine's whole blocks: no request longer than its cache
    if spec.engine == "sglang" and p.tokens is not None and pool is not None and pool > 0:
        # SGLang's own figure (managers/tp_worker.py max_req_len = min(context_len - 1, max_total_num_tokens - 1)):
        # the pool's tokens less one, the same figure its cap note names
        longest = max(0, p.tokens - 1)
    len_note = None
    if spec.engine == "vllm" and spec.max_model_len_auto and req is not None and longest is not None:
        # --max-model-len auto / -1: vLLM takes the model's length where the pool holds one request of it, else the
        # longest it holds (v1/core/kv_cache_utils.py _auto_fit_max_model_len, a binary search on the KV budget)
        if fits_len is False:
            len_note = (f"--max-model-len auto: the model's {mml:,} tokens do not fit the pool, so vLLM cuts the length "
                         f"to about {longest:,} tokens ('Auto-fit max_model_len: reduced from {mml} to ...')")
            mml = longest
            req = _req(mml) / GIB
            conc, fits_len = (round(pool / req, 2) if req and pool else None), True
        else:
            len_note = f"--max-model-len auto: the model's full {mml:,} tokens fit the pool, vLLM keeps them"
    if gguf is not None and pool is not None:
        # llama.cpp / Ollama allocate the cells the flags ask for: a slot always holds a request of its own length,
        # the slots at that length are what the engine serves at once, and no slot runs past it (comparing bytes
        # here would only judge rounding, and on sliding-window layers count cells the slots share)
        conc, fits_len, longest = float(gguf.cells // gguf.slot_cells), True, gguf.slot_cells
    rng = None
    if p.uncertainties and pool is not None:
        # a pool cannot be negative: at 0 the engine refuses to start (no memory left for KV blocks)
        rng = [max(0.0, round(pool + sum(u.kv_change_gib[0] for u in p.uncertainties), 2)),
               max(0.0, round(pool + sum(u.kv_change_gib[1] for u in p.uncertainties), 2))]
    if spec.engine == "sglang" and p.cell_bytes:
        per_tok = p.cell_bytes + d_per * d_layers  # SGLang's pool token (sglang_swa_cell)
    kv = KVInfo(dtype_bytes=kvb, bytes_per_token=round(per_tok, 1), available_gib=pool, tokens=p.tokens,
                available_range_gib=rng, other_ranks_gib=p.kv_other_ranks,
                request_gib=None if req is None else round(req, 3), max_concurrency=conc, fits_max_model_len=fits_len,
                max_model_len_fitting=longest, sliding_layers=shape.sliding_layers, mla=bool(shape.mla_dim),
                stages=p.stages, none=kv_none)

    # one budget with preflight's G6/G3 (checks/pool_budget.py): the other planned jobs beside this
    # server's footprint, against what the pool can give now less the OS reserve
    footprint = p.footprint
    beside_lines = [pool_budget.PoolLine(b.name, b.gib, b.how) for b in beside]
    mine = [pool_budget.PoolLine(spec.model or spec.engine, footprint, "footprint")]
    pb = pool_budget.judge(machine.available_gib if machine.available_gib is not None else machine.total_gib,
                           beside_lines, mine, os_reserve_gib=machine.os_reserve_gib, fit_margin=fit_margin)
    by_reservations = False
    if running:
        # G6's view of the same pool: the running jobs by their reservation (a capped server's cap x total, which it
        # grows into whatever it holds now) on the whole pool; the stricter of the two budgets is the plan's, so the
        # plan and preflight's G3/G6 agree (one budget, checks/pool_budget.py)
        pr = pool_budget.judge(machine.total_gib, [pool_budget.PoolLine(r.name, r.gib, r.how) for r in running]
                               + beside_lines, mine, os_reserve_gib=machine.os_reserve_gib, fit_margin=fit_margin)
        if pr.left_gib is not None and pb.left_gib is not None and pr.left_gib < pb.left_gib:
            pb, by_reservations = pr, True
    budget, headroom, others = pb.usable_gib, pb.left_gib, pb.reserved_gib
    beside_gib = sum(b.gib for b in beside)  # the planned jobs beside it (the running ones are in free memory already)
    assert budget is not None and headroom is not None
    sugg: list[str] = []
    notes = list(p.notes)
    if st_note:
        notes.append(st_note)
    if auto_note:
        notes.append(auto_note)
    if len_note:
        notes.append(len_note)
    if spec.engine in ("llama.cpp", "ollama"):  # a requested cache type the engine drops (Ollama without flash attention)
        dropped = gguf_cache_types(spec, gguf_arch(shape))[2]
        notes += [dropped] if dropped else []
    flag_note = vllm_pooling_flag_note(typed) if spec.engine == "vllm" else None
    if flag_note:
        notes.append(flag_note)
    verdict: Verdict = "fits"
    bad = []
    limit = engine_max_len(shape, spec) if spec.engine in ("vllm", "sglang") and spec.max_model_len else None
    too_long = limit is not None and spec.max_model_len is not None and spec.max_model_len > limit
    refusals: list[str] = []  # the engine's own refusals (ServePlanResult.refusals): also in bad, in this order
    capped = False  # SGLang / TensorRT-LLM shorten a request the pool cannot hold instead of refusing
    if too_long:
        flag, env, override = (("--max-model-len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "--hf-overrides")
                               if spec.engine == "vllm" else
                               ("--context-length", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
                                "--json-model-override-args"))
        refusals.append(f"{flag} {spec.max_model_len} is beyond the {limit:,} tokens the model's config allows "
                        f"(max_position_embeddings and its rope scaling): {spec.engine} refuses to start; "
                        + ("an encoder's learned positions end there" if kv_none else
                           f"extend it with rope scaling ({override}) or set {env}=1 if the model really runs longer"))
        bad.append(refusals[-1])
    # a fitted term (engines.yaml vllm.fitted_non_kv: a median of public starts, not read from the engine's source)
    # moves the point estimate but never decides "does not fit" alone: where the engine's own accounting leaves room
    # for the request and only the fitted charge takes it, the plan says tight (public GB10 starts at small shares
    # that did start sit on both sides of that median). Calibrated from a log, the fitted terms cancel in its delta:
    # the pool is the log's measured basis, not a median
    fitted = 0.0 if "log_calibration" in p.overheads else p.overheads.get("fitted_non_kv", 0.0)
    kv_short = pool is not None and (pool <= 0 or fits_len is False)
    by_fit_alone = kv_short and fitted > 0 and pool + fitted > 0 and (req is None or pool + fitted >= req)
    if by_fit_alone:
        seen_gb10 = engine_value("vllm", "unified_non_torch_observed_gib")
        notes.append(f"may start with little or no KV cache: vLLM's own accounting leaves {pool + fitted:.2f} GiB of "
                     f"KV; the fitted {fitted:g} GiB unified-memory charge (the median of public GB10 starts, which "
                     f"ranged {float(seen_gb10['min']):g}-{float(seen_gb10['max']):g} GiB) leaves "
                     f"{pool:.2f} GiB; pin the pool with --kv-cache-memory, or raise the share")
    elif pool is not None and pool <= 0 and not too_long:
        refusals.append(f"no memory is left for the KV cache ({pool:.2f} GiB)")
        bad.append(refusals[-1])
    elif fits_len is False and not too_long and spec.engine in ("sglang", "trtllm"):
        # neither refuses: SGLang caps a request at the pool (managers/tp_worker.py: max_req_len = min(context_len - 1,
        # max_total_num_tokens - 1)); TensorRT-LLM's KV cache manager reduces maxSequenceLen to what the pool holds
        capped = True
        cap = (f"SGLang caps every request at {max(0, (p.tokens or 1) - 1):,} tokens (tp_worker.py max_req_len)"
               if spec.engine == "sglang" else
               f"TensorRT-LLM reduces the longest sequence to about {longest or 0:,} tokens (its KV cache manager)")
        notes.append(f"one request of {mml} tokens needs {req:.2f} GiB of KV cache and the pool has {pool:.2f} GiB: "
                     f"{cap}; it starts, serving shorter requests")
    elif fits_len is False and not too_long:
        refusals.append(f"one request of {mml} tokens needs {req:.2f} GiB of KV cache, the pool has {pool:.2f} GiB")
        bad.append(refusals[-1])
    if p.start.passes is False and not p.start.passes_after_flush:
        bad.append("the engine's start-up memory check fails with the memory free now")
    pinned = spec.engine == "vllm" and bool(spec.kv_cache_memory_bytes)  # not bounded by its share (vllm_footprint)
    if headroom < 0 and (spec.engine in ("llama.cpp", "ollama", "trtllm") or beside or pinned or by_reservations):
        with_ = (f" beside {others:.2f} GiB the running jobs have reserved (a capped server's cap x total) and the "
                 "other planned jobs" if by_reservations else f" beside {others:.2f} GiB of other jobs" if beside else "")
        bad.append(f"it holds {footprint:.2f} GiB{with_}; the pool can give {budget:.2f} GiB")
    seen = p.start.free_gib  # what the start-up check reads (vLLM on unified memory: MemAvailable less its context)
    me_first = False
    if beside and spec.engine in ("vllm", "sglang") and p.start.passes is not None and seen is not None \
            and seen - beside_gib < (p.start.requested_gib or 0):
        me_first = True
        notes.append(f"start the server before the other jobs: once they hold {beside_gib:.2f} GiB, the free memory "
                     f"its check reads ({seen - beside_gib:.2f} GiB) is below the {p.start.requested_gib:.2f} GiB the "
                     "start-up check asks for")
    beside_refused = False
    if seen is not None:
        for b in beside:  # a server beside this one has its own start-up check, read once the rest holds its memory
            rest = footprint + sum(o.gib for o in beside if o is not b)
            if b.start_ask_gib is None or seen - rest >= b.start_ask_gib:
                continue
            if seen < b.start_ask_gib:  # refused even as the first job started
                beside_refused = True
                notes.append(f"{b.name}: its start-up check asks {b.start_ask_gib:.2f} GiB free and only {seen:.2f} GiB "
                             "is free even before anything else starts: give it a smaller share")
            elif me_first and (p.start.requested_gib or 0) + b.start_ask_gib > seen:
                # each must start first and their asks together are more than is free: no order starts both (and the
                # "start this one first" note above would be advice that cannot work)
                beside_refused = True
                notes = [n for n in notes if not n.startswith("start the server before the other jobs")]
                notes.append(f"{b.name} and this server each pass their start-up check only if started first, and "
                             f"their asks ({b.start_ask_gib:.2f} + {p.start.requested_gib:.2f} GiB) are more than the "
                             f"{seen:.2f} GiB free: no start order runs both; give one a smaller share")
            else:
                notes.append(f"{b.name}: its start-up check asks {b.start_ask_gib:.2f} GiB free; once this server and "
                             f"the other jobs hold {rest:.2f} GiB, {max(0.0, seen - rest):.2f} GiB is: start it first, "
                             "or give it a share it can get then")
    if bad:
        verdict = "does-not-fit"
    elif p.start.passes is False and p.start.passes_after_flush:
        verdict = "tight"
        notes.append("starts only after the page cache is dropped (sync; echo 3 > /proc/sys/vm/drop_caches, as root)")
    elif by_fit_alone or capped or beside_refused or pb.code != "ok" or (spec.concurrency and conc is not None
                                                                and conc < spec.concurrency):
        verdict = "tight"
    if spec.concurrency and conc is not None and conc < spec.concurrency:
        notes.append(f"{spec.concurrency} requests of {mml} tokens were asked for; the pool holds {conc:g}")
    if spec.engine == "vllm":
        util = spec.gpu_memory_utilization or vllm_default_share(spec.engine_version,
                                                                 extensible=vllm_extensible_kv_cache(spec))
        floor_need = vllm_non_kv_gib(p.overheads, p.weights, p.overheads["cudagraph"]) + (req or 0.0)
        if p.start.passes is False and seen is not None:
            now = p.start.largest_share_now or 0.0
            # a flush helps only where the check reads CUDA's MemFree (passes_after_flush is None when it reads
            # MemAvailable: the page cache is already counted as free there)
            cache = (machine.page_cache_gib or 0.0) if p.start.passes_after_flush is not None else 0.0
            flushed = math.floor((seen + cache) / machine.total_gib * 100) / 100
            if now * machine.total_gib >= floor_need:
                sugg.append(f"--gpu-memory-utilization {now:.2f} passes the start-up check with today's free "
                            f"memory ({seen:.2f} of {machine.total_gib:.2f} GiB)")
            if cache and flushed > now and flushed * machine.total_gib >= floor_need:
                sugg.append(f"drop the page cache first (sync; echo 3 > /proc/sys/vm/drop_caches, as root): "
                            f"then --gpu-memory-utilization {flushed:.2f} passes")
            if flushed * machine.total_gib < floor_need:
                sugg.append(f"{'even with the page cache dropped, ' if cache else ''}"
                            f"{flushed * machine.total_gib:.2f} GiB is free and this "
                            f"server needs {floor_need:.2f} GiB: stop other jobs, or a smaller model or quantization")
        if fits_len is False and longest:
            sugg.append(f"--max-model-len {longest // 1024 * 1024 if longest >= 1024 else longest} fits the pool")
        if req and (fits_len is False or (spec.concurrency and conc is not None and conc < spec.concurrency)):
            want = max(1, spec.concurrency or 1) * req
            need_util = (want + vllm_non_kv_gib(p.overheads, p.weights, p.overheads["cudagraph"])) / machine.total_gib
            room = budget - others if (beside or by_reservations) else machine.total_gib  # beside others: what is left
            if need_util <= 1.0 and need_util * machine.total_gib <= room:
                sugg.append(f"--gpu-memory-utilization {math.ceil(need_util * 100) / 100:.2f} would hold "
                            f"{max(1, spec.concurrency or 1)} request(s) of {mml} tokens")
            elif need_util <= 1.0:
                pass  # the share exists on an empty machine but not beside the other jobs: said below
            else:  # no share of this GPU holds it
                sugg.append(f"no --gpu-memory-utilization holds {max(1, spec.concurrency or 1)} request(s) of {mml} tokens: "
                            f"they need {need_util * machine.total_gib:.2f} GiB with the weights, more than the GPU's "
                            f"{machine.total_gib:.2f} GiB; a shorter --max-model-len, an fp8 KV cache, or more GPUs")
        if pinned and headroom < 0 and pool is not None and pool + headroom > 0:
            sugg.append(f"--kv-cache-memory-bytes {math.floor(pool + headroom)}G fits the pool beside the rest "
                        "(the pinned pool is not bounded by --gpu-memory-utilization)")
        if headroom < 0 and not pinned and not (bad and not (beside or by_reservations)):
            # the share that leaves the OS reserve and the other jobs their memory; only where it still holds the
            # server's non-KV memory and one request (else no share does: say so)
            share = math.floor(max(0.0, budget - others) / machine.total_gib * 100) / 100
            if share > 0 and share * machine.total_gib >= floor_need:
                sugg.append(f"--gpu-memory-utilization {share:.2f} leaves the OS/driver reserve "
                            f"({machine.os_reserve_gib:g} GiB) and the other jobs their memory")
            else:
                sugg.append(f"no --gpu-memory-utilization fits beside the other jobs: {max(0.0, budget - others):.2f} "
                            f"GiB is left for this server and it needs {floor_need:.2f} GiB; stop or shrink a "
                            "neighbour first, or a smaller model or quantization")
        if kvb >= 2 and req:
            sugg.append("--kv-cache-dtype fp8 halves the KV bytes per token")
        if machine.unified and not vllm_extensible_kv_cache(spec) and not kv_none and not pinned:
            notes.append(f"on unified memory the share is of ALL memory: {util:g} x {machine.total_gib:.2f} GiB "
                         f"= {math.ceil(machine.total_gib * util * GIB) / GIB:.2f} GiB, which leaves "
                         f"{machine.total_gib * (1 - util):.2f} GiB for the OS, desktop and every other process")
    if spec.engine == "trtllm" and machine.unified:
        frac = spec.free_gpu_memory_fraction or engine_value("trtllm", "default_free_gpu_memory_fraction")
        notes.append(f"on unified memory free_gpu_memory_fraction {frac:g} takes that share of ALL free memory for "
                     "the KV cache: the OS and every other process keep only the rest")
        if headroom < 0:
            sugg.append("a lower --kv_cache_free_gpu_memory_fraction (or KvCacheConfig.max_tokens) leaves the OS "
                        "reserve and the other jobs their memory")
    if spec.engine in ("llama.cpp", "ollama") and fits_len is not None and headroom < 0:
        sugg.append("a smaller -c / num_ctx, -ctk q8_0 -ctv q8_0 (with flash attention), or a smaller quant type")
    if bad:
        notes = bad + notes
    world = spec.tensor_parallel * spec.pipeline_parallel
    sglang_dp = spec.data_parallel if spec.engine == "sglang" else 1  # --dp-size: replicas, each on its own tp x pp GPUs
    world *= max(1, sglang_dp)
    if machine.gpus is not None and world > machine.gpus:
        # planned per GPU, as a cluster of such hosts would run it (issue 20's two Sparks); this host alone cannot
        info_2 = kbe.engines[spec.engine].two_sparks
        hosts = -(-world // max(1, machine.gpus))
        dp_words = f" x DP {sglang_dp}" if sglang_dp > 1 else ""
        head = (f"the line asks for {world} GPUs (TP {spec.tensor_parallel} x PP {spec.pipeline_parallel}{dp_words}) and "
                f"{'this Spark has 1' if machine.unified else f'this host has {machine.gpus}'}: the plan is per GPU of "
                f"{hosts} such hosts; on this one alone {spec.engine} refuses to start (fewer GPUs than its world size)")
        if machine.unified:  # the two-Spark modes over ConnectX-7 (engines.yaml two_sparks)
            how = "; ".join(f"{k.replace('_', ' ').replace('g10', 'G10')}: {info_2[k]}"
                            for k in ("tensor_parallel", "pipeline_parallel", "g10") if k in info_2)
            head += f". Across Sparks: {how}"
        notes.insert(0, head)
    if calibration is not None and not calibration.applied:
        notes.append(f"not calibrated from the start-up log: {calibration.refused}; this plan is from the flags alone")
    if spec.ignored:
        notes.append("not used for memory: " + " ".join(spec.ignored[:8]) + (" ..." if len(spec.ignored) > 8 else ""))
    info = kbe.engines[spec.engine]
    return ServePlanResult(
        engine=spec.engine, engine_modelled_version=info.modelled_version, spec=spec,
        model=ServeModelInfo(id=shape.id, name=shape.name, source=shape.source,
                             params_b=round(shape.params_total / 1e9, 3), format=fmt, weights_detail=wdetail),
        weights_gib=round(p.weights, 2), overheads={k: round(v, 3) for k, v in p.overheads.items()}, kv=kv,
        footprint_gib=round(footprint, 2), machine=machine, start=p.start, verdict=verdict,
        budget_gib=round(budget, 2), headroom_gib=round(headroom, 2), beside=beside, running=list(running or []),
        suggestions=sugg, notes=notes, uncertainties=list(p.uncertainties),
        two_sparks=dict(info.two_sparks), refusals=refusals,
        calibration=calibration if spec.engine == "vllm" else None)
