"""The workload reader, round 20ay (a review): a length on either side of its word, never a count of users as a length,
and a training sentence that mentions serving is still a training workload. Property tests over the reader's words;
each test fails on the code before this round."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from sparkops import cli
from sparkops.facts.workload import parse_workload

COUNT_WORDS = ["users", "requests", "concurrent", "parallel", "seqs", "sequences", "clients"]
AFTER = ["ctx", "context", "seq", "seq_len", "max-model-len", "max_model_len"]
BEFORE = ["context", "ctx", "tokens"]


@pytest.mark.parametrize(("text", "seq"), [
    ("lora llama-3.1-8b ctx 4096 parallel 4", 4096),
    ("qlora llama-3.1-70b context 128k", 128 * 1024),
    ("lora qwen3-8b seq 8k bs 2", 8 * 1024),
    ("lora qwen3-8b 2k tokens", 2 * 1024),
    ("serve qwen3-8b 64k context 4 users", 64 * 1024),
    ("serve qwen3-8b context 32k 8 users", 32 * 1024),
])
def test_a_length_is_read_on_either_side_of_its_word(text, seq):
    assert parse_workload(text).seq_len == seq


def _len_text(n: int, k: bool) -> str:
    return f"{n}k" if k else str(n)


@given(word=st.sampled_from(AFTER), n=st.integers(1, 512), k=st.booleans(), cw=st.sampled_from(COUNT_WORDS),
       c=st.integers(1, 64), where=st.sampled_from(["count word first", "count after", "count before"]))
def test_a_length_after_its_word_beside_a_count(word, n, k, cw, c, where):
    """"ctx 4096 parallel 4", "parallel 4 ctx 4096", "4 users ctx 4096": the length is read, the count is not."""
    length = f"{word} {_len_text(n, k)}"
    text = {"count word first": f"{cw} {c} {length}", "count after": f"{length} {cw} {c}",
            "count before": f"{c} {cw} {length}"}[where]
    assert parse_workload(f"lora llama-3.1-8b {text}").seq_len == (n * 1024 if k else n)


@given(word=st.sampled_from(BEFORE), n=st.integers(1, 512), cw=st.sampled_from(COUNT_WORDS), c=st.integers(1, 64))
def test_a_length_before_its_word_and_a_count_after(word, n, cw, c):
    w = parse_workload(f"serve qwen3-8b {n}k {word} {c} {cw}")
    assert w.seq_len == n * 1024


@given(word=st.sampled_from(AFTER), cw=st.sampled_from(COUNT_WORDS), c=st.integers(1, 100_000))
def test_a_count_of_users_is_never_a_length(word, cw, c):
    """"context 4 users", "parallel 4 ctx": the number counts users or slots, whatever its size."""
    assert parse_workload(f"serve qwen3-8b {word} {c} {cw}").seq_len is None
    assert parse_workload(f"serve qwen3-8b {cw} {c} {word}").seq_len is None
    assert parse_workload(f"serve qwen3-8b {c} {cw}").seq_len is None


@pytest.mark.parametrize("text", [
    "fine-tune llama-3.1-8b for serving",
    "sft qwen3-8b then serve it with vllm",
    "train llama-3.1-8b for inference on ollama",
    "grpo qwen2.5-7b with trl, rollouts from vllm serve",
])
def test_a_training_sentence_that_mentions_serving_is_a_training_workload(text):
    assert parse_workload(text).method != "inference"
    out = CliRunner().invoke(cli.app, ["plan", "--json", "--budget-gb", "120", "--offline", "-w", text],
                             standalone_mode=False, catch_exceptions=False)
    assert json.loads(out.stdout)["verdict"] in ("fits", "tight", "does-not-fit")


@pytest.mark.parametrize("text", ["serve qwen3-8b with vllm 32k context 8 users", "serving llama-3.1-8b on ollama"])
def test_a_sentence_that_asks_to_serve_and_names_no_training_is_still_refused_with_the_serve_hint(text):
    assert parse_workload(text).method == "inference"
    with pytest.raises(Exception, match="--serve"):
        CliRunner().invoke(cli.app, ["plan", "--json", "--budget-gb", "120", "--offline", "-w", text],
                           standalone_mode=False, catch_exceptions=False)
