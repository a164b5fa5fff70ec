"""The free-text workload parser: what users type, and that nothing crashes it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops.facts.workload import merge, parse_workload


def test_qlora_line_from_the_issue():
    w = parse_workload("qlora 70b seq 8192 bs 1")
    assert (w.method, w.params_b, w.seq_len, w.batch_size) == ("qlora", 70.0, 8192, 1)
    assert w.unparsed == []


def test_inference_with_tp_across_two_sparks():
    w = parse_workload("nvfp4 inference with vLLM tp 2 on 2 sparks")
    assert w.precision == "nvfp4"
    assert w.method == "inference"
    assert w.tensor_parallel == 2
    assert w.nodes == 2
    assert w.components == ["vllm"]


def test_model_name_gives_size_and_moe_product():
    assert parse_workload("lora llama-3.1-70b").params_b == 70.0
    assert parse_workload("lora llama-3.1-70b").model == "llama-3.1-70b"
    assert parse_workload("full mixtral 8x7b").params_b == 56.0


def test_unknown_words_are_reported_not_guessed():
    w = parse_workload("lora frobnicate 7b")
    assert w.unparsed == ["frobnicate"]
    assert w.params_b == 7.0


def test_flags_override_text():
    w = merge("qlora 70b tp 4", tensor_parallel=1, components=["unsloth"])
    assert w.tensor_parallel == 1
    assert w.method == "qlora"
    assert w.components == ["unsloth"]


def test_empty():
    assert parse_workload("").empty
    assert not parse_workload("lora").empty


@given(st.text(max_size=200))
def test_parser_never_raises(text):
    w = parse_workload(text)
    assert w.text == text.strip()



@pytest.mark.parametrize("text,field,value", [
    ("vllm serve Qwen3-32B --tensor-parallel-size 2", "tensor_parallel", 2),
    ("vllm serve Qwen3-32B --tensor-parallel-size=2", "tensor_parallel", 2),
    ("sglang -tp 2", "tensor_parallel", 2),
    ("lora Llama-3.1-70B-Instruct", "params_b", 70.0),
    ("lora qwen2.5-72b-instruct", "params_b", 72.0),
    ("full mixtral-8x7b", "params_b", 56.0),
    ("lora meta-llama/Llama-3.1-8B", "params_b", 8.0),
    ("inference gpt-oss-120b", "params_b", 120.0),
    ("lora 8b batch size 8", "batch_size", 8),
    ("ddp on a 2-node cluster", "nodes", 2),
    ("fsdp 2x spark", "nodes", 2),
    ("vllm --max-model-len 32768", "seq_len", 32768),
])
def test_realistic_spellings(text, field, value):
    assert getattr(parse_workload(text), field) == value


def test_flag_spellings_are_normalised_like_text():
    assert merge(None, precision="NVFP4").precision == "nvfp4"
    assert merge(None, precision="fp4").precision == "nvfp4"
    assert merge(None, method="QLoRA").method == "qlora"


@pytest.mark.parametrize(("text", "model"), [
    ("qlora Qwen/Qwen3-8B seq 4096", "Qwen/Qwen3-8B"),
    ("lora meta-llama/Llama-3.1-8B-Instruct bs 2", "meta-llama/Llama-3.1-8B-Instruct"),
    ("--model=Qwen/Qwen3-30B-A3B lora", "Qwen/Qwen3-30B-A3B"),
    ("full llama-3.1-70b", "llama-3.1-70b"),
])
def test_a_model_id_keeps_the_case_it_was_written_in(text, model):
    """The Hub's repository names are case-sensitive: a workload's model id reaches the Hub reader as written
    (the catalogs match names without regard to case)."""
    w = parse_workload(text)
    assert w.model == model and w.params_b is not None


@pytest.mark.parametrize(("text", "engine"), [
    ("docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.34.0 --model Qwen/Qwen3-8B --max-model-len 32768", "vllm"),
    ("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B", "vllm"),
    ("python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --mem-fraction-static 0.5", "sglang"),
    ("llama-server -m gpt-oss-20b-mxfp4.gguf -c 32768 -np 2", "llama.cpp"),
    ("trtllm-serve Qwen/Qwen3-8B --max_batch_size 8", "tensorrt-llm"),
])
def test_a_server_launch_line_is_an_inference_workload_on_its_engine(text, engine):
    # no word says "serve", yet the line starts a server: preflight must plan it as one (and G3 judge its start)
    w = parse_workload(text)
    assert w.method == "inference" and engine in w.components


def test_the_method_a_description_names_wins_over_a_launch_word():
    w = parse_workload("qlora 70b on the llama-server box's sibling")
    assert w.method == "qlora"
