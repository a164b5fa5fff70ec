"""SGLang's KV layout for sliding-window, hybrid linear-attention and vision models (round 20ax), each rule read in
SGLang's own PyPI releases (0.5.3, 0.5.8, 0.5.10, 0.5.13.post1 wheels/sdists and the 0.5.23 wheel, 2026-12-04):

- Gemma 3 is not a hybrid SWA model in any release read (configs/model_config.py is_hybrid_swa_model; server_args /
  0.5.23 arg_groups/model_overrides/gemma2_gemma3.py set disable_hybrid_swa_memory): every layer keeps every token, so
  a request costs the pool's full cell per token and the plan's request, concurrency and longest request follow
  the pool's tokens;
- gpt-oss (0.5.8 on; 0.5.3 disables it) and Gemma 4 (0.5.13.post1 on) are pooled as hybrid SWA: one pool token is a
  full-layer token plus swa_full_tokens_ratio (0.8) of a sliding-layer token (pool_configurator.py
  HybridSWAPoolConfigurator._recompute_cell_size);
- gated-DeltaNet models: the mamba state pool takes rest x 0.9 / 1.9 first (0.5.8 .. 0.5.23 mamba_full_memory_ratio;
  0.5.23 mem_cache/kv_cache_configurator.py), 512 states before (0.5.3);
- multimodal models: SGLang loads the vision tower and (0.5.3 on) multiplies its default mem_fraction_static by
  adjust_mem_fraction_for_vlm's factor (0.95 x 0.9734 for Qwen3.5/3.6's 1152-wide tower read as 24 layers).

The expected numbers below are computed from the model's config shapes and SGLang's formulas, not read back from
the plan."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from sparkops import api
from sparkops.planner.serve import sglang_mamba_state_bytes, sglang_vlm_factor
from sparkops.planner.serve_engines import ServeSpec
from sparkops.planner.serve_shape import resolve_shape

HEALTHY = FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"
GIB = 2**30


def _plan(model: str, *, image: str | None = None, extra: str = "", **kw):
    head = f"docker run --gpus all lmsysorg/sglang:{image} python3 -m sglang.launch_server" if image else \
        "python -m sglang.launch_server"
    return api.serve_plan(workload=f"{head} --model-path {model} --context-length 32768 {extra}".strip(),
                          facts=HEALTHY, offline=True, **kw)


def _agrees_with_pool(res, length: int = 32768) -> None:
    """Request size, concurrency and longest request all priced at the pool's own token."""
    kv = res.kv
    assert kv.request_gib == pytest.approx(kv.bytes_per_token * length / GIB, rel=1e-3)
    assert kv.max_concurrency == pytest.approx(kv.tokens / length, rel=0.01)
    assert kv.max_model_len_fitting == pytest.approx(kv.tokens, rel=1e-3)


# ---------------------------------------------------------------- 1. sliding-window models


def test_gemma3_is_pooled_as_full_attention_so_requests_are_priced_at_full_cells() -> None:
    res = _plan("google/gemma-3-27b-it")
    # 62 layers x K and V x 16 KV heads x 128 x 2 bytes: every layer, the 52 sliding ones too
    assert res.kv.bytes_per_token == 62 * 2 * 16 * 128 * 2
    _agrees_with_pool(res)
    assert res.kv.max_concurrency < 4  # windowed request bytes gave 17.47 in a 107,582-token pool
    assert any("as full attention" in n for n in res.notes)


def test_gpt_oss_is_hybrid_swa_from_0_5_8_with_the_ratio_cell() -> None:
    per_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16
    new = _plan("openai/gpt-oss-120b")  # 0.5.23
    assert new.kv.bytes_per_token == pytest.approx(18 * per_layer + 0.8 * 18 * per_layer, abs=0.1)
    assert new.kv.tokens == pytest.approx(new.kv.available_gib * GIB / new.kv.bytes_per_token, rel=1e-3)
    _agrees_with_pool(new)
    old = _plan("openai/gpt-oss-120b", image="v0.5.3-cu129")  # server_args: disable_hybrid_swa_memory for gpt-oss
    assert old.kv.bytes_per_token == 36 * per_layer
    _agrees_with_pool(old)


def test_gemma4_full_layers_use_their_own_heads_in_the_hybrid_cell() -> None:
    res = _plan("gemma-4-26b-a4b")
    full, swa = 2 * 1024 * 2, 2 * 8 * 256 * 2  # 2 global KV heads of 512; 8 sliding KV heads of 256
    assert res.kv.bytes_per_token == pytest.approx(5 * full + 0.8 * 25 * swa, abs=0.1)
    _agrees_with_pool(res)


# ---------------------------------------------------------------- 2. hybrid linear-attention models


def test_mamba_state_bytes_follow_sglangs_float32_temporal_state() -> None:
    shape = resolve_shape("qwen3.5-35b-a3b")
    conv = (2 * 16 * 128 + 32 * 128) * 3 * 2  # conv_dim x (kernel - 1) in bf16
    temporal = 32 * 128 * 128 * 4  # v_heads x v_dim x k_dim in float32
    assert sglang_mamba_state_bytes(shape) == 30 * (conv + temporal)


def test_mamba_pool_takes_r_over_1_plus_r_of_the_rest_before_the_kv_tokens() -> None:
    res = _plan("qwen3.5-35b-a3b")
    mamba = res.overheads["mamba_state_pool"]
    rest = mamba + res.kv.available_gib
    assert mamba / rest == pytest.approx(0.9 / 1.9, abs=0.005)
    assert res.kv.tokens == pytest.approx(res.kv.available_gib * GIB / (10 * 2 * 2 * 256 * 2), rel=1e-3)


def test_mamba_pool_before_0_5_8_is_512_states() -> None:
    res = _plan("Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", image="v0.5.3-cu129")
    shape = resolve_shape("Qwen/Qwen3-Next-80B-A3B-Instruct-FP8")
    assert res.overheads["mamba_state_pool"] == pytest.approx(512 * sglang_mamba_state_bytes(shape) / GIB, abs=0.01)


# ---------------------------------------------------------------- 3. vision-language models


def test_sglang_loads_the_vision_tower_and_shrinks_its_default_fraction() -> None:
    with_tower = _plan("qwen3.6-27b")
    shape = resolve_shape("qwen3.6-27b")
    assert "vision tower" in with_tower.model.weights_detail
    text_only = _plan("qwen3.6-27b", language_model_only=True)
    assert with_tower.weights_gib - text_only.weights_gib == pytest.approx(shape.params_vision * 2 / GIB, abs=0.01)
    factor = 0.95 * (1 - 0.1 * (1152**2 / 1024**2 - 1))
    assert sglang_vlm_factor(shape, ServeSpec(engine="sglang"))[0] == pytest.approx(factor)
    # the start-up ask is weights / mem_fraction_static: the fraction shrank by the factor
    msf_tower = with_tower.weights_gib / with_tower.start.requested_gib
    msf_text = text_only.weights_gib / text_only.start.requested_gib
    assert msf_tower / msf_text == pytest.approx(factor, abs=0.002)


def test_vlm_factor_is_by_release() -> None:
    shape = resolve_shape("qwen3.6-27b")
    assert sglang_vlm_factor(shape, ServeSpec(engine="sglang", engine_version="0.4.9.post2")) is None  # x 0.90 tiers
    assert sglang_vlm_factor(shape, ServeSpec(engine="sglang", engine_version="0.5.3")) is not None
    assert sglang_vlm_factor(shape, ServeSpec(engine="sglang", engine_version="0.5.23", language_model_only=True)) is None
