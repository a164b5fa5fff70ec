"""core/launch.py: which serving engine a pasted launch line starts, for the workload parser and plan --serve alike."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops.core.launch import detect_engine, engine_in_text, image_version


@given(st.text(max_size=300))
def test_engine_in_text_never_raises(text):
    assert engine_in_text(text) in (None, "vllm", "sglang", "llama.cpp", "ollama", "trtllm")


@pytest.mark.parametrize(("line", "engine", "first_arg"), [
    ("docker run --gpus all vllm/vllm-openai:v0.34.0 --model Qwen/Qwen3-8B", "vllm", "--model"),
    ("vllm serve Qwen/Qwen3-8B --max-model-len 8192", "vllm", "Qwen/Qwen3-8B"),
    ("python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B", "sglang", "--model-path"),
    ("ollama run gpt-oss:20b", "ollama", "gpt-oss:20b"),
    ("llama-server -m model.gguf -c 8192", "llama.cpp", "-m"),
])
def test_the_engine_and_where_its_arguments_start(line, engine, first_arg):
    tokens = line.split()
    found, start = detect_engine(tokens)
    assert found == engine
    assert (tokens[start] if start < len(tokens) else None) == first_arg


def test_a_description_that_names_no_launch_is_no_engine():
    # "vllm" as a word, "serve" elsewhere: only `vllm serve`, an entrypoint, an image or a server binary start one
    assert engine_in_text("qlora 70b, later I serve it with vllm") is None
    assert engine_in_text('unbalanced "quote vllm serve X') == "vllm"  # falls back to whitespace splitting


def test_only_a_release_tag_names_a_version():
    assert image_version("vllm/vllm-openai:v0.34.0") == "0.34.0"
    assert image_version("vllm/vllm-openai:latest") is None and image_version("nvcr.io/nvidia/vllm:26.01-py3") is None
