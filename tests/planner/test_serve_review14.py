"""Defects a read-only review of `plan --serve` found in session 14, each pinned by the engine's own rule:

- a pool pinned with --kv-cache-memory is not bounded by --gpu-memory-utilization (gpu_worker.determine_available_memory
  returns the pinned bytes), so the server's footprint is its weights, peak, graphs and that pool;
- llama.cpp / Ollama allocate the cells their flags ask for: a request of a slot's length always fits (comparing
  rounded bytes had said "does not fit" for `ollama run qwen3:8b`);
- llama-server's slots (src/llama-context.cpp n_ctx_seq, tools/server/server.cpp's auto -np): an explicit -np gives each
  slot -c/np cells unless -kvu; no -np is 4 slots sharing all cells; sliding-window layers keep a window per stream;
- vLLM / SGLang refuse a context beyond the config's (max_position_embeddings x rope scaling) without an override;
- a tensor-parallel line on a one-GPU Spark is planned per node of a cluster, and says so."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops import api
from sparkops.planner import serve
from sparkops.planner.serve_engines import ServeSpec, engine_value, parse_command

GIB = 1024**3


def _plan(line: str, **kw):
    return api.serve_plan(workload=line, target="dgx-spark", offline=True, **kw)


# ---------------------------------------------------------------- a pinned KV pool


def test_a_pinned_pool_counts_whole_against_the_machine_whatever_the_share() -> None:
    res = _plan("vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.3 --kv-cache-memory-bytes 100G")
    o = res.overheads
    held = res.weights_gib + o["activation_peak"] + o["non_torch"] + o["cudagraph"] + 100.0
    assert res.footprint_gib == pytest.approx(held, abs=0.02)
    assert res.footprint_gib > res.budget_gib and res.verdict == "does-not-fit"
    fit = [s for s in res.suggestions if s.startswith("--kv-cache-memory-bytes")]
    assert fit, res.suggestions
    pinned = int(fit[0].split()[1].rstrip("G"))
    smaller = _plan(f"vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.3 --kv-cache-memory-bytes {pinned}G")
    assert smaller.verdict != "does-not-fit" and smaller.headroom_gib >= 0
    # the share no longer sizes what it holds: only the start-up check reads it
    other_share = _plan(f"vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.5 --kv-cache-memory-bytes {pinned}G")
    assert other_share.footprint_gib == pytest.approx(smaller.footprint_gib, abs=0.01)
    assert other_share.start.requested_gib > smaller.start.requested_gib


def test_a_profiled_pool_still_fills_its_share() -> None:
    res = _plan("vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.3")
    assert res.footprint_gib == pytest.approx(res.machine.total_gib * 0.3, abs=0.05)


# ---------------------------------------------------------------- llama.cpp / Ollama: the cells the flags ask for


@pytest.mark.parametrize("line", ["ollama run qwen3:8b", "llama-server -m Qwen3-8B-Q4_K_M.gguf -c 4096",
                                  "llama-server -m Qwen3-8B-Q4_K_M.gguf -c 2048",
                                  "OLLAMA_CONTEXT_LENGTH=2048 ollama run qwen3:8b",
                                  "ollama run hf.co/unsloth/Qwen3-8B-GGUF:Q8_0"])
def test_a_small_gguf_server_fits_its_own_cells(line: str) -> None:
    res = _plan(line)
    assert res.verdict == "fits", res.notes
    assert res.kv.fits_max_model_len is True and res.kv.max_concurrency == 1.0


def test_explicit_slots_split_the_context_and_auto_slots_share_it() -> None:
    base = "llama-server -m unsloth/Qwen3-30B-A3B-GGUF:Q8_0 -c 131072"
    split = _plan(base + " -np 4")
    assert split.kv.max_model_len_fitting == 131072 // 4 and split.kv.max_concurrency == 4.0
    assert any("-kvu lets one request take them all" in n for n in split.notes)
    for line in (base, base + " -np 4 -kvu", base + " --parallel 4 --kv-unified"):
        shared = _plan(line)
        assert shared.kv.max_model_len_fitting == 131072 and shared.kv.max_concurrency == 1.0, line
        assert any("share one unified KV cache" in n for n in shared.notes), line
    # the KV memory is the same: -c cells in all, however they are shared
    assert split.kv.available_gib == _plan(base).kv.available_gib


def test_slots_by_build() -> None:
    c = engine_value("llama.cpp", "slots")
    assert serve.llama_server_slots(ServeSpec(engine="llama.cpp")) == (int(c["auto_slots"]), True, True)
    assert serve.llama_server_slots(ServeSpec(engine="llama.cpp", engine_version="b7342")) == (4, True, True)
    old = ServeSpec(engine="llama.cpp", engine_version="b5622 (97340b4c)")
    assert serve.llama_server_slots(old) == (1, True, True)
    # before split streams the server still cut each slot to -c/np
    assert serve.llama_server_slots(old.model_copy(update={"parallel": 2})) == (2, True, False)
    fork = ServeSpec(engine="llama.cpp", engine_version="ik_llama.cpp fork, build 3933 (7a921655)")
    assert serve.llama_cpp_build(fork) == 0 and serve.llama_server_slots(fork)[0] == 1


def test_sliding_window_layers_keep_a_window_per_stream() -> None:
    """llama-kv-cache-iswa.cpp: GGML_PAD(min(size, n_swa x (unified ? n_seq_max : 1) + n_ubatch), 256) per stream."""
    shape = serve.resolve_shape("gemma3:27b")
    w, ub = int(shape.sliding_window), int(engine_value("llama.cpp", "default_ubatch"))
    pad = lambda x: -(-x // 256) * 256  # noqa: E731
    split = serve._gguf_kv_cells(shape, ServeSpec(engine="llama.cpp", ctx_size=65536, parallel=4))
    assert split.swa_cells == 4 * min(65536 // 4, pad(w + ub)) and split.slot_cells == 16384
    shared = serve._gguf_kv_cells(shape, ServeSpec(engine="llama.cpp", ctx_size=65536, parallel=4, kv_unified=True))
    assert shared.swa_cells == min(65536, pad(w * 4 + ub)) and shared.slot_cells == 65536


@given(ctx=st.integers(256, 1 << 20), np_=st.integers(1, 64), kvu=st.sampled_from([None, True, False]),
       build=st.sampled_from([None, "b5000", "b6500", "b7342", "ik_llama.cpp fork, 2025-05"]))
def test_slot_cells_never_exceed_the_cells(ctx: int, np_: int, kvu: bool | None, build: str | None) -> None:
    shape = serve.resolve_shape("Qwen/Qwen3-8B")
    g = serve._gguf_kv_cells(shape, ServeSpec(engine="llama.cpp", ctx_size=ctx, parallel=np_, kv_unified=kvu,
                                              engine_version=build))
    assert 1 <= g.slots == np_ and 0 < g.slot_cells <= g.cells == ctx
    assert g.slot_cells in (ctx, ctx // np_)


def test_kv_unified_flags_parse() -> None:
    assert parse_command("llama-server -m x.gguf -np 4 -kvu").kv_unified is True
    assert parse_command("llama-server -m x.gguf --no-kv-unified").kv_unified is False
    assert parse_command("llama-server -m x.gguf -np 4").kv_unified is None


# ---------------------------------------------------------------- a context beyond the config


def test_vllm_refuses_a_context_beyond_the_config_without_an_override() -> None:
    line = "vllm serve Qwen/Qwen3-8B --max-model-len 100000 --gpu-memory-utilization 0.5"
    res = _plan(line)
    assert res.verdict == "does-not-fit"
    assert any("beyond the 40,960 tokens" in n and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in n for n in res.notes)
    for allowed in ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 " + line,
                    line + " --hf-overrides '{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                           "\"original_max_position_embeddings\": 32768}}'",
                    "vllm serve Qwen/Qwen3-8B --max-model-len 40960 --gpu-memory-utilization 0.5"):
        assert not any("beyond the" in n for n in _plan(allowed).notes), allowed


def test_yarn_scales_from_the_original_length() -> None:
    """gpt-oss: max_position_embeddings 131072 = yarn's original 4096 x factor 32: 131072 passes, twice that does not."""
    assert serve.engine_max_len(serve.resolve_shape("openai/gpt-oss-120b"),
                                ServeSpec(engine="vllm", model="openai/gpt-oss-120b")) == 4096 * 32
    assert serve.engine_max_len(serve.resolve_shape("meta-llama/Llama-3.1-8B-Instruct"),
                                ServeSpec(engine="vllm", model="meta-llama/Llama-3.1-8B-Instruct")) == 131072  # llama3


