"""Blind round v16's records that the planner got right, pinned from their own log lines (tests/planner/serve_logs/
logs.yaml): llama.cpp's sliding-window split for gpt-oss-20b and SGLang's per-rank K size at tensor parallel 4.
Scored blind in benchmarks/results/serve-accuracy-blind-v16.md before these tests existed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from sparkops.planner import serve

GIB = 1024**3
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}


def test_llamacpp_gpt_oss_20b_at_131072_caches_12_full_layers_and_a_768_cell_window():
    """Log (llama.cpp b6699, RTX 3070, -c 131072 -fa on, one slot): non-SWA 3072.00 MiB (131072 cells, 12 layers) + SWA
    18.00 MiB (768 cells, 12 layers) = 3090 MiB; 8 KV heads x 64 x 2 (K, V) x 2 bytes = 2 KiB a token and layer."""
    rec = RECORDS["llamacpp-ik822-gpt-oss-20b-mxfp4-3070-131k-ncpumoe"]
    res = sa.plan_of(rec)
    # within 0.5 %: caching all 24 layers at the full context (6144 MiB) or the window alone would miss by far
    assert res.kv.available_gib * 1024 == pytest.approx(rec["observed"]["kv_mib"], rel=0.005)


def test_sglang_qwen3_14b_tp4_k_size_is_a_quarter_of_the_kv_heads_per_rank():
    """Log (SGLang at ebaf86d4, 4 x RTX 4090, --tp-size 4): '#tokens: 298447, K size: 5.69 GB' and 'mem usage=7.08 GB'
    per rank; Qwen3-14B has 40 layers x 8 KV heads x 128, two heads a rank at TP4."""
    rec = RECORDS["sglang-kuiperinfer-qwen3-14b-4x4090-tp4-mf080"]
    shape = serve.resolve_shape(rec["model"])
    spec = sa.spec_of(rec)
    assert spec.tensor_parallel == 4
    per_token = serve.kv_bytes_per_token(shape, serve.kv_dtype_bytes(spec), 4)
    assert per_token == 40 * 2 * 128 * 2 * 2  # layers x heads a rank x head dim x (K, V) x bf16
    assert rec["observed"]["tokens"] * per_token / 2 / GIB == pytest.approx(rec["observed"]["k_gib"], abs=0.005)
    assert sa.plan_of(rec).weights_gib == pytest.approx(rec["observed"]["weights_gib"], rel=0.05)
