"""Round 20ar (issue 20): the discrete-GPU vLLM rows the plan under-gives by about 1 GiB, decomposed against the logs'
own numbers (benchmarks/results/serve-discrete-bias.md). IN-SAMPLE records: these tests pin the decomposition, they
do not score the planner."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from sparkops.planner import serve

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import serve_accuracy as sa  # noqa: E402
import serve_discrete_bias as bias  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}

# Model Runner V2 starts before 0.29 whose logs do not say whether the torch.compile cache was warm
V2_UNSTATED = ["vllm-llmso-qwen3-8b-4090wsl-u090-4k", "vllm-llmso-qwen3-8b-4090wsl-u085-4k",
               "vllm-thunderagent-qwen3-8b-4090-u092-32k", "vllm-twogpu-qwen3-32b-2xrtxpro6000-tp2-u0426"]


def test_the_4090_record_names_the_line_only_0_24_to_0_25_print():
    """vLLM prints "GPU KV cache size" at kv_cache_utils.py:2146 in 0.24.0-0.25.1 (2177 in 0.26.0, 2235 in 0.27.x):
    the record's release is pinned from it, and 0.24.0 and 0.25.1 give the same plan (V2, no graph estimate)."""
    rec = RECORDS["vllm-thunderagent-qwen3-8b-4090-u092-32k"]
    assert "kv_cache_utils.py:2146" in rec["engine_version"] and serve._version(sa.spec_of(rec)) is not None
    shape = serve.resolve_shape(rec["model"])
    plans = [sa.plan_of(rec, engine_version=v) for v in ("0.24.0", "0.25.1")]
    assert plans[0].kv.available_gib == plans[1].kv.available_gib
    for v in ("0.24.0", "0.25.1"):
        spec = sa.spec_of(rec).model_copy(update={"engine_version": v})
        assert serve.vllm_model_runner_v2(shape, spec) and serve.v2_graphs_outside_budget(shape, spec)


@pytest.mark.parametrize("rid", V2_UNSTATED)
def test_the_only_term_between_plan_and_log_is_the_cold_compile_charge(rid):
    """On these starts the plan charges its CUDA-graph estimate as the stand-in for a cold torch.compile (V2 before
    0.29 estimates no graphs); the log's pool is what the plan gives without that one term, within 5 %."""
    rec = RECORDS[rid]
    shape, spec = serve.resolve_shape(rec["model"]), sa.spec_of(rec)
    assert serve.v2_graphs_outside_budget(shape, spec) and serve.graphs_in_budget(spec, shape)
    first, warm = sa.plan_of(rec), sa.plan_of(rec, compile_state="warm")
    kv = rec["observed"]["kv_gib"]
    assert first.kv.available_gib < 0.9 * kv
    assert warm.kv.available_gib == pytest.approx(kv, rel=0.05)
    assert warm.kv.available_gib - first.kv.available_gib == pytest.approx(first.overheads["cudagraph"], abs=0.011)


def test_the_decomposition_reads_each_logs_own_terms():
    """The results table's columns add up: budget = the plan's pool + what the plan holds beside it, and the
    0.27+ usage line of the warm 4090 start leaves requested - consumed - peak for the pool (graphs captured after)."""
    row = bias.decompose(RECORDS["vllm-recon-qwen3-8b-4090-default-warm"])
    assert row["budget"] == pytest.approx(row["kv"] + row["weights"] + row["peak"] + row["non_torch"] + row["graphs"],
                                          abs=0.02)
    assert row["budget"] == pytest.approx(0.92 * 23.52, abs=0.02)  # vLLM's default share of the total (0.19.2+)
    assert "consumed 15.54, peak 0.19" in row["log_terms"]
    assert row["kv_log"] == pytest.approx(21.64 - 15.54 - 0.19, abs=0.011)
    assert row["why"].startswith("V2 <0.29")