def test_sglang_has_the_same_rule_under_its_own_names() -> None:
    res = _plan("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --context-length 131072")
    assert res.verdict == "does-not-fit"
    assert any("--context-length 131072" in n and "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in n
               and "--json-model-override-args" in n for n in res.notes)


# ---------------------------------------------------------------- more GPUs than the host has


def test_tensor_parallel_beyond_one_spark_is_planned_per_node_and_says_so() -> None:
    res = api.serve_plan(workload="vllm serve Qwen/Qwen3-8B -tp 2 --gpu-memory-utilization 0.5",
                         facts="tests/fixtures/facts/gb10_ngc_2509_healthy.json", offline=True)
    assert res.machine.gpus == 1
    note = next(n for n in res.notes if "asks for 2 GPUs" in n)
    assert "this Spark has 1" in note and "refuses to start" in note and "ConnectX-7" in note
    one = api.serve_plan(workload="vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.5",
                         facts="tests/fixtures/facts/gb10_ngc_2509_healthy.json", offline=True)
    assert not any("GPUs (TP" in n for n in one.notes)
    # a target that names a GPU kind, not a host, says nothing of the count
    h200 = api.serve_plan(workload="vllm serve Qwen/Qwen3-8B -tp 2", target="h200", offline=True)
    assert h200.machine.gpus is None and not any("GPUs (TP" in n for n in h200.notes)


