"""The estimator's terms and phases, one behaviour at a time, on real catalog architectures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.planner import architecture
from sparkops.planner.estimate import estimate, linear_modules, lora_targets
from sparkops.planner.run import PlanInputError, build_run, planner_knowledge, run_words


@pytest.fixture(scope="module")
def llama8b():
    return architecture.resolve("llama-3.1-8b")


@pytest.fixture(scope="module")
def llama70b():
    return architecture.resolve("llama-3.1-70b")


def run(**kw):
    kw.setdefault("method", "lora")
    kw.setdefault("loop", "plain")  # the hand-written loop the harness calibrated; the Trainer path has its own tests
    kw.setdefault("batch", 1)
    kw.setdefault("seq_len", 2048)
    return build_run(**kw)


# ---------------------------------------------------------------- trainable parameters (reference §2.3 checks)

@pytest.mark.parametrize(("model", "r", "targets", "expected"), [
    ("llama-3.1-8b", 16, ["all-linear"], 41_943_040),
    ("llama-3.1-70b", 16, ["all-linear"], 207_093_760),
    ("llama-2-7b", 8, ["q_proj", "v_proj"], 4_194_304),
    ("llama-3.2-3b", 32, ["q_proj", "v_proj"], 9_175_040),
])
def test_lora_trainable_parameters_match_the_published_counts(model, r, targets, expected):
    est = estimate(architecture.resolve(model), run(lora_r=r, lora_targets=targets))
    assert est.trainable_params == expected


def test_lora_targets_that_match_nothing_are_refused(llama8b):
    with pytest.raises(PlanInputError, match="match no Linear module"):
        estimate(llama8b, run(lora_targets=["query_key_value"]))


# ---------------------------------------------------------------- static terms

def test_bf16_weights_are_two_bytes_per_parameter(llama8b):
    est = estimate(llama8b, run(method="full"))
    assert est.terms["weights"] == pytest.approx(2 * llama8b.params_total)


def test_qlora_weights_quantize_only_the_linear_layers(llama8b):
    pk = planner_knowledge()
    est = estimate(llama8b, run(method="qlora", framework="unsloth"))  # no fp32 upcast: the rest stays bf16
    lin, rest = llama8b.params_linear, llama8b.params_total - llama8b.params_linear
    assert est.terms["weights"] == pytest.approx(lin * pk.storage_bytes["nf4-dq"] + rest * 2)
    upcast = estimate(llama8b, run(method="qlora", framework="hf"))  # prepare_model_for_kbit_training: fp32
    assert upcast.terms["weights"] - est.terms["weights"] == pytest.approx(rest * 2)
    assert "dequant_transient" in est.terms and est.terms["dequant_transient"] == 2 * llama8b.largest_linear * 2


def test_double_quant_is_smaller_than_plain_nf4(llama8b):
    dq = estimate(llama8b, run(method="qlora", quant="nf4-dq")).terms["weights"]
    plain = estimate(llama8b, run(method="qlora", quant="nf4")).terms["weights"]
    saved_bits = (plain - dq) * 8 / llama8b.params_linear
    assert saved_bits == pytest.approx(0.373, abs=0.01)  # QLoRA paper: 0.373 bits per parameter


@pytest.mark.parametrize(("optimizer", "bytes_per_param"), [
    ("adamw_torch", 4.0),  # torch AdamW: two states in the parameter dtype (bf16)
    ("adamw_8bit", 2.03),
    ("sgd", 2.0),
    ("paged_adamw_32bit", 8.0),
])
def test_optimizer_states_per_trainable_parameter(llama8b, optimizer, bytes_per_param):
    est = estimate(llama8b, run(method="full", optimizer=optimizer))
    assert est.terms["optimizer_states"] == pytest.approx(bytes_per_param * llama8b.params_total)


def test_paged_optimizer_state_counts_in_the_pool_but_not_in_torch_counters(llama8b):
    paged = estimate(llama8b, run(method="full", optimizer="paged_adamw_32bit", grad_checkpointing=True))
    assert paged.untracked_by_torch == paged.terms["optimizer_states"]
    assert paged.peak_allocated == pytest.approx(paged.peak_tensors - paged.untracked_by_torch)
    assert any("managed memory" in n for n in paged.notes)


def test_foreach_adamw_needs_a_step_temporary_fused_does_not(llama8b):
    foreach = estimate(llama8b, run(method="full", optimizer="adamw_torch", grad_checkpointing=True))
    fused = estimate(llama8b, run(method="full", optimizer="adamw_torch_fused", grad_checkpointing=True))
    assert foreach.terms["optimizer_step_temp"] == pytest.approx(2 * llama8b.params_total)
    assert fused.terms["optimizer_step_temp"] == 0
    assert foreach.phase_total("optimizer-step") > fused.phase_total("optimizer-step")


def test_fp32_master_weights_cost_four_bytes_and_autocast_copies(llama8b):
    est = estimate(llama8b, run(method="full", dtype="fp32", grad_checkpointing=True))
    assert est.terms["weights"] == pytest.approx(4 * llama8b.params_total)
    assert est.terms["optimizer_states"] == pytest.approx(8 * llama8b.params_total)
    # the layers' Linear weights and the lm_head: autocast caches each leaf weight's bf16 cast for backward
    assert est.terms["autocast_weight_copies"] == pytest.approx(2 * (llama8b.params_linear + llama8b.params_lm_head))


# ---------------------------------------------------------------- the Trainer path (issue 19)

def test_hf_framework_assumes_the_trainer_and_says_so(llama8b):
    est = estimate(llama8b, build_run(method="lora", framework="hf"))
    assert any("Trainer" in n and "--loop plain" in n for n in est.notes)
    plain = build_run(method="lora", framework="hf", loop="plain")
    assert plain.loop == "plain" and not plain.autocast and not plain.assumed
    assert build_run(method="lora", framework="torchtune").loop == "plain"
    assert build_run(method="lora", framework="trl").autocast


def test_trainer_autocast_halves_the_fp32_adapter_input_copies(llama8b):
    """bf16 model, fp32 adapters: PEFT casts the input to fp32 and autocast casts it back to bf16 in lora_A,
    so each targeted module keeps a bf16 copy (2 B/elem) instead of an fp32 one (4 B/elem)."""
    kw = dict(method="lora", batch=1, seq_len=2048, lora_dropout=0.0, grad_checkpointing=False)
    plain = estimate(llama8b, run(**kw))
    trainer = estimate(llama8b, run(**{**kw, "loop": "trainer"}))
    assert trainer.terms["activations_layers"] < plain.terms["activations_layers"]


def test_trainer_8bit_adamw_keeps_32bit_states_for_the_embedding(llama8b):
    plain = estimate(llama8b, run(method="full", optimizer="adamw_8bit"))
    trainer = estimate(llama8b, run(method="full", optimizer="adamw_8bit", loop="trainer"))
    extra = trainer.terms["optimizer_states"] - plain.terms["optimizer_states"]
    assert extra == pytest.approx(llama8b.params_embedding * (8.0 - 2.03))


def test_gradient_accumulation_keeps_gradients_through_the_forward(llama8b):
    one = estimate(llama8b, run(method="full", loop="trainer"))
    two = estimate(llama8b, run(method="full", loop="trainer", grad_accum=2))
    assert two.phase_total("forward-backward") - one.phase_total("forward-backward") == pytest.approx(
        one.terms["gradients"])


# ---------------------------------------------------------------- activations

def test_checkpointing_keeps_one_hidden_state_per_layer(llama8b):
    est = estimate(llama8b, run(grad_checkpointing=True, framework="unsloth", batch=2, seq_len=1024))
    assert est.terms["activations_checkpoints"] == 2 * 1024 * llama8b.hidden * 2 * llama8b.layers
    no_gc = estimate(llama8b, run(grad_checkpointing=False, framework="unsloth", batch=2, seq_len=1024))
    assert no_gc.terms["activations_layers"] > 10 * est.terms["activations_checkpoints"]


def test_frozen_linears_keep_no_input_so_lora_saves_less_than_full(llama8b):
    full = estimate(llama8b, run(method="full", framework="unsloth", grad_checkpointing=False))
    full = full.terms["activations_layers"]
    qv = estimate(llama8b, run(method="lora", framework="unsloth", lora_targets=["q_proj", "v_proj"],
                               grad_checkpointing=False))
    assert qv.terms["activations_layers"] < full


def test_fp32_adapters_keep_an_fp32_copy_of_each_targeted_input(llama8b):
    bf16 = estimate(llama8b, run(framework="unsloth", grad_checkpointing=False)).terms["activations_layers"]
    fp32 = estimate(llama8b, run(framework="hf", grad_checkpointing=False)).terms["activations_layers"]  # PEFT fp32
    assert fp32 > bf16


def test_lora_dropout_adds_a_copy_and_a_mask(llama8b):
    without = estimate(llama8b, run(lora_dropout=0.0)).terms["activations_layers"]
    with_do = estimate(llama8b, run(lora_dropout=0.05)).terms["activations_layers"]
    assert with_do > without


def test_eager_attention_grows_with_the_square_of_the_sequence(llama8b):
    def layers(att, s):
        return estimate(llama8b, run(attention=att, seq_len=s)).terms["activations_layers"]
    # SDPA is linear in s; eager adds a*s^2 per layer: doubling s more than doubles it
    assert layers("sdpa", 4096) == pytest.approx(2 * layers("sdpa", 2048))
    assert layers("eager", 4096) > 2.2 * layers("eager", 2048)
    assert layers("eager", 2048) > layers("sdpa", 2048)


@pytest.mark.parametrize(("loss", "k"), [("hf", 12.0), ("chunked", 4.0), ("fused", 0.25), ("hf_legacy", 16.0)])
def test_logits_term_is_bytes_per_logit_times_tokens_times_vocab(llama8b, loss, k):
    est = estimate(llama8b, run(loss=loss, batch=2, seq_len=4096))
    assert est.terms["logits_loss"] == pytest.approx(k * 2 * 4096 * llama8b.vocab)


def test_moe_activations_scale_with_active_experts_not_all_experts():
    moe = architecture.resolve("qwen3-30b-a3b")
    est = estimate(moe, run(framework="unsloth", lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"],
                            grad_checkpointing=False))
    assert est.terms["weights"] == pytest.approx(2 * moe.params_total)  # every expert's weights are resident
    per_token_layer = est.terms["activations_layers"] / 2048 / moe.layers
    all_experts = moe.experts * 3 * moe.expert_intermediate * 2
    assert per_token_layer < all_experts / 4


# ---------------------------------------------------------------- phases

def test_full_finetune_with_checkpointing_binds_at_the_optimizer_step(llama8b):
    est = estimate(llama8b, run(method="full", grad_checkpointing=True, seq_len=1024))
    assert est.binding_phase == "optimizer-step"
    step = est.phases["optimizer-step"]
    assert set(step) >= {"weights", "gradients", "optimizer_states", "optimizer_step_temp"}


def test_lora_binds_in_forward_backward_with_logits(llama8b):
    est = estimate(llama8b, run(seq_len=4096, grad_checkpointing=True))
    assert est.binding_phase == "forward-backward"
    assert "logits_loss" in est.phases["forward-backward"]
    assert "gradients" not in est.phases["forward-backward"]  # grads of a step are not alive with its activations


def test_load_phase_holds_weights_and_in_flight_quantization(llama8b):
    est = estimate(llama8b, run(method="qlora"))
    assert est.phases["load"]["weights"] == est.terms["weights"]
    assert est.phases["load"]["load_inflight"] > 0
    assert est.phase_total("load") < est.phase_total("forward-backward")


def test_pool_total_adds_slack_context_and_host_process(llama8b):
    est = estimate(llama8b, run())
    co = planner_knowledge().coefficients
    assert est.peak_total == pytest.approx(est.peak_tensors + est.terms["allocator_slack"]
                                           + co.cuda_context_gb * 1e9 + co.host_process_gb * 1e9)
    assert est.terms["allocator_slack"] >= co.allocator_slack_min_gb * 1e9
    tighter = estimate(llama8b, run(expandable_segments=True))
    assert tighter.terms["allocator_slack"] <= est.terms["allocator_slack"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["full", "lora", "qlora"]), st.integers(1, 8), st.integers(1, 64), st.booleans(),
       st.sampled_from(["sdpa", "eager"]))
def test_peak_never_shrinks_when_batch_or_sequence_grows(method, batch, seq_blocks, gc, att):
    arch = architecture.resolve("llama-3.2-1b")
    s = seq_blocks * 128

    def peak(b, s_):
        return estimate(arch, build_run(method=method, batch=b, seq_len=s_, grad_checkpointing=gc,
                                        attention=att)).peak_total
    base = peak(batch, s)
    assert peak(batch + 1, s) >= base
    assert peak(batch, s + 128) >= base
    assert base > 0


# ---------------------------------------------------------------- run description

def test_framework_presets_set_their_real_defaults():
    assert build_run(method="lora", framework="trl").grad_checkpointing is True
    assert build_run(method="lora", framework="hf").grad_checkpointing is False
    assert build_run(method="qlora", framework="hf").grad_checkpointing is True  # PEFT's kbit preparation
    assert build_run(method="lora", framework="unsloth").loss == "fused"
    assert build_run(method="lora", framework="torchtune").loss == "chunked"
    assert build_run(method="lora", framework="unsloth").lora.dtype == "bf16"
    assert build_run(method="lora", framework="hf").lora.dtype == "fp32"
    # explicit choices win over the preset
    assert build_run(method="lora", framework="trl", grad_checkpointing=False).grad_checkpointing is False


@pytest.mark.parametrize("kw", [
    {"method": "inference"}, {"method": "lora", "batch": 0}, {"method": "lora", "seq_len": -5},
    {"method": "lora", "lora_r": 0}, {"method": "lora", "lora_dropout": 1.5}, {"method": "lora", "optimizer": "adamq"},
    {"method": "lora", "framework": "keras"}, {"method": "lora", "batch": 100000, "seq_len": 100000},
    {"method": "qlora", "quant": "bf16"}, {"method": "lora", "dtype": "int3"}, {"method": "lora", "attention": "ring"},
])
def test_impossible_runs_are_refused_with_a_reason(kw):
    with pytest.raises(PlanInputError):
        build_run(**kw)


def test_workload_words_become_run_options():
    opts, rest = run_words(["gc", "eager", "r", "64", "adamw8bit", "dropout", "0.05", "fused-ce", "banana"])
    assert opts == {"grad_checkpointing": True, "attention": "eager", "lora_r": 64, "optimizer": "adamw_8bit",
                    "lora_dropout": 0.05, "loss": "fused"}
    assert rest == ["banana"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abcdefgr0123456789_-.", min_size=0, max_size=12), max_size=12))
def test_run_words_never_raises(words):
    opts, rest = run_words(words)
    assert len(rest) <= len(words)


def test_linear_modules_cover_every_linear_parameter(llama8b):
    mods = linear_modules(llama8b)
    assert sum(m.d_in * m.d_out * m.count for m in mods) == llama8b.params_linear
    assert {m.name for m in lora_targets(mods, ["all-linear"])} == set(llama8b.linear_shapes)


def test_trl_fused_lm_head_has_no_vocabulary_sized_loss_term(llama8b):
    """TRL >= 1.x: what autograd keeps does not grow with the vocabulary (counted on CPU, fixture); the HF loss
    keeps at least its fp32 log-softmax (4 B per logit)."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parents[1] / "fixtures" / "planner" / "trl_fused_head_saved_bytes.json").read_text())
    small, big = data["rows"]
    growth_per_logit = {k: (big[k] - small[k]) / (data["tokens"] * (big["vocab"] - small["vocab"]))
                        for k in ("hf_loss_bytes", "trl_fused_head_bytes")}
    assert growth_per_logit["trl_fused_head_bytes"] == 0 and growth_per_logit["hf_loss_bytes"] >= 4.0
    trl = estimate(llama8b, build_run(method="lora", framework="trl"))
    hf = estimate(llama8b, build_run(method="lora", framework="hf"))
    tokens_vocab = 2048 * llama8b.vocab
    assert trl.terms["logits_loss"] / tokens_vocab <= 0.25 < 4.0 <= hf.terms["logits_loss"] / tokens_vocab


def test_plain_loop_qlora_with_gqa_pays_sdpa_math_fallback_at_long_sequences(llama8b):
    """PEFT's kbit upcast makes Q/K/V fp32; outside autocast SDPA with grouped KV heads takes its math path
    (seq^2 fp32 probabilities). Under the Trainer's autocast they are bf16 (flash): no such term."""
    kw = dict(method="qlora", batch=1, seq_len=4096, grad_checkpointing=True, optimizer="adamw_torch")
    plain = estimate(llama8b, run(**kw))
    trainer = estimate(llama8b, run(**{**kw, "loop": "trainer"}))
    assert any("math kernel" in n for n in plain.notes) and not any("math kernel" in n for n in trainer.notes)
    probs = 4.0 * llama8b.heads * 4096 * 4096  # one layer's fp32 probabilities at batch 1
    assert plain.terms["activations_one_layer"] - estimate(llama8b, run(**{**kw, "seq_len": 4096, "attention": "flash"})
                                                           ).terms["activations_one_layer"] == pytest.approx(probs)
    assert plain.terms["backward_transient"] >= 2 * probs
