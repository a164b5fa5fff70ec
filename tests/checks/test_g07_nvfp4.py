"""G7 — NVFP4 on SM121 needs sm_121a kernels."""

from __future__ import annotations

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks.base import Status
from sparkops.workload import Workload

NVFP4 = Workload(precision="nvfp4")


def test_nvfp4_planned_without_sm121a_evidence_warns():
    f = run_check("G7", load_facts_fixture("gb10_vllm_default"), NVFP4)
    assert f.status is Status.warn and "sm_121a" in f.summary


def test_torch_cuda_arch_list_with_121a_counts_as_evidence():
    facts = patch(load_facts_fixture("gb10_vllm_default"), {"host.env.TORCH_CUDA_ARCH_LIST": "12.1a"})
    f = run_check("G7", facts, NVFP4)
    assert f.status is Status.passed and "TORCH_CUDA_ARCH_LIST=12.1a" in f.summary


def test_plain_121_arch_list_is_not_evidence():
    facts = patch(load_facts_fixture("gb10_vllm_default"), {"host.env.TORCH_CUDA_ARCH_LIST": "12.1"})
    assert run_check("G7", facts, NVFP4).status is Status.warn


def test_sm121a_in_torch_arch_list_counts_as_evidence():
    facts = patch(load_facts_fixture("gb10_vllm_default"), {"target.live.arch_list": ["sm_90", "sm_120", "sm_121a"]})
    assert run_check("G7", facts, NVFP4).status is Status.passed


def test_other_precision_planned_passes():
    f = run_check("G7", load_facts_fixture("gb10_vllm_default"), Workload(precision="fp8"))
    assert f.status is Status.passed and "fp8" in f.summary


def test_no_precision_is_info_saying_what_to_check():
    f = run_check("G7", load_facts_fixture("gb10_vllm_default"))
    assert f.status is Status.info and "hardware confirmed" in f.summary and "sm_121a" in f.summary


def test_gpu_without_fp4_is_not_applicable():
    f = run_check("G7", load_facts_fixture("h200_generic"), NVFP4)
    assert f.status is Status.info and "not applicable" in f.summary


def test_other_blackwell_is_info_not_warn():
    facts = patch(load_facts_fixture("h200_generic"), {"gpu.devices.0.name": "NVIDIA GeForce RTX 5090",
                                                       "gpu.devices.0.capability": (12, 0)})
    f = run_check("G7", facts, NVFP4)
    assert f.status is Status.info and "SM121" in f.summary


def test_no_gpu_skips():
    assert run_check("G7", load_facts_fixture("no_gpu"), NVFP4).status is Status.skip
