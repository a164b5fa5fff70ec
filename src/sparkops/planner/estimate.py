"""The estimate: a pure function from (architecture, run) to itemised terms and phase peaks.

The peak is a maximum over phases, not a sum of everything (memory-estimation.md §0, §1.6):

- ``load``: the weights as stored on the device, plus what loading holds in flight;
- ``forward-backward``: weights + optimizer states + saved activations + the logits/loss buffers
  (and early gradients, kernel transients) at the start of the backward pass;
- ``optimizer-step``: weights + optimizer states + all gradients + the step's temporaries.

Activations are counted tensor by tensor from what autograd really keeps (§1.3), derived from
the shapes, not from a per-model fit: a frozen Linear keeps no input (its backward needs only
the weight), PEFT's fp32 adapters keep an fp32 copy of each targeted module's input, HF's fp32
RMSNorm keeps an fp32 copy of its input, SDPA/flash attention keeps Q, K, V and O but no scores.
Every number here is bytes; the CLI converts to GB (10^9 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkops.core.units import GB
from sparkops.planner.run import Coefficients, PlannerKnowledge, RunSpec, planner_knowledge

if TYPE_CHECKING:
    from sparkops.planner.architecture import ModelArch

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}

# Linear modules by role (HF names across families); the architecture lists each layer's modules.
QKV = {"q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "wqkv", "c_attn", "query", "key", "value",
       "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"}
ATTN_OUT = {"o_proj", "dense", "out_proj", "c_proj", "wo"}
MLP_IN = {"gate_proj", "up_proj", "gate_up_proj", "fc1", "dense_h_to_4h", "c_fc", "w1", "w3"}
MLP_OUT = {"down_proj", "fc2", "dense_4h_to_h", "w2"}


@dataclass(frozen=True)
class LinearModule:
    """One kind of Linear in a decoder layer: ``count`` copies across the model."""

    name: str  # as in the architecture's linear_shapes (e.g. "q_proj", "experts.gate_proj")
    d_in: int
    d_out: int
    count: int  # instances across the whole model
    per_token_instances: float  # how many instances one token passes through per layer (MoE: top-k)
    role: str  # qkv | attn_out | mlp_in | mlp_out | router | other


@dataclass
class Estimate:
    """Itemised bytes; ``phases`` hold each phase's peak and which terms make it."""

    terms: dict[str, float] = field(default_factory=dict)  # name -> bytes
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # phase -> {term: bytes}
    notes: list[str] = field(default_factory=list)
    trainable_params: int = 0
    untracked_by_torch: float = 0.0  # bytes torch's counters do not see (paged optimizer state)

    def phase_total(self, phase: str) -> float:
        return sum(self.phases[phase].values())

    @property
    def binding_phase(self) -> str:
        return max(self.phases, key=self.phase_total)

    @property
    def peak_allocated(self) -> float:
        """What ``torch.cuda.max_memory_allocated`` should show (tensors only)."""
        return self.phase_total(self.binding_phase) - self.untracked_by_torch

    @property
    def peak_tensors(self) -> float:
        return self.phase_total(self.binding_phase)

    @property
    def peak_total(self) -> float:
        """What the memory pool must hold: tensors + allocator slack + CUDA context (+ host process)."""
        return self.peak_tensors + self.terms.get("allocator_slack", 0.0) + self.terms.get("cuda_context", 0.0) \
            + self.terms.get("host_process", 0.0)


