"""Model architecture input for the planner: the packaged catalog, a config.json, a model folder
or a local Hugging Face cache entry, turned into one :class:`ModelArch` (shapes and counts).

Why counted, not looked up: the estimator needs what each term is made of (which weights a
4-bit quantizer touches, per-expert shapes, how many layers keep a KV window), and a published
total alone does not say. Counting follows the transformers module layout of each family; the
catalog test compares every count with the published total. Local checkpoints add the exact
stored bytes from their safetensors headers (hf-mem's approach), read without torch and never
in full. Nothing here touches the network: a Hub id is read by :mod:`sparkops.planner.hub`, and
only when a front end hands :func:`resolve` its access.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkops.core.errors import InputError

if TYPE_CHECKING:
    from sparkops.planner.hub import HubAccess

__all__ = [
    "ArchitectureError",
    "CatalogEntry",
    "ModelArch",
    "from_config",
    "from_path",
    "load_catalog",
    "read_safetensors_header",
    "resolve",
]


class ArchitectureError(InputError):
    """The model cannot be described: unknown name, unsupported type, missing or impossible field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ModelArch(_Strict):
    """One model's shapes and parameter counts, as the estimator consumes them."""

    id: str
    name: str
    family: str  # HF model_type
    source: str  # "catalog", a path, or "hf-cache:<id>"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    q_dim: int  # heads*head_dim (differs from hidden for Gemma, some Qwen3 sizes)
    intermediate: int  # dense MLP width (0 if every layer is MoE)
    mlp_gated: bool  # 3 matrices (SwiGLU/GeGLU) vs 2 (fc1/fc2)
    norm: Literal["rms", "layer"]
    vocab: int
    tied_embeddings: bool
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    shared_intermediate: int = 0  # TOTAL width of the shared expert(s) per MoE layer
    moe_layers: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0
    linear_attention_layers: int = 0  # layers without softmax attention (gated DeltaNet, Mamba)
    activation: str = ""  # the MLP activation as transformers names it (hidden_act): eager GELU variants keep more
    parallel_block: bool = False  # attention and MLP read one shared norm output (Phi, parallel-residual StableLM)
    norms_per_layer: int = 2  # hidden-width norms in a decoder layer (Gemma 2/3 add post-attention/post-MLP norms)
    qk_norm_width: int = 0  # elements per token normalized by q_norm/k_norm (Qwen3, Gemma 3, OLMo 2, GLM-4.5)
    norm_fp32_multiply: bool = False  # Gemma and OLMo 2/3 RMSNorms scale in fp32: they keep fp32 tensors, not bf16 ones
    params_total: int
    params_embedding: int
    params_lm_head: int  # 0 when tied
    params_linear: int  # nn.Linear weights inside decoder layers (what bnb 4-bit quantizes), experts+router included
    params_active: int  # per-token active parameters; = params_total for dense
    largest_linear: int  # numel of the largest single Linear weight in a layer (per expert for MoE)
    linear_shapes: dict[str, tuple[int, int]]  # name -> (in_features, out_features)
    stored_bytes: int | None = None
    stored_dtype: str | None = None
    prequantized: str | None = None
    approximate: list[str] = Field(default_factory=list)


class CatalogEntry(_Strict):
    """One packaged model: names it answers to, its published size and a verbatim config subset."""

    id: str
    name: str
    hf_ids: list[str]
    aliases: list[str] = Field(default_factory=list)
    params_b: float
    source: str
    config: dict[str, Any]


class RefusedEntry(_Strict):
    """A model the planner names but refuses to describe, and why."""

    id: str
    name: str
    hf_ids: list[str] = Field(default_factory=list)
    aliases: list[str] = Field(default_factory=list)
    reason: str


class _Limits(_Strict):
    max_hidden: int
    max_layers: int
    max_heads: int
    max_vocab: int
    max_intermediate: int
    max_experts: int
    max_head_dim: int


class _CatalogFile(_Strict):
    version: int
    last_verified: date
    models: list[CatalogEntry]
    refused: list[RefusedEntry] = Field(default_factory=list)
    limits: _Limits


@lru_cache(maxsize=1)
def _catalog_file() -> _CatalogFile:
    from sparkops.knowledge import load_file

    return load_file("models.yaml", _CatalogFile)


def load_catalog() -> list[CatalogEntry]:
    """The packaged catalog (cached; validated at first use so a bad edit fails loudly)."""
    return list(_catalog_file().models)


# --------------------------------------------------------------------------- config reading


def _need(cfg: Mapping[str, Any], *keys: str, what: str = "") -> int:
    """The first present key as a positive int; ArchitectureError naming the key otherwise."""
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return _positive(cfg[k], k)
    label = " / ".join(f"`{k}`" for k in keys)
    raise ArchitectureError(f"config has no {label}{' (' + what + ')' if what else ''}")


