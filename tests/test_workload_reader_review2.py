"""The workload reader, round 20ba (a fifth review): a sentence that asks to serve a fine-tuned model or LoRA adapters
is serving (only a training verb makes it a training run), a count word does not own a number that carries its own
length mark, a number already taken is not read again, and node / GPU counts are never lengths. Property tests over
the reader's words; each test fails on the code before this round."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops.facts.workload import NODE_WORDS, parse_workload

SERVE = ["serve", "serving", "host", "inference"]
VERBS = ["fine-tune", "finetune", "train", "sft", "dpo", "grpo"]
COUNT_WORDS = ["users", "requests", "concurrent", "parallel", "seqs", "sequences", "clients"]
AFTER = ["ctx", "context", "seq", "tokens"]
BEFORE = ["context", "ctx", "tokens"]
UNITS = [*NODE_WORDS, "gpus", "gpu"]


# ------------------------------------------------------------------ 5. serving a fine-tuned model / LoRA adapters


@pytest.mark.parametrize("text", [
    "serve qwen3-8b with lora adapters on vllm",
    "serve my fine-tuned qwen3-8b with vllm 8k context",
    "serving a finetuned llama-3.1-8b on ollama",
    "host my qlora llama-3.1-8b adapter with vllm",
])
def test_serving_a_fine_tuned_model_or_lora_adapters_is_serving(text):
    assert parse_workload(text).method == "inference"


@pytest.mark.parametrize("text", [  # round 20ay's four training sentences stay training runs
    "fine-tune llama-3.1-8b for serving",
    "sft qwen3-8b then serve it with vllm",
    "train llama-3.1-8b for inference on ollama",
    "grpo qwen2.5-7b with trl, rollouts from vllm serve",
])
def test_a_training_verb_still_makes_a_training_run(text):
    assert parse_workload(text).method != "inference"


@given(serve=st.sampled_from(SERVE), noun=st.sampled_from(["lora adapters", "fine-tuned", "qlora", "finetuned"]),
       first=st.booleans())
def test_a_serve_word_with_an_adjective_or_noun_of_training_is_serving(serve, noun, first):
    text = f"{noun} qwen3-8b {serve} on vllm" if first else f"{serve} my {noun} qwen3-8b on vllm"
    assert parse_workload(text).method == "inference"


@given(serve=st.sampled_from(SERVE), verb=st.sampled_from(VERBS), first=st.booleans())
def test_the_first_request_decides_between_training_and_serving(serve, verb, first):
    """The rule's last form (the lead, after a sixth review: "serve qwen3-8b with vllm for grpo rollouts" and a pasted
    `vllm serve ... --lora-modules sft=/ckpt` had been judged as training and BLOCKED by G10): whichever the sentence
    asks for first."""
    if first:
        assert parse_workload(f"{verb} qwen3-8b then {serve} it").method != "inference"
    else:
        assert parse_workload(f"{serve} qwen3-8b after we {verb} it with lora").method == "inference"


@pytest.mark.parametrize("line", ["vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --enable-lora --lora-modules sft=/ckpt/sft",
                                  "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --lora-paths dpo=/ckpt/dpo"])
def test_a_pasted_launch_line_serves_whatever_its_flags_name(line):
    assert parse_workload(line).method == "inference"
    assert parse_workload("grpo qwen2.5-7b with trl, rollouts from vllm serve").method != "inference"


@pytest.mark.parametrize(("text", "method"), [("lora qwen3-8b seq 8k", "lora"), ("qlora 70b seq 8192", "qlora")])
def test_lora_without_a_serve_word_is_still_the_training_method(text, method):
    assert parse_workload(text).method == method


# ------------------------------------------------------------------ 6. counts and lengths


@pytest.mark.parametrize(("text", "seq"), [
    ("serve qwen3-8b 4 users 32k context", 32 * 1024),
    ("serve qwen3-8b 4 users 32768 context", 32768),
    ("qlora 70b batch 8 tokens 4096", 4096),
    ("parallel 4 ctx 4096", 4096),
])
def test_a_count_does_not_own_a_number_that_carries_its_own_length(text, seq):
    assert parse_workload(text).seq_len == seq


def test_the_batch_number_is_not_read_again_as_a_length():
    w = parse_workload("qlora 70b batch 8 tokens 4096")
    assert (w.batch_size, w.seq_len) == (8, 4096)
    assert parse_workload("qlora 70b batch 8 tokens").seq_len is None


@given(c=st.integers(1, 64), cw=st.sampled_from(COUNT_WORDS), n=st.integers(1, 512), word=st.sampled_from(BEFORE))
def test_a_count_then_a_k_length_before_its_word(c, cw, n, word):
    w = parse_workload(f"serve qwen3-8b {c} {cw} {n}k {word}")
    assert w.seq_len == n * 1024


@given(b=st.integers(1, 512), n=st.integers(1, 65536), word=st.sampled_from(["bs", "batch", "batch_size"]))
def test_a_number_taken_by_the_batch_is_never_a_length(b, n, word):
    w = parse_workload(f"lora llama-3.1-8b {word} {b} tokens")
    assert w.batch_size == b and w.seq_len is None


# ------------------------------------------------------------------ 7. node / GPU counts are never lengths


@pytest.mark.parametrize(("text", "seq", "nodes"), [
    ("qlora 70b 16k context 2 sparks", 16 * 1024, 2),
    ("qlora 70b 16k context 2 nodes", 16 * 1024, 2),
    ("qlora 70b context 16k 2 nodes", 16 * 1024, 2),
    ("qlora 70b 16k context 2 gpus", 16 * 1024, None),
    ("serve qwen3-8b 8k ctx 1 spark", 8 * 1024, 1),
])
def test_a_node_or_gpu_count_is_never_a_length(text, seq, nodes):
    w = parse_workload(text)
    assert (w.seq_len, w.nodes) == (seq, nodes)


@given(n=st.integers(1, 512), k=st.booleans(), word=st.sampled_from(AFTER), c=st.integers(1, 16),
       unit=st.sampled_from(UNITS), before=st.booleans())
def test_a_length_is_never_overwritten_by_a_unit_count(n, k, word, c, unit, before):
    length = f"{n}k" if k else str(n)
    text = f"{length} {word} {c} {unit}" if before and word in BEFORE else f"{word} {length} {c} {unit}"
    assert parse_workload(f"lora llama-3.1-8b {text}").seq_len == (n * 1024 if k else n)


@given(word=st.sampled_from(AFTER), c=st.integers(1, 16), unit=st.sampled_from(UNITS))
def test_a_length_word_before_a_unit_count_reads_no_length(word, c, unit):
    assert parse_workload(f"serve qwen3-8b {word} {c} {unit}").seq_len is None
