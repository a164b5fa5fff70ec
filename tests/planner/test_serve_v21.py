"""Blind round v21's SGLang / llama.cpp records (tests/planner/serve_logs/logs.yaml, round 20ak), scored blind in
benchmarks/results/serve-accuracy-blind-v21.md before these tests existed: SGLang's K size from the logged token count (the
bytes-per-token model by itself), and the round's misses named with their reasons."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}
V21 = ("sglang-gw-qwen25-0.5b-4070tis-mf015-2k-v058", "sglang-myr1-r1-distill-qwen-7b-3090-mf088-2502",
       "sglang-play-qwen25-0.5b-h100nvl-mf086-v0510", "sglang-gkesnap-qwen3-32b-h100-v0519",
       "llamacpp-mtp-qwen36-27b-udq4kxl-5090-131k-np4-q8kv")
# blind v21 misses, with their reasons:
KNOWN = {
    # SGLang 0.5.19 Qwen3-32B on an H100: the manifest holding --mem-fraction-static was not read (flags {}); the log's
    # own numbers (78.47 GB free before load, 61.07 GB weights, 9.54 GB KV) imply 0.90, not SGLang's computed default
    ("sglang-gkesnap-qwen3-32b-h100-v0519", "KV tokens (end to end)"),
}


def _rows() -> list[dict]:
    rows, _ = sa.evaluate([RECORDS[rid] for rid in V21])
    return rows


def test_sglang_k_size_follows_from_the_logged_tokens():
    """Log: 'KV Cache is allocated. #tokens: 107319, K size: 0.61 GB' (Qwen2.5-0.5B: 24 layers x 2 KV heads x 64 x bf16
    = 6 KiB of K a token), '#tokens' 105531 with 'K size: 2.82 GB' (R1-Distill-Qwen-7B: 28 x 4 x 128 x 2 = 28 KiB)."""
    small = RECORDS["sglang-gw-qwen25-0.5b-4070tis-mf015-2k-v058"]["observed"]
    r1 = RECORDS["sglang-myr1-r1-distill-qwen-7b-3090-mf088-2502"]["observed"]
    k_small = small["tokens"] * 24 * 2 * 64 * 2 / sa.GIB
    k_r1 = r1["tokens"] * 28 * 4 * 128 * 2 / sa.GIB
    assert small["k_gib"] == pytest.approx(k_small, abs=0.005)
    assert r1["k_gib"] == pytest.approx(k_r1, abs=0.005)
    k_rows = [r for r in _rows() if r["what"] == "K GiB given tokens"]
    assert {r["id"] for r in k_rows} == set(V21[:3])
    assert all(r["ok"] for r in k_rows)


def test_the_round_misses_only_where_named():
    rows = _rows()
    missed = {(r["id"], r["what"]) for r in rows if not r["ok"]}
    assert missed <= KNOWN
    # the two SGLang starts whose share the log states land within 10 % end to end
    tok = {r["id"]: r for r in rows if r["what"] == "KV tokens (end to end)"}
    assert tok["sglang-gw-qwen25-0.5b-4070tis-mf015-2k-v058"]["ok"]
    assert tok["sglang-myr1-r1-distill-qwen-7b-3090-mf088-2502"]["ok"]


def test_an_mtp_gguf_repo_resolves_to_its_base_model():
    """Blind v21 missed this record because ``unsloth/Qwen3.6-27B-MTP-GGUF`` resolved to no catalog model (fixed after
    the blind score, so in-sample). The log: 'llama_kv_cache: size = 4352.00 MiB (131072 cells, 16 layers, 4/4 seqs)'
    with q8_0 K and V: 16 attention layers x 4 KV heads x 256 x (K, V) x 131072 cells x 34/32 bytes."""
    from sparkops.planner.serve_shape import resolve_shape

    rec = RECORDS["llamacpp-mtp-qwen36-27b-udq4kxl-5090-131k-np4-q8kv"]
    assert resolve_shape(rec["model"]).id == resolve_shape("Qwen/Qwen3.6-27B").id
    kv = {r["what"]: r for r in _rows() if r["id"] == rec["id"]}["KV MiB (end to end)"]
    assert kv["ok"] and kv["pred"] == pytest.approx(rec["observed"]["kv_mib"], rel=0.001)
