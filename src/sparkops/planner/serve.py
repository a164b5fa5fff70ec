"""Serving on a Spark: will this model serve, with how much KV cache, beside what else? (issue 20)

model shape (training catalog, serving-only entries in engines.yaml, a config.json, or a GGUF
header) -> weights as the engine holds them (bf16, FP8, NVFP4, MXFP4, AWQ/GPTQ, GGUF types) ->
KV bytes per token (GQA, head dim, sliding-window layers, MLA, fp8/q8 caches) -> the engine's own
accounting (vLLM's share of TOTAL memory and its start-up free-memory check, SGLang's
mem_fraction_static, llama.cpp's -c/-np, Ollama's num_ctx x parallel) -> the machine (total, what
CUDA calls free, page cache) -> verdict. Pure functions of their inputs; the machine comes in as
numbers (``Machine``), read from facts by :func:`machine_from_facts`.

Units: GiB (2^30 bytes), as the engines print them.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops.checks import pool_budget
from sparkops.checks.g03_unified_memory import vllm_default_share  # the G3 owner's default share by release
from sparkops.checks.g03_unified_memory import vllm_extensible_kv_cache as g03_extensible
from sparkops.core.releases import OLD_ENGINE, Release, at_least, release
from sparkops.core.units import GIB
from sparkops.planner.serve_engines import (
    ServeInputError,
    ServeSpec,
    candidate_names,
    engine_value,
    engines_knowledge,
    format_from_name,
    gguf_type_from_name,
)

if TYPE_CHECKING:
    from sparkops.facts.model import Facts
    from sparkops.planner.architecture import ModelArch
    from sparkops.planner.gguf import GGUFHeader
    from sparkops.planner.hub import HubAccess

Verdict = Literal["fits", "tight", "does-not-fit"]


# ------------------------------------------------------------------ model shape


@dataclass(frozen=True)
class ServeShape:
    """What serving needs to know of a model."""

    id: str
    name: str
    source: str
    layers: int
    attn_layers: int  # layers with a KV cache (softmax attention, full or sliding)
    sliding_layers: int
    sliding_window: int | None
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    experts: int
    top_k: int
    expert_intermediate: int
    vocab: int
    params_total: int
    params_embedding: int
    params_linear: int  # quantizable decoder Linear weights (experts included)
    params_expert: int  # expert weights only (MXFP4 in gpt-oss)
    mla_dim: int | None = None  # kv_lora_rank + qk_rope_head_dim (DeepSeek MLA)
    native_format: str | None = None  # what the published checkpoint stores when the name says nothing
    gguf_bytes: int | None = None  # exact tensor bytes from a GGUF header
    gguf_embedding_bytes: int | None = None
    gguf_type: str | None = None
    context_train: int | None = None
    # hybrid models (Qwen3-Next, Qwen3.5/3.6): gated-DeltaNet layers keep a fixed recurrent state per
    # request instead of a per-token KV cache; (linear_num_key_heads, linear_num_value_heads,
    # linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim) from config.json
    linear_layers: int = 0
    gdn: tuple[int, int, int, int, int] | None = None
    ssm_state_bytes: int = 2  # config mamba_ssm_dtype (float32 -> 4), else the model dtype's 2
    # a multimodal checkpoint's vision tower (from its vision_config): parameters vLLM loads beside the text model
    params_vision: int = 0
    vision: VisionDims | None = None  # its shapes, for the profile run's dummy image batch
    # the checkpoint's own MTP layers (config mtp_num_hidden_layers), loaded when an MTP method drafts
    mtp_layers: int = 0
    mtp_layer_params: int = 0  # one MTP layer with its fc and norms
    # for vLLM's LoRA slots: query width (heads x head_dim; 0 = hidden) and the layers with a dense MLP beside
    # (or instead of) the experts (-1 = every layer without experts, none with them)
    q_dim: int = 0
    dense_mlp_layers: int = -1
    moe_layers: int = -1  # layers with experts (-1: every layer of an expert model)
    # Gemma 4's full-attention layers: their own KV heads x head size (num_global_key_value_heads x
    # global_head_dim; 0 = the sliding layers' kv_heads x head_dim)
    full_kv_dim: int = 0
    # an untied lm_head's parameters in params_total (0: tied, or not known); a pipeline's last stage holds a
    # vocabulary matrix either way (vllm_stage_weight_shifts)
    params_lm_head: int = 0
    # the config's model_type ("" when not known: a GGUF file): which vLLM release runs it on Model Runner V2
    # (engines.yaml vllm.model_runner_v2_architectures)
    model_type: str = ""


@dataclass(frozen=True)
class VisionDims:
    """What vLLM's profile run of a Qwen3-VL-style vision tower needs (its vision_config)."""

    hidden: int
    intermediate: int
    patch_in: int  # in_channels x temporal_patch x patch^2: one patch's pixel values
    patch: int
    merge: int
    out_hidden: int
    image_max_pixels: int | None  # the image processor's largest image (size.longest_edge); None: not known

    @classmethod
    def from_config(cls, vc: dict[str, Any]) -> VisionDims:
        p, t = int(vc["patch_size"]), int(vc.get("temporal_patch_size", 2))
        mp = vc.get("image_max_pixels")
        return cls(hidden=int(vc["hidden_size"]), intermediate=int(vc["intermediate_size"]),
                   patch_in=int(vc.get("in_channels", 3)) * t * p * p, patch=p, merge=int(vc.get("spatial_merge_size", 2)),
                   out_hidden=int(vc.get("out_hidden_size", vc["hidden_size"])),
                   image_max_pixels=int(mp) if isinstance(mp, int) else None)

    def image_tokens(self) -> int | None:
        """Tokens of the largest image (after the spatial merge): max_pixels / (patch x merge)^2."""
        return None if self.image_max_pixels is None else self.image_max_pixels // (self.patch * self.merge) ** 2


