"""Round 18ac's G1 readings (sparkops/diagnose/learned.py ``cuda_mismatch``, ``wrong_cuda``, ``kernel_gap``), which the
CV harness (benchmarks/diagnose_learn.py ``--g1``) weighs: a line showing a CUDA major-version mismatch (a CUDA 12
library, tag, toolkit or torch.version.cuda; a CPU-only torch; a driver older than the runtime; "built for the wrong
CUDA") vs a library that merely lacks an SM12x kernel (labelled none). Read on the verbatim excerpts of labelled reports.
The gate shipped in round 18ag (variant B, diagnose-learn-cv-v30.md; its tests: test_g1_gate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.diagnose.learned import (
    cuda13_needed,
    cuda_mismatch,
    kernel_gap,
    no_cuda_torch,
    text_features,
    wrong_cuda,
)
from sparkops.diagnose.reading import QUOTED, ROLES, line_roles
from sparkops.knowledge import safe_load

HERE = Path(__file__).parent


def _case(rel: str) -> tuple[str, list[str]]:
    case = safe_load((HERE / rel).read_text(encoding="utf-8"))
    return str(case["label"]), str(case["text"]).splitlines()


@pytest.mark.parametrize("rel", [
    "holdout/sglang-omni-620-sgl-kernel-cuda12-libs-on-spark.yaml",  # libnvrtc.so.12 / libcudart.so.12 not found
    "cases/whisperlivekit-284-torch-not-compiled-with-cuda.yaml",  # Torch not compiled with CUDA enabled
    "cases/index-tts-556-torch-cu128-no-aarch64-wheel.yaml",  # torch==2.8.0+cu128
    "holdout2/spark-vllm-docker-pr263-flashinfer-resolve-downgrades-torch-to-cpu.yaml",  # torch 2.10.0+cpu
    "holdout4/llm-d-1402-cuda13-image-vllm-links-libcudart12.yaml",  # extensions linked to libcudart.so.12
])
def test_a_g1_report_shows_a_cuda_major_version_mismatch(rel: str) -> None:
    label, lines = _case(rel)
    assert label == "G1"
    assert cuda_mismatch(lines, line_roles(lines))


@pytest.mark.parametrize("rel", [
    "holdout/causal-conv1d-119-no-sm121-prebuilt-wheel.yaml",  # a prebuilt wheel without an sm_121 kernel
    "cases/flashinfer-5238-moe-utils-no-sm12x-image.yaml",  # no SM12x image in a library's kernels
])
def test_a_library_without_an_sm12x_kernel_is_a_kernel_gap_not_a_mismatch(rel: str) -> None:
    label, lines = _case(rel)
    assert label == "none"
    roles = line_roles(lines)
    assert kernel_gap(lines, roles)
    assert not cuda_mismatch(lines, roles)  # its "CUDA 13.0, PyTorch cu130" is the right build, not a mismatch


def test_the_capability_warning_alone_is_not_a_mismatch() -> None:
    label, lines = _case("cases/pytorch-172629-gb10-capability-warning.yaml")  # none: "(8.0) - (12.0)" is harmless
    assert label == "none"
    assert not cuda_mismatch(lines, line_roles(lines))


def test_the_wrong_cuda_told_in_words_counts_for_the_gate() -> None:
    label, lines = _case("holdout/unsloth-pr9281-torch-wrong-cuda-no-accelerator.yaml")
    roles = line_roles(lines)
    assert label == "G1"
    assert not cuda_mismatch(lines, roles) and wrong_cuda(lines, roles)
    denied = ["It was not built for the wrong CUDA: torch.version.cuda is 13.0"]
    assert not wrong_cuda(denied, line_roles(denied))


def test_the_g1_readings_are_text_features_and_never_raise_on_odd_input() -> None:
    for lines in ([], [""], ["\x00\xff" * 50], ["libcudart.so.12"] * 3):
        f = text_features(lines, line_roles(lines))
        assert {f["cuda_mismatch"], f["wrong_cuda"], f["kernel_gap"]} <= {0.0, 1.0}


# --- round 18ag: two more readings a G1 gate may pass on (diagnose-learn-cv-v30.md; no_cuda_torch opens the gate)

def test_a_tool_finding_no_accelerator_on_a_listed_gb10_is_a_no_cuda_torch() -> None:
    label, lines = _case("holdout2/heretic-13-gb10-no-accelerator-detected.yaml")  # nvidia-smi lists the GB10
    roles = line_roles(lines)
    assert label == "G1"
    assert no_cuda_torch(lines, roles) and not cuda_mismatch(lines, roles) and not wrong_cuda(lines, roles)
    alone = [ln for ln in lines if "accelerator detected" in ln]  # the same line, no GPU shown anywhere
    assert alone and not no_cuda_torch(alone, line_roles(alone))
    quoted = ["Support GB10 / DGX Spark Hardware."] + ["> " + ln for ln in alone]
    assert not no_cuda_torch(quoted, line_roles(quoted))
    denied = ["Support GB10 / DGX Spark Hardware.", "It did not fall back to the CPU this time."]
    assert not no_cuda_torch(denied, line_roles(denied))


def test_is_available_false_beside_a_spark_is_a_no_cuda_torch() -> None:
    label, lines = _case("holdout/unsloth-pr9281-torch-wrong-cuda-no-accelerator.yaml")
    assert label == "G1" and no_cuda_torch(lines, line_roles(lines))


def test_a_spark_that_needed_a_cu130_torch_to_run_reads_cuda13_needed() -> None:
    label, lines = _case("holdout5/ml-sharp-5-spark-needs-cu130-torch.yaml")  # "requires CUDA 13.0 ... made it run"
    roles = line_roles(lines)
    assert label == "G1"
    assert cuda13_needed(lines, roles) and not cuda_mismatch(lines, roles)
    setup = ["DGX Spark, PyTorch 2.9.0+cu130, CUDA 13.0: the kernel build fails"]  # the right build, named as setup
    assert not cuda13_needed(setup, line_roles(setup))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["No GPU or other accelerator detected.", "DGX Spark (GB10) here",
                                           "The DGX Spark requires CUDA 13.0.", "torch.cuda.is_available() -> False",
                                           "it works", ""]) | st.text(max_size=80),
                          st.sampled_from(ROLES)), max_size=12))
def test_the_18ag_readings_read_only_the_non_quoted_lines(pairs) -> None:
    lines = [ln.replace("\n", " ") for ln, _r in pairs]
    roles = [r for _ln, r in pairs]
    live = [(ln, r) for ln, r in zip(lines, roles, strict=True) if r != QUOTED]
    for reading in (no_cuda_torch, cuda13_needed):
        got = reading(lines, roles)
        assert got in (True, False)
        assert got == reading([ln for ln, _r in live], [r for _ln, r in live])