# ---------------------------------------------------------------- --max-model-len auto


def test_auto_length_is_cut_to_the_pool_not_refused() -> None:
    """v1/core/kv_cache_utils.py _auto_fit_max_model_len: -1 / auto binary-searches the longest length the pool holds;
    the same line with the model's own length (no flag) does not fit one request."""
    fixed = _plan("vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.15")
    assert fixed.verdict == "does-not-fit" and fixed.kv.fits_max_model_len is False
    for word in ("auto", "-1"):
        auto = _plan(f"vllm serve Qwen/Qwen3-8B --max-model-len {word} --gpu-memory-utilization 0.15")
        assert auto.spec.max_model_len_auto and auto.verdict != "does-not-fit"
        assert auto.kv.fits_max_model_len is True
        assert auto.kv.request_gib == pytest.approx(auto.kv.available_gib, rel=0.01)  # one request takes the pool
        assert any("cuts the length to about" in n and f"{fixed.kv.max_model_len_fitting:,}" in n for n in auto.notes)
    roomy = _plan("vllm serve Qwen/Qwen3-8B --max-model-len auto --gpu-memory-utilization 0.5")
    assert any("full 40,960 tokens fit" in n for n in roomy.notes)
    assert not parse_command("vllm serve Qwen/Qwen3-8B --max-model-len 8192").max_model_len_auto


def test_an_ollama_library_name_without_a_tag_is_its_default_size() -> None:
    d = engine_value("ollama", "library_default_tags")
    assert parse_command("ollama run llama2").model == "llama2:7b" == f"llama2:{d['llama2']}"
    assert parse_command("ollama run llama3.1").model == "llama3.1:8b"
    assert parse_command("ollama run qwen3:30b").model == "qwen3:30b"  # a tag is kept
    assert parse_command("ollama run hf.co/unsloth/Qwen3-8B-GGUF:Q8_0").model == "hf.co/unsloth/Qwen3-8B-GGUF:Q8_0"
    assert ServeSpec(engine="ollama", model="gemma3").model == "gemma3:4b"
    assert ServeSpec(engine="vllm", model="gemma3").model == "gemma3"  # an Ollama rule only
    assert _plan("ollama run llama2").model.id == "llama-2-7b"


# ---------------------------------------------------------------- the second review's findings


def test_the_context_check_judges_only_a_config_of_the_models_own() -> None:
    """A serving entry that borrows another model's shape (Qwen3-Coder-30B-A3B: native 262,144 tokens, shaped as
    Qwen3-30B-A3B's 40,960) and a model outside the catalogs (a Hub read) are not judged: never a false refusal."""
    res = _plan("vllm serve Qwen/Qwen3-Coder-30B-A3B-Instruct --max-model-len 131072 --gpu-memory-utilization 0.8")
    assert not res.refusals and not any("beyond the" in n for n in res.notes)
    shape = serve.resolve_shape("Qwen/Qwen3-8B")
    assert serve.engine_max_len(shape, ServeSpec(engine="vllm", model="acme/yarn-128k")) is None
    assert serve.engine_max_len(shape, ServeSpec(engine="vllm", model="Qwen/Qwen3-8B")) == 40960


@pytest.mark.parametrize("override", ["--hf_overrides '{\"max_position_embeddings\": 131072}'",
                                      "--hf-overrides.rope_scaling.factor 4",
                                      "--hf-overrides={\"max_position_embeddings\":131072}"])