def linear_modules(arch: ModelArch) -> list[LinearModule]:
    """The architecture's per-layer Linear modules with their counts across the model."""
    moe_layers = arch.moe_layers
    dense_layers = arch.layers - moe_layers
    attn_layers = arch.layers - arch.linear_attention_layers
    out: list[LinearModule] = []
    for name, (d_in, d_out) in arch.linear_shapes.items():
        base = name.rsplit(".", 1)[-1].lower()
        prefix = name.rsplit(".", 1)[0].lower() if "." in name else ""
        role = ("qkv" if base in QKV else "attn_out" if base in ATTN_OUT else "mlp_in" if base in MLP_IN
                else "mlp_out" if base in MLP_OUT else "router" if base in ("gate", "router") else "other")
        if prefix.startswith("expert"):
            count, per_tok = arch.experts * moe_layers, float(arch.experts_per_token) * moe_layers / max(arch.layers, 1)
        elif prefix.startswith("shared") or role == "router":
            count, per_tok = moe_layers, moe_layers / max(arch.layers, 1)
        elif prefix.startswith("linear_attn") or prefix.startswith("mixer"):
            count, per_tok = arch.linear_attention_layers, arch.linear_attention_layers / max(arch.layers, 1)
        elif role in ("qkv", "attn_out"):
            count, per_tok = attn_layers, attn_layers / max(arch.layers, 1)
        elif role in ("mlp_in", "mlp_out"):
            count, per_tok = dense_layers, dense_layers / max(arch.layers, 1)
        else:
            count, per_tok = arch.layers, 1.0
        if count > 0:
            out.append(LinearModule(name, d_in, d_out, count, per_tok, role))
    return out


def lora_targets(modules: list[LinearModule], targets: list[str]) -> list[LinearModule]:
    """PEFT's matching: ``all-linear`` = every Linear in the layers; else by module-name suffix."""
    wanted = {t.lower() for t in targets}
    if wanted & {"all-linear", "all", "all_linear"}:
        return [m for m in modules if m.role != "router"]
    return [m for m in modules if m.name.rsplit(".", 1)[-1].lower() in wanted or m.name.lower() in wanted]