def mtp_layer_params(cfg: dict[str, Any]) -> int:
    """One MTP layer as model_executor/models/qwen3_5_mtp.py builds it: a full decoder layer of the target's shapes
    (gated attention when attn_output_gate: q_proj doubled; q/k RMSNorms; a dense MLP or the MoE with its router,
    shared expert and shared-expert gate; two RMSNorms), then fc (2h -> h) and three RMSNorms."""
    h = int(cfg["hidden_size"])
    heads, kv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    d = int(cfg.get("head_dim") or h // heads)
    attn = h * heads * d * (2 if cfg.get("attn_output_gate") else 1) + 2 * h * kv * d + heads * d * h + 2 * d
    if cfg.get("num_experts"):
        e, ie = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"])
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        mlp = e * 3 * h * ie + h * e + (3 * h * shared + h if shared else 0)
    else:
        mlp = 3 * h * int(cfg["intermediate_size"])
    return attn + mlp + 2 * h + 2 * h * h + 3 * h


def mtp_drafting(spec: ServeSpec, shape: ServeShape) -> int:
    """MTP layers the drafter loads: the checkpoint's own, for an MTP method (engines.yaml vllm.speculative)."""
    if spec.engine != "vllm" or not shape.mtp_layers or not spec.speculative_method:
        return 0
    methods = engine_value("vllm", "speculative").get("mtp_methods", [])
    return shape.mtp_layers if spec.speculative_method.lower() in methods else 0


def vision_params(vc: dict[str, Any]) -> int:
    """Parameters of a Qwen3-VL-style vision tower (Qwen3.5/3.6 ``qwen3_5*_vision``) from its vision_config:
    a Conv3d patch embedding (in_channels x temporal_patch x patch^2 -> hidden, with bias), learned position
    embeddings, ``depth`` blocks (two LayerNorms, fused qkv and proj with biases, a two-layer MLP with biases) and
    the patch merger (LayerNorm over hidden, hidden x merge^2 -> same -> out_hidden). The tensor list this counts
    (27 blocks x 12 + 3 patch/pos + 6 merger = 333 tensors) is the one a public port of the tower checks.
    A tower of another design carries its published parameter count instead (``params``)."""
    if "params" in vc:
        return int(vc["params"])
    h, i, d = int(vc["hidden_size"]), int(vc["intermediate_size"]), int(vc["depth"])
    patch = int(vc.get("in_channels", 3)) * int(vc.get("temporal_patch_size", 2)) * int(vc["patch_size"]) ** 2 * h + h
    pos = int(vc.get("num_position_embeddings", 0)) * h
    block = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * i + i) + (i * h + h)
    m = h * int(vc.get("spatial_merge_size", 2)) ** 2
    out = int(vc.get("out_hidden_size", h))
    merger = 2 * h + (m * m + m) + (m * out + out)
    return patch + pos + d * block + merger


def pixtral_params(vc: dict[str, Any], cfg: dict[str, Any]) -> int:
    """A Pixtral tower with its Mistral 3 projector (transformers' modeling_pixtral / modeling_mistral3) from a
    config.json: the patch convolution (no bias) and ln_pre, ``num_hidden_layers`` blocks (q, k, v, o without biases,
    a gated SiLU MLP, two RMSNorms), then the projector: a norm, the patch merger (hidden x merge^2 -> hidden) and two
    Linears to the text width (with biases when ``multimodal_projector_bias``). For Mistral-Small-3.1/3.2's
    dimensions it gives 438,958,080, the count the serving catalog carries for that checkpoint."""
    h, i, n = int(vc["hidden_size"]), int(vc["intermediate_size"]), int(vc["num_hidden_layers"])
    p, c = int(vc["patch_size"]), int(vc.get("num_channels", 3))
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    width, merge = int(text["hidden_size"]), int(cfg.get("spatial_merge_size", 2))
    tower = c * p * p * h + h + n * (4 * h * h + 3 * h * i + 2 * h)
    projector = h + h * merge * merge * h + h * width + width * width
    biases = 2 * width if cfg.get("multimodal_projector_bias", True) else 0
    return tower + projector + biases


def shape_from_arch(arch: ModelArch) -> ServeShape:
    gated = 3 if arch.mlp_gated else 2
    expert = arch.moe_layers * arch.experts * gated * arch.hidden * arch.expert_intermediate
    native = "mxfp4" if arch.family == "gpt_oss" else arch.prequantized
    return ServeShape(
        id=arch.id, name=arch.name, source=arch.source, layers=arch.layers,
        attn_layers=arch.layers - arch.linear_attention_layers, sliding_layers=arch.sliding_layers,
        sliding_window=arch.sliding_window, kv_heads=arch.kv_heads, head_dim=arch.head_dim, hidden=arch.hidden,
        intermediate=arch.intermediate, experts=arch.experts, top_k=arch.experts_per_token,
        expert_intermediate=arch.expert_intermediate, vocab=arch.vocab, params_total=arch.params_total,
        params_embedding=arch.params_embedding, params_linear=arch.params_linear, params_expert=expert,
        native_format=native, q_dim=arch.q_dim, dense_mlp_layers=arch.layers - arch.moe_layers if arch.experts else arch.layers,
        moe_layers=arch.moe_layers if arch.experts else 0, params_lm_head=arch.params_lm_head, model_type=arch.family)


