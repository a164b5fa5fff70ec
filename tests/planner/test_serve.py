"""`plan --serve`: launch lines, KV bytes per token against real engine logs, the engines' own
accounting (vLLM's start-up check, SGLang's fraction, llama.cpp/Ollama cells), verdicts, the
shared budget. Numbers marked "log" are copied from tests/planner/serve_logs/logs.yaml."""

from __future__ import annotations

import contextlib
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import load_facts_fixture

from sparkops.planner import serve
from sparkops.planner.gguf import write_header
from sparkops.planner.serve_budget import BudgetJob, serving_budget, start_decision
from sparkops.planner.serve_engines import (
    ServeInputError,
    ServeSpec,
    candidate_names,
    engines_knowledge,
    format_from_name,
    gguf_type_from_name,
    parse_command,
    parse_size,
    spec_from_text,
)

GIB = 1024**3


def spark(free: float = 110.34, avail: float = 113.07) -> serve.Machine:
    return serve.Machine(source="test", total_gib=121.69, free_gib=free, available_gib=avail,
                         page_cache_gib=round(avail - free, 2), unified=True, os_reserve_gib=3.73)


# ------------------------------------------------------------------ launch lines


def test_vllm_line_with_env_equals_underscores_and_human_sizes():
    s = parse_command("VLLM_USE_V1=1 vllm serve Qwen/Qwen3-0.6B-FP8 --max-model-len=32K "
                      "--gpu_memory_utilization 0.5 -tp 2 --enforce-eager --port 8000 --trust-remote-code")
    assert (s.engine, s.model, s.max_model_len, s.gpu_memory_utilization, s.tensor_parallel, s.enforce_eager) == \
        ("vllm", "Qwen/Qwen3-0.6B-FP8", 32768, 0.5, 2, True)
    assert s.env == {"VLLM_USE_V1": "1"} and "--port 8000" in s.ignored and "--trust-remote-code" in s.ignored


def test_multiline_docker_style_and_other_engines():
    s = parse_command("python3 -m sglang.launch_server --model /p/Qwen3-235B-A22B-FP8 --tp 4 \\\n"
                      "  --mem-fraction-static 0.93 --context-length 40960")
    assert (s.engine, s.model, s.tensor_parallel, s.mem_fraction_static, s.max_model_len) == \
        ("sglang", "/p/Qwen3-235B-A22B-FP8", 4, 0.93, 40960)
    s = parse_command("llama-server -m /m/Qwen3-30B-A3B-UD-Q4_K_XL.gguf -c 32768 -fmoe -fa -ngl 99 -np 4 -ctk q8_0")
    assert (s.engine, s.ctx_size, s.n_gpu_layers, s.parallel, s.cache_type_k, s.gguf_path) == \
        ("llama.cpp", 32768, 99, 4, "q8_0", "/m/Qwen3-30B-A3B-UD-Q4_K_XL.gguf")
    s = parse_command("OLLAMA_NUM_PARALLEL=2 OLLAMA_CONTEXT_LENGTH=8k OLLAMA_KV_CACHE_TYPE=q8_0 ollama run gemma3:27b")
    assert (s.engine, s.model, s.parallel, s.ctx_size, s.cache_type_k) == ("ollama", "gemma3:27b", 2, 8000, "q8_0")


@pytest.mark.parametrize(("line", "message"), [
    ("vllm serve m --gpu-memory-utilization 1.5", "in \\(0.0, 1.0\\]"),
    ("vllm serve m --max-model-len lots", "number like 32768"),
    ("vllm serve m --max-model-len", "needs a value"),
    ("python train.py --lr 1e-4", "no serving engine"),
    ("vllm serve m 'unterminated", "cannot split"),
])
def test_bad_lines_say_why(line, message):
    with pytest.raises(ServeInputError, match=message):
        parse_command(line)


@settings(max_examples=300)
@given(st.text(max_size=120))
def test_parse_command_raises_only_serve_input_error(text):
    with contextlib.suppress(ServeInputError):
        parse_command(text)


@settings(max_examples=200)
@given(st.integers(1, 10**7), st.sampled_from(["", "k", "K"]))
def test_parse_size_units(n, unit):
    assert parse_size(f"{n}{unit}", "x") == n * {"": 1, "k": 1000, "K": 1024}[unit]