def estimate(arch: ModelArch, run: RunSpec, pk: PlannerKnowledge | None = None) -> Estimate:
    """Itemised estimate of one training run's memory, as a maximum over phases."""
    pk = pk or planner_knowledge()
    co = pk.coefficients
    est = Estimate()
    est.notes.extend(run.assumed)
    tokens = run.batch * run.seq_len
    c = DTYPE_BYTES[run.compute_dtype]
    pbytes = DTYPE_BYTES[run.param_dtype]
    modules = linear_modules(arch)
    targeted = lora_targets(modules, run.lora.targets) if run.lora else []
    if run.lora and not targeted:
        from sparkops.planner.run import PlanInputError

        names = sorted({m.name.rsplit(".", 1)[-1] for m in modules})
        raise PlanInputError(f"LoRA targets {run.lora.targets} match no Linear module of {arch.name}; "
                             f"its modules: {', '.join(names)}")

    # ---- weights
    nonlinear = arch.params_total - arch.params_linear
    if run.method == "qlora":
        q = pk.storage_bytes[run.quant or "nf4-dq"]
        keep = 4.0 if run.kbit_upcast else c  # embeddings, lm_head, norms stay unquantized (fp32 after PEFT's upcast)
        weights = arch.params_linear * q + nonlinear * keep
        if run.kbit_upcast:
            est.notes.append("QLoRA via prepare_model_for_kbit_training: embeddings, lm_head and norms are upcast "
                             "to fp32, and so is the residual stream (activations in fp32)")
    else:
        weights = arch.params_total * pbytes
    est.terms["weights"] = weights

    # ---- trainable parameters, gradients, optimizer states
    opt_key, opt = pk.optimizer(run.optimizer)
    if run.lora:
        a_bytes = DTYPE_BYTES[run.lora.dtype]
        trainable = sum(run.lora.r * (m.d_in + m.d_out) * m.count for m in targeted)
        est.terms["adapters"] = trainable * a_bytes
        grad_b = state_dtype_b = a_bytes
    else:
        trainable = arch.params_total
        grad_b = state_dtype_b = pbytes
    est.trainable_params = trainable
    est.terms["gradients"] = trainable * grad_b
    per_state = opt.state_bytes if opt.state_bytes is not None else opt.states * state_dtype_b
    states = trainable * per_state
    if run.loop == "trainer" and run.trains_base and opt.state_bytes is not None and opt.state_bytes < 8.0 \
            and "8bit" in opt_key:
        # Trainer registers a 32-bit override for every nn.Embedding with bitsandbytes 8-bit optimizers
        states += arch.params_embedding * (8.0 - per_state)
        est.notes.append("Trainer + 8-bit AdamW: the embedding keeps 32-bit optimizer states (Trainer's override)")
    est.terms["optimizer_states"] = states
    est.terms["optimizer_step_temp"] = trainable * state_dtype_b * opt.step_temp_params
    if not opt.torch_counted:
        est.untracked_by_torch = states
        est.notes.append(f"{opt_key}: optimizer state lives in CUDA managed memory, invisible to torch's counters; "
                         "on a Spark it pages within the same pool and frees nothing")
    if run.param_dtype == "fp32" and run.method != "qlora":
        # autocast casts every Linear weight to bf16 and the matmul keeps that copy for backward
        est.terms["autocast_weight_copies"] = (arch.params_linear + (arch.params_lm_head or arch.params_embedding)) * c
    # ---- activations
    act = _activations(arch, run, modules, targeted, co, tokens)
    unused = "activations_layers" if run.grad_checkpointing else "activations_one_layer"
    est.terms.update({k: b for k, b in act.items() if k != unused})
    v = arch.vocab
    est.terms["logits_loss"] = pk.loss_bytes_per_logit[run.loss] * tokens * v
    if run.trains_base:
        # the lm_head's (or tied embedding's) gradient appears at the very start of backward
        est.terms["early_gradients"] = v * arch.hidden * grad_b
    if run.method == "qlora":
        # bnb dequantizes the whole 4-bit weight to the compute dtype per matmul, forward and backward
        est.terms["dequant_transient"] = 2 * arch.largest_linear * c
    if _sdpa_math_fp32(arch, run, 4.0 if run.method == "qlora" and run.kbit_upcast else c):
        est.notes.append("fp32 attention inputs with grouped KV heads outside autocast: SDPA falls back to its math "
                         "kernel (seq^2 fp32 probabilities per head); the Trainer's autocast avoids it (in-sample: "
                         "one device point, m19)")
    est.terms["cuda_workspaces"] = 64 * 2**20  # cuBLAS workspaces (2 handles x 32 MiB on Hopper/Blackwell)

    # ---- phases
    base = {"weights": weights}
    if run.lora:
        base["adapters"] = est.terms["adapters"]
    inflight = 0.0
    if run.method == "qlora" and arch.prequantized is None:
        inflight = co.load_inflight_tensors * arch.largest_linear * (2 + pk.storage_bytes[run.quant or "nf4-dq"])
    est.phases["load"] = {**base, "load_inflight": inflight}
    fb = {**base, "optimizer_states": states}
    for k in ("autocast_weight_copies", "early_gradients", "dequant_transient", "cuda_workspaces"):
        if k in est.terms:
            fb[k] = est.terms[k]
    if run.grad_checkpointing:
        fb["activations_checkpoints"] = act["activations_checkpoints"]
        logit_side = act["activations_outside_layers"] + est.terms["logits_loss"]
        recompute_side = act["activations_one_layer"] + act["backward_transient"]
        if logit_side >= recompute_side:
            fb["activations_outside_layers"] = act["activations_outside_layers"]
            fb["logits_loss"] = est.terms["logits_loss"]
        else:
            fb["activations_one_layer"] = act["activations_one_layer"]
            fb["backward_transient"] = act["backward_transient"]
    else:
        fb["activations_layers"] = act["activations_layers"]
        fb["activations_outside_layers"] = act["activations_outside_layers"]
        if est.terms["logits_loss"] >= act["backward_transient"]:
            fb["logits_loss"] = est.terms["logits_loss"]
        else:
            fb["backward_transient"] = act["backward_transient"]
    if run.grad_accum > 1:  # accumulated gradients stay alive through the next micro-batches' forward and backward
        fb["gradients"] = est.terms["gradients"]
    est.phases["forward-backward"] = fb
    est.phases["optimizer-step"] = {**base, "optimizer_states": states, "gradients": est.terms["gradients"],
                                    "optimizer_step_temp": est.terms["optimizer_step_temp"],
                                    "cuda_workspaces": est.terms["cuda_workspaces"]}

    # ---- what the pool holds beyond tensors
    tensors = max(sum(p.values()) for p in est.phases.values())
    frac = co.allocator_slack_expandable if run.expandable_segments else co.allocator_slack_fraction
    est.terms["allocator_slack"] = max(co.allocator_slack_min_gb * GB, frac * tensors)
    est.terms["cuda_context"] = co.cuda_context_gb * GB
    est.terms["host_process"] = co.host_process_gb * GB
    if arch.approximate:
        est.notes.extend(f"architecture: {a}" for a in arch.approximate)
    return est


