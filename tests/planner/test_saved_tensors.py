"""The per-layer activation formula against what autograd really keeps (counted on CPU by
benchmarks/memory/saved_tensors.py; recorded in tests/fixtures/planner/saved_tensors_per_layer.json).

One layer's kept bytes are the difference between a 1- and a 2-layer model, so embeddings, the loss
and the final norm cancel out: this tests the layer formula alone, family by family (GQA, per-head
q/k norms, Gemma's four fp32 norms, Phi's shared-input parallel block and its composed GELU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkops.planner import architecture
from sparkops.planner.estimate import estimate
from sparkops.planner.run import build_run

DATA = json.loads((Path(__file__).parents[1] / "fixtures" / "planner" / "saved_tensors_per_layer.json").read_text())


def _layer_estimate(row: dict) -> float:
    out = []
    variant = row.get("variant", "plain")
    for layers in (1, 2):
        cfg = {**row["config"], "model_type": row["model_type"], "num_hidden_layers": layers}
        arch = architecture.from_config(cfg, id="tiny", name="tiny", source="test")
        run = build_run(method=row["method"], framework="hf", dtype=row.get("dtype", "bf16"), optimizer="adamw_torch",
                        batch=row["batch"], seq_len=row["seq_len"], grad_checkpointing=False, attention="sdpa",
                        loss="hf", lora_r=(row["lora"] or {}).get("r"), lora_targets=None,
                        lora_dropout=(row["lora"] or {}).get("dropout", 0.0),
                        loop="trainer" if variant == "trainer" else "plain")
        assert run.autocast == (variant != "plain")
        out.append(estimate(arch, run).terms["activations_layers"])
    return out[1] - out[0]


def _cpu_only_bytes(row: dict) -> float:
    """What the CPU count holds for one layer beyond the planner's activation term, for known reasons:
    - autocast's bf16 copies of trainable fp32 weights are saved tensors too (the planner keeps them in the
      ``autocast_weight_copies`` term): the layer's Linear weights (full) or its LoRA A/B (adapters);
    - CPU dropout is composite (input * noise) and keeps an input-dtype mask (fp32 after PEFT's cast: 4 bytes),
      where CUDA's fused native_dropout keeps a bool mask (1 byte), which the planner counts."""
    if row.get("variant", "plain") == "plain":
        return 0.0
    cfg = {**row["config"], "model_type": row["model_type"], "num_hidden_layers": 1}
    arch = architecture.from_config(cfg, id="tiny", name="tiny", source="test")
    tokens = row["batch"] * row["seq_len"]
    if row["method"] == "full":
        return 2.0 * sum(i * o for i, o in arch.linear_shapes.values())
    r = row["lora"]["r"]
    copies = 2.0 * sum(r * (i + o) for i, o in arch.linear_shapes.values())
    masks = (4.0 - 1.0) * tokens * sum(i for i, _ in arch.linear_shapes.values()) if row["lora"]["dropout"] else 0.0
    return copies + masks


@pytest.mark.parametrize("row", DATA["rows"], ids=lambda r: f"{r['model_type']}-{r['method']}-{r.get('variant', 'plain')}")
def test_layer_activations_match_what_autograd_keeps(row):
    est, kept = _layer_estimate(row), row["per_layer_bytes"] - _cpu_only_bytes(row)
    # LoRA (the Spark's common case) within 3 %; full fine-tuning within 8 % (the formula keeps a
    # few small trainable-norm tensors that CPU SDPA frees)
    tol = 0.03 if row["method"] == "lora" else 0.08
    assert est == pytest.approx(kept, rel=tol), f"estimate {est:.0f} B vs kept {kept} B"


def test_composed_gelu_keeps_three_more_mlp_tensors_than_a_fused_one():
    phi = next(r for r in DATA["rows"] if r["model_type"] == "phi" and r["method"] == "lora")
    fused = {**phi, "config": {**phi["config"], "hidden_act": "gelu"}}
    width = phi["batch"] * phi["seq_len"] * phi["config"]["intermediate_size"] * 2  # one bf16 MLP-width tensor
    assert _layer_estimate(phi) - _layer_estimate(fused) == pytest.approx(3 * width)


def test_fixture_holds_model_types_the_planner_has_no_family_for():
    """smollm3 and ernie4_5 are planned as a generic decoder; the layer test above checks them like the rest."""
    unseen = {r["model_type"] for r in DATA["rows"]} - set(architecture.SUPPORTED_TYPES)
    assert {"smollm3", "ernie4_5"} <= unseen
    for mt in unseen:
        row = next(r for r in DATA["rows"] if r["model_type"] == mt)
        arch = architecture.from_config({**row["config"], "model_type": mt, "num_hidden_layers": 1})
        assert any("generic decoder" in n for n in arch.approximate)


def test_fixture_holds_the_trainer_path_under_autocast():
    """The Trainer's autocast (bf16 model + fp32 adapters with dropout) and fp32 master weights under autocast
    are counted too, so the layer test above checks the autocast terms."""
    variants = {(r.get("variant"), r["method"]) for r in DATA["rows"]}
    assert {("trainer", "lora"), ("fp32-autocast", "full")} <= variants
