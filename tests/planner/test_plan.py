"""Budget, verdict, the OOM ladder, the sizing anchors on a GB10 snapshot, preflight and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import FIXTURES, load_facts_fixture
from sparkops import api
from sparkops.core.errors import InputError
from sparkops.knowledge import load
from sparkops.planner import architecture
from sparkops.planner.plan import Budget, budget_from_facts, budget_from_target, plan
from sparkops.planner.run import build_run

GB10 = "gb10_ngc_2509_healthy"


@pytest.fixture(scope="module")
def kb():
    return load()


def spark_budget(kb):
    return budget_from_facts(load_facts_fixture(GB10), kb, "facts")


# ---------------------------------------------------------------- budgets

def test_unified_budget_is_memavailable_minus_the_reserve(kb):
    facts = load_facts_fixture(GB10)
    b = budget_from_facts(facts, kb, "facts")
    avail = facts.memory.meminfo_bytes["MemAvailable"]
    reserve = kb.thresholds.g3.os_reserve_gb * 1024**3
    assert b.unified and b.gb == pytest.approx((avail - reserve) / 1e9, abs=0.1)


def test_discrete_budget_is_gpu_free_memory_and_excludes_the_host_process(kb):
    b = budget_from_facts(load_facts_fixture("h200_device_recorded"), kb, "facts")
    assert not b.unified and 140 < b.gb < 151
    arch = architecture.resolve("llama-3.1-8b")
    res = plan(arch, build_run(method="lora"), b, kb)
    assert "host_process" not in res.terms


def test_target_dgx_spark_budget_from_the_profile(kb):
    b = budget_from_target("dgx-spark", kb)
    assert b.unified and b.source == "target:gb10" and 110 < b.gb < 122


def test_unknown_target_is_an_input_error(kb):
    with pytest.raises(InputError, match="known targets"):
        budget_from_target("tpu-v5", kb)


def test_no_gpu_facts_have_no_budget(kb):
    with pytest.raises(InputError, match="--budget-gb"):
        budget_from_facts(load_facts_fixture("no_gpu"), kb, "facts")


# ---------------------------------------------------------------- verdicts and the ladder

def _plan(kb, model, budget_gb, **kw):
    kw.setdefault("method", "lora")
    return plan(architecture.resolve(model), build_run(**kw),
                Budget(gb=budget_gb, source="explicit", unified=True), kb)


def test_verdict_moves_from_fits_to_tight_to_does_not_fit(kb):
    peak = _plan(kb, "llama-3.1-8b", 1000.0).peak_gb
    assert _plan(kb, "llama-3.1-8b", peak * 1.5).verdict == "fits"
    assert _plan(kb, "llama-3.1-8b", peak * 1.02).verdict == "tight"
    assert _plan(kb, "llama-3.1-8b", peak * 0.8).verdict == "does-not-fit"


def test_ladder_is_in_the_documented_order_and_its_sequence_really_fits(kb):
    res = _plan(kb, "llama-3.1-8b", 70.0, method="full", batch=4, seq_len=4096, grad_checkpointing=True)
    assert res.verdict == "does-not-fit"
    actions = [s.action for s in res.ladder]
    assert actions[0] == "flush caches"
    assert actions.index("shorter packing / sequence") < actions.index("smaller batch")
    assert actions.index("bf16 LoRA instead") < actions.index("QLoRA instead")
    assert actions[-1] == "smaller model or two Sparks"
    lora_step = next(s for s in res.ladder if s.action == "bf16 LoRA instead")
    assert lora_step.fits is True  # an 8B bf16 LoRA fits in 70 GB where the full fine-tune does not


def test_max_sequence_length_is_the_largest_that_fits(kb):
    res = _plan(kb, "llama-3.1-8b", 30.0, seq_len=32768, grad_checkpointing=True)
    assert res.verdict != "fits" and res.max_seq_len
    budget = Budget(gb=30.0, source="explicit", unified=True)
    arch = architecture.resolve("llama-3.1-8b")
    at = plan(arch, build_run(method="lora", seq_len=res.max_seq_len, grad_checkpointing=True), budget, kb)
    above = plan(arch, build_run(method="lora", seq_len=res.max_seq_len + 64, grad_checkpointing=True), budget, kb)
    assert at.verdict == "fits" and above.verdict != "fits"


def test_discrete_budget_has_no_flush_caches_step(kb):
    res = plan(architecture.resolve("llama-3.1-70b"), build_run(method="lora"),
               Budget(gb=80.0, source="explicit", unified=False), kb)
    assert res.verdict == "does-not-fit" and res.ladder[0].action != "flush caches"


# ---------------------------------------------------------------- the anchors (stack-matrix.md) on a GB10 snapshot

@pytest.mark.parametrize(("workload", "verdict"), [
    ("qlora 70b seq 2048", "fits"),                 # "70B fits via QLoRA ..."
    ("lora llama-3.1-70b seq 2048 gc", "does-not-fit"),  # "... not bf16"
    ("lora gemma-3-27b packing 1024 gc", "fits"),   # 27B LoRA fits at packing <= 1024
    ("full gemma-2-9b seq 2048 gc", "fits"),        # the full-FT ceiling
    ("full llama-3.1-70b seq 2048 gc", "does-not-fit"),
])
def test_sizing_anchors_land_on_the_right_side_on_a_gb10_snapshot(workload, verdict):
    res = api.plan(workload=workload, facts=FIXTURES / "facts" / f"{GB10}.json")
    assert res.verdict == verdict, (res.peak_gb, res.budget_gb)
    assert res.anchor is not None


def test_27b_lora_is_the_ceiling_long_packing_does_not_fit():
    res = api.plan(workload="lora gemma-3-27b packing 16384 gc", facts=FIXTURES / "facts" / f"{GB10}.json")
    assert res.verdict != "fits" and res.max_seq_len and res.max_seq_len < 16384


def test_a_bare_size_plans_with_a_named_proxy():
    res = api.plan(workload="qlora 70b seq 4096", target="dgx-spark")
    assert res.model.assumed and "70" in res.model.name and "name the model" in res.model.assumed


def test_unknown_model_suggests_close_matches():
    with pytest.raises(InputError, match="llama-3.1-70b"):
        api.plan(model="llama-3.1-70", method="lora", target="dgx-spark")


def test_nothing_to_plan_is_an_input_error():
    with pytest.raises(InputError, match="no model given"):
        api.plan(workload="lora seq 2048", target="dgx-spark")


# ---------------------------------------------------------------- preflight integration

def test_preflight_runs_the_planner_and_g3_fails_when_it_does_not_fit():
    from sparkops.facts.workload import parse_workload

    rep = api.build_report(load_facts_fixture(GB10), parse_workload("lora llama-3.1-70b seq 4096"))
    assert rep.plan is not None and rep.plan.verdict == "does-not-fit"
    assert rep.checks["G3"].startswith("fail") and "exceeds" in rep.checks["G3"]
    assert rep.verdict == "blocked"
    assert rep.workload.estimated_peak_gb == rep.plan.peak_gb


def test_preflight_planned_fit_leaves_g3_judged_not_unknown():
    from sparkops.facts.workload import parse_workload

    rep = api.build_report(load_facts_fixture(GB10), parse_workload("qlora llama-3.1-8b seq 2048"))
    assert rep.plan.verdict == "fits"
    assert not rep.checks["G3"].startswith(("fail", "unknown"))


def test_preflight_survives_an_unknown_model():
    from sparkops.facts.workload import parse_workload

    rep = api.build_report(load_facts_fixture(GB10), parse_workload("lora zorblax-13b seq 2048"))
    # a size was given, so the planner used a proxy; an unknown name alone must not break preflight
    assert rep.plan is not None and (rep.plan.assumed or rep.plan.error)


def test_explicit_peak_wins_over_the_planner():
    from sparkops.facts.workload import merge

    rep = api.build_report(load_facts_fixture(GB10), merge("lora llama-3.1-70b seq 4096", estimated_peak_gb=10.0))
    assert rep.plan is None and not rep.checks["G3"].startswith("fail")


# ---------------------------------------------------------------- the CLI

def spark_ops(*args):
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True, timeout=120)


def test_cli_plan_json_contract_and_exit_code():
    p = spark_ops("plan", "--model", "llama-3.1-70b", "--method", "qlora", "--seq-len", "4096",
                  "--facts", str(FIXTURES / "facts" / f"{GB10}.json"), "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == "fits" and d["unit"].startswith("GB")
    assert {"peak_gb", "budget_gb", "terms", "phases", "ladder", "binding_phase"} <= set(d)
    assert {"weights", "adapters", "optimizer_states", "logits_loss", "cuda_context"} <= set(d["terms"])
    assert set(d["phases"]) == {"load", "forward-backward", "optimizer-step"}


def test_cli_plan_table_and_does_not_fit_exit_code():
    p = spark_ops("plan", "--model", "llama-3.1-70b", "--method", "full", "--target", "dgx-spark")
    assert p.returncode == 2
    assert "DOES NOT FIT" in p.stdout and "OOM ladder" in p.stdout and "optimizer_states" in p.stdout


@pytest.mark.parametrize("args", [
    ["plan", "--model", "no-such-model-9b", "--target", "dgx-spark"],
    ["plan", "--model", "llama-3.1-8b", "--batch", "-1", "--target", "dgx-spark"],
    ["plan", "--model", "llama-3.1-8b", "--seq-len", "0", "--target", "dgx-spark"],
    ["plan", "--model", "llama-3.1-8b", "--budget-gb", "-4"],
    ["plan", "--model", "llama-3.1-8b", "--method", "inference", "--target", "dgx-spark"],
    ["plan", "--config", "/nonexistent/config.json", "--target", "dgx-spark"],
])
def test_cli_bad_input_is_exit_3_with_a_message(args):
    p = spark_ops(*args)
    assert p.returncode == 3, p.stdout
    assert p.stderr.strip() and "Traceback" not in p.stderr


def test_cli_config_missing_fields_is_exit_3(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    p = spark_ops("plan", "--config", str(cfg), "--target", "dgx-spark")
    assert p.returncode == 3 and "num_hidden_layers" in p.stderr