def shape_from_config(cfg: dict[str, Any], *, id: str, name: str, source: str) -> ServeShape:
    """A llama-like (dense or MoE, optionally MLA) shape straight from config.json fields: for
    model types the training catalog does not count (MiniMax-M2, DeepSeek V3)."""
    def need(*keys: str) -> int:
        for k in keys:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        raise ServeInputError(f"{name}: config has no positive {' / '.join(keys)}")

    h = need("hidden_size")
    layers = need("num_hidden_layers")
    heads = need("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    vocab = need("vocab_size")
    n_full, gdn = hybrid_layers(cfg, layers, name)
    experts = int(cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts") or 0)
    top_k = int(cfg.get("num_experts_per_tok") or cfg.get("top_k_experts") or 0)
    inter = int(cfg.get("intermediate_size") or 0)
    e_inter = int(cfg.get("moe_intermediate_size") or (inter if experts else 0))
    dense_layers = int(cfg.get("first_k_dense_replace") or 0) if experts else layers
    moe_layers = layers - dense_layers if experts else 0
    # Gemma 4 MoE (enable_moe_block): every layer runs a dense MLP of intermediate_size beside the experts
    both = bool(cfg.get("enable_moe_block")) and experts > 0 and inter > 0
    # sliding-window layers (layer_types "sliding_attention"); Gemma 4's full-attention layers have their own KV
    # heads and head size (num_global_key_value_heads, global_head_dim) and may share K and V (attention_k_eq_v)
    lt = cfg.get("layer_types")
    n_sliding = sum(1 for t in lt if t == "sliding_attention") if isinstance(lt, list) and len(lt) == layers else 0
    window = cfg.get("sliding_window") if n_sliding else None
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        qk = int(cfg.get("qk_nope_head_dim") or 0) + int(cfg.get("qk_rope_head_dim") or 0)
        q_lora = int(cfg.get("q_lora_rank") or 0)
        attn = (h * q_lora + q_lora * heads * qk if q_lora else h * heads * qk) + h * mla \
            + int(cfg["kv_lora_rank"]) * heads * (int(cfg.get("qk_nope_head_dim") or 0) + int(cfg.get("v_head_dim") or hd)) \
            + heads * int(cfg.get("v_head_dim") or hd) * h
    else:
        gate = 2 if gdn and cfg.get("attn_output_gate", True) else 1  # Qwen3-Next/3.5: q_proj also yields the output gate
        attn = h * heads * hd * gate + 2 * h * kv * hd + heads * hd * h
    full_attn = attn
    if n_sliding and cfg.get("global_head_dim"):
        ghd, gkv = int(cfg["global_head_dim"]), int(cfg.get("num_global_key_value_heads") or kv)
        full_attn = h * heads * ghd + (1 if cfg.get("attention_k_eq_v") else 2) * h * gkv * ghd + heads * ghd * h
    expert_p = moe_layers * experts * 3 * h * e_inter
    s_inter = int(cfg.get("shared_expert_intermediate_size") or 0)
    shared = moe_layers * (int(cfg.get("n_shared_experts") or 0) * 3 * h * e_inter + (3 * h * s_inter + h if s_inter else 0))
    dense_p = dense_layers * 3 * h * (inter if not experts else int(cfg.get("intermediate_size") or e_inter))
    if both:
        dense_p = layers * 3 * h * inter
    router = moe_layers * h * experts
    mixers = n_sliding * attn + (layers - n_sliding) * full_attn
    if gdn:  # gated-DeltaNet layers: in_proj_qkvz, in_proj_ba, out_proj (vLLM/transformers module layout)
        nk, nv, dk, dv, _ = gdn
        mixers = n_full * attn + (layers - n_full) * (h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + nv * dv * h)
    linear = mixers + expert_p + shared + dense_p + router
    emb = vocab * h
    head = 0 if cfg.get("tie_word_embeddings") else vocab * h
    total = linear + emb + head + layers * 2 * h + h
    return ServeShape(
        id=id, name=name, source=source, layers=layers, attn_layers=n_full, sliding_layers=n_sliding,
        sliding_window=int(window) if isinstance(window, int) else None,
        kv_heads=int(kv), head_dim=int(hd), hidden=h, intermediate=inter, experts=experts, top_k=top_k,
        expert_intermediate=e_inter, vocab=vocab, params_total=total, params_embedding=emb, params_linear=linear,
        params_expert=expert_p, mla_dim=mla, linear_layers=layers - n_full, gdn=gdn, ssm_state_bytes=ssm_state_bytes(cfg),
        q_dim=int(heads) * int(hd), dense_mlp_layers=layers if both or not experts else dense_layers, moe_layers=moe_layers,
        full_kv_dim=int(cfg.get("num_global_key_value_heads") or kv) * int(cfg["global_head_dim"])
        if n_sliding and cfg.get("global_head_dim") else 0, params_lm_head=head, model_type=str(cfg.get("model_type") or ""))


def hybrid_layers(cfg: dict[str, Any], layers: int, name: str = "model") -> tuple[int, tuple[int, int, int, int, int] | None]:
    """(softmax-attention layers, gated-DeltaNet dims or None) from config.json: `layer_types`
    ("full_attention" / "linear_attention"), else `full_attention_interval` beside the linear_* keys."""
    lt = cfg.get("layer_types")
    interval = cfg.get("full_attention_interval")
    if not cfg.get("linear_num_value_heads"):
        return layers, None
    if isinstance(lt, list) and len(lt) == layers:
        n_full = sum(1 for t in lt if t == "full_attention")
    elif isinstance(interval, int) and interval > 0:
        n_full = layers // interval
    else:
        raise ServeInputError(f"{name}: config has linear-attention heads but neither layer_types nor full_attention_interval")
    keys = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim")
    vals = [cfg.get(k) for k in keys]
    if not all(isinstance(v, int) and v > 0 for v in vals):
        raise ServeInputError(f"{name}: config lacks a positive {' / '.join(keys)}")
    return n_full, (vals[0], vals[1], vals[2], vals[3], vals[4])  # type: ignore[return-value]


def ssm_state_bytes(cfg: dict[str, Any]) -> int:
    """Bytes per element of a gated-DeltaNet layer's recurrent state: config.json's mamba_ssm_dtype when it
    says float32, else the model dtype's 2."""
    return 4 if str(cfg.get("mamba_ssm_dtype", "")).lower() in ("float32", "fp32") else 2


# one global layer per N (llama.cpp); Ollama's own gpt-oss blobs name the architecture "gptoss"
_SWA_PATTERN = {"gemma3": 6, "gemma2": 2, "gpt-oss": 2, "gptoss": 2, "cohere2": 4}


def shape_from_gguf(header: GGUFHeader, *, source: str) -> ServeShape:
    """Shapes and exact weight bytes from a GGUF header (llama.cpp's own metadata keys)."""
    arch = header.architecture
    if not arch:
        raise ServeInputError(f"{source}: GGUF header has no general.architecture")

    def get_int(key: str, default: int | None = None) -> int:
        v = header.arch_key(key, default)
        if isinstance(v, list):  # per-layer arrays (head_count_kv on hybrid models): the largest
            v = max((x for x in v if isinstance(x, int)), default=default)
        if not isinstance(v, int) or v <= 0:
            if default is not None:
                return default
            raise ServeInputError(f"{source}: GGUF header has no {arch}.{key}")
        return v

    layers = get_int("block_count")
    hidden = get_int("embedding_length")
    heads = get_int("attention.head_count")
    kv = get_int("attention.head_count_kv", heads)
    hd = get_int("attention.key_length", hidden // heads)
    window = header.arch_key("attention.sliding_window")
    window = window if isinstance(window, int) and window > 0 else None
    sliding = 0
    if window and arch in _SWA_PATTERN:
        sliding = layers - layers // _SWA_PATTERN[arch]
    emb_t = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    vocab = header.array_lengths.get("tokenizer.ggml.tokens") or (emb_t.shape[1] if emb_t and len(emb_t.shape) > 1 else 0)
    total = sum(t.elements for t in header.tensors)
    emb = emb_t.elements if emb_t else 0
    gbytes = header.tensor_bytes()
    ftype = header.metadata.get("general.file_type")
    name = str(header.metadata.get("general.name") or source)
    expert_count = get_int("expert_count", 0) if header.arch_key("expert_count") else 0
    return ServeShape(
        id=name, name=name, source=f"gguf:{source}", layers=layers, attn_layers=layers, sliding_layers=sliding,
        sliding_window=window, kv_heads=kv, head_dim=hd, hidden=hidden,
        intermediate=get_int("feed_forward_length", 0), experts=expert_count,
        top_k=get_int("expert_used_count", 0) if expert_count else 0,
        expert_intermediate=get_int("expert_feed_forward_length", 0) if expert_count else 0, vocab=int(vocab or 0),
        params_total=total, params_embedding=emb, params_linear=total - emb, params_expert=0,
        gguf_bytes=gbytes, gguf_embedding_bytes=(emb_t.nbytes or 0) if emb_t else 0,
        gguf_type=_FILE_TYPES.get(ftype) if isinstance(ftype, int) else None,
        context_train=header.arch_key("context_length") if isinstance(header.arch_key("context_length"), int) else None)


# llama.cpp's llama_ftype numbers (general.file_type)
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
               12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
               19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
               26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 38: "MXFP4"}


def resolve_shape(model: str | None, *, config: str | None = None, gguf: str | None = None,
                  env: Any = None, hub: HubAccess | None = None) -> ServeShape:
    """The model's serving shape: a GGUF file's header, a config path, the serving-only entries,
    then the training catalog (under the name, then without its quantization suffix), a local HF cache entry,
    and with ``hub`` the Hugging Face Hub (config.json and safetensors headers, by range)."""
    from pathlib import Path

    from sparkops.planner import architecture

    if gguf:
        from sparkops.planner.gguf import read_model_header

        return shape_from_gguf(read_model_header(Path(gguf).expanduser())[0], source=gguf)
    if config:
        if hub is not None and not Path(config).expanduser().exists():
            import os

            from sparkops.planner.hub import is_hub_id

            if is_hub_id(config) and architecture._cache_snapshot(config, os.environ if env is None else env) is None:
                return _hub_shape(config, hub)  # --config ORG/NAME, not downloaded: read as --model reads it
        return shape_from_arch(architecture.from_path(config, env=env))
    if not model:
        raise ServeInputError("no model given: name one (--model qwen3-30b-a3b, or the id in the command line)")
    if hub is not None:  # llama.cpp's -hf org/repo:TAG, Ollama's hf.co/org/repo:TAG: the GGUF header, by range
        from sparkops.planner.hub import HubOffline, fetch_gguf, gguf_ref

        ref = gguf_ref(model)
        if ref is not None:
            try:
                header, source = fetch_gguf(ref[0], ref[1], hub)
                return shape_from_gguf(header, source=source)
            except HubOffline:
                pass  # without the Hub: the catalogs below, by name
    names = candidate_names(model)
    from sparkops.planner.hub import gguf_ref

    ref = gguf_ref(model)
    if ref is not None and ref[0] != model:  # -hf org/repo:TAG: the repository's name without the tag
        names += [n for n in candidate_names(ref[0]) if n not in names]
    kb = engines_knowledge()
    for n in names:
        key = n.lower()
        for e in kb.models:
            if key in {e.id, e.name.lower(), *(h.lower() for h in e.hf_ids), *(a.lower() for a in e.aliases)}:
                if e.same_as:
                    s = shape_from_arch(architecture.resolve(e.same_as))
                    return ServeShape(**{**s.__dict__, "id": e.id, "name": e.name, "source": e.source,
                                         "context_train": _catalog_context(e.same_as)})
                s = shape_from_config(e.config, id=e.id, name=e.name, source=e.source)
                ctx = e.config.get("max_position_embeddings")
                return ServeShape(**{**s.__dict__, "context_train": ctx if isinstance(ctx, int) else None,
                                     "params_vision": vision_params(e.vision) if e.vision else 0,
                                     "vision": VisionDims.from_config(e.vision) if e.vision and "depth" in e.vision
                                     else None,
                                     "mtp_layers": int(e.config.get("mtp_num_hidden_layers") or 0),
                                     "mtp_layer_params": mtp_layer_params(e.config)
                                     if e.config.get("mtp_num_hidden_layers") else 0})
    last: Exception | None = None
    for n in names:
        try:
            s = shape_from_arch(architecture.resolve(n, env=env))
            return ServeShape(**{**s.__dict__, "context_train": _catalog_context(n), **_catalog_hybrid(n, s.layers)})
        except architecture.ArchitectureError as exc:
            last = last or exc
    if hub is not None:
        from sparkops.planner.hub import HubOffline, is_hub_id

        for n in names:
            if is_hub_id(n):
                try:
                    return _hub_shape(n, hub)
                except HubOffline as exc:  # the catalogs' answer stands, saying the Hub was not asked
                    last = ServeInputError(f"{last or f'unknown model {model!r}'} (the Hugging Face Hub was not read: "
                                           f"{exc.why})")
                except (architecture.ArchitectureError, ServeInputError) as exc:
                    last = exc
                break
    raise ServeInputError(str(last) if last else f"unknown model {model!r}")


def _hub_shape(name: str, hub: HubAccess) -> ServeShape:
    """A Hub model's serving shape: counted by the training planner with its stored bytes when it knows the family,
    else by :func:`shape_from_config` (hybrids, MLA, Gemma 4), with what serving reads beyond the counts."""
    from sparkops.planner import architecture
    from sparkops.planner.hub import HubError

    cfg, _weights, source, _notes = architecture.hub_config(name, hub)
    try:
        s = shape_from_arch(architecture.from_hub(name, hub))
    except HubError:
        raise
    except architecture.ArchitectureError:  # a family the training planner does not count
        text, _ = architecture._unwrap(cfg)
        s = shape_from_config(text, id=name, name=name, source=source)
        s = ServeShape(**{**s.__dict__, "native_format": architecture._prequantized(text.get("quantization_config"))})
    return ServeShape(**{**s.__dict__, **_hub_extras(cfg, s.layers, name)})


def _hub_extras(cfg: dict[str, Any], layers: int, name: str) -> dict[str, Any]:
    """What serving reads from a Hub model's config.json beyond the counted shape, as for the serving catalog's
    entries: the context vLLM and SGLang default to, the gated-DeltaNet dims of a hybrid, a Qwen3-VL-style vision
    tower (its dummy-image size is not in config.json: the profile's encoder pass is then a note), its MTP layers."""
    from sparkops.planner import architecture

    text, _notes = architecture._unwrap(cfg)
    ctx = text.get("max_position_embeddings")
    out: dict[str, Any] = {"context_train": ctx if isinstance(ctx, int) and not isinstance(ctx, bool) else None}
    if text.get("linear_num_value_heads"):
        n_full, gdn = hybrid_layers(text, layers, name)
        out |= {"linear_layers": layers - n_full, "attn_layers": n_full, "gdn": gdn, "ssm_state_bytes": ssm_state_bytes(text)}
    vc = cfg.get("vision_config")
    if isinstance(vc, dict) and all(isinstance(vc.get(k), int) for k in ("hidden_size", "intermediate_size", "depth", "patch_size")):
        out |= {"params_vision": vision_params(vc), "vision": VisionDims.from_config(vc)}
    elif isinstance(vc, dict) and vc.get("model_type") == "pixtral":
        with contextlib.suppress(KeyError, TypeError, ValueError):  # a Pixtral config missing a dimension: not counted
            out["params_vision"] = pixtral_params(vc, cfg)
    mtp = text.get("mtp_num_hidden_layers")
    if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0:
        with contextlib.suppress(KeyError, TypeError, ValueError):  # an MTP layer this count does not know: not counted
            out |= {"mtp_layers": mtp, "mtp_layer_params": mtp_layer_params(text)}
    return out


def _catalog_hybrid(name: str, layers: int) -> dict[str, Any]:
    """The gated-DeltaNet dims of a catalog model (Qwen3-Next), for vLLM's hybrid KV layout; {} otherwise."""
    from sparkops.planner import architecture

    cfg = getattr(architecture._lookup(name), "config", None)
    if not isinstance(cfg, dict) or not cfg.get("linear_num_value_heads"):
        return {}
    n_full, gdn = hybrid_layers(cfg, layers, name)
    return {"linear_layers": layers - n_full, "gdn": gdn, "ssm_state_bytes": ssm_state_bytes(cfg)}


def _catalog_context(name: str) -> int | None:
    """The catalog config's max_position_embeddings: what vLLM and SGLang take as max_model_len when the
    launch line does not set it (vllm/config ModelConfig._get_and_verify_max_len reads it from config.json).
    None for local paths and models outside the catalog."""
    from sparkops.planner import architecture

    e = architecture._lookup(name)
    cfg = getattr(e, "config", None)
    ctx = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
    return ctx if isinstance(ctx, int) else None


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


def kv_dtype_bytes(spec: ServeSpec) -> float:
    if spec.engine in ("llama.cpp", "ollama"):
        table = engine_value("llama.cpp", "cache_type_bytes")
        k = table.get((spec.cache_type_k or "f16").lower())
        v = table.get((spec.cache_type_v or spec.cache_type_k or "f16").lower())
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
    kvb = kv_dtype_bytes(spec)
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
                       gpu_name=dev.name if dev is not None else "",
                       detail="unified memory: CUDA total = MemTotal, CUDA free = MemFree")
    if dev is not None and known(dev.memory_total_bytes):
        total = dev.memory_total_bytes / GIB  # type: ignore[operator]
        free = dev.memory_free_bytes / GIB if known(dev.memory_free_bytes) else None  # type: ignore[operator]
        return Machine(source=source, total_gib=round(total, 2), free_gib=_r(free), available_gib=_r(free),
                       unified=False, gpu_name=dev.name, detail=f"GPU 0 ({dev.name}) device memory")
    raise ServeInputError("no GPU memory in these facts (no GPU, or its memory was not read); "
                          "give --target dgx-spark or --budget-gb")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


# dated: an idle DGX Spark (reference/gb10-readings.md: MemTotal 127600748 kB = 121.69 GiB,
# MemAvailable 118566368 kB = 113.07 GiB; vLLM saw free 110.34/121.69 on a clean boot)
TARGETS = {"dgx-spark": {"total_gib": 121.69, "free_gib": 110.34, "available_gib": 113.07, "unified": True},
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
                   os_reserve_gib=os_reserve_gib if t["unified"] else 0.0,
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


# ------------------------------------------------------------------ engine accounting


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
    """The dummy sampler run's peak: min(max_num_seqs, max_num_batched_tokens) rows of vocab logits."""
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
    out = {"activation_peak": round(max(act + cache, sampler + cache, enc.peak_gib if enc else 0.0), 3),
           "non_torch": non_torch, "cudagraph": round(graphs, 3),
           "profiled_tokens": float(tokens), "profiled_seqs": float(seqs), "cudagraphs_captured": float(n_graphs),
           "sampler_gib": round(sampler, 3), "forward_gib": round(act, 3)}
    if enc:
        out.update({"mm_encoder": round(enc.peak_gib, 3), "mm_encoder_cache": round(cache, 3),
                    "mm_items": float(enc.items), "mm_item_tokens": float(enc.item_tokens),
                    "mm_lean_peak": round(max(act + cache, sampler + cache, enc.lean_peak_gib), 3)})
    return out


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
        out.append(Uncertainty(
            term="unified-non-torch", assumed=f"{ov['non_torch']:g} GiB of non-torch memory, as on a discrete GPU",
            kv_change_gib=[-hi, 0.0],
            why="on unified memory vLLM reads free memory as MemAvailable (vllm/utils/mem_utils.py MemorySnapshot) and "
                "charges every fall of it between init_device and the end of the profile run that torch's pool does "
                "not hold as non-torch memory: the engine's own host heap (torch.compile/Triton during the profile "
                "run) and any other process growing on the pool meanwhile; in all "
                f"{seen['starts']} public GB10 starts read so far the logged pool came out below this plan's, by "
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
                             tp: int) -> list[float]:
    """GiB each pipeline stage's rank holds above (or below) the average rank's base weights (``base_bytes``, all
    ranks, as weights_bytes counts them): its own decoder layers' share, the embedding matrix on the first stage and
    a vocabulary matrix on the last (lm_head; a tied model's last stage builds its own embed_tokens for it), engines.yaml
    vllm.pipeline_stages. Everything else the plan adds to the weights (vision tower, MTP, drafter, LoRA slots) stays
    spread evenly over the stages."""
    c = engine_value("vllm", "pipeline_stages")
    n = len(stage_layers)
    per_param = 4 if fmt == "fp32" else 2  # embeddings / lm_head are kept in the model dtype (weights_bytes)
    vocab = shape.params_embedding * per_param
    layer = (base_bytes - vocab - shape.params_lm_head * per_param) / max(1, shape.layers)
    out = []
    for i, layers in enumerate(stage_layers):
        own = layers * layer + vocab * ((i == c["embedding_stage"] % n) + (i == c["lm_head_stage"] % n))
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
            kv = requested - stage_weights[i] - act - ov["non_torch"] - (graphs if graphs_counted else 0.0)
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


def _vllm(shape: ServeShape, spec: ServeSpec, m: Machine, weights_gib: float, tm: VllmTokenModel,
          stage_weights: list[float] | None = None) -> _Plan:
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
        kv_avail = requested - weights_gib - ov["activation_peak"] - ov["non_torch"] - graphs
        if _version(spec) == OLD_ENGINE and tp * spec.pipeline_parallel > 1:
            # V0 (worker/model_runner.py: "Only perform sampling in the driver worker"): the other ranks profile
            # the forward pass alone and print a larger KV figure; the executor keeps the smallest rank's block
            # count (min over workers), the driver's
            other = round(requested - weights_gib - ov["forward_gib"] - ov["non_torch"] - graphs, 2)
            if other != round(kv_avail, 2):
                kv_other = other
                notes.append(f"V0: only the driver worker samples; the other ranks profile {other:.2f} GiB of KV, "
                             f"the pool is the driver's {kv_avail:.2f} GiB (the smallest rank's)")
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
                 footprint=(ext_persistent + max(kv_avail, 0.0) + ov["activation_peak"] if extensible else
                            requested + (ov["cudagraph"] if graphs_outside_share(spec, shape) else 0.0)),
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
    chunk = spec.max_num_batched_tokens or chunk
    bs = cuda_graph_max_bs or (bs_small if spec.tensor_parallel < 4 else bs_large)
    reserved = (f["base_mib"] + f["activation_mib_per_token"] * max(chunk, f["min_activation_tokens"])
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
    how = (f"SGLang's default: ({gpu_mib:.0f} MiB - {reserved:.0f} MiB reserved for chunked prefill {chunk}, CUDA graphs "
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


def _sglang(shape: ServeShape, spec: ServeSpec, m: Machine, weights_gib: float, kvb: float) -> _Plan:
    """SGLang (model_runner / kv_cache_configurator): the pool is the memory free after the weights less
    pre_model_load_memory x (1 - mem_fraction_static), where pre_model_load_memory is what it read as free before
    loading, NOT the device total: so rest = pre x mem_fraction_static - weights (engines.yaml sglang)."""
    notes: list[str] = []
    if spec.mem_fraction_static:
        msf = spec.mem_fraction_static
    else:
        msf, how = sglang_default_fraction(spec, m.total_gib, mla=bool(shape.mla_dim), multimodal=shape.params_vision > 0)
        notes.append(f"--mem-fraction-static not named: {how} = {msf:g}")
    tp = spec.tensor_parallel
    pre, reads = sglang_pre_load_free(m, spec)
    known_free = pre is not None
    if pre is None:
        pre = m.total_gib - float(engine_value("sglang", "pre_load_context_gib")["tp1" if tp <= 1 else "tp_multi"])
    after_weights = pre - weights_gib
    slack = pre * (1 - msf)
    rest = after_weights - slack
    cell = kv_layer_bytes(shape, kvb, tp) * shape.attn_layers
    page = int(engine_value("sglang", "default_page_size"))
    tokens = int(rest * GIB // cell) // page * page if rest > 0 else 0
    passes = rest > 0 if known_free else None
    if spec.kv_max_tokens and tokens > spec.kv_max_tokens:
        # model_runner: max_total_num_tokens = min(profiled, --max-total-tokens); the pool is allocated for that many
        notes.append(f"--max-total-tokens {spec.kv_max_tokens} caps the pool below the {tokens:,} tokens "
                     f"mem_fraction_static {msf:g} leaves room for")
        tokens = spec.kv_max_tokens // page * page
        rest = tokens * cell / GIB
    start = StartCheck(check="free before loading x mem_fraction_static - weights > 0",
                       requested_gib=round(weights_gib + slack, 2), free_gib=round(pre, 2) if known_free else None,
                       passes=passes,
                       detail=f"SGLang reads {pre:.2f} GiB free before loading ({reads}, less its own context) and keeps "
                              f"(1 - {msf:g}) of that, {slack:.2f} GiB, for activations and CUDA graphs; the rest of the "
                              "memory free after the weights becomes the KV pool (not a share of the device total)")
    return _Plan(weights=weights_gib, overheads={"reserved_for_activations": round(slack, 2)},
                 kv_available=round(rest, 2), tokens=tokens, footprint=weights_gib + max(rest, 0.0) + 0.5,
                 start=start, notes=notes)


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


def _gguf_kv_cells(shape: ServeShape, spec: ServeSpec) -> tuple[int, int, int]:
    """(context cells, sliding-layer cells, sequences) for llama.cpp / Ollama."""
    if spec.engine == "ollama":
        num_ctx = spec.ctx_size or int(engine_value("ollama", "default_num_ctx"))
        seqs = spec.parallel or int(engine_value("ollama", "default_num_parallel"))
        cells = num_ctx * seqs
    else:
        cells = spec.ctx_size or (shape.context_train or int(engine_value("llama.cpp", "default_ctx")))
        seqs = spec.parallel or int(engine_value("llama.cpp", "default_parallel"))
    ub = spec.ubatch or int(engine_value("llama.cpp", "default_ubatch"))
    swa = cells
    if shape.sliding_layers and shape.sliding_window and not spec.swa_full:
        keep = ollama_swa_memory(shape, spec)
        if keep is not None:  # Ollama's own engine: maxSequences x memory + maxBatch, or all when memory > context
            mem, batch = keep
            swa = cells if mem > cells // max(1, seqs) else -(-(mem * seqs + batch) // 256) * 256
        else:
            swa = min(cells, -(-(shape.sliding_window * seqs + ub) // 256) * 256)
    return cells, swa, seqs


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
    cells, swa, seqs = _gguf_kv_cells(shape, spec)
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
                 tokens=cells, footprint=need, start=start, notes=[])


# ------------------------------------------------------------------ the plan


def plan_serve(shape: ServeShape, spec: ServeSpec, machine: Machine, *, fit_margin: float = 0.10,
               beside: list[BesideJob] | None = None, running: list[BesideJob] | None = None,
               drafter: DrafterShape | None = _UNSET) -> ServePlanResult:
    """Judge one server against one machine, beside other planned jobs on the same pool. Pure. ``drafter``: a
    speculative drafter resolved by the caller (e.g. from the Hub); by default the catalog's, when it names one."""
    beside = list(beside or [])
    kbe = engines_knowledge()
    fmt = weight_format(shape, spec)
    wbytes, wdetail = weights_bytes(shape, fmt, spec.engine, max(1, spec.tensor_parallel))
    base_bytes = wbytes  # the checkpoint alone, before the tower, drafter, MTP and LoRA terms
    if shape.params_vision and spec.engine == "vllm":
        if vision_tower_loaded(spec):
            wbytes += shape.params_vision * 2
            wdetail += (f"; vision tower {shape.params_vision / 1e9:.2f} B parameters in bf16 (its vision_config; "
                        "vLLM loads it unless every image/video limit is 0)")
        else:
            wdetail += "; vision tower not loaded (--limit-mm-per-prompt 0 for image and video / --language-model-only)"
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
    kvb = kv_dtype_bytes(spec)
    tp = spec.tensor_parallel if spec.engine in ("vllm", "sglang", "trtllm") else 1
    # vLLM's token model (hybrid layout, drafter, MTP layers), built once per plan and passed on
    tm = None
    if spec.engine == "vllm":
        batched, _seqs = vllm_profiled_batch(shape, spec, machine.total_gib, machine.gpu_name, machine.unified)
        tm = vllm_token_model(shape, spec, drafter, int(batched))
    hy = tm.layout if tm is not None else None
    if tm is not None:
        stage_w = None
        if tm.stage_layers:
            stage_w = [weights_gib + d for d in vllm_stage_weight_shifts(shape, fmt, base_bytes, tm.stage_layers,
                                                                          max(1, spec.tensor_parallel))]
        p = _vllm(shape, spec, machine, weights_gib, tm, stage_w)
    elif spec.engine == "sglang":
        p = _sglang(shape, spec, machine, weights_gib, kvb)
    elif spec.engine == "trtllm":
        p = _trtllm(shape, spec, machine, weights_gib, kvb)
    else:
        p = _gguf(shape, spec, machine, weights_gib, kvb)

    d_layers = drafter_kv_layers(shape, hy, drafter)
    d_per = drafter.kv_layer_bytes(kvb, tp) if drafter is not None else 0.0
    per_tok = kv_bytes_per_token(shape, kvb, tp) + d_per * d_layers + kv_layer_bytes(shape, kvb, tp) * mtp
    mml = spec.max_model_len if spec.engine in ("vllm", "sglang", "trtllm") else None
    if spec.engine in ("llama.cpp", "ollama"):
        cells, _, seqs = _gguf_kv_cells(shape, spec)
        # llama.cpp (kv_unified, b6xxx+): every slot may grow to all -c cells, they share them;
        # Ollama: each of the parallel sequences gets num_ctx
        mml = cells if spec.engine == "llama.cpp" else (spec.ctx_size or cells // seqs)
    mml = mml or shape.context_train

    def _req(length: int) -> float:
        if hy is not None:
            return hy.request_bytes(length)
        return request_kv_bytes(shape, length, kvb, tp) + (d_per * d_layers + kv_layer_bytes(shape, kvb, tp) * mtp) * length

    req = _req(mml) / GIB if mml else None
    pool = p.kv_available
    conc = round(pool / req, 2) if (req and pool is not None and pool > 0) else (0.0 if req else None)
    fits_len = None if req is None or pool is None else pool >= req
    longest = None
    if pool is not None and pool > 0:
        lo, hi = 0, 1 << 24
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _req(mid) / GIB <= pool:
                lo = mid
            else:
                hi = mid - 1
        longest = lo
    rng = None
    if p.uncertainties and pool is not None:
        # a pool cannot be negative: at 0 the engine refuses to start (no memory left for KV blocks)
        rng = [max(0.0, round(pool + sum(u.kv_change_gib[0] for u in p.uncertainties), 2)),
               max(0.0, round(pool + sum(u.kv_change_gib[1] for u in p.uncertainties), 2))]
    kv = KVInfo(dtype_bytes=kvb, bytes_per_token=round(per_tok, 1), available_gib=pool, tokens=p.tokens,
                available_range_gib=rng, other_ranks_gib=p.kv_other_ranks,
                request_gib=None if req is None else round(req, 3), max_concurrency=conc, fits_max_model_len=fits_len,
                max_model_len_fitting=longest, sliding_layers=shape.sliding_layers, mla=bool(shape.mla_dim),
                stages=p.stages)

    # one budget with preflight's G6/G3 (checks/pool_budget.py): the other planned jobs beside this
    # server's footprint, against what the pool can give now less the OS reserve
    footprint = p.footprint
    pb = pool_budget.judge(machine.available_gib if machine.available_gib is not None else machine.total_gib,
                           [pool_budget.PoolLine(b.name, b.gib, b.how) for b in beside],
                           [pool_budget.PoolLine(spec.model or spec.engine, footprint, "footprint")],
                           os_reserve_gib=machine.os_reserve_gib, fit_margin=fit_margin)
    budget, headroom, others = pb.usable_gib, pb.left_gib, pb.reserved_gib
    assert budget is not None and headroom is not None
    sugg: list[str] = []
    notes = list(p.notes)
    verdict: Verdict = "fits"
    bad = []
    if pool is not None and pool <= 0:
        bad.append(f"no memory is left for the KV cache ({pool:.2f} GiB)")
    elif fits_len is False:
        bad.append(f"one request of {mml} tokens needs {req:.2f} GiB of KV cache, the pool has {pool:.2f} GiB")
    if p.start.passes is False and not p.start.passes_after_flush:
        bad.append("the engine's start-up memory check fails with the memory free now")
    if headroom < 0 and (spec.engine in ("llama.cpp", "ollama", "trtllm") or beside):
        with_ = f" beside {others:.2f} GiB of other jobs" if beside else ""
        bad.append(f"it holds {footprint:.2f} GiB{with_}; the pool can give {budget:.2f} GiB")
    seen = p.start.free_gib  # what the start-up check reads (vLLM on unified memory: MemAvailable less its context)
    if beside and spec.engine in ("vllm", "sglang") and p.start.passes is not None and seen is not None \
            and seen - others < (p.start.requested_gib or 0):
        notes.append(f"start the server before the other jobs: once they hold {others:.2f} GiB, the free memory its "
                     f"check reads ({seen - others:.2f} GiB) is below the {p.start.requested_gib:.2f} GiB the "
                     "start-up check asks for")
    if bad:
        verdict = "does-not-fit"
    elif p.start.passes is False and p.start.passes_after_flush:
        verdict = "tight"
        notes.append("starts only after the page cache is dropped (sync; echo 3 > /proc/sys/vm/drop_caches, as root)")
    elif pb.code != "ok" or (spec.concurrency and conc is not None and conc < spec.concurrency):
        verdict = "tight"
    if spec.concurrency and conc is not None and conc < spec.concurrency:
        notes.append(f"{spec.concurrency} requests of {mml} tokens were asked for; the pool holds {conc:g}")
    if spec.engine == "vllm":
        util = spec.gpu_memory_utilization or vllm_default_share(spec.engine_version,
                                                                 extensible=vllm_extensible_kv_cache(spec))
        floor_need = p.weights + p.overheads["activation_peak"] + p.overheads["non_torch"] + p.overheads["cudagraph"] \
            + (req or 0.0)
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
            need_util = (want + (p.weights + p.overheads["activation_peak"] + p.overheads["non_torch"]
                                 + p.overheads["cudagraph"])) / machine.total_gib
            if need_util <= 1.0:
                sugg.append(f"--gpu-memory-utilization {math.ceil(need_util * 100) / 100:.2f} would hold "
                            f"{max(1, spec.concurrency or 1)} request(s) of {mml} tokens")
            else:  # no share of this GPU holds it
                sugg.append(f"no --gpu-memory-utilization holds {max(1, spec.concurrency or 1)} request(s) of {mml} tokens: "
                            f"they need {need_util * machine.total_gib:.2f} GiB with the weights, more than the GPU's "
                            f"{machine.total_gib:.2f} GiB; a shorter --max-model-len, an fp8 KV cache, or more GPUs")
        if headroom < 0 and not bad:
            share = math.floor(max(0.0, budget - others) / machine.total_gib * 100) / 100
            sugg.append(f"--gpu-memory-utilization {share:.2f} leaves the OS/driver reserve "
                        f"({machine.os_reserve_gib:g} GiB) and the other jobs their memory")
        if kvb >= 2 and req:
            sugg.append("--kv-cache-dtype fp8 halves the KV bytes per token")
        if machine.unified and not vllm_extensible_kv_cache(spec):
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
        two_sparks=dict(info.two_sparks))