def _sdpa_math_fp32(arch: ModelArch, run: RunSpec, inner: float) -> bool:
    """SDPA on fp32 Q/K/V of a GQA model outside autocast (a plain-loop QLoRA after PEFT's fp32 upcast):
    transformers passes enable_gqa=True (no mask), flash refuses fp32 and the memory-efficient kernel has no GQA,
    so the math path runs and materializes batch x heads x seq^2 fp32 probabilities."""
    return run.attention == "sdpa" and not run.autocast and inner == 4.0 and arch.kv_heads < arch.heads


def _activations(arch: ModelArch, run: RunSpec, modules: list[LinearModule], targeted: list[LinearModule],
                 co: Coefficients, tokens: int) -> dict[str, float]:
    """Saved activations per token, per layer and outside the layers, times the tokens."""
    lora = run.lora
    fp32_stream = run.param_dtype == "fp32" or (run.method == "qlora" and run.kbit_upcast)
    inner = 4.0 if run.method == "qlora" and run.kbit_upcast else DTYPE_BYTES[run.compute_dtype]
    stream = 4.0 if fp32_stream else DTYPE_BYTES[run.compute_dtype]
    frozen_saves = co.frozen_linear_saves_input
    h, q, kvd = arch.hidden, arch.q_dim, arch.kv_heads * arch.head_dim
    a_heads, s = arch.heads, run.seq_len
    tset = {m.name for m in targeted}

    def group_input(roles: set[str], width: int, x_bytes: float) -> float:
        """Bytes kept for one shared input feeding the Linear modules of these roles."""
        mods = [m for m in modules if m.role in roles and not m.name.startswith(("expert", "shared", "linear_attn"))]
        if not mods:
            return 0.0
        base_keeps = run.trains_base or frozen_saves or run.bnb_keeps_input
        if run.autocast:
            return _autocast_group(mods, base_keeps, width, x_bytes == 4.0)
        total = 0.0
        shared = base_keeps
        for m in mods:
            if m.name not in tset or lora is None:
                continue
            a = DTYPE_BYTES[lora.dtype]
            cast = a != x_bytes
            if lora.dropout > 0:
                total += (a if cast else x_bytes) * width + 1.0 * width  # dropout output + mask
            elif cast:
                total += a * width  # PEFT casts the input to the adapter dtype; lora_A keeps the copy
            else:
                shared = True  # lora_A keeps the very tensor the base layer got
            total += a * lora.r * m.per_token_instances  # lora_A output kept for lora_B
        return total + (x_bytes * width if shared else 0.0)

    def _autocast_group(mods: list[LinearModule], base_keeps: bool, width: int, feed32: bool) -> float:
        """Under autocast a matmul keeps the bf16 copy it made of an fp32 input, one copy per module (only
        leaf weights are cached); PEFT's cast of the input to fp32 adapters is cast back to bf16 in lora_A."""
        total, shared = 0.0, False
        for m in mods:
            if base_keeps:
                if feed32:
                    total += 2.0 * width
                else:
                    shared = True
            if lora is None or m.name not in tset:
                continue
            if DTYPE_BYTES[lora.dtype] == 4.0 or feed32 or lora.dropout > 0:
                total += 2.0 * width
            else:
                shared = True
            if lora.dropout > 0:
                total += 1.0 * width  # dropout mask
            total += 2.0 * lora.r * m.per_token_instances  # lora_A output (bf16) kept for lora_B
        return total + (2.0 * width if shared else 0.0)

    # norms: HF RMSNorm keeps its fp32 input, plus the normalized tensor when its weight trains
    if arch.norm_fp32_multiply:  # Gemma: x.float() kept, and the fp32 product when the weight trains
        per_elem = 4.0 + (4.0 if run.trains_base else 0.0)
    elif run.fp32_norm or fp32_stream:
        per_elem = 4.0 + (stream if run.trains_base else 0.0)
    else:
        per_elem = stream
    norm = per_elem * h
    # Gemma 2/3's extra post-attention and post-MLP norms, and per-head q/k norms
    extra_norms = per_elem * (h * (arch.norms_per_layer - 2) + arch.qk_norm_width)
    x_in = inner if not fp32_stream or run.method == "qlora" else DTYPE_BYTES[run.compute_dtype]
    extra_b = co.autocast_activation_extra_bytes if run.autocast else inner
    composed = co.activation_extra_saved.get(arch.activation, 0) > 0
    attn_out_in, mlp_out_in = inner, inner
    if run.autocast:  # the dtype of the tensor that feeds each group of Linear modules
        x_in = 4.0 if fp32_stream else inner
        attn_out_in = 2.0
        mlp_out_in = 4.0 if (run.method == "qlora" and run.kbit_upcast) or composed else 2.0
    # attention core
    if run.attention == "eager":
        core = inner * 3 * q + (4.0 + inner) * a_heads * s  # Q, repeated K and V, fp32 softmax + probs
        bwd_attn = (4.0 + 2 * inner) * a_heads * s
    elif _sdpa_math_fp32(arch, run, inner):
        # fp32 Q/K/V with GQA: flash needs half precision and the memory-efficient kernel takes no enable_gqa,
        # so SDPA falls back to its math path: fp32 probabilities kept, and their gradients in backward
        core = inner * (2 * q + 2 * kvd) + 4.0 * a_heads * s
        bwd_attn = 2 * 4.0 * a_heads * s
    else:
        core = inner * (2 * q + 2 * kvd)  # Q, K, V (GQA-native), O
        bwd_attn = 0.0
    attn_layer = norm + extra_norms + group_input({"qkv"}, h, x_in) + core + group_input({"attn_out"}, q, attn_out_in)
    # MLP (dense layers)
    i = arch.intermediate
    act_extra = extra_b * i * co.activation_extra_saved.get(arch.activation, 0)  # composed GELUs keep intermediates
    if arch.mlp_gated:
        mlp_dense = 3 * inner * i + group_input({"mlp_out"}, i, mlp_out_in) + act_extra  # act input, act output, up output
    else:
        mlp_dense = inner * i + group_input({"mlp_out"}, i, mlp_out_in) + act_extra  # activation input
    if arch.parallel_block:  # one norm feeds both branches: its output is kept once, beside the attention's
        shared = group_input({"qkv", "mlp_in"}, h, x_in)
        mlp_common = shared - group_input({"qkv"}, h, x_in)
    else:
        mlp_common = norm + group_input({"mlp_in"}, h, x_in)
    # MoE layers: per token, top-k experts each with their own gathered input and intermediates
    moe = 0.0
    if arch.moe_layers:
        k, ie = arch.experts_per_token, arch.expert_intermediate
        exp_in_kept = run.trains_base or frozen_saves or any(m.name.startswith("expert") and
                                                             m.role == "mlp_in" for m in targeted)
        exp_out_kept = run.trains_base or frozen_saves or any(m.name.startswith("expert") and
                                                              m.role == "mlp_out" for m in targeted)
        per_expert = 3 * inner * ie + (inner * ie if exp_out_kept else 0.0) + (inner * h if exp_in_kept else 0.0) \
            + inner * h  # routing-weight multiply keeps the expert output
        moe = k * per_expert + 4.0 * arch.experts  # + fp32 router probabilities
        if arch.shared_experts:
            moe += 4 * inner * arch.shared_intermediate
    n_moe, n_dense = arch.moe_layers, arch.layers - arch.moe_layers
    layer_avg = attn_layer + mlp_common + (n_dense * mlp_dense + n_moe * moe) / max(arch.layers, 1)
    biggest_layer = attn_layer + mlp_common + max(mlp_dense if n_dense else 0.0, moe if n_moe else 0.0)
    bg = co.backward_layer_grads
    width_i = arch.expert_intermediate * arch.experts_per_token if n_moe and not n_dense else i
    bwd = inner * (bg.mlp_widths * width_i + bg.hidden_widths * h) + bwd_attn
    outside = norm + (inner * h if run.trains_base or frozen_saves else 0.0)  # final norm, lm_head input
    res = {
        "activations_layers": tokens * layer_avg * arch.layers,
        "activations_outside_layers": tokens * outside,
        "activations_one_layer": tokens * biggest_layer,
        "backward_transient": tokens * bwd,
    }
    if run.grad_checkpointing:
        res["activations_checkpoints"] = tokens * stream * h * arch.layers
    return res