def _positive(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or isinstance(value, float) and not value.is_integer():
        raise ArchitectureError(f"config `{key}` must be a whole number, got {value!r}")
    if value <= 0:
        raise ArchitectureError(f"config `{key}` must be positive, got {value!r}")
    return int(value)


def _opt(cfg: Mapping[str, Any], key: str, default: int) -> int:
    v = cfg.get(key)
    return default if v is None else _positive(v, key)


def _flag(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    v = cfg.get(key, default)
    return default if v is None else bool(v)


@dataclass
class _Kind:
    """One kind of decoder layer (uniform models have one; MoE with dense first layers or hybrids more)."""

    count: int
    linears: dict[str, tuple[int, int]]  # every non-expert Linear weight, router included
    extra: int = 0  # norms, biases, sinks, convolutions: parameters that are not Linear weights
    experts: int = 0
    expert_linears: dict[str, tuple[int, int]] = field(default_factory=dict)  # per expert
    expert_extra: int = 0  # per-expert biases (gpt-oss)

    def per_expert(self) -> int:
        return sum(i * o for i, o in self.expert_linears.values()) + self.expert_extra

    def linear_weights(self) -> int:
        return sum(i * o for i, o in self.linears.values()) + self.experts * sum(i * o for i, o in self.expert_linears.values())

    def total(self) -> int:
        return sum(i * o for i, o in self.linears.values()) + self.extra + self.experts * self.per_expert()


@dataclass
class _Shape:
    """What the family readers produce; ``_assemble`` turns it into a ModelArch."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    norm: Literal["rms", "layer"]
    mlp_gated: bool
    intermediate: int
    kinds: list[_Kind]
    embed_extra: int = 0  # e.g. BLOOM's embedding LayerNorm
    final_extra: int = 0  # final norm (+ lm_head bias)
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    shared_intermediate: int = 0
    moe_layers: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0
    linear_attention_layers: int = 0
    parallel_block: bool = False
    norms_per_layer: int = 2
    qk_norm_width: int = 0
    notes: list[str] = field(default_factory=list)


def _attn(h: int, heads: int, kv: int, hd: int, *, qkv_bias: bool, o_bias: bool, fused: bool = False) -> tuple[dict[str, tuple[int, int]], int]:
    """q/k/v/o Linear shapes and their bias count; ``fused`` is Phi-3's single qkv_proj."""
    q, k = heads * hd, kv * hd
    lin = {"qkv_proj": (h, q + 2 * k)} if fused else {"q_proj": (h, q), "k_proj": (h, k), "v_proj": (h, k)}
    lin["o_proj"] = (q, h)
    return lin, (q + 2 * k if qkv_bias else 0) + (h if o_bias else 0)


def _mlp(h: int, i: int, *, gated: bool, bias: bool = False, fused: bool = False) -> tuple[dict[str, tuple[int, int]], int]:
    if gated and fused:
        return {"gate_up_proj": (h, 2 * i), "down_proj": (i, h)}, (2 * i + h if bias else 0)
    if gated:
        return {"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}, (2 * i + h if bias else 0)
    return {"up_proj": (h, i), "down_proj": (i, h)}, (i + h if bias else 0)


def _common(cfg: Mapping[str, Any]) -> tuple[int, int, int, int, int, int]:
    h = _need(cfg, "hidden_size", "n_embd", "d_model")
    layers = _need(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _need(cfg, "num_attention_heads", "n_head")
    kv = _opt(cfg, "num_key_value_heads", heads)
    if kv > heads or heads % kv:
        raise ArchitectureError(f"config has {heads} attention heads and {kv} key/value heads: heads must be a multiple of kv heads")
    hd = _opt(cfg, "head_dim", 0) if cfg.get("head_dim") is not None else 0
    if not hd:
        if h % heads:
            raise ArchitectureError(f"hidden_size {h} is not divisible by {heads} heads and the config has no `head_dim`")
        hd = h // heads
    vocab = _need(cfg, "vocab_size", "padded_vocab_size")
    return h, layers, heads, kv, hd, vocab


def _layer_types(cfg: Mapping[str, Any], layers: int) -> list[str] | None:
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and all(isinstance(x, str) for x in lt):
        if len(lt) != layers:
            raise ArchitectureError(f"config `layer_types` lists {len(lt)} layers but `num_hidden_layers` is {layers}")
        return lt
    return None


def _window(cfg: Mapping[str, Any]) -> int | None:
    sw = cfg.get("sliding_window")
    if sw is None or sw is False:
        return None
    return _positive(sw, "sliding_window")


# Families whose decoder layer is attention + MLP with per-family details (module names follow transformers).
_LLAMA_LIKE = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
               "olmo", "olmo2", "olmo3", "stablelm", "phi3", "nemotron", "gpt_oss", "glm4_moe", "granite", "seed_oss"}
_SPECIAL = {"phi", "bloom", "qwen", "qwen3_next", "nemotron_h"}
SUPPORTED_TYPES = sorted(_LLAMA_LIKE | _SPECIAL)

_REFUSED_TYPES = {
    "nemotron-nas": "NAS-pruned layers that differ one by one (block_configs); a uniform count would be a guess",
    "deci": "variable per-layer attention (DeciLM); a uniform count would be a guess",
    "deepseek_v2": "multi-head latent attention is not modelled",
    "deepseek_v3": "multi-head latent attention is not modelled",
}


def _llama_like(mt: str, cfg: Mapping[str, Any]) -> _Shape:
    h, layers, heads, kv, hd, vocab = _common(cfg)
    tied = _flag(cfg, "tie_word_embeddings", mt in {"gemma", "gemma2", "gemma3_text"})
    notes: list[str] = []
    gated = mt != "nemotron"
    norm: Literal["rms", "layer"] = "layer" if mt in {"stablelm", "nemotron", "olmo"} else "rms"
    # per-norm parameter count: LayerNorm with bias has 2h, OLMo-1 norms have none
    norm_p = {"stablelm": 2 * h, "nemotron": 2 * h, "olmo": 0}.get(mt, h)
    norms = 4 if mt in {"gemma2", "gemma3_text"} else (1 if mt == "stablelm" and cfg.get("use_parallel_residual") else 2)
    q_dim, k_dim = heads * hd, kv * hd
    qkv_bias = {"qwen2": True, "qwen2_moe": True, "stablelm": _flag(cfg, "use_qkv_bias", False), "gpt_oss": True,
                "seed_oss": _flag(cfg, "attention_bias", True)}.get(mt, _flag(cfg, "attention_bias", False))
    o_bias = mt == "gpt_oss" or (mt in {"llama", "olmo2", "olmo3", "nemotron", "granite"} and _flag(cfg, "attention_bias", False)) \
        or (mt == "seed_oss" and _flag(cfg, "attention_out_bias", False))
    attn, extra = _attn(h, heads, kv, hd, qkv_bias=qkv_bias, o_bias=o_bias, fused=mt == "phi3")
    extra += norms * norm_p
    qk_width = 0  # elements per token the q/k norms normalize (activations), whatever their parameter shape
    if mt in {"qwen3", "qwen3_moe", "gemma3_text"} or (mt == "glm4_moe" and _flag(cfg, "use_qk_norm", False)):
        extra += 2 * hd  # per-head q_norm / k_norm
        qk_width = q_dim + k_dim
    if mt in {"olmo2", "olmo3"}:
        extra += q_dim + k_dim  # full-width q_norm / k_norm
        qk_width = q_dim + k_dim
    if mt == "stablelm" and _flag(cfg, "qk_layernorm", False):
        extra += q_dim + k_dim
        qk_width = q_dim + k_dim
    if mt == "gpt_oss":
        extra += heads  # attention sinks
    mlp_bias = _flag(cfg, "mlp_bias", False) and mt in {"llama", "nemotron", "granite"}
    final = norm_p

    sw = _window(cfg)
    if mt in {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"} and not _flag(cfg, "use_sliding_window", False):
        sw = None
    sliding = 0
    lt = _layer_types(cfg, layers)
    if sw is not None:
        if lt is not None:
            sliding = sum(t == "sliding_attention" for t in lt)
        elif mt == "gemma2":
            sliding = (layers + 1) // 2
        elif mt == "gemma3_text":
            pattern = _opt(cfg, "sliding_window_pattern", _opt(cfg, "_sliding_window_pattern", 6))
            sliding = layers - layers // pattern
        elif mt == "gpt_oss":
            sliding = (layers + 1) // 2
        elif mt in {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}:
            sliding = max(0, layers - _opt(cfg, "max_window_layers", layers))
        else:
            sliding = layers
        if sliding == 0:
            sw = None

    shape = _Shape(hidden=h, heads=heads, kv_heads=kv, head_dim=hd, vocab=vocab, tied=tied, norm=norm, mlp_gated=gated,
                   intermediate=0, kinds=[], final_extra=final, sliding_window=sw, sliding_layers=sliding, notes=notes,
                   parallel_block=mt == "stablelm" and bool(cfg.get("use_parallel_residual")),
                   norms_per_layer=max(norms, 2) if mt != "olmo" else 2, qk_norm_width=qk_width)

    # the family's own key first; transformers 5 saves Qwen2/3-MoE configs with num_local_experts (attribute_map
    # {"num_experts": "num_local_experts"}), so every spelling is accepted
    experts_key = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts", "glm4_moe": "n_routed_experts"}.get(mt, "num_experts")
    if mt in {"mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "glm4_moe"}:
        E = _need(cfg, experts_key, *(k for k in ("num_experts", "num_local_experts", "n_routed_experts") if k != experts_key),
                  what="number of routed experts")
        k = _need(cfg, "num_experts_per_tok", "experts_per_token", what="experts per token")
        if k > E:
            raise ArchitectureError(f"config routes {k} experts per token but has only {E}")
        ei = _need(cfg, "moe_intermediate_size", "intermediate_size", what="expert width") if mt != "mixtral" else _need(cfg, "intermediate_size")
        if mt == "gpt_oss":
            ei = _need(cfg, "intermediate_size")
            elin = {"gate_up_proj": (h, 2 * ei), "down_proj": (ei, h)}
            eextra = 2 * ei + h
            router, router_extra = {"router": (h, E)}, E
        else:
            elin = {"gate_proj": (h, ei), "up_proj": (h, ei), "down_proj": (ei, h)}
            eextra = 0
            router, router_extra = {"gate": (h, E)}, 0  # GLM's e_score_correction_bias is a buffer, not a parameter
        shared_lin: dict[str, tuple[int, int]] = {}
        si, n_shared = 0, 0
        if mt == "qwen2_moe" and cfg.get("shared_expert_intermediate_size"):
            si, n_shared = _positive(cfg["shared_expert_intermediate_size"], "shared_expert_intermediate_size"), 1
            shared_lin = {"shared_expert.gate_proj": (h, si), "shared_expert.up_proj": (h, si), "shared_expert.down_proj": (si, h),
                          "shared_expert_gate": (h, 1)}
        if mt == "glm4_moe" and cfg.get("n_shared_experts"):
            n_shared = _positive(cfg["n_shared_experts"], "n_shared_experts")
            si = ei * n_shared
            shared_lin = {"shared_experts.gate_proj": (h, si), "shared_experts.up_proj": (h, si), "shared_experts.down_proj": (si, h)}
        # which layers are MoE
        if mt == "glm4_moe":
            first_dense = int(cfg.get("first_k_dense_replace") or 0)
            moe_idx = [i for i in range(layers) if i >= first_dense]
        elif mt in {"qwen2_moe", "qwen3_moe"}:
            step = _opt(cfg, "decoder_sparse_step", 1)
            only = set(cfg.get("mlp_only_layers") or [])
            moe_idx = [i for i in range(layers) if i not in only and (i + 1) % step == 0]
        else:
            moe_idx = list(range(layers))
        n_moe = len(moe_idx)
        moe_kind = _Kind(count=n_moe, linears={**attn, **router, **shared_lin}, extra=extra + router_extra, experts=E,
                         expert_linears=elin, expert_extra=eextra)
        kinds = [moe_kind] if n_moe else []
        if n_moe < layers:
            di = _need(cfg, "intermediate_size", what="dense MLP width of the non-MoE layers")
            mlp, b = _mlp(h, di, gated=True)
            kinds.append(_Kind(count=layers - n_moe, linears={**attn, **mlp}, extra=extra + b))
            shape.intermediate = di
        shape.kinds = kinds
        shape.experts, shape.experts_per_token, shape.expert_intermediate = E, k, ei
        shape.shared_experts, shape.shared_intermediate, shape.moe_layers = n_shared, si, n_moe
        notes.append("routed experts are counted in params_linear, but transformers >= 5 (and gpt-oss always) keeps them as "
                     "fused 3-D parameters, not nn.Linear: bitsandbytes 4-bit may leave them unquantized")
        return shape

    i = _need(cfg, "intermediate_size", "ffn_hidden_size", what="MLP width")
    mlp, b = _mlp(h, i, gated=gated, bias=mlp_bias, fused=mt == "phi3")
    shape.intermediate = i
    shape.kinds = [_Kind(count=layers, linears={**attn, **mlp}, extra=extra + b)]
    return shape


# Structures a generic decoder cannot stand for: the config field that shows each one.
_UNSIZABLE_FIELDS = (
    ("kv_lora_rank", "multi-head latent attention (compressed K/V projections) is not modelled"),
    ("q_lora_rank", "multi-head latent attention (low-rank query projections) is not modelled"),
    ("block_configs", "layers that differ one by one (NAS-pruned); a uniform per-layer count would be a guess"),
    ("hybrid_override_pattern", "a hybrid of Mamba / attention / MLP blocks whose block kinds the planner does not know"),
    ("layers_block_type", "a hybrid of attention and state-space blocks"),
    ("attn_layer_indices", "attention only in some layers (state-space blocks elsewhere)"),
    ("ssm_state_size", "state-space (Mamba) mixers"),
    ("linear_num_key_heads", "linear-attention (DeltaNet-style) mixers"),
    ("encoder_layers", "an encoder-decoder model (separate encoder stack)"),
    ("type_vocab_size", "token-type embeddings of a BERT-style encoder, not a causal decoder"),
)
_DECODER_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_ATTENTION_LAYER_TYPES = {"full_attention", "sliding_attention", "attention", "global_attention", "local_attention"}


def _generic(mt: str, cfg: Mapping[str, Any]) -> _Shape:
    """A decoder-only config of an unknown ``model_type`` with the usual fields, sized as a Llama-style decoder
    (or a Qwen/GLM-style MoE when it names routed experts); every assumption is written into the notes.
    Refuses, naming the deciding field, what such a decoder cannot stand for."""
    for key, why in _UNSIZABLE_FIELDS:
        if cfg.get(key) not in (None, False, 0, "", [], {}):
            raise ArchitectureError(f"model_type '{mt}' is not a family the planner knows, and its config field `{key}` "
                                    f"shows {why}; it cannot be sized as a generic decoder")
    arch_names = cfg.get("architectures")
    if isinstance(arch_names, list) and arch_names and not any(str(a).endswith(_DECODER_HEADS) for a in arch_names):
        raise ArchitectureError(f"model_type '{mt}': `architectures` ({', '.join(map(str, arch_names))}) names no causal-LM "
                                "head; only decoder-only language models are planned")
    if cfg.get("is_encoder_decoder"):
        raise ArchitectureError(f"model_type '{mt}': `is_encoder_decoder` is true; only decoder-only models are planned")
    lt = cfg.get("layer_types")
    if isinstance(lt, list):
        odd = sorted({str(t) for t in lt} - _ATTENTION_LAYER_TYPES)
        if odd:
            raise ArchitectureError(f"model_type '{mt}': `layer_types` lists {', '.join(odd)} layers; only softmax-attention "
                                    "layers can be sized as a generic decoder")
    ncfg = dict(cfg)
    notes = [f"model_type '{mt}' is not one of the planner's families: sized as a generic decoder from its config"]
    assumed = ["every layer is alike (attention + MLP)", "RMSNorm", "gated (SwiGLU-style) MLP of `intermediate_size`",
               "rotary positions (no position-embedding table)"]
    experts = next((k for k in _EXPERT_KEYS if isinstance(ncfg.get(k), int) and ncfg[k] > 1), None)
    if any(k in cfg for k in ("layer_norm_eps", "layer_norm_epsilon")) and "rms_norm_eps" not in cfg:
        assumed[1] = "LayerNorm (the config has layer_norm_eps)"
    if "tie_word_embeddings" not in cfg:
        ncfg["tie_word_embeddings"] = False
        assumed.append("an untied lm_head (`tie_word_embeddings` absent; the larger case)")
    if cfg.get("attention_bias") is None:
        assumed.append("no attention biases (`attention_bias` absent)")
    if cfg.get("use_qk_norm") or cfg.get("qk_layernorm") or cfg.get("use_qk_layernorm"):
        ncfg["use_qk_norm"] = True
    for key in ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_layers"):
        if cfg.get(key):
            notes.append(f"`{key}` = {cfg[key]}: multi-token-prediction layers are not counted (fine-tuning through "
                         "transformers' causal-LM head does not run them)")
    if experts:
        ncfg["n_routed_experts"] = ncfg[experts]
        ncfg.setdefault("num_experts_per_tok", cfg.get("moe_k") or cfg.get("moe_topk") or cfg.get("top_k"))
        if ncfg.get("moe_intermediate_size") is None and cfg.get("expert_intermediate_size") is not None:
            ncfg["moe_intermediate_size"] = cfg["expert_intermediate_size"]
        if cfg.get("shared_expert_intermediate_size") and not cfg.get("n_shared_experts"):
            raise ArchitectureError(f"model_type '{mt}': `shared_expert_intermediate_size` without `n_shared_experts`; "
                                    "the shared expert's layout cannot be told")
        assumed.append(f"MoE in every layer from `first_k_dense_replace` (= {int(cfg.get('first_k_dense_replace') or 0)}) "
                       f"on, `{experts}` experts of `moe_intermediate_size`, top-`num_experts_per_tok`")
    if cfg.get("use_sliding_window") is False:
        ncfg["sliding_window"] = None
    try:
        shape = _llama_like("glm4_moe" if experts else mt, ncfg)
    except ArchitectureError as exc:
        raise ArchitectureError(f"model_type '{mt}' (sized as a generic decoder): {exc}") from exc
    if assumed[1].startswith("LayerNorm"):
        shape.norm = "layer"
    shape.notes = notes + ["assumed: " + "; ".join(assumed)] + shape.notes
    return shape


def _phi(cfg: Mapping[str, Any]) -> _Shape:
    """Phi-1/1.5/2: parallel attention+MLP under one LayerNorm, biases everywhere, fc1/fc2, lm_head bias."""
    h, layers, heads, kv, hd, vocab = _common(cfg)
    i = _need(cfg, "intermediate_size")
    q, k = heads * hd, kv * hd
    lin = {"q_proj": (h, q), "k_proj": (h, k), "v_proj": (h, k), "dense": (q, h), "fc1": (h, i), "fc2": (i, h)}
    extra = q + 2 * k + h + i + h + 2 * h
    if _flag(cfg, "qk_layernorm", False):
        extra += 4 * hd
    tied = _flag(cfg, "tie_word_embeddings", False)
    return _Shape(hidden=h, heads=heads, kv_heads=kv, head_dim=hd, vocab=vocab, tied=tied, norm="layer", mlp_gated=False,
                  intermediate=i, kinds=[_Kind(count=layers, linears=lin, extra=extra)], final_extra=2 * h + (0 if tied else vocab),
                  parallel_block=True)


def _bloom(cfg: Mapping[str, Any]) -> _Shape:
    """BLOOM: fused query_key_value, 4h GeLU MLP, LayerNorms with bias, an embedding LayerNorm, ALiBi (no rotary)."""
    h, layers, heads, kv, hd, vocab = _common(cfg)
    lin = {"query_key_value": (h, 3 * h), "dense": (h, h), "dense_h_to_4h": (h, 4 * h), "dense_4h_to_h": (4 * h, h)}
    extra = 3 * h + h + 4 * h + h + 2 * 2 * h
    return _Shape(hidden=h, heads=heads, kv_heads=heads, head_dim=hd, vocab=vocab, tied=_flag(cfg, "tie_word_embeddings", True),
                  norm="layer", mlp_gated=False, intermediate=4 * h, kinds=[_Kind(count=layers, linears=lin, extra=extra)],
                  embed_extra=2 * h, final_extra=2 * h)


def _qwen1(cfg: Mapping[str, Any]) -> _Shape:
    """Qwen v1 (remote code): c_attn fused with bias, w1/w2/c_proj MLP where intermediate_size is twice one matrix's width."""
    h = _need(cfg, "hidden_size")
    layers = _need(cfg, "num_hidden_layers")
    heads = _need(cfg, "num_attention_heads")
    if cfg.get("kv_channels") is not None:
        hd = _positive(cfg["kv_channels"], "kv_channels")
    elif h % heads == 0:
        hd = h // heads
    else:
        raise ArchitectureError("qwen config has no `kv_channels` and hidden_size is not divisible by the heads")
    vocab = _need(cfg, "vocab_size")
    ff = _need(cfg, "intermediate_size")
    if ff % 2:
        raise ArchitectureError(f"qwen (v1) intermediate_size {ff} must be even (it is twice the w1/w2 width)")
    i, proj = ff // 2, heads * hd
    lin = {"c_attn": (h, 3 * proj), "attn.c_proj": (proj, h), "w1": (h, i), "w2": (h, i), "mlp.c_proj": (i, h)}
    extra = 3 * proj + 2 * h
    return _Shape(hidden=h, heads=heads, kv_heads=heads, head_dim=hd, vocab=vocab, tied=_flag(cfg, "tie_word_embeddings", False),
                  norm="rms", mlp_gated=True, intermediate=i, kinds=[_Kind(count=layers, linears=lin, extra=extra)], final_extra=h)


def _qwen3_next(cfg: Mapping[str, Any]) -> _Shape:
    """Qwen3-Next: gated attention every ``full_attention_interval`` layers, gated DeltaNet elsewhere, MoE + shared expert."""
    h, layers, heads, kv, hd, vocab = _common(cfg)
    lt = _layer_types(cfg, layers)
    if lt is not None:
        full = [t == "full_attention" for t in lt]
    else:
        interval = _need(cfg, "full_attention_interval")
        full = [(i + 1) % interval == 0 for i in range(layers)]
    nk, nv = _need(cfg, "linear_num_key_heads"), _need(cfg, "linear_num_value_heads")
    dk, dv = _need(cfg, "linear_key_head_dim"), _need(cfg, "linear_value_head_dim")
    conv_k = _need(cfg, "linear_conv_kernel_dim")
    key_dim, value_dim = nk * dk, nv * dv
    E, k = _need(cfg, "num_experts"), _need(cfg, "num_experts_per_tok")
    ei = _need(cfg, "moe_intermediate_size")
    si = _opt(cfg, "shared_expert_intermediate_size", 0) if cfg.get("shared_expert_intermediate_size") else 0
    moe_lin = {"gate": (h, E)}
    if si:
        moe_lin |= {"shared_expert.gate_proj": (h, si), "shared_expert.up_proj": (h, si), "shared_expert.down_proj": (si, h),
                    "shared_expert_gate": (h, 1)}
    elin = {"gate_proj": (h, ei), "up_proj": (h, ei), "down_proj": (ei, h)}
    q, kd = heads * hd, kv * hd
    full_lin = {"q_proj": (h, 2 * q), "k_proj": (h, kd), "v_proj": (h, kd), "o_proj": (q, h)}  # q_proj also yields the output gate
    lin_lin = {"linear_attn.in_proj_qkvz": (h, 2 * key_dim + 2 * value_dim), "linear_attn.in_proj_ba": (h, 2 * nv),
               "linear_attn.out_proj": (value_dim, h)}
    conv = (2 * key_dim + value_dim) * conv_k
    n_full = sum(full)
    kinds = []
    if n_full:
        kinds.append(_Kind(count=n_full, linears={**full_lin, **moe_lin}, extra=2 * h + 2 * hd, experts=E, expert_linears=elin))
    if layers - n_full:
        kinds.append(_Kind(count=layers - n_full, linears={**lin_lin, **moe_lin}, extra=2 * h + conv + 2 * nv + dv, experts=E,
                           expert_linears=elin))
    notes = ["gated-DeltaNet layers: parameters counted from the transformers module layout; their activation and "
             "recurrent-state memory is not the softmax-attention formula"]
    return _Shape(hidden=h, heads=heads, kv_heads=kv, head_dim=hd, vocab=vocab, tied=_flag(cfg, "tie_word_embeddings", False),
                  norm="rms", mlp_gated=True, intermediate=0, kinds=kinds, final_extra=h, experts=E, experts_per_token=k,
                  expert_intermediate=ei, shared_experts=1 if si else 0, shared_intermediate=si, moe_layers=layers,
                  linear_attention_layers=layers - n_full, notes=notes)


def _nemotron_h(cfg: Mapping[str, Any]) -> _Shape:
    """Nemotron-H: a pattern of single-mixer blocks, M = Mamba-2, * = attention, - = squared-ReLU MLP."""
    h, layers, heads, kv, hd, vocab = _common(cfg)
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set("M*-"):
        raise ArchitectureError("nemotron_h config needs `hybrid_override_pattern` with one of M, *, - per layer "
                                "(MoE 'E' blocks are not supported)")
    i = _need(cfg, "intermediate_size")
    mh, mhd = _need(cfg, "mamba_num_heads"), _need(cfg, "mamba_head_dim")
    state, groups, conv_k = _need(cfg, "ssm_state_size"), _need(cfg, "n_groups"), _need(cfg, "conv_kernel")
    inner = mh * mhd
    conv_dim = inner + 2 * groups * state
    conv_bias = conv_dim if _flag(cfg, "use_conv_bias", True) else 0
    mamba = _Kind(count=pattern.count("M"), linears={"mixer.in_proj": (h, inner + conv_dim + mh), "mixer.out_proj": (inner, h)},
                  extra=h + conv_dim * conv_k + conv_bias + 3 * mh + inner)
    attn_lin, attn_b = _attn(h, heads, kv, hd, qkv_bias=_flag(cfg, "attention_bias", False), o_bias=_flag(cfg, "attention_bias", False))
    attention = _Kind(count=pattern.count("*"), linears=attn_lin, extra=h + attn_b)
    mlp = _Kind(count=pattern.count("-"), linears={"mixer.up_proj": (h, i), "mixer.down_proj": (i, h)},
                extra=h + ((i + h) if _flag(cfg, "mlp_bias", False) else 0))
    notes = [f"hybrid: {mamba.count} Mamba-2, {attention.count} attention and {mlp.count} MLP-only blocks of {layers}; "
             "parameters are exact per block, but per-layer activation formulas (attention + MLP in every layer) only approximate it"]
    return _Shape(hidden=h, heads=heads, kv_heads=kv, head_dim=hd, vocab=vocab, tied=_flag(cfg, "tie_word_embeddings", False),
                  norm="rms", mlp_gated=False, intermediate=i, kinds=[k for k in (mamba, attention, mlp) if k.count],
                  final_extra=h, linear_attention_layers=mamba.count, notes=notes)


# --------------------------------------------------------------------------- assembling


_QUANT_NAMES = {"mxfp4": "mxfp4", "fp8": "fp8", "fbgemm_fp8": "fp8", "gptq": "gptq", "awq": "awq", "hqq": "hqq", "eetq": "int8",
                "bitnet": "bitnet", "torchao": "torchao", "quanto": "quanto", "aqlm": "aqlm", "exl2": "exl2"}


def _prequantized(qc: Any) -> str | None:
    """The checkpoint's own quantization, from quantization_config (what the weights term must use)."""
    if not isinstance(qc, Mapping):
        return None
    method = str(qc.get("quant_method", "")).lower()
    if method == "bitsandbytes":
        return "bnb-4bit" if qc.get("load_in_4bit") or qc.get("_load_in_4bit") else "bnb-8bit"
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).lower()
        return "nvfp4" if "fp4" in algo else ("fp8" if "fp8" in algo else "modelopt")
    if method == "compressed-tensors":
        blob = json.dumps(qc).lower()
        return "nvfp4" if "nvfp4" in blob else ("fp8" if "float" in blob and "8" in blob else "compressed-tensors")
    if not method:
        return None
    return _QUANT_NAMES.get(method, method)


def _unwrap(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The text model's config: multimodal wrappers (gemma3, llava, mistral3...) nest it in text_config."""
    notes: list[str] = []
    for key in ("text_config", "llm_config", "language_config"):
        inner = cfg.get(key)
        if isinstance(inner, Mapping) and inner:
            merged = dict(inner)
            for k in ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config"):
                if k not in merged and k in cfg:
                    merged[k] = cfg[k]
            if "model_type" not in merged or merged["model_type"] == cfg.get("model_type"):
                outer = str(cfg.get("model_type", ""))
                merged["model_type"] = {"gemma3": "gemma3_text"}.get(outer, merged.get("model_type", outer))
            if any(k in cfg for k in ("vision_config", "audio_config")):
                notes.append(f"only the text model of this {cfg.get('model_type', 'multimodal')} checkpoint is counted; "
                             "the vision/audio tower is not")
            return merged, notes
    return dict(cfg), notes


def _check_limits(s: _Shape, layers: int) -> None:
    lim = _catalog_file().limits
    for value, bound, key in ((s.hidden, lim.max_hidden, "hidden_size"), (layers, lim.max_layers, "num_hidden_layers"),
                              (s.heads, lim.max_heads, "num_attention_heads"), (s.vocab, lim.max_vocab, "vocab_size"),
                              (s.intermediate, lim.max_intermediate, "intermediate_size"), (s.experts, lim.max_experts, "experts"),
                              (s.head_dim, lim.max_head_dim, "head_dim"), (s.expert_intermediate, lim.max_intermediate, "moe_intermediate_size")):
        if value > bound:
            raise ArchitectureError(f"config `{key}` = {value} is beyond any real model (limit {bound}); check the file")


def from_config(cfg: Mapping[str, Any], *, id: str = "custom", name: str | None = None, source: str = "config") -> ModelArch:
    """A ModelArch from a Hugging Face config mapping; ArchitectureError says which field or type is the problem."""
    if not isinstance(cfg, Mapping):
        raise ArchitectureError(f"a model config must be a JSON object, got {type(cfg).__name__}")
    text, notes = _unwrap(cfg)
    mt = text.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise ArchitectureError("config has no `model_type`; cannot tell the architecture")
    if mt in _REFUSED_TYPES:
        raise ArchitectureError(f"model_type '{mt}' is refused: {_REFUSED_TYPES[mt]}")
    if mt == "phi":
        s = _phi(text)
    elif mt == "bloom":
        s = _bloom(text)
    elif mt == "qwen":
        s = _qwen1(text)
    elif mt == "qwen3_next":
        s = _qwen3_next(text)
    elif mt == "nemotron_h":
        s = _nemotron_h(text)
    elif mt in _LLAMA_LIKE:
        s = _llama_like(mt, text)
    else:
        s = _generic(mt, text)
    layers = sum(k.count for k in s.kinds)
    _check_limits(s, layers)

    emb = s.vocab * s.hidden
    head = 0 if s.tied else s.vocab * s.hidden
    body = sum(k.count * k.total() for k in s.kinds)
    total = emb + s.embed_extra + body + s.final_extra + head
    inactive = sum(k.count * (k.experts - s.experts_per_token) * k.per_expert() for k in s.kinds if k.experts)
    shapes: dict[str, tuple[int, int]] = {}
    for k in s.kinds:
        shapes.update(k.linears)
        shapes.update({f"experts.{n}": v for n, v in k.expert_linears.items()})
    largest = max((i * o for n, (i, o) in shapes.items() if n not in {"gate", "router"}), default=0)
    dtype = text.get("torch_dtype") or text.get("dtype")
    return ModelArch(
        id=id, name=name or id, family=mt, source=source, hidden=s.hidden, layers=layers, heads=s.heads, kv_heads=s.kv_heads,
        head_dim=s.head_dim, q_dim=s.heads * s.head_dim, intermediate=s.intermediate, mlp_gated=s.mlp_gated, norm=s.norm,
        vocab=s.vocab, tied_embeddings=s.tied, experts=s.experts, experts_per_token=s.experts_per_token,
        expert_intermediate=s.expert_intermediate, shared_experts=s.shared_experts, shared_intermediate=s.shared_intermediate,
        moe_layers=s.moe_layers, sliding_window=s.sliding_window, sliding_layers=s.sliding_layers,
        linear_attention_layers=s.linear_attention_layers, activation=_activation(mt, text),
        parallel_block=s.parallel_block, norms_per_layer=s.norms_per_layer, qk_norm_width=s.qk_norm_width,
        norm_fp32_multiply=mt in {"gemma", "gemma2", "gemma3_text", "olmo2", "olmo3"}, params_total=total, params_embedding=emb, params_lm_head=head,
        params_linear=sum(k.count * k.linear_weights() for k in s.kinds), params_active=total - inactive, largest_linear=largest,
        linear_shapes=shapes, stored_dtype=str(dtype) if isinstance(dtype, str) else None,
        prequantized=_prequantized(text.get("quantization_config")), approximate=notes + s.notes,
    )


_DEFAULT_ACT = {"phi": "gelu_new", "gemma": "gelu_pytorch_tanh", "gemma2": "gelu_pytorch_tanh",
                "gemma3_text": "gelu_pytorch_tanh", "bloom": "bloom_gelu"}


def _activation(mt: str, cfg: Mapping[str, Any]) -> str:
    """The MLP activation's transformers name: the config's, else the family's default."""
    for key in ("hidden_activation", "hidden_act", "activation_function"):
        if isinstance(cfg.get(key), str):
            return cfg[key].strip().lower()
    return _DEFAULT_ACT.get(mt, "silu")


# --------------------------------------------------------------------------- catalog lookup


_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base", "-pt")


def _key(name: str) -> str:
    """A forgiving lookup key: org dropped, case and separators folded, "Meta-" and -Instruct/-hf style suffixes removed."""
    n = name.strip().lower().replace("_", "-").replace(" ", "-")
    n = n.rsplit("/", 1)[-1]
    if n.startswith("meta-llama"):
        n = n[len("meta-"):]
    changed = True
    while changed:
        changed = False
        for suf in _SUFFIXES:
            if n.endswith(suf) and len(n) > len(suf):
                n, changed = n[: -len(suf)], True
    return n.replace("-", "")


def _names(e: CatalogEntry | RefusedEntry) -> list[str]:
    return [e.id, *e.aliases, *e.hf_ids]


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, CatalogEntry | RefusedEntry], dict[str, CatalogEntry | RefusedEntry]]:
    """Exact (lower-cased) names and folded keys -> entry; a folded key claimed by two entries is dropped."""
    exact: dict[str, CatalogEntry | RefusedEntry] = {}
    folded: dict[str, CatalogEntry | RefusedEntry] = {}
    clash: set[str] = set()
    f = _catalog_file()
    for e in [*f.models, *f.refused]:
        for n in _names(e):
            exact.setdefault(n.lower(), e)
            k = _key(n)
            if k in folded and folded[k].id != e.id:
                clash.add(k)
            folded.setdefault(k, e)
    for k in clash:
        folded.pop(k, None)
    return exact, folded


def _lookup(name: str) -> CatalogEntry | RefusedEntry | None:
    exact, folded = _index()
    return exact.get(name.strip().lower()) or folded.get(_key(name))


def _suggest(name: str) -> list[str]:
    f = _catalog_file()
    by_name = {n.lower(): e.id for e in f.models for n in _names(e)}
    close = difflib.get_close_matches(name.strip().lower(), list(by_name), n=20, cutoff=0.5)
    ids: list[str] = []
    for c in close:
        if by_name[c] not in ids:
            ids.append(by_name[c])
    return ids[:5]


def _from_entry(e: CatalogEntry) -> ModelArch:
    return from_config(e.config, id=e.id, name=e.name, source="catalog")


def resolve(name: str, *, env: Mapping[str, str] | None = None, hub: HubAccess | None = None) -> ModelArch:
    """A model by catalog id, alias or HF id (case and -Instruct/-hf variants forgiven), else a local path or
    HF-cache entry, else (with ``hub``, an ``org/name`` id) the Hub's config.json and safetensors headers;
    unknown names raise ArchitectureError with up to 5 close catalog matches."""
    if not isinstance(name, str) or not name.strip():
        raise ArchitectureError("no model name given")
    env = os.environ if env is None else env
    p = Path(name).expanduser()
    if ("/" in name or name.endswith(".json")) and _exists(p):
        return from_path(name, env=env)
    e = _lookup(name)
    if isinstance(e, RefusedEntry):
        raise ArchitectureError(f"{e.name} is not supported: {e.reason}")
    if e is not None:
        return _from_entry(e)
    if "/" in name and _cache_snapshot(name, env) is not None:
        return from_path(name, env=env)
    not_read = ""
    if hub is not None and _is_hub_id(name):
        from sparkops.planner.hub import HubOffline

        try:
            return from_hub(name, hub)
        except HubOffline as exc:
            not_read = f"; the Hugging Face Hub was not read ({exc.why})"
    hint = _suggest(name)
    more = f"{not_read}; close matches: {', '.join(hint)}" if hint else not_read
    raise ArchitectureError(f"unknown model '{name}' (not in the catalog, not a local path or cached HF id){more}. "
                            "Pass --config with a config.json or model folder for other models.")


# --------------------------------------------------------------------------- local files


_HEADER_LIMIT = 100 * 1024 * 1024
_DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16, "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U64": 64, "U32": 32,
               "U16": 16, "U8": 8, "BOOL": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
               "C64": 64, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4, "E8M0": 8}


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except OSError:
        return False


def read_safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Tensor name -> (dtype, shape) from a safetensors file's JSON header (8-byte little-endian length
    first); reads only the header, refuses one over 100 MB, and raises ArchitectureError on anything malformed."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                raise ArchitectureError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", raw)
            if n > _HEADER_LIMIT:
                raise ArchitectureError(f"{path}: safetensors header claims {n} bytes (over the 100 MB limit); not a valid file")
            blob = fh.read(n)
    except OSError as exc:
        raise ArchitectureError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(blob) < n:
        raise ArchitectureError(f"{path}: truncated safetensors header ({len(blob)} of {n} bytes)")
    return parse_safetensors_header(blob, str(path))


