"""Blind round v25's llama.cpp / Ollama records (tests/planner/serve_logs/logs.yaml, round 20at), scored blind in
benchmarks/results/serve-accuracy-blind-v25.md before these tests existed: the llama-server slot rule (engines.yaml
llama.cpp.slots) met logs it was not written from. Pinned from the records' own log lines: the auto slots of a build with
no -np (b8198: 4 slots sharing one unified stream), the sliding-window cells per stream (GGML_PAD(n_swa x n_seq +
n_ubatch, 256)), the one sequence of llama-cli, q4_0's 18 bytes per 32 values; and the round's one unresolved name."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from sparkops.planner import serve

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}
AUTO = "llamacpp-ontouch-gpt-oss-20b-q4km-m5-auto4-b8198"
CLI = "llamacpp-ontouch-gpt-oss-20b-mxfp4-m5-cli-ub2048-b7217"
VULKAN = "llamacpp-chase-qwen3-14b-q4km-rx9060xt-vulkan-65k-q40kv"
OLLAMA = "ollama-yuji-llama2-7b-q40-m2pro-parallel2-v070"


def _logged(rec: dict, pattern: str) -> int:
    m = re.search(pattern, rec["log"])
    assert m, pattern
    return int(m.group(1))


def _layout(rid: str) -> serve.GgufSlots:
    rec = RECORDS[rid]
    return serve._gguf_kv_cells(serve.resolve_shape(rec["model"]), sa.spec_of(rec))


def test_a_b8198_server_without_np_runs_four_unified_slots_and_pads_the_window_for_all_four():
    """Log: 'n_parallel is set to auto, using n_parallel = 4 and kv_unified = true', 'n_seq_max = 4', 'n_ctx_seq =
    131072', 'creating     SWA KV cache, size = 1024 cells' = GGML_PAD(128 x 4 + 512, 256)."""
    rec = RECORDS[AUTO]
    assert sa.spec_of(rec).parallel is None and sa.spec_of(rec).ctx_size is None  # nothing on the launch line
    assert serve.llama_server_slots(sa.spec_of(rec)) == (4, True, True)
    lay = _layout(AUTO)
    assert lay.slots == _logged(rec, r"n_seq_max\s+=\s+(\d+)") == 4
    assert lay.cells == lay.slot_cells == _logged(rec, r"n_ctx_seq\s+=\s+(\d+)") == 131072
    assert lay.swa_cells == _logged(rec, r"creating\s+SWA KV cache, size = (\d+) cells") == 1024


def test_llama_cli_at_ubatch_2048_keeps_one_stream_and_a_window_padded_for_the_ubatch():
    """Log: 'n_seq_max = 1', 'n_ubatch = 2048', 'creating     SWA KV cache, size = 2304 cells' = GGML_PAD(128 + 2048, 256)."""
    rec = RECORDS[CLI]
    lay = _layout(CLI)
    assert _logged(rec, r"n_ubatch\s+=\s+(\d+)") == sa.spec_of(rec).ubatch == 2048
    assert lay.slots == _logged(rec, r"n_seq_max\s+=\s+(\d+)") == 1
    assert lay.swa_cells == _logged(rec, r"creating\s+SWA KV cache, size = (\d+) cells") == 2304


def test_q4_0_k_and_v_at_65536_cells_cost_what_the_vulkan_log_prints():
    """Log: 'size = 2880.00 MiB (65536 cells, 40 layers, 1/1 seqs), K (q4_0): 1440.00 MiB'; q4_0 stores 32 values in 18
    bytes, Qwen3-14B has 8 KV heads of 128: 65536 x 40 x 1024 x 18/32 bytes = 1440 MiB each for K and V."""
    rec = RECORDS[VULKAN]
    assert 65536 * 40 * 1024 * 18 / 32 / 1024**2 == 1440.0
    assert sa.kv_mib_unbounded(rec) == pytest.approx(rec["observed"]["kv_mib"], abs=1.0)


def test_the_slot_rows_hold_and_the_ollama_library_tag_resolves():
    """Blind (benchmarks/results/serve-accuracy-blind-v25.md): 9/13, every miss the Ollama record, whose bare library
    tag `llama2` no catalog alias knew. Since then (IN-SAMPLE for this record) a library name without a tag is read
    as its default size (engines.yaml ollama.library_default_tags: llama2 -> llama2:7b, from Ollama's README)."""
    rows, skipped = sa.evaluate([RECORDS[i] for i in (AUTO, CLI, VULKAN, OLLAMA)])
    slot_rows = [r for r in rows if r["what"] in ("slots (n_seq_max)", "per-slot context (n_ctx_seq)")]
    assert len(slot_rows) == 6
    assert all(r["ok"] for r in rows) and not skipped
    assert sa.spec_of(RECORDS[OLLAMA]).model == "llama2:7b"
