"""preflight --method inference with a launch line: G3 tests the server's footprint as plan --serve plans it
(issue 20: "preflight's G3/G6 use it for inference workloads"). Found on the lent H200 (session 11): a vLLM workload
left G3 unknown on a discrete GPU, where no start-up check of the unified pool stands in for the fit."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, load_facts_fixture
from sparkops import api
from sparkops.core.units import GB, GIB
from sparkops.facts.workload import merge, parse_workload

H200 = "h200_device_s9_full"         # the lent H200, recorded idle
GB10_BUSY = "gb10_vllm_default"      # a GB10 with a vLLM server already holding its share
LINE = "vllm serve Qwen/Qwen3-8B --max-model-len 32768"


def _report(fixture: str, text: str):
    return api.build_report(load_facts_fixture(fixture), parse_workload(text), offline=True)


def test_the_peak_g3_tests_is_the_footprint_plan_serve_gives_on_the_same_facts():
    rep = _report(H200, LINE + " --gpu-memory-utilization 0.5")
    served = api.serve_plan(workload=LINE + " --gpu-memory-utilization 0.5", facts=FIXTURES / "facts" / f"{H200}.json",
                            offline=True)
    assert rep.plan is not None and rep.plan.error is None
    assert rep.workload.estimated_peak_gb == rep.plan.peak_gb == pytest.approx(served.footprint_gib * GIB / GB, abs=0.01)
    assert rep.plan.verdict == served.verdict == "fits"
    assert not rep.checks["G3"].startswith(("fail", "unknown"))  # judged, no longer "fit not tested"


def test_a_server_that_cannot_get_its_share_blocks_on_g3():
    rep = _report(GB10_BUSY, LINE)  # vLLM's default share (0.92) beside a server already holding ~94 GiB
    assert rep.plan is not None and rep.plan.verdict == "does-not-fit"
    # a server's own code (G3.serve-exceeds-budget: its share or neighbours, not the fine-tune ladder)
    assert rep.checks["G3"].startswith("fail") and "more than the" in rep.checks["G3"]
    assert "start-up check fails" in (rep.plan.note or "")
    assert rep.verdict == "blocked"


def test_an_unknown_served_model_leaves_g3_untested_with_the_planners_reason():
    rep = _report(H200, "vllm serve no-such-org/no-such-model-7b --max-model-len 4096")
    assert rep.plan is not None and rep.plan.error  # offline: not in a catalog or the local cache
    assert rep.checks["G3"].startswith("unknown")
    assert rep.workload.estimated_peak_gb is None


def test_an_explicit_peak_wins_over_the_serving_plan():
    rep = api.build_report(load_facts_fixture(H200), merge(LINE, estimated_peak_gb=20.0), offline=True)
    assert rep.plan is None and rep.workload.estimated_peak_gb == 20.0


def test_g3s_start_up_check_judges_the_share_the_launch_line_names():
    # a Spark with 78 GiB of page cache and ~88 GiB free as vLLM reads it: at the default share (0.92 x 119.7 GiB) the
    # start is refused, at 0.3 it passes; G3 once judged the default share whatever the line said
    default = _report("gb10_page_cache", LINE)
    small = _report("gb10_page_cache", LINE + " --gpu-memory-utilization 0.3")
    assert default.workload.serve_share is None and small.workload.serve_share == 0.3
    g3 = {name: next(f for f in rep.findings if f.gotcha == "G3") for name, rep in (("default", default), ("small", small))}
    assert "G3.serve-start-refused" in g3["default"].codes and "0.92 x 119.7" in g3["default"].detail
    assert "G3.serve-start-refused" not in g3["small"].codes
    # the share is read even when the model cannot be planned
    unknown = _report("gb10_page_cache", "vllm serve no-such-org/no-such-model-7b --gpu-memory-utilization 0.3")
    assert unknown.plan.error and unknown.workload.serve_share == 0.3


def test_vllm_034s_extensible_kv_cache_has_no_start_up_check_for_g3_to_judge():
    # vLLM 0.34.0's request_memory skips "Free memory on device ... less than desired" when the extensible KV cache is
    # on (its default; engines.yaml vllm.extensible_kv_cache): the page cache that refuses a 0.33 start at the default
    # share refuses nothing there. --no-enable-extensible-kv-cache restores the profiled budget and the check.
    image = "docker run --gpus all vllm/vllm-openai:{tag} --model Qwen/Qwen3-8B --max-model-len 32768"
    old, new = _report("gb10_page_cache", image.format(tag="v0.33.0")), _report("gb10_page_cache", image.format(tag="v0.34.0"))
    off = _report("gb10_page_cache", image.format(tag="v0.34.0") + " --no-enable-extensible-kv-cache")
    g3 = {k: next(f for f in r.findings if f.gotcha == "G3") for k, r in (("old", old), ("new", new), ("off", off))}
    assert old.workload.serve_extensible_kv is False and new.workload.serve_extensible_kv is True
    assert off.workload.serve_extensible_kv is False
    assert "G3.serve-start-refused" in g3["old"].codes and "G3.serve-start-refused" in g3["off"].codes
    assert "G3.serve-start-refused" not in g3["new"].codes
    start = next(e for e in g3["new"].evidence if e.fact == "vllm start-up check")
    assert "extensible KV cache" in str(start.value) and start.value["share"] == 1.0  # the cap is the whole pool
    # plan --serve says the same on the same facts (one owner: G3's vllm_extensible_kv_cache)
    plan = api.serve_plan(workload=image.format(tag="v0.34.0"), facts=FIXTURES / "facts" / "gb10_page_cache.json",
                          offline=True)
    assert plan.start.passes is True and plan.start.check.startswith("none")


def test_vllm_034_on_an_idle_discrete_gpu_is_tight_not_blocked():
    # Found on the lent H200 (session 12, benchmarks/results/device-serve-034-s12.md): vLLM 0.34's default pool takes
    # what is free less its 1 GiB margin, and G6 kept the unified pool's 4 GiB OS reserve on the H200's own memory, so
    # an idle GPU read -2.4 GiB left and preflight said BLOCKED. The OS lives in the pool only on unified memory.
    line = "docker run --gpus all vllm/vllm-openai:v0.34.0 --model Qwen/Qwen3-8B --max-model-len 32768"
    rep = _report(H200, line)
    g6 = next(f for f in rep.findings if f.gotcha == "G6")
    budget = next(e.value for e in g6.evidence if e.fact == "pool budget")
    assert budget["os_reserve_gib"] == 0.0 and budget["left_gib"] > 0
    assert g6.status.value != "fail" and rep.verdict != "blocked"
    # on a GB10 the reserve stays: the OS and desktop share the pool
    spark = _report(GB10_BUSY, LINE)
    budgets = [e.value for f in spark.findings if f.gotcha in ("G3", "G6") for e in f.evidence if e.fact == "pool budget"]
    assert budgets and all(b["os_reserve_gib"] > 0 for b in budgets)


@pytest.mark.parametrize("model", ["BAAI/bge-m3", "deepseek-ai/DeepSeek-V3"])
def test_a_launch_line_is_planned_whatever_its_model_name_looks_like(model):
    """The workload reader found a model only by a size in its name (8b, 70b), so a launch line serving BAAI/bge-m3
    or deepseek-ai/DeepSeek-V3 was never planned and G3 judged vLLM's DEFAULT share (0.92), not the line's (found in
    session 13 on a recorded GB10 beside a running server). The engine's own flags name the model; the line's share
    reaches G3's start-up check even where the model is unknown offline."""
    line = f"vllm serve {model} --gpu-memory-utilization 0.2"
    assert parse_workload(line).needs_planning
    rep = _report(GB10_BUSY, line)
    assert rep.workload.serve_share == 0.2 and rep.plan is not None
    g3 = next(f for f in rep.findings if f.gotcha == "G3")
    assert "--gpu-memory-utilization 0.2 " in g3.summary and "0.92" not in g3.summary + g3.detail


