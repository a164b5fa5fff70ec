"""symptoms.yaml v10 (issue 18, round 18v): symptom families by meaning, on lines copied verbatim from public threads.

Each input is a line (or lines) as posted in the named thread, cut but not edited; none of these threads is in a labelled
set. They check that a family written from the spec's meaning matches a real wording it was not written from, and that
the meaning does not stretch to a neighbouring one."""

from __future__ import annotations

from sparkops.diagnose import load_symptoms
from sparkops.diagnose.matcher import match
from sparkops.diagnose.text import from_text

KB = load_symptoms()


def matched(text: str) -> set[str]:
    return match(from_text(text, "-", KB.text_limits), KB, set(), {}).matched


def test_a_refused_buffer_allocation_is_the_pool_running_short_without_the_words_out_of_memory():
    # https://github.com/ggml-org/llama.cpp/issues/20431 (the two lines after cudaMalloc's own message)
    text = ("alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624\n"
            "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n")
    got = matched(text)
    assert "g3.refused-allocation" in got
    assert not {"g3.cuda-oom", "g3.oom-word"} & got  # the family, not the old phrase, found it


def test_workers_left_holding_memory_after_their_container_is_removed_are_a_neighbour():
    # https://github.com/vllm-project/vllm-omni/issues/2317 (its title)
    got = matched("[Bug]: Worker processes persist after docker rm -f, holding GPU memory indefinitely\n")
    assert "g6.stale-holder" in got
    # the same words about a process that is simply running hold nothing over: no stale holder
    assert "g6.stale-holder" not in matched("Worker processes start after docker run, using GPU memory\n")


def test_flash_attn_failing_when_called_is_its_run_time_family():
    # https://github.com/Dao-AILab/flash-attention/issues/2214 (lines of the description)
    text = ("I got this error when using flash_attn:\n"
            "from flash_attn import flash_attn_func\n"
            "attn_output = flash_attn_func(\n"
            "“RuntimeError: CUDA error: an illegal memory access was encountered.”\n")
    assert "g2.flash-traceback" in matched(text)
    # the same CUDA error with no flash-attn call before it is not flash-attn's
    assert "g2.flash-traceback" not in matched("“RuntimeError: CUDA error: an illegal memory access was encountered.”\n")


def test_fp4_and_bf16_on_one_line_without_a_speed_verdict_is_not_the_comparison_family():
    # https://github.com/vllm-project/vllm-omni/pull/4025 (its summary, where W4A4 NVFP4 ends ahead of BF16)
    text = ("loss reflects the small FP4 prefill dequant overhead that BF16 native\n"
            "tensor cores don't pay; once concurrency saturates the GEMM, FP4 weight\n")
    got = matched(text)
    assert "g7.fp4" in got  # FP4 is read ...
    assert not {"g7.fp4-vs-other-quant", "g7.switch-to-fp4-slower"} & got  # ... but no slower-than verdict is
