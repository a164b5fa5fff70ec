"""vLLM release by release (round 20ai): which model runner each release picks by default, and which non-KV formula
its profile uses, as read in the PyPI sdists 0.21.0-0.34.0 (engines.yaml vllm.model_runner_v2_by_release and
vllm.non_kv_formula_by_release), checked against the recorded start-up logs that print either."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from sparkops.core.releases import at_least, release
from sparkops.planner import serve
from sparkops.planner.serve_engines import engine_value, spec_from_text

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import serve_accuracy as sa  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}


def _v2(model: str, version: str | None, extra: str = "") -> bool:
    spec = spec_from_text(f"{extra}vllm serve {model} --max-model-len 8192").model_copy(update={"engine_version": version})
    return serve.vllm_model_runner_v2(serve.resolve_shape(model), spec)


@pytest.mark.parametrize(("model", "version", "extra", "v2"), [
    ("qwen3-8b", "0.21.0", "", False),  # opt-in only: VLLM_USE_V2_MODEL_RUNNER defaults to "0"
    ("qwen3-8b", "0.21.0", "VLLM_USE_V2_MODEL_RUNNER=1 ", True),
    ("qwen3-8b", "0.22.0", "", True),  # the Qwen3 canary
    ("meta-llama/Llama-3.2-3B-Instruct", "0.22.0", "", False),  # not listed until 0.23.0
    ("meta-llama/Llama-3.2-3B-Instruct", "0.23.0", "", True),
    ("mistralai/Mistral-7B-Instruct-v0.3", "0.23.0", "", True),
    ("Qwen/Qwen3-8B-AWQ", "0.23.0", "", False),  # 0.22-0.23: quantized checkpoints stay on V1
    ("Qwen/Qwen3-8B-AWQ", "0.24.0", "", True),  # 0.24.0: a listed architecture, whatever its quantization
    ("Qwen/Qwen2.5-0.5B-Instruct", "0.24.0", "", False),  # qwen2 is not listed
    ("Qwen/Qwen2.5-0.5B-Instruct", "0.25.0", "", True),  # 0.25.0: any non-MoE, non-hybrid model
    ("Qwen/Qwen2.5-0.5B-Instruct", "0.25.1", "", True),
    ("Qwen/Qwen3.5-4B", "0.28.0", "", False),  # a hybrid (gated DeltaNet) that is not listed
    ("qwen3-30b-a3b", "0.28.0", "", False),  # Qwen3MoeForCausalLM is not listed (Qwen2Moe is)
    ("qwen3-30b-a3b", "0.29.0", "", True),  # every family
    ("Qwen/Qwen3.5-4B", "0.29.0", "", True),
    ("qwen3-30b-a3b", "0.34.0", "VLLM_USE_V2_MODEL_RUNNER=0 ", True),  # V1 is removed in 0.34.0
    ("qwen3-30b-a3b", "0.33.0", "VLLM_USE_V2_MODEL_RUNNER=0 ", False),
    ("qwen3-8b", None, "VLLM_USE_V2_MODEL_RUNNER=0 ", False),  # a release not named is not taken to be 0.34
])
def test_each_release_picks_the_runner_its_config_names(model, version, extra, v2):
    assert _v2(model, version, extra) is v2


def test_the_0_22_canary_leaves_a_reasoning_parser_on_v1():
    """0.22.0's unsupported-features list holds "reasoning budget enforcement" whenever reasoning_config is set, which
    --reasoning-parser does (engine/arg_utils.py _set_default_reasoning_config_args); 0.23.0 dropped it."""
    line = "vllm serve qwen3-8b --reasoning-parser qwen3"
    shape = serve.resolve_shape("qwen3-8b")
    for version, v2 in (("0.22.0", False), ("0.23.0", True)):
        spec = spec_from_text(line).model_copy(update={"engine_version": version})
        assert spec.reasoning_parser == "qwen3"
        assert serve.vllm_model_runner_v2(shape, spec) is v2


@pytest.mark.parametrize(("method", "version", "v2"), [
    ("ngram", "0.31.0", False), ("ngram", "0.32.0", True),  # V2 drafts n-gram from 0.32.0
    ("draft_model", "0.29.0", False), ("draft_model", "0.30.0", False), ("draft_model", "0.31.0", True),
    ("mtp", "0.27.1", True), ("dflash", "0.23.0", False), ("dflash", "0.24.0", True),
    ("medusa", "0.32.0", False), ("medusa", "0.33.0", True), ("suffix", "0.33.0", False),
])
def test_a_speculative_method_v2_does_not_draft_falls_back_to_v1(method, version, v2):
    shape = serve.resolve_shape("qwen3-8b")
    spec = spec_from_text("vllm serve qwen3-8b").model_copy(update={"engine_version": version,
                                                                     "speculative_method": method})
    assert serve.vllm_model_runner_v2(shape, spec) is v2


def test_the_release_table_runs_newest_first_and_names_its_source():
    rows = engine_value("vllm", "model_runner_v2_by_release")
    sinces = [release(r["since"]) for r in rows]
    assert sinces == sorted(sinces, reverse=True)
    assert all(r.get("source") for r in rows)
    names = engine_value("vllm", "model_runner_v2_architectures")
    assert set(names) <= {a for r in rows for a in r.get("architectures", [])}  # every matched class is a listed one
    assert {r["rule"] for r in rows} == {"only", "all", "dense_or_listed", "listed", "listed_dense_unquantized", "opt_in"}


# ------------------------------------------------------------------ the non-KV formula, from the logs' own line

_OLD = re.compile(r"Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)\. Actual usage is ([\d.]+) GiB for weight, "
                  r"([\d.]+) GiB for peak activation, ([\d.]+) GiB for non-torch memory, and ([\d.]+) GiB for CUDAGraph")
_NEW = re.compile(r"Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)\. Actual usage is ([\d.]+) GiB for consumed "
                  r"memory \(weights \+ non-torch\), ([\d.]+) GiB for peak activation, and ([\d.]+) GiB for CUDAGraph")


def _formula(version: str) -> str:
    v = release(version)
    return next(r["formula"] for r in engine_value("vllm", "non_kv_formula_by_release") if at_least(v, r["since"]))


def _usage_lines() -> list[tuple[dict, re.Match, str]]:
    out = []
    for rec in yaml.safe_load(sa.LOGS.read_text())["records"]:
        log = " ".join((rec.get("log") or "").split())
        for rx, form in ((_OLD, "weights_peak_non_torch"), (_NEW, "consumed_headroom")):
            m = rx.search(log)
            if m and rec["engine"] == "vllm":
                out.append((rec, m, form))
    return out


def test_every_logged_usage_line_has_the_form_of_its_releases_formula():
    """The line vLLM prints after the profile names the terms of its non-KV formula: weight / peak / non-torch up to
    0.26.0, consumed (weights + non-torch) / peak from 0.27.0. Every recorded line with a stated release agrees."""
    seen = set()
    for rec, _m, form in _usage_lines():
        spec = sa.spec_of(rec)
        if serve._version(spec) is None:
            continue
        assert _formula(spec.engine_version) == form, rec["id"]
        seen.add(form)
    assert seen == {"weights_peak_non_torch", "consumed_headroom"}


def test_the_logged_terms_add_up_to_the_logged_kv_pool():
    """KV = requested - the non-KV terms - the applied CUDA-graph estimate. From 0.27.0 the printed peak already holds
    the applied estimate (gpu_worker: peak_activation_memory = transient_peak_headroom + estimate), so KV = requested -
    consumed - peak on either runner. Up to 0.26.0 the estimate is subtracted on its own where the runner makes one
    (V1 since 0.19.2; Model Runner V2 returns 0): the printed capture size stands in for it there."""
    n = {"weights_peak_non_torch": 0, "consumed_headroom": 0}
    for rec, m, form in _usage_lines():
        kv = rec["observed"].get("kv_gib")
        if kv is None:
            continue
        requested = float(m.group(2))
        if form == "consumed_headroom":
            consumed, peak = float(m.group(3)), float(m.group(4))
            assert requested - consumed - peak == pytest.approx(kv, abs=0.021), rec["id"]
            w = rec["observed"].get("weights_gib")
            if w is not None:  # consumed counts the weights through the fall of free memory, and more
                assert 0.1 < consumed - w < 2.0, rec["id"]
        else:
            w, peak, non_torch, graphs = (float(m.group(i)) for i in (3, 4, 5, 6))
            spec = sa.spec_of(rec)
            estimated = serve.graphs_in_budget(spec) and not serve.vllm_model_runner_v2(serve.resolve_shape(rec["model"]), spec)
            assert requested - w - peak - non_torch - (graphs if estimated else 0.0) == pytest.approx(kv, abs=0.05), rec["id"]
        n[form] += 1
    assert n["weights_peak_non_torch"] >= 3 and n["consumed_headroom"] >= 10


def test_a_warm_restart_on_0_24_is_within_the_v2_range():
    """ThunderAgent's two boots of one launch (Qwen3-8B, RTX 5090, vLLM 0.24.0: kv_cache_utils.py:2146 is where
    0.24.0-0.25.1 print the token count): 89,040 tokens cold, 95,936 after the compile cache. 0.24.0 runs
    Qwen3ForCausalLM on Model Runner V2, whose profile estimates no CUDA graphs: the flags-alone point is the first
    start, and given a warm cache the charge comes back."""
    boot1, boot2 = RECORDS["vllm-thunderagent-qwen3-8b-5090-u092-32k-boot1"], RECORDS["vllm-thunderagent-qwen3-8b-5090-u092-32k-boot2"]
    assert "kv_cache_utils.py:2146" in boot1["engine_version"]
    shape, spec = serve.resolve_shape(boot1["model"]), sa.spec_of(boot1)
    assert serve.vllm_model_runner_v2(shape, spec) and serve.v2_graphs_outside_budget(shape, spec)
    total = sa.total_of(boot1)
    m = serve.Machine(source="log", total_gib=total, free_gib=total, gpu_name=boot1["gpu"])
    first = serve.plan_serve(shape, spec, m)
    warm = serve.plan_serve(shape, spec.model_copy(update={"compile_state": "warm"}), m)
    assert first.kv.tokens == pytest.approx(boot1["observed"]["tokens"], rel=0.05)
    assert warm.kv.tokens == pytest.approx(boot2["observed"]["tokens"], rel=0.05)
    assert warm.kv.tokens > first.kv.tokens