def test_free_text_workload():
    s = spec_from_text("serve qwen3-30b-a3b with vllm 32k context 8 users fp8")
    assert (s.engine, s.model, s.max_model_len, s.concurrency, s.quantization) == ("vllm", "qwen3-30b-a3b", 32768, 8, "fp8")
    s = spec_from_text("ollama gemma-3-27b 8k ctx 2 users")
    assert (s.engine, s.ctx_size, s.parallel) == ("ollama", 8192, 2)
    with pytest.raises(ServeInputError, match="name the model"):
        spec_from_text("serve a 70b with vllm")


def test_names_formats_and_gguf_types():
    assert format_from_name("Qwen/Qwen3-235B-A22B-FP8") == "fp8"
    assert format_from_name("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8") == "int8"
    assert format_from_name("Qwen/Qwen2.5-7B-Instruct-AWQ") == "awq"
    assert format_from_name("nvidia/Llama-3.3-70B-Instruct-NVFP4") == "nvfp4"
    assert format_from_name("meta-llama/Llama-3.1-8B-Instruct") is None
    assert format_from_name("x", "fp8") == "fp8"
    assert gguf_type_from_name("Qwen3-30B-A3B-UD-Q4_K_XL.gguf") == "Q4_K_M"
    assert gguf_type_from_name("Qwen3-Coder-30B-A3B-Instruct-Q8_0.gguf") == "Q8_0"
    assert gguf_type_from_name("qwen3:30b") is None
    assert "Qwen3-235B-A22B" in candidate_names("Qwen/Qwen3-235B-A22B-FP8")
    assert "gemma-3-27b" in candidate_names("gemma3:27b")


# ------------------------------------------------------------------ KV bytes per token, against logs


