"""vLLM's torch.compile cache state read from start-up logs, and Model Runner V2's CUDA-graph accounting by release
(round 20af; engines.yaml vllm.compile_state, vllm.v2_cudagraph_estimate_since; read in vLLM's PyPI sdists)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from sparkops.planner import serve
from sparkops.planner.serve_engines import spec_from_text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}


def _state(rec: dict) -> serve.CompileReading:
    flags = rec.get("flags") or {}
    return serve.vllm_compile_state(rec.get("log") or "", rec.get("engine_version"), bool(flags.get("enforce_eager")))


def _line(rid: str, needle: str) -> str:
    return next(ln for ln in RECORDS[rid]["log"].splitlines() if needle in ln)


def test_every_recorded_compile_state_is_what_the_records_own_log_lines_say():
    """The `environment.compile_state` of logs.yaml is recomputed from each record's log, never typed in: a record
    carries it exactly where its lines say cold or warm."""
    counts: dict[str, int] = {}
    for rid, rec in RECORDS.items():
        if rec["engine"] != "vllm":
            continue
        got = _state(rec)
        counts[got.state] = counts.get(got.state, 0) + 1
        recorded = (rec.get("environment") or {}).get("compile_state")
        assert recorded == (got.state if got.state in ("cold", "warm") else None), rid
        if got.state != "unknown":
            assert got.line, rid
    assert counts["cold"] >= 6 and counts["warm"] >= 5 and counts["eager"] >= 10


def test_compile_and_load_lines_decide_before_the_compile_time():
    # recorded lines: a cache load at 0.19.1 (vllm-tokenkaki), a 39 s compile at 0.27.1 (vllm-recon ... -cold)
    load = _line("vllm-tokenkaki-qwen3-8b-a100-40g-defaults", "Directly load the compiled graph(s)")
    assert serve.vllm_compile_state(load, "0.19.1").state == "warm"
    cold = _line("vllm-recon-qwen3-8b-4090-default-cold", "torch.compile took")
    assert serve.vllm_compile_state(cold, "0.27.1") == serve.CompileReading("cold", cold.strip())
    assert serve.vllm_compile_state(cold, "0.27.1", enforce_eager=True).state == "eager"


def test_a_long_compile_time_says_cold_only_where_a_warm_start_is_an_aot_load():
    """Before AOT compilation was the default (torch >= 2.10, vLLM 0.18 on) a warm start re-traces with Dynamo, so
    13 or 92 s of torch.compile may be warm: unknown. A sub-second total is a load in any release."""
    ngc_013 = _line("vllm-guardkit-qwen3-30b-a3b-fp8-gb10-u030-32k-fp8kv", "torch.compile takes")
    ngc_011 = _line("vllm-armlp-mistral7b-v02-gptq-gb10-u090-32k", "torch.compile takes")
    assert serve.vllm_compile_state(ngc_013, "0.13.0").state == "unknown"
    assert serve.vllm_compile_state(ngc_011, "0.11.0").state == "unknown"
    assert serve.vllm_compile_state(ngc_013, "0.18.0").state == "cold"
    assert serve.vllm_compile_state(ngc_013, None).state == "unknown"  # no release named: not assumed current
    quick = _line("vllm-a5-qwen3-4b-lora1-4090-u080", "torch.compile took")
    assert serve.vllm_compile_state(quick, "0.13.0").state == "warm"
    assert serve.vllm_compile_state("", "0.27.1").state == "unknown"


@pytest.mark.parametrize(("model", "version", "outside"), [
    ("qwen3-8b", "0.26.0", True), ("qwen3-8b", "0.27.1", True), ("qwen3-8b", "0.28.0", True),
    ("qwen3-8b", "0.29.0", False),  # V2's profile_cudagraph_memory captures into a throwaway pool from 0.29.0
    ("qwen3-30b-a3b", "0.27.1", False),  # a MoE model stays on V1 before 0.29, which estimates
    ("qwen3-8b", "0.20.0", False),  # V1 for every family
])
def test_model_runner_v2_estimates_no_cuda_graphs_before_0_29(model, version, outside):
    shape = serve.resolve_shape(model)
    spec = spec_from_text(f"vllm serve {model} --max-model-len 8192").model_copy(update={"engine_version": version})
    assert serve.v2_graphs_outside_budget(shape, spec) is outside
    eager = spec.model_copy(update={"enforce_eager": True})
    assert serve.v2_graphs_outside_budget(shape, eager) is False


def test_a_warm_v2_start_before_0_29_gets_the_graph_charge_back_and_a_cold_one_does_not():
    """The recon pair (Qwen3-8B, RTX 4090, 0.27.1, V2, same flags): 4.92 GiB cold (torch.compile 38.96 s) and 5.91 GiB
    warm (compilation 0.30 s). The flags-alone plan is a first start: it holds its graph estimate in place of the cold
    compile's temporaries; given a warm cache it drops that charge, and the captured graphs then sit beyond the share."""
    cold, warm = RECORDS["vllm-recon-qwen3-8b-4090-default-cold"], RECORDS["vllm-recon-qwen3-8b-4090-default-warm"]
    first, c, w = sa.plan_of(warm), sa.plan_of(cold, compile_state="cold"), sa.plan_of(warm, compile_state="warm")
    graphs = first.overheads["cudagraph"]
    assert graphs > 0.5
    assert c.kv.available_gib == first.kv.available_gib
    assert w.kv.available_gib == pytest.approx(first.kv.available_gib + graphs, abs=0.011)
    assert c.kv.available_gib == pytest.approx(cold["observed"]["kv_gib"], rel=0.05)
    assert w.kv.available_gib == pytest.approx(warm["observed"]["kv_gib"], rel=0.02)
    assert first.kv.available_gib < warm["observed"]["kv_gib"] * 0.9  # flags alone: the warm start is a miss
    # what the engine holds once started: the share plus the graphs captured outside it, either way
    assert w.footprint_gib == pytest.approx(first.footprint_gib, abs=0.011)
    # the range runs from a cold start at the public pairs' largest gap to the warm start's pool
    (unc,) = [u for u in first.uncertainties if u.term == "compile-cache"]
    assert "cudagraph" not in [u.term for u in first.uncertainties]
    assert unc.kv_change_gib[1] == pytest.approx(graphs, abs=0.011) and unc.kv_change_gib[0] < 0
    lo, hi = first.kv.available_range_gib
    assert lo <= cold["observed"]["kv_gib"] <= hi and warm["observed"]["kv_gib"] == pytest.approx(hi, rel=0.02)
    assert "compile-cache" not in [u.term for u in w.uncertainties]


def test_a_known_warm_start_on_v1_keeps_the_graph_estimate():
    """V1 (vLLM 0.20.0 for every family) subtracts its estimate whatever the cache: a warm state moves nothing but
    the compile-cache range."""
    m = serve.Machine(source="t", total_gib=23.52, free_gib=23.52, gpu_name="RTX 4090")
    spec = spec_from_text("vllm serve qwen3-8b --max-model-len 8192").model_copy(update={"engine_version": "0.20.0"})
    shape = serve.resolve_shape("qwen3-8b")
    first, warm = serve.plan_serve(shape, spec, m), serve.plan_serve(shape, spec.model_copy(update={"compile_state": "warm"}), m)
    assert warm.kv.available_gib == first.kv.available_gib and warm.footprint_gib == first.footprint_gib
    assert "compile-cache" in [u.term for u in first.uncertainties]
    assert "compile-cache" not in [u.term for u in warm.uncertainties]
