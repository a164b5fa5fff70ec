"""Weights as an engine holds them and the KV cache's bytes per token (GQA, head dim, sliding-window and hybrid
layers, MLA, fp8 / q8 caches, drafters), and vLLM's token model: how many tokens a KV pool of N GiB reports. Pure
arithmetic on a model shape and a launch spec; no machine here."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sparkops.core.releases import OLD_ENGINE, Release, at_least, release
from sparkops.core.units import GIB
from sparkops.planner.serve_engines import (
    ServeInputError,
    ServeSpec,
    engine_value,
    engines_knowledge,
    format_from_name,
    gguf_cache_types,
    gguf_type_from_name,
)
from sparkops.planner.serve_shape import (
    ServeShape,
    mtp_drafting,
    resolve_shape,
)

if TYPE_CHECKING:
    from sparkops.planner.hub import HubAccess

# ------------------------------------------------------------------ the release whose accounting applies


def _version(spec: ServeSpec) -> Release | None:
    """The engine version to model (core/releases.py, the reading G3 uses too); None = the current one."""
    return release(spec.engine_version)


def hybrid_tokens_per_group(spec: ServeSpec) -> bool:
    """Does this vLLM print a hybrid model's 'GPU KV cache size' as the blocks split evenly over the KV cache
    groups (before vllm#40694), rather than max concurrency x max_model_len?"""
    return not _ge(_version(spec), str(engine_value("vllm", "hybrid_tokens_report_per_request_since")))


def _ge(v: Release | None, s: str) -> bool:
    """Is the modelled version at least ``s`` ("0.21", "0.11.1")? The current version (None) is."""
    return at_least(v, s)


# ------------------------------------------------------------------ weights


def weight_format(shape: ServeShape, spec: ServeSpec) -> str:
    """bf16 | fp8 | int8 | awq | gptq | nvfp4 | mxfp4 | gguf:<TYPE>."""
    if spec.engine in ("llama.cpp", "ollama") or shape.gguf_bytes is not None:
        t = shape.gguf_type or gguf_type_from_name(spec.model) or gguf_type_from_name(spec.gguf_path)
        if t is None and shape.native_format == "mxfp4":  # gpt-oss ships as MXFP4: its GGUFs are "MXFP4 MoE" files
            t = "MXFP4"
        return f"gguf:{t or 'Q4_K_M'}"
    return format_from_name(spec.model, spec.quantization) or shape.native_format or "bf16"


def weights_bytes(shape: ServeShape, fmt: str, engine: str = "", tp: int = 1) -> tuple[int, str]:
    """Bytes the weights take in the engine (all ranks together) and how that was counted."""
    kb = engines_knowledge()
    if fmt.startswith("gguf:"):
        if shape.gguf_bytes is not None:
            return shape.gguf_bytes, "exact tensor bytes from the GGUF header"
        t = fmt.split(":", 1)[1]
        if t == "MXFP4" and shape.params_expert:  # llama-quant.cpp's MXFP4_MOE: experts MXFP4, the rest Q8_0
            bits = engine_value("llama.cpp", "mxfp4_moe_bits")
            rest = shape.params_total - shape.params_expert
            return int((shape.params_expert * bits["experts"] + rest * bits["other"]) / 8), \
                f"MXFP4 MoE: experts at {bits['experts']:g} bits, other tensors Q8_0 at {bits['other']:g} (llama-quant.cpp)"
        bpw = kb.gguf_bits_per_weight.get(t)
        if bpw is None:
            raise ServeInputError(f"unknown GGUF type {t!r}; known: {', '.join(kb.gguf_bits_per_weight)}")
        return int(shape.params_total * bpw / 8), f"{t} at about {bpw:g} bits per weight (llama.cpp's quantize table)"
    wb = kb.weight_bytes.get(fmt)
    if wb is None:
        raise ServeInputError(f"unknown weight format {fmt!r}; known: {', '.join(kb.weight_bytes)}, gguf:<TYPE>")
    if fmt in ("bf16", "fp16", "fp32"):
        return int(shape.params_total * wb), f"{fmt}: {wb:g} bytes per parameter"
    if fmt == "mxfp4":
        q = shape.params_expert or shape.params_linear
        pad = 1.0
        if engine == "vllm" and shape.params_expert and shape.hidden and shape.expert_intermediate:
            p = engine_value("vllm", "mxfp4_pad")
            part = shape.expert_intermediate / max(1, tp)  # each rank pads its own slice of the experts
            pad = (-(-shape.hidden // p["hidden"]) * p["hidden"] / shape.hidden) * \
                  (-(-part // p["intermediate"]) * p["intermediate"] / part)
        note = f", experts padded x{pad:.3f} (vLLM's MXFP4 layout)" if pad > 1 else ""
        return int(q * pad * wb + (shape.params_total - q) * 2), f"MXFP4 experts (4.25 bits), everything else bf16{note}"
    q = shape.params_linear
    return int(q * wb + (shape.params_total - q) * 2), \
        f"{fmt} decoder Linear weights ({wb:g} bytes each, scales included), embeddings/lm_head/norms bf16"


# ------------------------------------------------------------------ KV cache

_KV_BYTES = {"auto": 2.0, "bf16": 2.0, "fp16": 2.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0,
             "fp8_e5m2": 1.0, "fp8_ds_mla": 1.0, "int8": 1.0, "fp4": 0.5, "nvfp4": 0.5625}


def gguf_arch(shape: ServeShape | None) -> str | None:
    """The model's own architecture name for the GGUF engines' per-architecture rules: the GGUF header's, else the
    config's model_type; None when neither was read."""
    return (shape.gguf_architecture or shape.model_type or None) if shape is not None else None


def kv_dtype_bytes(spec: ServeSpec, shape: ServeShape | None = None) -> float:
    if spec.engine in ("llama.cpp", "ollama"):
        table = engine_value("llama.cpp", "cache_type_bytes")
        kt, vt, _ = gguf_cache_types(spec, gguf_arch(shape))  # what the engine allocates (Ollama may drop a quantized type)
        k, v = table.get(kt), table.get(vt)
        if k is None or v is None:
            raise ServeInputError(f"unknown cache type {spec.cache_type_k or spec.cache_type_v!r}; known: {', '.join(table)}")
        return (k + v) / 2
    d = (spec.kv_cache_dtype or "auto").lower()
    if d not in _KV_BYTES:
        raise ServeInputError(f"unknown --kv-cache-dtype {spec.kv_cache_dtype!r}; known: {', '.join(_KV_BYTES)}")
    return _KV_BYTES[d]


def kv_layer_bytes(shape: ServeShape, kv_bytes: float, tp: int = 1) -> float:
    """KV bytes one token takes in ONE attention layer on one tensor-parallel rank: K and V of
    the rank's KV heads (replicated when there are fewer KV heads than ranks); MLA keeps one
    compressed latent (kv_lora_rank + rope dims), the same on every rank."""
    if shape.mla_dim:
        return shape.mla_dim * kv_bytes
    heads = max(1, math.ceil(shape.kv_heads / max(1, tp)))
    return 2 * heads * shape.head_dim * kv_bytes


def kv_bytes_per_token(shape: ServeShape, kv_bytes: float, tp: int = 1) -> float:
    """All attention layers of one rank (what a fully grown token costs)."""
    return kv_layer_bytes(shape, kv_bytes, tp) * shape.attn_layers


def request_kv_bytes(shape: ServeShape, length: int, kv_bytes: float, tp: int = 1, block: int = 16) -> float:
    """KV one request of ``length`` tokens holds: full layers grow with it, sliding-window layers
    stop at the window (plus one block)."""
    per = kv_layer_bytes(shape, kv_bytes, tp)
    full = shape.attn_layers - shape.sliding_layers
    win = min(length, (shape.sliding_window or length) + block)
    return per * (full * length + shape.sliding_layers * win)


@dataclass(frozen=True)
class DrafterShape:
    """A speculative drafter vLLM loads beside the target, from its public config (engines.yaml
    vllm.speculative.drafters; DFlash as model_executor/models/qwen3_dflash.py builds it)."""

    id: str
    method: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    fc_in: int  # the aux-hidden-state projection's input: target hidden x len(target_layer_ids)
    vocab: int
    own_embed: bool
    own_lm_head: bool
    stored_bytes: int | None = None  # exact, from its safetensors headers (a drafter read from the Hub)
    source: str = "its config in the catalog"
    total_params: int | None = None  # a whole catalog model as drafter (method draft_model): its own count

    def weight_bytes(self) -> int:
        """What its weights take: the stored bytes when the headers were read, else its counted parameters in bf16."""
        return self.stored_bytes if self.stored_bytes is not None else self.params() * 2

    def params(self) -> int:
        """Decoder layers (fused qkv, o_proj, q/k norms, gate_up/down MLP, two norms), fc, hidden_norm and
        norm, and the vocabulary rows only when the checkpoint ships its own embed_tokens / lm_head; a whole
        model loaded as the drafter (draft_model) counts as the catalog counts it."""
        if self.total_params is not None:
            return self.total_params
        h, d = self.hidden, self.head_dim
        layer = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h + 2 * d + 3 * h * self.intermediate + 2 * h
        vocab = self.vocab * h * (int(self.own_embed) + int(self.own_lm_head))
        return self.layers * layer + self.fc_in * h + 2 * h + vocab

    def kv_layer_bytes(self, kv_bytes: float, tp: int = 1) -> float:
        return 2 * max(1, math.ceil(self.kv_heads / max(1, tp))) * self.head_dim * kv_bytes


def drafter_shape(spec: ServeSpec) -> DrafterShape | None:
    """The drafter named by --speculative-config's "model" when its config is in the catalog (by id, or a local
    path ending in the id's name), and its method matches; None otherwise."""
    name = (spec.speculative_model or "").strip().rstrip("/").lower()
    if spec.engine != "vllm" or not name:
        return None
    for d in engine_value("vllm", "speculative").get("drafters", []):
        did = str(d["id"]).lower()
        if name != did and name.rsplit("/", 1)[-1] != did.rsplit("/", 1)[-1]:
            continue
        if spec.speculative_method and spec.speculative_method.lower() != str(d["method"]).lower():
            continue
        c = d["config"]
        return DrafterShape(id=d["id"], method=d["method"], layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]),
                            intermediate=int(c["intermediate_size"]), heads=int(c["num_attention_heads"]),
                            kv_heads=int(c["num_key_value_heads"]), head_dim=int(c["head_dim"]),
                            fc_in=int(c.get("target_hidden_size", c["hidden_size"])) * len(c.get("target_layer_ids") or []),
                            vocab=int(c["vocab_size"]), own_embed=bool(d.get("ships_embed_tokens")),
                            own_lm_head=bool(d.get("ships_lm_head")))
    return catalog_draft_model(spec)


def catalog_draft_model(spec: ServeSpec) -> DrafterShape | None:
    """--speculative-config '{"method": "draft_model", "model": M}' with M a model the catalog describes: vLLM loads M
    whole beside the target (v1/spec_decode/draft_model.py load_model: get_model on the draft model's own config, its
    embeddings and lm_head included) and registers its attention layers in the same forward context, so they are in
    the KV cache spec beside the target's (engines.yaml vllm.speculative.draft_model). Plain-attention drafters in
    the model's dtype only: a quantized, sliding-window, hybrid or MLA draft model is not sized here (None)."""
    method = (spec.speculative_method or "").lower()
    draft = engine_value("vllm", "speculative").get("draft_model", {})
    if spec.engine != "vllm" or not spec.speculative_model or method not in draft.get("methods", []):
        return None
    try:
        ds = resolve_shape(spec.speculative_model)
    except Exception:  # noqa: BLE001 - not a catalog model: the speculative range names it, as before
        return None
    quantized = ds.native_format not in (None, "bf16", "fp16") or any(
        tag in spec.speculative_model.lower() for tag in ("awq", "gptq", "fp8", "fp4", "int4", "int8", "gguf"))
    if quantized or ds.sliding_layers or ds.mla_dim or ds.linear_layers or ds.attn_layers != ds.layers:
        return None
    return DrafterShape(id=spec.speculative_model, method=spec.speculative_method or "draft_model", layers=ds.attn_layers,
                        hidden=ds.hidden, intermediate=ds.intermediate, heads=0, kv_heads=ds.kv_heads,
                        head_dim=ds.head_dim, fc_in=0, vocab=ds.vocab, own_embed=True, own_lm_head=True,
                        source=f"the model catalog's {ds.id} (a whole model: its own embeddings and lm_head)",
                        total_params=ds.params_total)


def hub_drafter(spec: ServeSpec, hub: HubAccess) -> DrafterShape | None:
    """A drafter outside the catalog named by a Hugging Face id (EAGLE/EAGLE-3 heads, draft models): its attention
    layers from its config.json, its weights as the exact bytes of its safetensors headers, both read from the Hub by
    range. None when it cannot be read (offline, not on the Hub, no attention shape): the plan then names it as the
    speculative uncertainty, as before."""
    from sparkops.planner import architecture
    from sparkops.planner.hub import is_hub_id

    name = (spec.speculative_model or "").strip().rstrip("/")
    if spec.engine != "vllm" or not spec.speculative_method or not is_hub_id(name) or drafter_shape(spec) is not None:
        return None
    try:
        cfg, weights, source, _notes = architecture.hub_config(name, hub)
    except architecture.ArchitectureError:
        return None
    text, _ = architecture._unwrap(cfg)

    def num(*keys: str) -> int:
        for k in keys:
            v = text.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return 0

    layers, hidden, heads = num("num_hidden_layers"), num("hidden_size"), num("num_attention_heads")
    if not (layers and hidden and heads):
        return None
    return DrafterShape(id=name, method=spec.speculative_method, layers=layers, hidden=hidden,
                        intermediate=num("intermediate_size"), heads=heads,
                        kv_heads=num("num_key_value_heads") or heads, head_dim=num("head_dim") or hidden // heads,
                        fc_in=0, vocab=num("draft_vocab_size", "vocab_size"), own_embed=False, own_lm_head=False,
                        stored_bytes=weights.stored_bytes if weights is not None and weights.files else None,
                        source=f"its config.json and safetensors headers, {source}")


@dataclass(frozen=True)
class HybridLayout:
    """vLLM's KV layout for a model with gated-DeltaNet (mamba-type) layers beside attention layers
    (engines.yaml vllm.hybrid_kv): one page size for both, layers in equal-sized groups."""

    state_bytes: int  # one GDN layer's recurrent state for one request on one rank (conv + ssm)
    block_tokens: int  # the attention block size vLLM sets so an attention page holds a state
    page_bytes: int  # one page (attention block = padded state)
    group_size: int  # layers per KV cache group (one tensor per group slot)
    attn_groups: int  # the target's attention layers' groups and, with a known drafter, its layers' groups
    state_groups: int
    state_pages_per_request: int  # 1, or 2 in 'align' mode (prefix caching on, vLLM's default)
    buckets: tuple[int, ...] = ()  # layers of each KV spec (target attention, drafter attention, state)

    def padding(self) -> list[tuple[int, float]]:
        """vLLM's "Add N padding layers, may waste at most P% KV cache memory" per bucket."""
        out = []
        for n in self.buckets:
            pad = self.group_size - n % self.group_size
            if pad != self.group_size:
                out.append((pad, round(pad / n * 100, 2)))
        return out

    def pages_per_request(self, length: int) -> int:
        return self.attn_groups * -(-length // self.block_tokens) + self.state_groups * self.state_pages_per_request

    def blocks(self, kv_gib: float) -> int:
        return int(kv_gib * GIB // (self.page_bytes * self.group_size)) if kv_gib > 0 else 0

    def request_bytes(self, length: int) -> int:
        return self.pages_per_request(length) * self.page_bytes * self.group_size

    def tokens(self, kv_gib: float, max_model_len: int, *, per_group: bool = False) -> int:
        """'GPU KV cache size': max concurrency x max_model_len (kv_cache_utils._report_kv_cache_config); with
        ``per_group`` the figure vLLM printed before that fix: the blocks split evenly over the KV cache groups,
        times the attention block (engines.yaml vllm.hybrid_tokens_report_per_request_since)."""
        if per_group:
            return self.blocks(kv_gib) // (self.attn_groups + self.state_groups) * self.block_tokens
        return int(self.blocks(kv_gib) / self.pages_per_request(max_model_len) * max_model_len)


def vllm_hybrid_layout(shape: ServeShape, kv_bytes: float, tp: int = 1,
                       drafter: DrafterShape | None = None, extra_attn: int = 0) -> HybridLayout | None:
    """None for models without gated-DeltaNet layers. Read from vLLM (engines.yaml vllm.hybrid_kv):
    MambaStateShapeCalculator.gated_delta_net_state_shape (conv state (conv_dim/tp, kernel-1) in the
    model dtype, ssm state (v_heads/tp, v_dim, k_dim) in mamba_ssm_dtype), HybridAttentionMambaModelConfig
    (attention block = 16 x ceil(state / (16 x attention bytes per token)), the state padded to that page),
    kv_cache_utils._get_kv_cache_groups_uniform_page_size (group size = the smaller layer count, or the
    larger when it is under 1.5x the smaller) and MambaSpec.max_memory_usage_bytes (2 pages in 'align').
    A known drafter's attention layers are a bucket of their own (their own spec) when their page per token
    matches the target's; otherwise they are left out of the layout (see drafter_kv_layers). ``extra_attn``: MTP
    layers, whose attention has the target's spec and joins its bucket."""
    if not shape.gdn or not shape.linear_layers or not shape.attn_layers:
        return None
    c = engine_value("vllm", "hybrid_kv")
    nk, nv, dk, dv, ck = shape.gdn
    conv_dim = dk * nk * 2 + dv * nv
    state = (conv_dim // tp) * (ck - 1) * c["conv_state_bytes"] + (nv // tp) * dv * dk * shape.ssm_state_bytes
    per_tok = int(kv_layer_bytes(shape, kv_bytes, tp))
    a = c["block_alignment"]
    block = a * -(-state // (a * per_tok))
    attn_buckets = [shape.attn_layers + extra_attn]
    if drafter is not None and int(drafter.kv_layer_bytes(kv_bytes, tp)) == per_tok:
        attn_buckets.append(drafter.layers)
    buckets = (*attn_buckets, shape.linear_layers)
    lo, hi = min(buckets), max(buckets)
    gs = hi if hi < lo * 1.5 else lo
    return HybridLayout(state_bytes=state, block_tokens=block, page_bytes=block * per_tok, group_size=gs,
                        attn_groups=sum(-(-n // gs) for n in attn_buckets), state_groups=-(-shape.linear_layers // gs),
                        state_pages_per_request=c["align_state_pages"], buckets=buckets)


def drafter_kv_layers(shape: ServeShape, layout: HybridLayout | None, drafter: DrafterShape | None) -> int:
    """The drafter's KV layers the plan counts: all of them beside a plain attention model, those in the hybrid
    layout's buckets beside a hybrid one (0 when their page per token differs from the target's)."""
    if drafter is None:
        return 0
    if layout is None:
        return drafter.layers
    return drafter.layers if len(layout.buckets) == 3 else 0


_UNSET: Any = object()


def vllm_swa_tokens(shape: ServeShape, kv_gib: float, kv_bytes: float, tp: int, max_model_len: int,
                    batched_tokens: int) -> int:
    """'GPU KV cache size' of a model with sliding-window AND full-attention layers (Gemma 2/3/4, gpt-oss) as vLLM
    prints it since the per-request report (engines.yaml vllm.hybrid_tokens_report_per_request_since):
    int(max concurrency x max_model_len). Read from vllm/v1/core/kv_cache_utils.py (engines.yaml vllm.swa_groups):
    pages made equal by growing the smaller page's block, layers in groups of the smaller count (the larger when
    under 1.5x), a block slot = group size x page; a request needs cdiv(max_model_len, block) slots per full
    group and cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1 per sliding group."""
    if kv_gib <= 0:
        return 0
    base = int(engine_value("vllm", "block_size"))
    s_tok = kv_layer_bytes(shape, kv_bytes, tp)
    f_tok = s_tok if not shape.full_kv_dim else 2 * max(1, math.ceil(shape.full_kv_dim / max(1, tp))) * kv_bytes
    page = base * max(s_tok, f_tok)
    bs_s, bs_f = int(page // s_tok), int(page // f_tok)
    n_s, n_f = shape.sliding_layers, shape.attn_layers - shape.sliding_layers
    lo, hi = min(n_s, n_f), max(n_s, n_f)
    gs = hi if hi < lo * 1.5 else lo
    blocks = int(kv_gib * GIB // (page * gs))
    win = min(int(shape.sliding_window or 0) - 1 + int(batched_tokens), max_model_len)
    per_request = -(-n_f // gs) * -(-max_model_len // bs_f) + -(-n_s // gs) * (-(-win // bs_s) + 1)
    return int(blocks / per_request * max_model_len)


def pp_stage_layers(layers: int, pp: int, partition: str | None = None) -> tuple[int, ...]:
    """The decoder layers of each pipeline stage as vLLM's get_pp_indices splits them (engines.yaml
    vllm.pipeline_stages): ``partition`` (VLLM_PP_LAYER_PARTITION, "23,24,24,23") when set, else layers // pp each
    and the remainder one layer at a time from the second-last stage backwards (94 / 4 -> 23, 24, 24, 23)."""
    pp = max(1, pp)
    if partition is not None:
        try:
            parts = tuple(int(x) for x in partition.split(","))
        except ValueError as exc:
            raise ServeInputError(f"VLLM_PP_LAYER_PARTITION {partition!r} is not a list of layer counts") from exc
        if len(parts) != pp or sum(parts) != layers:
            raise ServeInputError(f"VLLM_PP_LAYER_PARTITION {partition!r}: vLLM needs {pp} counts summing to the "
                                  f"model's {layers} layers")
        return parts
    out = [layers // pp] * pp
    start = int(engine_value("vllm", "pipeline_stages")["remainder_from_stage"])
    for i in range(layers % pp):
        out[start - i] += 1
    return tuple(out)


def _blocks(kv_gib: float, page_bytes: float) -> int:
    """Whole KV blocks of ``page_bytes`` in a pool of ``kv_gib`` (0 for an empty or negative pool)."""
    return int(kv_gib * GIB // page_bytes) if kv_gib > 0 else 0


def vllm_kv_tokens(shape: ServeShape, kv_gib: float, kv_bytes: float, tp: int = 1, max_model_len: int | None = None,
                   *, layout: HybridLayout | None = _UNSET, drafter: DrafterShape | None = None, extra_attn: int = 0,
                   per_group: bool = False, pp: int = 1, batched_tokens: int = 2048,
                   stage_layers: tuple[int, ...] = ()) -> int:
    """vLLM's 'GPU KV cache size: N tokens' for a KV pool of ``kv_gib`` per rank. ``layout``: the hybrid layout
    the caller has already computed (None for a plain attention model); computed here when not given.
    ``per_group``: a hybrid model's figure as vLLM printed it before the per-request report (see
    hybrid_tokens_per_group). ``pp``: pipeline stages; a plain attention model's page then holds the largest
    stage's layers (engines.yaml vllm.pipeline_kv_layers; ``stage_layers``, the token model's split, when given,
    else get_pp_indices' default split). ``batched_tokens``: max_num_batched_tokens, which sets
    what a sliding-window group holds per request (vllm_swa_tokens)."""
    hy = vllm_hybrid_layout(shape, kv_bytes, tp, drafter, extra_attn) if layout is _UNSET else layout
    if hy is not None:
        mml = max_model_len or shape.context_train or hy.block_tokens
        return hy.tokens(kv_gib, mml, per_group=per_group)
    if not per_group and drafter is None and not extra_attn and pp == 1 and shape.sliding_window \
            and 0 < shape.sliding_layers < shape.attn_layers and not shape.mla_dim:
        mml = max_model_len or shape.context_train or shape.sliding_window
        return vllm_swa_tokens(shape, kv_gib, kv_bytes, tp, mml, batched_tokens)
    block = int(engine_value("vllm", "block_size"))
    extra = drafter.kv_layer_bytes(kv_bytes, tp) * drafter.layers if drafter is not None else 0.0
    layers = shape.attn_layers + extra_attn
    if pp > 1 and engine_value("vllm", "pipeline_kv_layers") == "per_stage":
        layers = max(stage_layers) if stage_layers else max(pp_stage_layers(layers, pp))
    page = (kv_layer_bytes(shape, kv_bytes, tp) * layers + extra) * block
    return _blocks(kv_gib, page) * block


@dataclass(frozen=True)
class VllmTokenModel:
    """Everything vLLM's 'GPU KV cache size: N tokens' depends on besides the pool's size: the KV dtype, the
    tensor-parallel split, the hybrid layout, a drafter the plan sizes, MTP drafting layers and how this version
    reports a hybrid model's tokens. Built by vllm_token_model, the one place that assembles it, so the plan and
    the validation's "tokens given KV GiB" row count the same pages."""

    shape: ServeShape
    kv_bytes: float
    tp: int
    max_model_len: int | None
    layout: HybridLayout | None
    drafter: DrafterShape | None
    mtp: int
    per_group: bool
    pp: int = 1
    batched_tokens: int = 2048  # max_num_batched_tokens (a sliding-window group's share per request)
    # the KV layers of each pipeline stage, where the plan sizes the stages one by one (vllm_pp_stages); () else
    stage_layers: tuple[int, ...] = ()

    def tokens(self, kv_gib: float) -> int:
        """Tokens of a pool of ``kv_gib`` on every rank (one figure: a pipeline's largest stage sets the page)."""
        return vllm_kv_tokens(self.shape, kv_gib, self.kv_bytes, self.tp, self.max_model_len, layout=self.layout,
                              drafter=self.drafter, extra_attn=self.mtp, per_group=self.per_group, pp=self.pp,
                              batched_tokens=self.batched_tokens, stage_layers=self.stage_layers)

    def stage_blocks(self, kv_gib: float, stage: int) -> int:
        """The KV blocks one pipeline stage's pool holds in pages of its own layers."""
        block = int(engine_value("vllm", "block_size"))
        return _blocks(kv_gib, kv_layer_bytes(self.shape, self.kv_bytes, self.tp) * self.stage_layers[stage] * block)

    def stage_tokens(self, kv_by_stage: list[float]) -> int:
        """'GPU KV cache size' of a pipeline whose stages profiled these pools: every worker keeps the smallest
        block count (get_kv_cache_configs) and reports it x block_size."""
        block = int(engine_value("vllm", "block_size"))
        return min(self.stage_blocks(kv, i) for i, kv in enumerate(kv_by_stage)) * block


def vllm_token_model(shape: ServeShape, spec: ServeSpec, drafter: DrafterShape | None = _UNSET,
                     batched_tokens: int | None = None) -> VllmTokenModel:
    """The token model of one vLLM launch. ``drafter``: one resolved by the caller (e.g. from the Hub); by default
    the catalog's, when --speculative-config names one. ``batched_tokens``: the profiled max_num_batched_tokens
    (the plan's overheads["profiled_tokens"]; default: the flag, else vLLM's small-GPU default)."""
    if drafter is _UNSET:
        drafter = drafter_shape(spec) if spec.speculative_method else None
    kvb = kv_dtype_bytes(spec, shape)
    tp = max(1, spec.tensor_parallel)
    mtp = mtp_drafting(spec, shape)
    layout = vllm_hybrid_layout(shape, kvb, tp, drafter, mtp)
    if layout is not None and spec.enable_prefix_caching is False:
        # prefix caching off: mamba_cache_mode 'none', MambaSpec.max_memory_usage_bytes = 1 page per request
        # (engines.yaml vllm.hybrid_kv_state_pages_no_prefix_caching)
        layout = replace(layout, state_pages_per_request=int(engine_value("vllm", "hybrid_kv_state_pages_no_prefix_caching")))
    pp = max(1, spec.pipeline_parallel)
    stages: tuple[int, ...] = ()
    if pp > 1 and layout is None and drafter is None and not mtp and not shape.sliding_layers \
            and shape.attn_layers == shape.layers and _version(spec) != OLD_ENGINE:
        # full attention in every layer: a stage's KV layers are its decoder layers (engines.yaml vllm.pipeline_stages)
        stages = pp_stage_layers(shape.layers, pp, spec.env.get(engine_value("vllm", "pipeline_stages")["partition_env"]))
    return VllmTokenModel(shape=shape, kv_bytes=kvb, tp=tp, max_model_len=spec.max_model_len,
                          layout=layout, drafter=drafter, mtp=mtp, stage_layers=stages,
                          per_group=hybrid_tokens_per_group(spec), pp=pp,
                          batched_tokens=int(batched_tokens or spec.max_num_batched_tokens
                                             or engine_value("vllm", "default_max_num_batched_tokens")["small_gpu"]))