def parse_safetensors_header(blob: bytes, where: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Tensor name -> (dtype, shape) from a safetensors header's JSON bytes (a local file's or one read
    from the Hub by range); ArchitectureError, naming ``where``, on anything malformed."""
    try:
        header = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ArchitectureError(f"{where}: safetensors header is not JSON") from exc
    if not isinstance(header, dict):
        raise ArchitectureError(f"{where}: safetensors header is not a JSON object")
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for tname, info in header.items():
        if tname == "__metadata__":
            continue
        if not isinstance(info, dict) or not isinstance(info.get("dtype"), str) or not isinstance(info.get("shape"), list):
            raise ArchitectureError(f"{where}: tensor '{str(tname)[:80]}' has no dtype/shape in the header")
        shape = info["shape"]
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ArchitectureError(f"{where}: tensor '{str(tname)[:80]}' has an invalid shape {str(shape)[:80]}")
        out[str(tname)] = (info["dtype"], tuple(shape))
    return out


def tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    bits = _DTYPE_BITS.get(dtype.upper())
    if bits is None:
        raise ArchitectureError(f"unknown safetensors dtype '{dtype[:20]}'")
    return math.ceil(math.prod(shape) * bits / 8)


def _load_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ArchitectureError(f"cannot read {p}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArchitectureError(f"{p} is not valid JSON: {exc}") from exc


def _weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        data = _load_json(index)
        wm = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(wm, dict):
            raise ArchitectureError(f"{index} has no weight_map")
        files = sorted({str(v) for v in wm.values()})
        missing = [f for f in files if not (folder / f).is_file()]
        if missing:
            raise ArchitectureError(f"{index} names {len(missing)} file(s) that are not in {folder}, e.g. {missing[0]}")
        return [folder / f for f in files]
    return sorted(folder.glob("*.safetensors"))


@dataclass(frozen=True)
class WeightSums:
    """What a checkpoint's safetensors headers say, summed: exact stored bytes, values, bytes per dtype."""

    files: int
    stored_bytes: int
    numel: int
    by_dtype: dict[str, int]


