"""What --enable-lora costs vLLM's KV pool beyond the adapter slots (round 20ae, benchmarks/results/serve-lora-profile.md),
pinned from recorded logs (tests/planner/serve_logs/logs.yaml). In-sample: these records were read while writing the rule."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}
GIB = 1024**3


def test_slots_cost_the_pool_only_what_they_load_from_1_to_64_slots():
    """Logs (Qwen3-4B, RTX 4090, vLLM 0.27.1, 0.8 share, warm compile cache both): 1 slot loads 7.63 GiB and leaves
    10.74 GiB of KV, 64 slots load 12.49 and leave 5.89: the pool shrinks by what the slots load (4.85 vs 4.86 GiB), so
    nothing else grows with max_loras (Punica's buffers have no max_loras axis). The plan charges LoRA only through the
    loaded slots, so its pool gap is its weight gap."""
    one, many = RECORDS["vllm-a5-qwen3-4b-lora1-4090-u080"], RECORDS["vllm-a5-qwen3-4b-lora64-4090-u080"]
    log_kv_gap = one["observed"]["kv_gib"] - many["observed"]["kv_gib"]
    log_w_gap = many["observed"]["weights_gib"] - one["observed"]["weights_gib"]
    assert log_kv_gap == pytest.approx(log_w_gap, abs=0.05)
    p1, p64 = sa.plan_of(one), sa.plan_of(many)
    assert p64.weights_gib > p1.weights_gib + 3.0  # 63 more slots of rank 16 on 36 layers
    assert p1.kv.available_gib - p64.kv.available_gib == pytest.approx(p64.weights_gib - p1.weights_gib, abs=0.02)


def test_a_lora_launch_names_its_config_as_part_of_the_compile_cache_key():
    """The v18 pair (Qwen3-8B, RTX 4090, 0.90 / 4096): 42,768 tokens without LoRA (a restart: 0.45 GiB left beside
    weights and KV) and 33,712 with --enable-lora --max-loras 2 (the notes' first LoRA start: ~1.51 GiB left, a cold
    compile's peak). LoRAConfig.compute_hash puts max_loras and max_lora_rank in the compile cache's key, so the plan's
    compile-cache term says so for the LoRA launch, and only for it; both logged pools lie in the plan's range."""
    lora, base = RECORDS["vllm-llmso-qwen3-8b-4090wsl-u090-4k-lora2"], RECORDS["vllm-llmso-qwen3-8b-4090wsl-u090-4k"]
    pl, pb = sa.plan_of(lora), sa.plan_of(base)
    why_l = next(u.why for u in pl.uncertainties if u.term == "compile-cache")
    why_b = next(u.why for u in pb.uncertainties if u.term == "compile-cache")
    assert "--enable-lora" in why_l and "max_loras" in why_l and "max_lora_rank" in why_l
    assert "LoRA" not in why_b
    lora_kv = lora["observed"]["tokens"] * pl.kv.bytes_per_token / GIB
    for res, kv in ((pl, lora_kv), (pb, base["observed"]["kv_gib"])):
        lo, hi = res.kv.available_range_gib
        assert lo <= kv <= hi