def test_kv_tokens_from_the_engines_own_kv_memory():
    """vLLM's 'GPU KV cache size' from its 'Available KV cache memory' (logs): blocks of 16 over all attention layers."""
    cases = [("Qwen/Qwen3-0.6B-FP8", 1, 12.67, 118576), ("Qwen/Qwen2.5-7B-Instruct-AWQ", 1, 8.0, 149712),
             ("Qwen/Qwen3-235B-A22B-FP8", 4, 8.11, 178880), ("MiniMax-M2.7-AWQ", 2, 28.74, 240816)]
    for model, tp, kv_gib, logged in cases:
        shape = serve.resolve_shape(model)
        page = serve.kv_layer_bytes(shape, 2.0, tp) * shape.attn_layers * 16
        tokens = int(kv_gib * GIB // page) * 16
        assert abs(tokens - logged) / logged < 0.015, (model, tokens, logged)


def test_one_request_at_max_model_len_as_vllm_prices_it():
    """MiniMax-M2.7 TP2 on two Sparks: '196608 ... 23.25 GiB KV cache is needed' (log)."""
    shape = serve.resolve_shape("MiniMax-M2.7-AWQ")
    assert serve.request_kv_bytes(shape, 196608, 2.0, tp=2) / GIB == pytest.approx(23.25, abs=0.01)
    # gpt-oss: half the layers slide over 128 tokens, so a long request costs about half
    g = serve.resolve_shape("openai/gpt-oss-120b")
    full = serve.kv_layer_bytes(g, 2.0) * g.attn_layers * 131072
    assert serve.request_kv_bytes(g, 131072, 2.0) < 0.51 * full


def test_sglang_cell_size_matches_its_k_size_line():
    """'#tokens: 367404, K size: 8.23 GB' (Qwen3-235B-FP8, TP4) and 1669816 tokens / 76.44 (Qwen3-30B-A3B)."""
    for model, tp, tokens, k_gib in [("Qwen/Qwen3-235B-A22B-FP8", 4, 367404, 8.23),
                                     ("Qwen/Qwen3-30B-A3B-Instruct-2507", 1, 1669816, 76.44)]:
        shape = serve.resolve_shape(model)
        assert tokens * serve.kv_bytes_per_token(shape, 2.0, tp) / 2 / GIB == pytest.approx(k_gib, abs=0.01)


def test_llama_cpp_and_ollama_kv_buffers_exactly():
    """llama.cpp 'KV self size = 3072.00 MiB' at -c 32768, '6144.00 MiB' at -c 65536 (4 slots, unified);
    Ollama 'memory.required.kv=400.0 MiB' for phi4 at num_ctx 2048."""
    for line, mib in [("llama-server -m /r/Qwen3-30B-A3B-UD-Q4_K_XL.gguf -c 32768 -ngl 99", 3072.0),
                      ("llama-server -m /a/Qwen3-Coder-30B-A3B-Instruct-Q8_0.gguf -c 65536 -np 4", 6144.0),
                      ("ollama run phi4", None)]:
        spec = parse_command(line)
        if spec.engine == "ollama":
            spec = spec.model_copy(update={"ctx_size": 2048})
            mib = 400.0
        res = serve.plan_serve(serve.resolve_shape(spec.model), spec, spark())
        assert res.kv.available_gib * 1024 == pytest.approx(mib, rel=0.002)


def test_fp8_cache_halves_and_mla_keeps_one_latent():
    shape = serve.resolve_shape("llama-3.1-8b")
    assert serve.kv_bytes_per_token(shape, 1.0) * 2 == serve.kv_bytes_per_token(shape, 2.0) == 2 * 32 * 8 * 128 * 2
    mla = serve.shape_from_config({"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
                                   "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                                   "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
                                   "q_lora_rank": 1536, "n_routed_experts": 256, "num_experts_per_tok": 8,
                                   "moe_intermediate_size": 2048, "intermediate_size": 18432,
                                   "first_k_dense_replace": 3, "n_shared_experts": 1}, id="dsv3", name="dsv3", source="t")
    assert serve.kv_bytes_per_token(mla, 2.0, tp=8) == 61 * 576 * 2  # not split by TP, no separate V
    assert 600e9 < mla.params_total < 720e9  # DeepSeek-V3 is 671B


def test_weights_by_format_against_logged_load_sizes():
    """'Model loading took' (logs): Llama-3.1-8B bf16 14.99 GiB, Llama-3.1-70B w8a8 67.72, Qwen3-0.6B-FP8 0.711."""
    for model, logged in [("meta-llama/Llama-3.1-8B-Instruct", 14.9888),
                          ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", 67.7229),
                          ("Qwen/Qwen3-0.6B-FP8", 0.7110)]:
        shape = serve.resolve_shape(model)
        b, _ = serve.weights_bytes(shape, serve.weight_format(shape, ServeSpec(engine="vllm", model=model)))
        assert b / GIB == pytest.approx(logged, rel=0.03)
    shape = serve.resolve_shape("llama-3.1-70b")
    bf16 = serve.weights_bytes(shape, "bf16")[0]
    assert serve.weights_bytes(shape, "nvfp4")[0] < serve.weights_bytes(shape, "fp8")[0] < 0.55 * bf16


# ------------------------------------------------------------------ the engines' accounting and verdicts


def test_vllm_start_check_is_a_share_of_total_against_cuda_free():
    """MiaAI-Lab/...#47 on a Spark: free 110.34/121.69 passes 0.87 (105.87 GiB); free 102.2 fails."""
    spec = ServeSpec(engine="vllm", model="qwen3-8b", gpu_memory_utilization=0.87, max_model_len=8192)
    shape = serve.resolve_shape("qwen3-8b")
    ok = serve.plan_serve(shape, spec, spark(free=110.34))
    assert ok.start.requested_gib == 105.87 and ok.start.passes is True
    bad = serve.plan_serve(shape, spec, spark(free=102.2, avail=110.0))
    assert bad.start.passes is False and bad.start.passes_after_flush is True and bad.verdict == "tight"
    assert any("drop_caches" in n for n in bad.notes)
    worse = serve.plan_serve(shape, spec, spark(free=60.0, avail=61.0))
    assert worse.verdict == "does-not-fit" and worse.start.passes_after_flush is False
    assert any("--gpu-memory-utilization 0.49" in s for s in worse.suggestions)


def test_context_that_does_not_fit_is_refused_with_the_longest_that_does():
    spec = ServeSpec(engine="vllm", model="llama-3.1-70b", gpu_memory_utilization=0.9, max_model_len=131072)
    res = serve.plan_serve(serve.resolve_shape("llama-3.1-70b"), spec, spark())
    assert res.verdict == "does-not-fit" and res.kv.fits_max_model_len is False  # bf16 70B leaves no room
    spec = spec.model_copy(update={"model": "nvidia/Llama-3.3-70B-Instruct-NVFP4"})
    res = serve.plan_serve(serve.resolve_shape("llama-3.3-70b"), spec, spark())
    assert res.model.format == "nvfp4" and res.kv.available_gib > 0
    assert res.kv.max_model_len_fitting >= 131072 or res.verdict == "does-not-fit"


def test_concurrency_wish_makes_it_tight_and_suggests_a_share():
    shape = serve.resolve_shape("qwen3-8b")
    spec = ServeSpec(engine="vllm", model="qwen3-8b", gpu_memory_utilization=0.3, max_model_len=32768, concurrency=64)
    res = serve.plan_serve(shape, spec, spark())
    assert res.verdict == "tight" and res.kv.max_concurrency < 64
    assert any("--gpu-memory-utilization" in s and "64 request" in s for s in res.suggestions)


def test_sglang_reserves_a_share_of_total_not_of_free():
    shape = serve.resolve_shape("llama-3.1-70b")
    spec = ServeSpec(engine="sglang", model="llama-3.1-70b", mem_fraction_static=0.7)
    res = serve.plan_serve(shape, spec, spark())
    # 131.5 GiB of bf16 weights cannot leave room: negative rest, the start fails
    assert res.kv.available_gib < 0 and res.start.passes is False and res.verdict == "does-not-fit"


def test_gguf_file_header_gives_exact_bytes_and_shapes(tmp_path):
    meta = {"general.architecture": "llama", "general.name": "tiny", "general.file_type": 15,
            "llama.block_count": 2, "llama.embedding_length": 256, "llama.attention.head_count": 4,
            "llama.attention.head_count_kv": 2, "llama.context_length": 4096}
    tensors = [("token_embd.weight", (256, 1000), 12), ("output.weight", (256, 1000), 14)]
    for i in range(2):
        tensors += [(f"blk.{i}.attn_q.weight", (256, 256), 12), (f"blk.{i}.ffn_up.weight", (256, 512), 12),
                    (f"blk.{i}.attn_norm.weight", (256,), 0)]
    p = tmp_path / "tiny-Q4_K_M.gguf"
    p.write_bytes(write_header(meta, tensors))
    shape = serve.resolve_shape(None, gguf=str(p))
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.gguf_type) == (2, 2, 64, "Q4_K_M")
    expect = sum(-(-math.prod(s) // {12: 256, 14: 256, 0: 1}[t]) * {12: 144, 14: 210, 0: 4}[t] for _, s, t in tensors)
    assert shape.gguf_bytes == expect
    spec = ServeSpec(engine="llama.cpp", gguf_path=str(p), ctx_size=4096)
    res = serve.plan_serve(shape, spec, spark())
    assert res.weights_gib == round(expect / GIB, 2) and "exact" in res.model.weights_detail
    assert res.kv.available_gib == pytest.approx(4096 * 2 * (2 * 2 * 64 * 2) / GIB, abs=0.0006)


def test_beside_a_fine_tune_shares_the_pool():
    shape = serve.resolve_shape("qwen3-8b")
    spec = ServeSpec(engine="vllm", model="qwen3-8b", gpu_memory_utilization=0.5, max_model_len=32768)
    alone = serve.plan_serve(shape, spec, spark())
    trainer = serve.BesideJob(name="qlora 70b", gib=60.0, how="planned peak")
    both = serve.plan_serve(shape, spec, spark(), beside=[trainer])
    assert both.headroom_gib == pytest.approx(alone.headroom_gib - 60.0, abs=0.01)
    assert both.verdict == "does-not-fit" and any("start the server before" in n for n in both.notes)


def test_engines_knowledge_is_dated_and_cites_versions():
    kb = engines_knowledge()
    assert kb.last_verified.year >= 2026
    for name, e in kb.engines.items():
        assert e.modelled_version and e.sources and set(e.two_sparks) >= {"tensor_parallel", "pipeline_parallel", "g10"}, name


# ------------------------------------------------------------------ one budget, from facts


def test_serving_budget_counts_a_capped_server_by_its_cap_once():
    facts = load_facts_fixture("gb10_vllm_default")  # vLLM at the default 0.9, engine child of its API server
    b = serving_budget(facts, [BudgetJob("lora 8b", 20.0, "trainer")])
    assert len(b.neighbours) == 1 and b.neighbours[0].gib == pytest.approx(0.9 * 119.63, abs=0.05)
    assert "cap 0.9" in b.neighbours[0].how
    assert b.code == "G6.budget_over" and b.values["left_gib"] < 0
    idle = serving_budget(load_facts_fixture("gb10_ngc_2509_healthy"), [BudgetJob("vllm 0.5", 0.5 * 119.7)])
    assert idle.code == "G6.budget_ok" and idle.neighbours == []


def test_start_decision_from_facts_sees_the_page_cache():
    code, v = start_decision(load_facts_fixture("gb10_page_cache"), 0.5)  # MemFree 12.7, MemAvailable 90.5 GiB
    assert code == "G3.start_after_flush" and v["page_cache_gib"] > 70
    assert start_decision(load_facts_fixture("gb10_ngc_2509_healthy"), 0.9)[0] == "G3.start_ok"
    assert start_decision(load_facts_fixture("gb10_vllm_default"), 0.5)[0] == "G3.start_fails"


def test_machine_from_facts_is_cuda_free_not_mem_available():
    m = serve.machine_from_facts(load_facts_fixture("gb10_page_cache"), "facts", 4.0)
    assert m.unified and m.free_gib < 13 and m.available_gib > 90 and m.page_cache_gib > 77


# ------------------------------------------------------------------ CLI


def test_cli_plan_serve_json_and_exit_codes(tmp_path):
    from tests.test_cli import spark_ops

    p = spark_ops("plan", "--serve", "--json", "--target", "dgx-spark", "-w",
                  "vllm serve openai/gpt-oss-20b --max-model-len 131072 --gpu-memory-utilization 0.5")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["engine"] == "vllm" and out["model"]["format"] == "mxfp4" and out["verdict"] == "fits"
    p = spark_ops("plan", "--serve", "--target", "dgx-spark", "-w", "vllm serve llama-3.1-70b --max-model-len 131072")
    assert p.returncode == 2 and "DOES NOT FIT" in p.stdout
    p = spark_ops("plan", "--serve", "--target", "dgx-spark", "-w", "vllm serve no-such-model-xyz")
    assert p.returncode == 3 and "unknown model" in (p.stderr + p.stdout)


def test_every_log_record_says_where_it_came_from_and_what_was_seen():
    from pathlib import Path

    import yaml

    data = yaml.safe_load((Path(__file__).parent / "serve_logs" / "logs.yaml").read_text())
    ids = [r["id"] for r in data["records"]]
    assert len(ids) == len(set(ids)) >= 32
    for r in data["records"]:
        assert r["source"] and r["engine"] in ("vllm", "sglang", "llama.cpp", "ollama", "trtllm") and r["engine_version"], r["id"]
        assert r["observed"] and r["log"].strip(), r["id"]
        if r.get("model") is None:  # start-up check records carry what the check needs
            assert {"start", "free_gib"} <= set(r["observed"]) and r["gpu_total_gib"], r["id"]


def test_readme_serve_examples_are_the_real_output():
    from tests.planner.serve_readme import README, blocks, render

    found = blocks(README.read_text(encoding="utf-8"))
    assert len(found) == 3
    for args, body in found:
        assert body == render(args), f"README example drifted: python tests/planner/serve_readme.py rewrites it ({args})"


def test_serve_plan_from_a_snapshot_names_what_runs_now():
    from tests.conftest import FIXTURES

    from sparkops import api

    res = api.serve_plan(workload="vllm serve qwen3-8b --max-model-len 32768 --gpu-memory-utilization 0.5",
                         facts=FIXTURES / "facts" / "gb10_vllm_default.json")
    # a vLLM at the default 0.9 already holds the pool: CUDA free (MemFree) is ~19 GiB, the check asks ~60
    assert res.machine.source.endswith("gb10_vllm_default.json") and res.start.passes is False
    assert res.verdict == "does-not-fit"
    assert [r.name for r in res.running] == ["vllm"] and "cap 0.9" in res.running[0].how


# ------------------------------------------------------------------ TensorRT-LLM


def test_trtllm_serve_line_is_read():
    s = parse_command("trtllm-serve meta-llama/Llama-3.1-8B-Instruct --backend pytorch --tp_size 2 "
                      "--kv_cache_free_gpu_memory_fraction 0.5 --max_num_tokens 4096 --max_batch_size 64 --max_seq_len 32k")
    assert (s.engine, s.model, s.tensor_parallel, s.free_gpu_memory_fraction) == \
        ("trtllm", "meta-llama/Llama-3.1-8B-Instruct", 2, 0.5)
    assert (s.max_num_batched_tokens, s.max_batch_size, s.max_model_len) == (4096, 64, 32000)
    assert "--backend pytorch" in s.ignored
    assert spec_from_text("trtllm-serve qwen3-8b").engine == "trtllm"


def test_trtllm_kv_pool_is_a_share_of_the_memory_free_after_loading():
    # log trtllm-4275: RTX 5090, Llama-3.1-8B FP8 weights + FP8 KV, fraction 0.9 of 17.83 GiB free -> 16.05 GiB,
    # 263,008 tokens in blocks of 32. Feed the machine so that free after loading is what the log printed.
    shape = serve.resolve_shape("meta-llama/Llama-3.1-8B-Instruct")
    spec = ServeSpec(engine="trtllm", model="meta-llama/Llama-3.1-8B-Instruct", quantization="fp8",
                     kv_cache_dtype="fp8", free_gpu_memory_fraction=0.9, max_num_batched_tokens=1024, max_model_len=2048)
    probe = serve.plan_serve(shape, spec, serve.Machine(source="t", total_gib=31.84, free_gib=31.84))
    loaded = probe.weights_gib + probe.overheads["activation_peak"] + probe.overheads["runtime_buffers"]
    res = serve.plan_serve(shape, spec, serve.Machine(source="t", total_gib=31.84, free_gib=17.83 + loaded))
    assert res.kv.available_gib == pytest.approx(16.05, abs=0.02)
    assert res.kv.tokens == pytest.approx(263008, rel=0.002) and res.kv.tokens % 32 == 0
    # max_tokens caps the pool: the smaller one wins
    capped = serve.plan_serve(shape, spec.model_copy(update={"kv_max_tokens": 8224}),
                              serve.Machine(source="t", total_gib=31.84, free_gib=17.83 + loaded))
    assert capped.kv.tokens == 8224 and any("max_tokens" in n for n in capped.notes)


def test_trtllm_on_a_spark_says_the_share_is_of_all_free_memory():
    res = serve.plan_serve(serve.resolve_shape("qwen3-8b"), ServeSpec(engine="trtllm", model="qwen3-8b"), spark())
    assert any("share of ALL free memory" in n for n in res.notes) and res.kv.available_gib > 80
    assert res.engine_modelled_version.startswith("TensorRT-LLM")


def test_qwen2_7b_has_the_qwen2_5_7b_shapes():
    a, b = serve.resolve_shape("Qwen/Qwen2-7B-Instruct"), serve.resolve_shape("qwen2.5-7b")
    assert (a.layers, a.kv_heads, a.head_dim, a.hidden, a.params_total) == (b.layers, b.kv_heads, b.head_dim, b.hidden,
                                                                          b.params_total)


def test_flashinfer_sampler_on_the_launch_line_shrinks_the_profiled_sampler():
    # log vllm-dennislee-qwen2-7b-a100-80g-u025 (vLLM 0.10.1.1, "Using FlashInfer for top-p & top-k sampling"):
    # 5.01 GiB of KV cache; the sorting sampler's 32 bytes per logit leaves 4.25, FlashInfer's 12 about 4.97
    shape = serve.resolve_shape("Qwen/Qwen2-7B-Instruct")
    m = serve.Machine(source="log", total_gib=79.2, free_gib=79.2, gpu_name="A100 80GB")
    line = "vllm serve Qwen/Qwen2-7B-Instruct --max-model-len 16384 --gpu-memory-utilization 0.25"
    v = {"engine_version": "0.10.1.1"}  # CUDA graphs were outside the budget then
    native = serve.plan_serve(shape, parse_command(line).model_copy(update=v), m)
    fi = serve.plan_serve(shape, parse_command("VLLM_USE_FLASHINFER_SAMPLER=1 " + line).model_copy(update=v), m)
    assert fi.overheads["activation_peak"] < native.overheads["activation_peak"]
    assert abs(fi.kv.available_gib - 5.01) / 5.01 < 0.03 < abs(native.kv.available_gib - 5.01) / 5.01