def weight_sums(headers: Iterable[Mapping[str, tuple[str, tuple[int, ...]]]]) -> WeightSums:
    """The sums over parsed headers (:func:`read_safetensors_header`, or the Hub's by range)."""
    stored, numel, files = 0, 0, 0
    by_dtype: dict[str, int] = {}
    for header in headers:
        files += 1
        for dtype, shape in header.values():
            b = tensor_bytes(dtype, shape)
            stored += b
            numel += math.prod(shape)
            by_dtype[dtype] = by_dtype.get(dtype, 0) + b
    return WeightSums(files=files, stored_bytes=stored, numel=numel, by_dtype=by_dtype)


def _with_headers(arch: ModelArch, files: list[Path]) -> ModelArch:
    return with_weights(arch, weight_sums(read_safetensors_header(f) for f in files))


def with_weights(arch: ModelArch, w: WeightSums) -> ModelArch:
    """Exact stored bytes (and, for unquantized checkpoints that match the structure, the exact parameter count)."""
    stored, numel, by_dtype = w.stored_bytes, w.numel, w.by_dtype
    update: dict[str, Any] = {"stored_bytes": stored}
    if not arch.stored_dtype and by_dtype:
        update["stored_dtype"] = max(by_dtype, key=lambda d: by_dtype[d]).lower()
    notes = list(arch.approximate)
    if arch.prequantized is None and numel:
        if abs(numel - arch.params_total) <= 0.02 * arch.params_total:
            delta = numel - arch.params_total
            update |= {"params_total": numel, "params_active": arch.params_active + delta}
        else:
            notes.append(f"the safetensors files hold {numel:,} values but the structure counts {arch.params_total:,} "
                         "(extra heads such as MTP or vision, or a saved tied lm_head); the structure count is kept")
    update["approximate"] = notes
    return arch.model_copy(update=update)


