"""SGLang's own memory accounting as its release source has it (round 20ah, IN-SAMPLE: the constants and rules were
read with these records in view; benchmarks/results/serve-sglang-accounting.md). Pinned from the records' own log
lines in tests/planner/serve_logs/logs.yaml: the pool is the memory SGLang read as free BEFORE loading
(pre_model_load_memory, 'Load weight begin. avail mem') times mem_fraction_static less the weights, not a share of the
device total; on a GB10 SGLang >= 0.5.9 reads MemAvailable; the default fraction follows the release's own formula."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from sparkops.planner import serve
from sparkops.planner.serve_engines import ServeSpec, engine_value

GIB = 1024**3
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

RECORDS = {r["id"]: r for r in yaml.safe_load(sa.LOGS.read_text())["records"]}


def _ctx(tp: int) -> float:
    return float(engine_value("sglang", "pre_load_context_gib")["tp1" if tp <= 1 else "tp_multi"])


def _plan_with_logged_weights(rid: str, m: serve.Machine, weights_gib: float):
    """The SGLang path fed the weights the log printed ('mem usage'), so only the accounting rule is under test."""
    rec = RECORDS[rid]
    spec = sa.spec_of(rec)
    shape = serve.resolve_shape(rec["model"])
    return serve._sglang(shape, spec, m, weights_gib, serve.kv_dtype_bytes(spec))


def test_tp4_pool_is_pre_load_free_times_the_fraction_less_the_weights():
    """Log (4 x RTX 4090, --tp-size 4 --mem-fraction-static 0.80): 'Load weight end ... avail mem=16.00 GB, mem
    usage=7.08 GB' and '#tokens: 298447': pre-load free 23.08 GiB; 23.08 x 0.8 - 7.08 = 11.38 GiB of K+V. The old
    total-based reading (free after weights - 23.99 x 0.2) gave 12.12 GiB, 6.7 % more tokens."""
    rec = RECORDS["sglang-kuiperinfer-qwen3-14b-4x4090-tp4-mf080"]
    pre = 16.00 + 7.08
    m = serve.Machine(source="log", total_gib=23.99, free_gib=pre + _ctx(4), gpu_name=rec["gpu"])
    p = _plan_with_logged_weights(rec["id"], m, 7.08)
    assert p.tokens == pytest.approx(rec["observed"]["tokens"], rel=0.002)
    assert p.start.passes is True and p.start.free_gib == pytest.approx(pre, abs=0.01)


def test_gb10_reads_mem_available_from_059_and_the_pool_follows_it():
    """Log (DGX Spark, SGLang of 2026-06, --mem-fraction-static 0.4): 'Load weight begin. avail mem=112.26 GB', 'mem
    usage=3.25 GB', '#tokens: 1557709'. SGLang >= 0.5.9 reads psutil MemAvailable on an integrated GPU; MemFree (what
    CUDA calls free there) is far lower on a machine with page cache, and 0.5.8 reads that."""
    rec = RECORDS["sglang-jethac-qwen25-1.5b-gb10-mf040"]
    m = serve.Machine(source="log", total_gib=121.69, free_gib=60.0, available_gib=112.26 + _ctx(1), unified=True,
                      gpu_name=rec["gpu"])
    p = _plan_with_logged_weights(rec["id"], m, 3.25)
    assert p.tokens == pytest.approx(rec["observed"]["tokens"], rel=0.005)
    assert "MemAvailable" in p.start.detail
    old = serve._sglang(serve.resolve_shape(rec["model"]), sa.spec_of(rec).model_copy(update={"engine_version": "0.5.8"}),
                        m, 3.25, 2.0)
    assert "MemFree" in old.start.detail and old.tokens < 0.6 * p.tokens


def test_gb10_start_beside_a_neighbour_passes_as_the_log_shows():
    """Log (the same Spark with another process holding the pool, --mem-fraction-static 0.2): 'Load weight begin. avail
    mem=16.48 GB', 'avail mem=13.46 GB, mem usage=3.01 GB', '#tokens: 6827': it started. A share of the device total
    (121.69 x 0.8 = 97 GiB kept back) said it could not. The pool is a small difference of large readings: the plan's
    10.7k tokens against 6,827 logged is a 0.1 GiB gap (MemAvailable moved between the readings)."""
    rec = RECORDS["sglang-jethac-qwen25-1.5b-gb10-mf020-neighbour"]
    m = serve.Machine(source="log", total_gib=121.69, free_gib=10.0, available_gib=16.48 + _ctx(1), unified=True,
                      gpu_name=rec["gpu"])
    p = _plan_with_logged_weights(rec["id"], m, 3.01)
    assert p.start.passes is True and 0 < p.tokens < 2 * rec["observed"]["tokens"]
    assert 13.46 - 121.69 * (1 - 0.2) < 0  # the total-based rule this replaces refused the start


def test_default_fraction_of_the_2025_08_image_reproduces_the_rtx5080_pool():
    """Log (RTX 5080 16303 MiB, fuis/sglang of 2025-08, no --mem-fraction-static): '13.91 GB' after '1.25 GB' of
    weights and '#tokens: 104273' (K 5.57 GB): an effective fraction of 1 - (13.91 - 11.14) / 15.16 = 0.817. SGLang
    before 0.5.3 reserves (2.8 + 0.1 x ranks) GiB under 20 GiB: round((16302 - 2970) / 16302, 3) = 0.818; the formula of
    0.5.3+ would give 0.771 (0.751 with 0.5.10's piecewise graphs)."""
    rec = RECORDS["sglang-mineru-qwen3-0.6b-rtx5080"]
    spec = sa.spec_of(rec)
    frac, how = serve.sglang_default_fraction(spec, 15.92)
    assert frac == pytest.approx(0.818, abs=0.0005) and "< 0.5.3" in how
    assert serve.sglang_default_fraction(spec.model_copy(update={"engine_version": "0.5.8"}), 15.92)[0] == \
        pytest.approx(0.771, abs=0.0005)
    assert serve.sglang_default_fraction(spec.model_copy(update={"engine_version": "0.5.13.post1"}), 15.92)[0] == \
        pytest.approx(0.751, abs=0.0005)
    m = serve.Machine(source="log", total_gib=15.92, free_gib=15.92, gpu_name=rec["gpu"])
    res = serve.plan_serve(serve.resolve_shape(rec["model"]), spec, m)
    assert res.kv.tokens == pytest.approx(rec["observed"]["tokens"], rel=0.05)
    assert any("--mem-fraction-static not named" in n and "0.818" in n for n in res.notes)


def test_default_fraction_of_the_docs_ci_h100_start_is_0841():
    """The docs CI (main of 2026-02-04, H100 80GB, cuda_graph_bs=[1, 2, 4]) printed mem_fraction_static=0.841 as
    SGLang's own default: 512 + 1.5 x 8192 + 2 x 4 + 128 = 12936 MiB reserved of the H100's ~81.1k MiB."""
    rec = RECORDS["sglang-docs-qwen25-0.5b-h100-mf0841-maxtok20480"]
    spec = sa.spec_of(rec).model_copy(update={"mem_fraction_static": None})
    frac, _ = serve.sglang_default_fraction(spec, 79.19, cuda_graph_max_bs=4)
    assert frac == pytest.approx(rec["flags"]["mem_fraction_static"], abs=0.0011)
    # without the CI's graph sizes the H100 tier captures to batch 256: a lower default
    assert serve.sglang_default_fraction(spec, 79.19)[0] < frac


def test_a_month_names_the_release_pypi_had_then():
    assert serve.sglang_release("2025-08 (fuis/sglang:base-cu128)") == (0, 5, 1)
    assert serve.sglang_release("main of 2026-02-04 (docs CI)") == (0, 5, 9)
    assert serve.sglang_release("0.5.13.post1") == (0, 5, 13)
    assert serve.sglang_release(None) is None


def test_too_little_left_after_the_weights_refuses_the_start():
    """rest <= 0: 'Not enough memory. Please try to increase --mem-fraction-static' (0.4.9 .. 0.5.13), 'Loaded weights
    leave no GPU memory for the KV cache' (0.5.23)."""
    shape = serve.resolve_shape("qwen3-8b")
    m = serve.Machine(source="test", total_gib=23.99, free_gib=20.0)
    spec = ServeSpec(engine="sglang", model="qwen3-8b", mem_fraction_static=0.5)
    p = serve.plan_serve(shape, spec, m)
    assert p.start.passes is False and p.kv.tokens == 0