def test_every_spelling_of_the_override_is_read(override: str) -> None:
    res = _plan(f"vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 131072 {override} --gpu-memory-utilization 0.8")
    assert not res.refusals, override


def test_preflight_fails_g3_on_a_launch_line_the_engine_refuses() -> None:
    from conftest import load_facts_fixture
    from sparkops.facts.workload import parse_workload

    def g3(line: str):
        rep = api.build_report(load_facts_fixture("gb10_ngc_2509_healthy"), parse_workload(line), offline=True)
        return rep, next(f for f in rep.findings if f.gotcha == "G3")

    rep, bad = g3("vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 131072 --gpu-memory-utilization 0.7")
    assert bad.status == "fail" and "will not start" in bad.summary and "32,768 tokens" in bad.summary
    assert rep.plan.verdict == "does-not-fit" and rep.workload.serve_refusals
    _, good = g3("vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768 --gpu-memory-utilization 0.7")
    assert good.status != "fail" and "will not start" not in good.summary


def test_a_context_per_request_becomes_cells_per_slot_on_llama_cpp() -> None:
    res = _plan("serve qwen3-8b q4_k_m with llama.cpp, 32k context, 4 users")
    assert res.spec.ctx_size == 4 * 32000 or res.spec.ctx_size == 4 * 32768
    assert res.kv.max_model_len_fitting == res.spec.ctx_size // 4
    cli = _plan("llama-server -m Qwen3-8B-Q4_K_M.gguf -np 4", max_model_len=32768)
    assert cli.spec.ctx_size == 4 * 32768 and cli.kv.max_model_len_fitting == 32768
    shared = _plan("llama-server -m Qwen3-8B-Q4_K_M.gguf -np 4 -kvu", max_model_len=32768)
    assert shared.spec.ctx_size == 32768  # a unified cache: every slot may take all -c cells


def test_ollama_reads_flash_attention_from_the_models_architecture() -> None:
    """ollama 0.12.4+ turns flash attention on by default for qwen3 (engines.yaml): an hf.co name says nothing of the
    architecture, the GGUF header or the config does."""
    from sparkops.planner.serve_engines import gguf_cache_types

    spec = ServeSpec(engine="ollama", model="hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M", engine_version="0.12.6",
                     cache_type_k="q8_0", cache_type_v="q8_0")
    assert gguf_cache_types(spec, "qwen3")[:2] == ("q8_0", "q8_0")
    assert gguf_cache_types(spec)[:2] == ("f16", "f16")  # by name alone: not a listed architecture
    tag = spec.model_copy(update={"model": "qwen3:8b"})
    assert gguf_cache_types(tag)[:2] == ("q8_0", "q8_0")


def test_a_dropped_cache_type_is_said_by_the_plan_itself() -> None:
    """The note lives in plan_serve, so preflight's plan and the CLI / MCP say the same."""
    spec = parse_command("OLLAMA_KV_CACHE_TYPE=q8_0 ollama run llama2").model_copy(update={"engine_version": "0.10.0"})
    res = serve.plan_serve(serve.resolve_shape(spec.model), spec, serve.machine_from_target("dgx-spark", 0.0))
    assert any("is not used" in n and "f16" in n for n in res.notes)


def test_an_old_mainline_build_warns_about_flash_attention_and_still_plans() -> None:
    res = _plan("llama-server -m Qwen3-8B-Q4_K_M.gguf -c 32768 -ctk q8_0 -ctv q8_0", engine_version="b5000")
    assert any("older than the -fa auto default" in n for n in res.notes)
    assert not any("older than the -fa auto default" in n
                   for n in _plan("llama-server -m Qwen3-8B-Q4_K_M.gguf -c 32768 -ctk q8_0 -ctv q8_0 -fa",
                                  engine_version="b5000").notes)


def test_more_slots_than_cells_is_bad_input_not_a_traceback() -> None:
    from sparkops.planner.serve_engines import ServeInputError

    with pytest.raises(ServeInputError, match="n_ctx_seq == 0"):
        _plan("llama-server -m Qwen3-8B-Q4_K_M.gguf -c 4 -np 8")


@pytest.mark.parametrize(("named", "build"), [("b7342", 7342), ("b5622 (97340b4c)", 5622),
                                               ("version: 7342 (96ac5a2)", 7342), ("5622", 5622),
                                               ("server-cuda-b5000", 5000), ("ik_llama.cpp fork, build 3933", 0),
                                               ("not stated (a 2026 build)", None), (None, None)])
