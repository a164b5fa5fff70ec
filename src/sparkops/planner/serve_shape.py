"""A served model's shape: what plan --serve needs to know about the model (layers, heads, KV layout, experts,
vision tower, drafter layers), from the training catalog, the serving-only entries in engines.yaml, a config.json
(local or the Hub) or a GGUF header. Pure readers; no engine accounting here."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparkops.planner.serve_engines import (
    ServeInputError,
    ServeModelEntry,
    ServeSpec,
    candidate_names,
    engine_value,
    engines_knowledge,
)

if TYPE_CHECKING:
    from sparkops.planner.architecture import ModelArch
    from sparkops.planner.gguf import GGUFHeader
    from sparkops.planner.hub import HubAccess

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
    # a GGUF file's general.architecture ("qwen3", "gemma3", "gptoss"; "" when not read from a GGUF header): what
    # Ollama's per-architecture defaults key on (engines.yaml ollama.kv_cache_type)
    gguf_architecture: str = ""
    # a pooling checkpoint from the serving catalog (engines.yaml models: pool_task, st_modules): what it is published
    # for, and whether its repository has a Sentence Transformers modules.json (None: not known)
    pool_task: str | None = None
    st_modules: bool | None = None


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

    if str(cfg.get("model_type") or "") in _ABSOLUTE_ENCODERS:
        return shape_from_encoder_config(cfg, id=id, name=name, source=source)
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


# encoder model_types whose vLLM class is bert.py's BertModel with learned absolute positions (BertEmbedding /
# roberta.py RobertaEmbedding); ModernBERT, NomicBERT and GTE-new (rotary) are not counted here
_ABSOLUTE_ENCODERS = ("bert", "roberta", "xlm-roberta")


def shape_from_encoder_config(cfg: dict[str, Any], *, id: str, name: str, source: str) -> ServeShape:
    """A BERT / RoBERTa / XLM-RoBERTa encoder as vLLM 0.27.1 builds it (model_executor/models/bert.py, roberta.py):
    word, position and token-type embeddings (VocabParallelEmbedding each) and their LayerNorm; per layer a fused QKV
    and an output projection with biases, a LayerNorm, the FFN's two biased Linears and a LayerNorm. The head is the
    architecture's: *Model (BertEmbeddingModel / RobertaEmbeddingModel) builds none (pooling is MEAN/CLS without
    weights); BertForSequenceClassification adds BertPooler (hidden x hidden) and a classifier (hidden x num_labels);
    XLM-RoBERTa / RoBERTa ForSequenceClassification add RobertaClassificationHead (dense hidden x hidden, out_proj
    hidden x num_labels). No lm_head. Every layer's attention is ENCODER_ONLY: no KV cache in vLLM (serve.py)."""
    def need(key: str) -> int:
        v = cfg.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
        raise ServeInputError(f"{name}: encoder config has no positive {key}")

    h, layers, heads = need("hidden_size"), need("num_hidden_layers"), need("num_attention_heads")
    inter, vocab, positions = need("intermediate_size"), need("vocab_size"), need("max_position_embeddings")
    types = cfg.get("type_vocab_size")
    types = types if isinstance(types, int) and not isinstance(types, bool) and types >= 0 else 2  # BertConfig default
    labels = cfg.get("num_labels") or (len(cfg["id2label"]) if isinstance(cfg.get("id2label"), dict) else 2)
    emb = (vocab + positions + types) * h
    linear = layers * (4 * h * h + 2 * h * inter)
    per_layer_rest = 4 * h + inter + h + 2 * 2 * h  # QKV + output biases, FFN biases, two LayerNorms
    archs = cfg.get("architectures") or []
    classify = any(str(a).endswith("ForSequenceClassification") for a in archs)
    head = h * h + h + h * int(labels) + int(labels) if classify else 0
    total = emb + 2 * h + linear + layers * per_layer_rest + head
    return ServeShape(
        id=id, name=name, source=source, layers=layers, attn_layers=layers, sliding_layers=0, sliding_window=None,
        kv_heads=heads, head_dim=h // heads, hidden=h, intermediate=inter, experts=0, top_k=0, expert_intermediate=0,
        vocab=vocab, params_total=total, params_embedding=emb, params_linear=linear, params_expert=0,
        q_dim=h, dense_mlp_layers=layers, moe_layers=0, params_lm_head=0, model_type=str(cfg["model_type"]))


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
        gguf_architecture=str(header.metadata.get("general.architecture") or ""),
        context_train=header.arch_key("context_length") if isinstance(header.arch_key("context_length"), int) else None)


# llama.cpp's llama_ftype numbers (general.file_type)
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
               12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
               19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
               26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 38: "MXFP4"}


def serving_entry(name: str) -> ServeModelEntry | None:
    """The serving catalog's entry a name stands for (its id, name, an HF id or an alias; case aside), else None."""
    key = name.strip().lower()
    for e in engines_knowledge().models:
        if key in {e.id, e.name.lower(), *(h.lower() for h in e.hf_ids), *(a.lower() for a in e.aliases)}:
            return e
    return None


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
    for n in names:
        e = serving_entry(n)
        if e is None:
            continue
        if e.same_as:
            s = shape_from_arch(architecture.resolve(e.same_as))
            return ServeShape(**{**s.__dict__, "id": e.id, "name": e.name, "source": e.source,
                                 "context_train": _catalog_context(e.same_as)})
        s = shape_from_config(e.config, id=e.id, name=e.name, source=e.source)
        ctx = e.config.get("max_position_embeddings")
        return ServeShape(**{**s.__dict__, "context_train": ctx if isinstance(ctx, int) else None,
                             "pool_task": e.pool_task, "st_modules": e.st_modules,
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