def _hub_dir(env: Mapping[str, str]) -> Path:
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".cache" / "huggingface" / "hub"


def _cache_snapshot(hf_id: str, env: Mapping[str, str]) -> Path | None:
    """The snapshot folder for an HF id in the local cache: the one refs/main names, else the newest."""
    if not re.fullmatch(r"[\w.\-]+/[\w.\-]+", hf_id.strip()):
        return None
    try:
        repo = _hub_dir(env) / ("models--" + hf_id.strip().replace("/", "--"))
        snaps = repo / "snapshots"
        if not snaps.is_dir():
            return None
        ref = repo / "refs" / "main"
        if ref.is_file():
            cand = snaps / ref.read_text(encoding="utf-8").strip()
            if (cand / "config.json").is_file():
                return cand
        found = [d for d in snaps.iterdir() if (d / "config.json").is_file()]
        return max(found, key=lambda d: d.stat().st_mtime) if found else None
    except OSError:
        return None


def _is_hub_id(name: str) -> bool:
    from sparkops.planner.hub import is_hub_id

    return is_hub_id(name)


def hub_config(name: str, hub: HubAccess) -> tuple[dict[str, Any], WeightSums | None, str, tuple[str, ...]]:
    """(config.json, the summed safetensors headers, the source "hub:ID@commit", notes) of a Hub model."""
    from sparkops.planner.hub import fetch_model

    m = fetch_model(name, hub)
    notes = (*m.notes, f"read from the Hub's cache of {m.fetched_at}") if m.from_cache else m.notes
    return m.config, m.weights, m.source, notes