def test_llama_cpp_build_readings(named: str | None, build: int | None) -> None:
    from sparkops.planner.serve_engines import llama_cpp_build

    assert llama_cpp_build(ServeSpec(engine="llama.cpp", engine_version=named)) == build


def test_the_multi_gpu_note_speaks_of_sparks_only_on_a_spark() -> None:
    res = api.serve_plan(workload="vllm serve Qwen/Qwen3-8B -tp 2 --gpu-memory-utilization 0.5",
                         facts="tests/fixtures/facts/h200_generic.json", offline=True)
    note = next(n for n in res.notes if "asks for 2 GPUs" in n)
    assert "this host has 1" in note and "Spark" not in note and "ConnectX" not in note


def test_sglang_and_trtllm_shorten_a_request_the_pool_cannot_hold_they_do_not_refuse() -> None:
    """Only vLLM refuses a max_model_len its pool cannot hold; SGLang caps max_req_len at the pool's tokens - 1
    (managers/tp_worker.py), TensorRT-LLM reduces maxSequenceLen (a third review of this session's refusals)."""
    facts = "tests/fixtures/facts/gb10_ngc_2509_healthy.json"
    sg = api.serve_plan(workload="python -m sglang.launch_server --model-path Qwen/Qwen3-8B --context-length 32768 "
                                 "--max-total-tokens 16384", facts=facts, offline=True)
    assert sg.verdict == "tight" and not sg.refusals
    assert any("caps every request at 16,383 tokens" in n for n in sg.notes)
    trt = api.serve_plan(workload="trtllm-serve Qwen/Qwen3-8B --max_seq_len 40960 "
                                  "--kv_cache_free_gpu_memory_fraction 0.05", facts=facts, offline=True)
    assert trt.verdict == "tight" and not trt.refusals
    vl = api.serve_plan(workload="vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.15", facts=facts, offline=True)
    assert vl.verdict == "does-not-fit" and vl.refusals


def test_sglang_chunked_prefill_zero_is_unchunked_and_rc_tags_name_a_release() -> None:
    """SGLang reads --chunked-prefill-size <= 0 as no chunking (a fourth review: 0 was taken as the default 8192);
    an rc image tag names its release."""
    from sparkops.core.launch import sglang_image_version

    line = "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --chunked-prefill-size {}"
    zero, minus = _plan(line.format(0)), _plan(line.format(-1))
    assert zero.kv.available_gib == minus.kv.available_gib
    assert any("unchunked prefill" in n for n in zero.notes)
    assert sglang_image_version("lmsysorg/sglang:v0.5.3rc0-cu126") == "0.5.3rc0"
    assert sglang_image_version("lmsysorg/sglang:latest") is None


def test_the_dgx_spark_target_names_its_gpu_so_a_gb10_log_matches_it() -> None:
    """--target dgx-spark is a GB10: a log naming 'NVIDIA GB10' is this machine's GPU without --from-log-same-machine;
    a log naming another GPU is refused."""
    from sparkops.planner.serve_calibrate import same_gpu
    from sparkops.planner.serve_log import VllmLogReading

    spark = serve.machine_from_target("dgx-spark", 0.0)
    assert spark.gpu_name == "NVIDIA GB10"
    assert same_gpu(VllmLogReading(gpu_name="NVIDIA GB10"), spark) is None
    assert "another GPU" in (same_gpu(VllmLogReading(gpu_name="NVIDIA H100 80GB HBM3"), spark) or "")


def test_sglang_month_table_holds_every_boundary_the_rules_use() -> None:
    """Blind v27's GB10 Gemma 4 start (an SGLang dev build of 2026-09) printed a hybrid SWA pool, but the month table
    jumped from 2026-04 (0.5.10.post1) to 2026-10, so the plan read it as before Gemma 4's hybrid pool (0.5.13.post1):
    every month from a rule's boundary on must map at or past it."""
    from sparkops.core.releases import release

    boundary = release("0.5.13.post1")
    for month in ("2026-06", "2026-07", "2026-09"):
        assert serve.sglang_release(f"0.0.0.dev1 ({month} image)") >= boundary, month
    assert serve.sglang_release("2026-05 image") < boundary


