"""vLLM 0.34's extensible KV cache (engines.yaml vllm.extensible_kv_cache, read from the vllm-0.34.0 sdist on PyPI):
the pool is sized from the memory free after warmup and CUDA-graph capture, the default share is 1.0, and the
start-up check on free memory is skipped; the flags that turn it off restore the profiled budget."""

from __future__ import annotations

import pytest

from sparkops.planner import serve
from sparkops.planner.serve_engines import engine_value, parse_command, spec_from_text

LINE = "vllm serve Qwen/Qwen3-8B --max-model-len 32768"


def spark(free: float = 110.34, avail: float = 113.07) -> serve.Machine:
    return serve.Machine(source="test", total_gib=121.69, free_gib=free, available_gib=avail,
                         page_cache_gib=round(avail - free, 2), unified=True, os_reserve_gib=3.73)


def _plan(line: str, version: str | None, machine: serve.Machine | None = None):
    spec = spec_from_text(line).model_copy(update={"engine_version": version})
    return serve.plan_serve(serve.resolve_shape("Qwen/Qwen3-8B"), spec, machine or spark())


def test_the_flags_that_decide_the_extensible_cache_are_read():
    s = parse_command(LINE + " --no-enable-extensible-kv-cache --num-gpu-blocks-override 4096")
    assert (s.enable_extensible_kv_cache, s.num_gpu_blocks_override) == (False, 4096)
    assert parse_command(LINE + " --enable_extensible_kv_cache").enable_extensible_kv_cache is True
    assert parse_command(LINE).enable_extensible_kv_cache is None


@pytest.mark.parametrize("version,flags,on", [
    ("0.34.0", "", True), ("0.34.1", "", True), ("v0.35.0-cu130", "", True),
    ("0.33.0", "", False), ("0.31.0", "", False),
    (None, "", False),  # a release the line does not name is not taken to be 0.34
    ("not stated (vLLM recipe Llama3.3_Hopper.yaml)", "", False),  # "3.3" there is a model name, not vLLM's
    ("0.34.0", " --no-enable-extensible-kv-cache", False), ("0.34.0", " --kv-cache-memory 20G", False),
    ("0.34.0", " --num-gpu-blocks-override 4096", False), (None, " --enable-extensible-kv-cache", True),
])
def test_which_launch_lines_get_the_extensible_cache(version, flags, on):
    spec = spec_from_text(LINE + flags).model_copy(update={"engine_version": version})
    assert serve.vllm_extensible_kv_cache(spec) is on


def test_the_pool_is_the_cap_or_the_free_memory_less_the_margin_whichever_is_smaller():
    """measure_kv_cache_bytes: min(requested - held, free - held - max(1 GiB, 0.75 x transient)) - transient."""
    x = engine_value("vllm", "extensible_kv_cache")
    assert (x["margin_floor_gib"], x["margin_fraction"], x["default_share"]) == (1.0, 0.75, 1.0)
    # the free-memory side binds at the default share: the floor margin (0.75 x 0.2 < 1 GiB)
    assert serve.vllm_extensible_kv(121.69, 110.0, 16.0, 0.2) == pytest.approx(110.0 - 16.0 - 1.0 - 0.2)
    # a large transient: the margin is 0.75 x it
    assert serve.vllm_extensible_kv(121.69, 110.0, 16.0, 4.0) == pytest.approx(110.0 - 16.0 - 3.0 - 4.0)
    # an explicit low share binds before the free memory does
    assert serve.vllm_extensible_kv(60.0, 110.0, 16.0, 0.2) == pytest.approx(60.0 - 16.0 - 0.2)
    assert serve.vllm_extensible_kv(60.0, None, 16.0, 0.2) == pytest.approx(60.0 - 16.0 - 0.2)


def test_on_a_spark_034_skips_the_start_check_that_033_fails_and_sizes_the_pool_from_free_memory():
    old, new = _plan(LINE, "0.33.0"), _plan(LINE, "0.34.0")
    assert old.start.passes is False and old.start.requested_gib == pytest.approx(0.92 * 121.69, abs=0.01)
    assert new.start.passes is True and "skips" in new.start.check
    assert new.start.requested_gib == pytest.approx(121.69, abs=0.01)  # the default share is 1.0 there
    ov = new.overheads
    held = new.weights_gib + ov["non_torch"] + ov["cudagraph"]
    free = serve.vllm_start_free(spark(), spec_from_text(LINE).model_copy(update={"engine_version": "0.34.0"}))[0]
    assert new.kv.available_gib == pytest.approx(serve.vllm_extensible_kv(121.69, free, held, ov["activation_peak"]),
                                                 abs=0.01)
    # on this machine MemAvailable less the context is below 0.92 x total: 0.34's pool is the free memory's
    assert new.kv.available_gib < old.kv.available_gib
    assert any("DGX Spark" in n for n in new.notes)


def test_an_explicit_share_is_a_cap_on_034_and_the_off_switch_restores_033s_budget():
    capped = _plan(LINE + " --gpu-memory-utilization 0.5", "0.34.0")
    ov = capped.overheads
    held = capped.weights_gib + ov["non_torch"] + ov["cudagraph"]
    assert capped.kv.available_gib == pytest.approx(round(capped.start.requested_gib - held - ov["activation_peak"], 2),
                                                    abs=0.02)
    off = _plan(LINE + " --gpu-memory-utilization 0.5 --no-enable-extensible-kv-cache", "0.34.0")
    old = _plan(LINE + " --gpu-memory-utilization 0.5", "0.33.0")
    assert (off.kv.available_gib, off.start.check) == (old.kv.available_gib, old.start.check)