def from_hub(name: str, hub: HubAccess) -> ModelArch:
    """A model on the Hugging Face Hub, counted from its config.json with the exact stored bytes of its
    safetensors headers (read by range, never the weights): as a local folder, before any download."""
    cfg, weights, source, notes = hub_config(name, hub)
    arch = from_config(cfg, id=name.strip(), name=name.strip(), source=source)
    if weights is not None and weights.files:
        arch = with_weights(arch, weights)
    return arch.model_copy(update={"approximate": [*arch.approximate, *notes]}) if notes else arch


def from_path(path_or_id: str, *, env: Mapping[str, str] | None = None, hub: HubAccess | None = None) -> ModelArch:
    """A config.json file, a model folder (config.json + safetensors headers), an HF id in the local cache, or
    (with ``hub``) an HF id read from the Hub."""
    env = os.environ if env is None else env
    p = Path(str(path_or_id)).expanduser()
    source = str(p)
    if _exists(p) and p.is_file():
        cfg_file, folder = p, None
    elif _exists(p) and p.is_dir():
        cfg_file, folder = p / "config.json", p
        if not cfg_file.is_file():
            raise ArchitectureError(f"{p} has no config.json")
    else:
        snap = _cache_snapshot(str(path_or_id), env)
        if snap is None and hub is not None and _is_hub_id(str(path_or_id)):
            return from_hub(str(path_or_id), hub)
        if snap is None:
            raise ArchitectureError(f"'{path_or_id}' is neither a file, a folder nor an HF id in the local cache ({_hub_dir(env)})")
        cfg_file, folder, source = snap / "config.json", snap, f"hf-cache:{path_or_id}"
    cfg = _load_json(cfg_file)
    ident = folder.name if folder is not None and not source.startswith("hf-cache:") else str(path_or_id)
    try:
        arch = from_config(cfg, id=ident, name=ident, source=source)
    except ValidationError as exc:  # pragma: no cover - from_config validates its own numbers first
        raise ArchitectureError(f"{cfg_file}: {exc.errors()[0]['msg']}") from exc
    if folder is not None:
        files = _weight_files(folder)
        if files:
            arch = _with_headers(arch, files)
    return arch
