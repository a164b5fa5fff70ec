"""SGLang defects a read-only review of `plan --serve` / `preflight` found (round 20aw), each pinned by SGLang's own
release source (read 2026-12-04 in the PyPI sdists 0.5.3, 0.5.4, 0.5.9 and the 0.5.23 wheel):

- a sentence that names sglang ("serve qwen3-8b with sglang 64k context 4 users") is free text; only
  `python -m sglang.launch_server` / `sglang serve` start a server; `plan` without --serve refuses a server;
- an `lmsysorg/sglang:v0.5.4-cu130` image names the release: before 0.5.9 SGLang reads CUDA's free memory
  (utils/common.py get_available_gpu_memory; MemFree on GB10), so a page cache refuses its start and a flush helps;
- its start-up check is rest_memory > 0, i.e. pre x mem_fraction_static > weights: the free memory it asks for is
  weights / mem_fraction_static;
- --chunked-prefill-size <= 0 sizes the default fraction's activation reserve from max_prefill_tokens (16384):
  0.5.3/0.5.4/0.5.9 server_args.py _handle_gpu_memory_settings, 0.5.23 arg_groups/memory_hook.py;
- server_args' long spellings (--tensor-parallel-size, --pipeline-parallel-size, --data-parallel-size / --dp-size,
  --cuda-graph-max-bs) are read; --dp-size replicas each take their own GPUs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import FIXTURES
from sparkops import api
from sparkops.facts.workload import parse_workload
from sparkops.planner.serve_engines import looks_like_command, parse_command, spec_from_text

HEALTHY = FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"
PAGE_CACHE = FIXTURES / "facts" / "gb10_page_cache.json"
LINE_054 = ("docker run --gpus all lmsysorg/sglang:v0.5.4-cu130 python3 -m sglang.launch_server "
            "--model-path Qwen/Qwen3-8B")


def _plan(line: str, facts=HEALTHY, **kw):
    return api.serve_plan(workload=line, facts=facts, offline=True, **kw)


# ---------------------------------------------------------------- 1. a sentence is free text


def test_a_sentence_naming_sglang_is_free_text_not_a_launch_line() -> None:
    text = "serve qwen3-8b with sglang 64k context 4 users"
    assert not looks_like_command(text)
    spec = spec_from_text(text)
    assert spec.engine == "sglang" and spec.model == "qwen3-8b" and spec.max_model_len == 65536
    assert spec.concurrency == 4
    for line in ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B", "sglang serve --model-path Qwen/Qwen3-8B",
                 LINE_054):
        assert looks_like_command(line), line


def test_the_workload_reader_takes_the_size_before_context_and_leaves_the_users_count() -> None:
    w = parse_workload("serve qwen3-8b with sglang 64k context 4 users")
    assert w.method == "inference" and w.seq_len == 65536 and "sglang" in w.components
    assert parse_workload("qlora llama-3.1-8b context 4096").seq_len == 4096


def test_the_sentence_plans_and_preflight_judges_it_as_plan_does() -> None:
    from conftest import load_facts_fixture

    text = "serve qwen3-8b with sglang 32k context 4 users"
    res = _plan(text)
    assert res.spec.engine == "sglang" and res.spec.max_model_len == 32768
    rep = api.build_report(load_facts_fixture("gb10_ngc_2509_healthy"), parse_workload(text), offline=True)
    g3 = next(f for f in rep.findings if f.gotcha == "G3")
    assert rep.plan is not None and rep.plan.verdict == res.verdict
    assert "no serving engine" not in g3.summary and g3.status in ("pass", "warn")


def test_plan_without_serve_refuses_a_serving_sentence_instead_of_planning_a_lora() -> None:
    out = subprocess.run([sys.executable, "-m", "sparkops", "plan", "--offline", "--facts", str(HEALTHY), "-w",
                          "serve qwen3-8b with sglang 32k context 4 users"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "--serve" in out.stderr and "lora r=" not in out.stdout


# ---------------------------------------------------------------- 2. the image tag names the release


@pytest.mark.parametrize(("token", "version"), [("lmsysorg/sglang:v0.5.4-cu130", "0.5.4"),
                                                ("lmsysorg/sglang:v0.5.4.post1-cu129-amd64", "0.5.4.post1"),
                                                ("docker.io/lmsysorg/sglang:v0.5.9", "0.5.9"),
                                                ("lmsysorg/sglang:spark", None), ("lmsysorg/sglang:latest", None),
                                                ("lmsysorg/sglang", None), ("vllm/vllm-openai:v0.10.1", None)])
def test_sglang_image_tags(token: str, version: str | None) -> None:
    from sparkops.core.launch import sglang_image_version

    assert sglang_image_version(token) == version


def test_an_sglang_054_image_on_a_page_cache_fails_now_and_passes_after_a_flush() -> None:
    assert parse_command(LINE_054).engine_version == "0.5.4"
    old = _plan(LINE_054, facts=PAGE_CACHE)
    assert old.start.passes is False and old.start.passes_after_flush is True
    assert old.start.free_gib < 15  # MemFree less its context, not MemAvailable
    assert old.verdict == "tight" and any("page cache is dropped" in n for n in old.notes)
    assert not old.refusals
    new = _plan(LINE_054.replace("v0.5.4-cu130", "v0.5.9"), facts=PAGE_CACHE)
    assert new.start.passes is True and new.start.passes_after_flush is None  # 0.5.9 reads MemAvailable


def test_preflight_g3_agrees_on_the_054_line() -> None:
    from conftest import load_facts_fixture

    rep = api.build_report(load_facts_fixture("gb10_page_cache"), parse_workload(LINE_054), offline=True)
    g3 = next(f for f in rep.findings if f.gotcha == "G3")
    assert rep.workload.serve_engine_version == "0.5.4"
    assert g3.status == "warn" and "drop_caches" in (g3.fix or "")


# ---------------------------------------------------------------- 4. the start-up check's direction


def test_the_start_up_ask_is_weights_over_the_fraction() -> None:
    res = _plan("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-static 0.5")
    assert res.start.requested_gib == pytest.approx(res.weights_gib / 0.5, abs=0.02)
    # the ask does not grow with the memory free: it is what must be free, not what is kept back
    low = _plan("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-static 0.5", facts=PAGE_CACHE)
    assert low.start.requested_gib == pytest.approx(res.start.requested_gib, abs=0.02)


# ---------------------------------------------------------------- 3. an unchunked prefill


def test_an_unchunked_prefill_reserves_for_max_prefill_tokens() -> None:
    base = "python -m sglang.launch_server --model-path Qwen/Qwen3-8B"
    chunked = _plan(base + " --chunked-prefill-size 2048")
    off = _plan(base + " --chunked-prefill-size -1")
    # 0.5.23 memory_hook: 512 + 1.5 x max(16384, 2048) + 2 x 256 + 128 MiB, above the 10240 MiB floor
    assert any("max_prefill_tokens 16384" in n and "25728 MiB" in n for n in off.notes), off.notes
    assert chunked.kv.available_gib - off.kv.available_gib > 12
    smaller = _plan(base + " --chunked-prefill-size -1 --max-prefill-tokens 4096")
    assert smaller.kv.available_gib == pytest.approx(chunked.kv.available_gib, abs=0.01)  # both at the 10 GiB floor


# ---------------------------------------------------------------- 5. server_args' spellings


def test_sglang_long_flag_spellings_are_read() -> None:
    spec = parse_command("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tensor-parallel-size 2 "
                         "--pipeline-parallel-size 2 --data-parallel-size 2 --cuda-graph-max-bs 16")
    assert (spec.tensor_parallel, spec.pipeline_parallel, spec.data_parallel, spec.cuda_graph_max_bs) == (2, 2, 2, 16)
    assert not spec.ignored
    assert parse_command("python -m sglang.launch_server --model-path X --dp-size 3").data_parallel == 3


def test_the_graph_batch_enters_the_default_fraction_and_dp_counts_gpus() -> None:
    base = "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --chunked-prefill-size 16384"
    small, big = _plan(base + " --cuda-graph-max-bs 8"), _plan(base + " --cuda-graph-max-bs 512")
    assert any("CUDA graphs to batch 8," in n for n in small.notes)
    assert small.kv.available_gib > big.kv.available_gib  # (512 - 8) x 2 MiB more reserved
    dp = _plan("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --dp-size 2")
    assert any("asks for 2 GPUs" in n and "DP 2" in n for n in dp.notes)
    one = _plan("python -m sglang.launch_server --model-path Qwen/Qwen3-8B")
    assert dp.kv.available_gib == pytest.approx(one.kv.available_gib, abs=0.01)  # memory per GPU unchanged