def test_an_encoder_only_server_is_planned_without_a_kv_cache():
    rep = _report("gb10_ngc_2509_healthy", "vllm serve BAAI/bge-m3 --gpu-memory-utilization 0.05")
    assert rep.plan is not None and rep.plan.error is None and rep.plan.verdict == "fits"
    assert "KV cache none (encoder-only)" in (rep.plan.note or "")
    assert rep.workload.estimated_peak_gb < 0.05 * 128  # what it holds, not its share


def test_the_launch_lines_model_and_unread_flags_are_the_workloads():
    """The review of session 13: preflight planned BAAI/bge-m3 from the line yet listed it as "ignored" and left the
    workload's model empty. The engine's parser names the model and what it could not read."""
    rep = _report("gb10_ngc_2509_healthy", "vllm serve BAAI/bge-m3 --gpu-memory-utilization 0.05 --frobnicate 3")
    assert rep.workload.model == "BAAI/bge-m3" and rep.plan.model == "BAAI/bge-m3"
    assert rep.workload.unparsed == ["--frobnicate 3"]


def test_free_text_naming_a_catalog_server_model_without_a_size_is_planned():
    rep = _report("gb10_ngc_2509_healthy", "serve bge-m3 as an embedding server with vllm")
    assert rep.plan is not None and rep.plan.error is None and rep.plan.model == "BAAI/bge-m3"
    assert not rep.checks["G3"].startswith("unknown")
    unnamed = _report("gb10_ngc_2509_healthy", "inference with vllm")  # no model: the planner says so, G3 untested
    assert unnamed.plan is not None and "name the model to serve" in unnamed.plan.error
    assert unnamed.checks["G3"].startswith("unknown")