def test_a_sixth_review_the_mcp_plan_tool_and_missing_log_paths_agree_with_the_cli() -> None:
    """MCP `plan` refuses a server as the CLI does (the rule lives in api.plan); a missing log written as a path is a
    path in MCP `plan_serve` too (the CLI's "cannot read it"), not the log's text."""
    from sparkops.mcp_server import tools
    from sparkops.planner.plan import PlanInputError
    from sparkops.planner.serve_engines import ServeInputError

    with pytest.raises(PlanInputError, match="describes a server"):
        tools.plan(workload="serve qwen3-8b with vllm 32k context", target="dgx-spark")
    assert tools.plan(workload="qlora llama-3.1-8b seq 4096", target="dgx-spark")  # a fine-tune still plans
    with pytest.raises((ServeInputError, Exception), match="cannot read it"):
        tools.plan_serve(workload="vllm serve Qwen/Qwen3-8B --max-model-len 8192", target="dgx-spark",
                         from_log="/tmp/nonexistent-dir-r14/vllm-start.log", offline=True)


def test_preflight_and_plan_agree_on_a_vllm_share_past_the_budget_that_still_starts() -> None:
    """A sixth review: `plan --serve` said TIGHT (the share passes vLLM's start-up check, leaving the OS less than its
    reserve) while preflight failed G3 on the same numbers (BLOCKED). G3 now follows the serving plan's verdict."""
    from conftest import load_facts_fixture
    from sparkops.facts.workload import parse_workload

    line = "vllm serve Qwen/Qwen3-8B"
    rep = api.build_report(load_facts_fixture("gb10_two_node_tp2"), parse_workload(line), offline=True)
    g3 = next(f for f in rep.findings if f.gotcha == "G3")
    plan = api.serve_plan(workload=line, facts="tests/fixtures/facts/gb10_two_node_tp2.json", offline=True)
    assert plan.verdict == "tight" and plan.headroom_gib < 0
    assert rep.plan.verdict == "tight" and g3.status == "warn" and "it starts" in g3.summary


# ---------------------------------------------------------------- a seventh review: the advice a plan gives

RUNNING = "tests/fixtures/facts/gb10_vllm_default.json"  # a vLLM running at its default 0.9 cap, MemAvailable 23.4 GiB


def test_a_server_beside_a_running_capped_one_is_judged_as_g6_judges_it() -> None:
    """The plan judged against MemAvailable only (the running server's unheld cap counted zero times) and said TIGHT
    at a share preflight's G6 blocked; now the stricter of the two budgets is the plan's, and it offers no share that
    cannot hold the server."""
    res = api.serve_plan(workload="vllm serve Qwen/Qwen3-8B --max-model-len 8192 --gpu-memory-utilization 0.15",
                         facts=RUNNING, offline=True)
    assert res.verdict == "does-not-fit" and res.running
    assert any("running jobs have reserved" in n for n in res.notes)
    assert any(s.startswith("no --gpu-memory-utilization fits beside") for s in res.suggestions)
    assert not any(s.startswith("--gpu-memory-utilization 0.") for s in res.suggestions)


def test_with_a_job_beside_it_a_share_that_fits_is_offered() -> None:
    res = api.serve_plan(workload="vllm serve Qwen/Qwen3-0.6B --max-model-len 8192 --gpu-memory-utilization 0.5",
                         target="dgx-spark", beside=["qlora llama-3.1-70b seq 4096"], offline=True)
    assert res.verdict == "does-not-fit"
    share = next(s for s in res.suggestions if s.startswith("--gpu-memory-utilization") and "leaves" in s)
    again = api.serve_plan(workload=f"vllm serve Qwen/Qwen3-0.6B --max-model-len 8192 {share.split(' leaves')[0]}",
                           target="dgx-spark", beside=["qlora llama-3.1-70b seq 4096"], offline=True)
    assert again.verdict != "does-not-fit"  # the advice does what it says


def test_longest_request_is_never_longer_than_the_engines_cache_and_zero_without_a_pool() -> None:
    res = _plan("vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.5")
    assert res.kv.max_model_len_fitting <= res.kv.tokens
    none = _plan("vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.1")
    assert none.kv.available_gib <= 0 and none.kv.max_model_len_fitting == 0


def test_two_servers_that_each_must_start_first_are_told_no_order_runs_both() -> None:
    res = api.serve_plan(workload="vllm serve Qwen/Qwen3-0.6B --max-model-len 8192 --gpu-memory-utilization 0.05",
                         facts=RUNNING, offline=True,
                         beside=["vllm serve Qwen/Qwen3-0.6B --max-model-len 8192 --gpu-memory-utilization 0.125"])
    assert any("no start order runs both" in n for n in res.notes)
    assert not any(n.startswith("start the server before the other jobs") for n in res.notes)
