"""Review 14 of ``plan --serve``: inputs the engines accept that the planner mis-read (findings 2-4).

2. A quantized cache type without flash attention: Ollama 0.5-0.29 drops it and keeps f16 (llm/server.go), llama.cpp
   refuses a quantized V cache with flash attention off (src/llama-context.cpp); engines.yaml holds both rules.
3. The CLI's / MCP tool's --max-model-len and --kv-cache-dtype reach llama.cpp's and Ollama's own fields.
4. Values the engines' own parsers give a meaning: -c 0, -ngl -1/auto/all, --chunked-prefill-size -1,
   --max-model-len -1/auto; OLLAMA_CONTEXT_LENGTH=8k is refused (Ollama ignores it).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops import api
from sparkops.mcp_server import tools
from sparkops.planner.serve_engines import ServeInputError, gguf_cache_types, ollama_uint, parse_command

GGUF = "llama-server -m ~/m/Qwen3-8B-Q4_K_M.gguf -ngl 99"
OLLAMA = "OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_CONTEXT_LENGTH=32768 ollama run {model}"


def _plan(workload: str, **kw):
    return api.serve_plan(workload=workload, target="dgx-spark", offline=True, **kw)


# ---------------------------------------------------------------- 2. cache type and flash attention

@pytest.mark.parametrize("model", ["qwen3:8b", "llama3.1:8b"])
def test_ollama_before_0_30_keeps_f16_without_flash_attention(model):
    line = OLLAMA.format(model=model)
    dropped = _plan(line, engine_version="0.9.0")  # 0.9: no architecture has flash attention on by default
    kept = _plan("OLLAMA_FLASH_ATTENTION=1 " + line, engine_version="0.9.0")
    assert dropped.kv.bytes_per_token == pytest.approx(kept.kv.bytes_per_token * 2 / 1.0625)
    assert any("OLLAMA_KV_CACHE_TYPE=q8_0 is not used" in n for n in dropped.notes)
    assert not any("is not used" in n for n in kept.notes)


def test_ollama_default_flash_attention_follows_the_architecture_list_by_release():
    qwen = parse_command(OLLAMA.format(model="qwen3:8b")).model_copy(update={"engine_version": "0.12.4"})
    llama = parse_command(OLLAMA.format(model="llama3.1:8b")).model_copy(update={"engine_version": "0.12.4"})
    assert gguf_cache_types(qwen)[:2] == ("q8_0", "q8_0")  # qwen3 is on the 0.12.4 list
    assert gguf_cache_types(llama)[:2] == ("f16", "f16")
    older = qwen.model_copy(update={"engine_version": "0.12.3"})  # qwen3 joined the list in 0.12.4
    assert gguf_cache_types(older)[:2] == ("f16", "f16")


def test_ollama_on_llama_server_with_flash_attention_off_will_not_start():
    with pytest.raises(ServeInputError, match="will not start"):
        _plan("OLLAMA_FLASH_ATTENTION=0 " + OLLAMA.format(model="qwen3:8b"))
    # the current release (llama-server, --flash-attn auto): the quantized cache is used
    assert gguf_cache_types(parse_command(OLLAMA.format(model="llama3.1:8b")))[:2] == ("q8_0", "q8_0")


@pytest.mark.parametrize("fa, starts", [("-fa off", False), ("--flash-attn=off", False), ("-fa on", True),
                                        ("-fa auto", True), ("-fa", True), ("", True)])
def test_llama_cpp_quantized_v_cache_needs_flash_attention(fa, starts):
    line = f"{GGUF} -ctk q8_0 -ctv q8_0 {fa}"
    if starts:
        assert _plan(line).kv.bytes_per_token > 0
    else:
        with pytest.raises(ServeInputError, match="will not start"):
            _plan(line)


def test_llama_cpp_quantized_k_alone_starts_with_flash_attention_off_and_v_stays_f16():
    spec = parse_command(f"{GGUF} -ctk q8_0 -fa off")
    assert gguf_cache_types(spec)[:2] == ("q8_0", "f16")


# ---------------------------------------------------------------- 3. options mapped per engine

def test_mcp_max_model_len_reaches_llama_cpp_context():
    default = tools.plan_serve(workload=GGUF, target="dgx-spark", offline=True)
    longer = tools.plan_serve(workload=GGUF, max_model_len=131072, target="dgx-spark", offline=True)
    assert default["kv"]["tokens"] == 40960  # the GGUF's trained context: -c not named
    assert longer["kv"]["tokens"] == 131072 and longer["kv"]["available_gib"] > default["kv"]["available_gib"]
    q8 = tools.plan_serve(workload=GGUF, kv_cache_dtype="q8_0", target="dgx-spark", offline=True)
    assert q8["kv"]["bytes_per_token"] == pytest.approx(default["kv"]["bytes_per_token"] * 1.0625 / 2)


def test_cli_options_reach_ollama_context_and_cache_type():
    line = "ollama run qwen3:8b"
    base = _plan(line)
    opt = _plan(line, engine="ollama", max_model_len=65536, kv_cache_dtype="q8_0")
    same = _plan("OLLAMA_CONTEXT_LENGTH=65536 OLLAMA_KV_CACHE_TYPE=q8_0 " + line)
    assert opt.kv.bytes_per_token == same.kv.bytes_per_token < base.kv.bytes_per_token
    assert opt.kv.available_gib == same.kv.available_gib > base.kv.available_gib
    # an explicit option wins over the line's own flag (the CLI's documented rule)
    assert _plan("OLLAMA_CONTEXT_LENGTH=4096 " + line, max_model_len=65536).kv.available_gib == \
        _plan("OLLAMA_CONTEXT_LENGTH=65536 " + line).kv.available_gib


# ---------------------------------------------------------------- 4. engine-accepted values

@pytest.mark.parametrize("line, field, value", [
    (GGUF + " -c 0", "ctx_size", None), (GGUF + " --ctx-size 0", "ctx_size", None),
    (GGUF.replace("99", "-1"), "n_gpu_layers", None), (GGUF.replace("99", "all"), "n_gpu_layers", None),
    (GGUF.replace("99", "auto"), "n_gpu_layers", None),
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --chunked-prefill-size -1", "max_num_batched_tokens", -1),
    ("vllm serve Qwen/Qwen3-8B --max-model-len -1", "max_model_len", None),
    ("vllm serve Qwen/Qwen3-8B --max-model-len auto", "max_model_len", None),
])
def test_values_the_engines_accept_are_read(line, field, value):
    assert getattr(parse_command(line), field) == value
    assert _plan(line).verdict in ("fits", "tight", "does-not-fit")


@pytest.mark.parametrize("line", [GGUF.replace("99", "many"), GGUF + " -c -5",
                                  "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --chunked-prefill-size -2",
                                  "vllm serve Qwen/Qwen3-8B --max-model-len -2", "OLLAMA_CONTEXT_LENGTH=8k ollama run qwen3:8b",
                                  "OLLAMA_NUM_PARALLEL=two ollama run qwen3:8b"])
def test_values_the_engines_refuse_stay_input_errors(line):
    with pytest.raises(ServeInputError):
        parse_command(line)


@given(st.integers(min_value=0, max_value=10**9))
def test_ollama_uint_reads_every_plain_decimal(n):
    assert ollama_uint(str(n), "X") == (n or None)


@given(st.text(max_size=12).filter(lambda t: not t.strip().isascii() or not t.strip().isdigit()))
def test_ollama_uint_refuses_what_parseuint_refuses(text):
    with pytest.raises(ServeInputError):
        ollama_uint(text, "X")


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_ngl_negative_is_all_layers_else_the_number(n):
    assert parse_command(f"{GGUF.replace('99', str(n))}").n_gpu_layers == (None if n < 0 else n)


@given(st.integers(min_value=0, max_value=10**7))
def test_llama_ctx_zero_is_the_trained_context_else_the_number(n):
    assert parse_command(f"{GGUF} -c {n}").ctx_size == (n or None)


@given(st.integers(min_value=1, max_value=10**4), st.sampled_from(["k", "K"]))
def test_llama_ctx_with_a_unit_keeps_its_size(n, unit):
    assert parse_command(f"{GGUF} -c {n}{unit}").ctx_size == n * {"k": 1000, "K": 1024}[unit]
