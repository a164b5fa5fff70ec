"""G7 — NVFP4 on SM121 needs sm_121a kernels."""

from __future__ import annotations

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.core.findings import Status
from sparkops.facts.workload import Workload

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


def test_serving_engine_kernels_are_read_from_their_fatbins(tmp_path):
    """Issue 15: G7 looks at the kernels serving engines ship. Real nvcc output (tests/fixtures/raw/fatbin)
    stands in for vLLM's and flashinfer's extension modules."""
    import shutil
    from pathlib import Path

    from sparkops.probes.target_env import scan_extensions

    fatbin = Path(__file__).parents[1] / "fixtures" / "raw" / "fatbin"
    vllm_c = tmp_path / "_C.abi3.so"
    fi = tmp_path / "flashinfer_kernels.so"
    shutil.copy(fatbin / "sm90_sm100_sm120_compressed.o", vllm_c)
    shutil.copy(fatbin / "sm121a_sm120_ptx120.o", fi)
    sources = {"vllm": {"files": [str(vllm_c)]}, "flashinfer-python": {"files": [str(fi)]}}
    exts, _ = scan_extensions(sources, 100, 10.0, frozenset({"vllm"}))
    assert [(e.package, e.kernels) for e in exts] == [("vllm", ["sm_100", "sm_120", "sm_90"])]
    base = load_facts_fixture("gb10_ngc_2509_healthy")
    f = run_check("G7", patch(base, {"target.extensions": [e.model_dump() for e in exts]}), Workload(precision="nvfp4"))
    assert f.code == "G7.engine-without-sm121a" and "vllm: sm_100, sm_120, sm_90" in f.summary
    exts, _ = scan_extensions(sources, 100, 10.0, frozenset({"vllm", "flashinfer-python"}))
    g = run_check("G7", patch(base, {"target.extensions": [e.model_dump() for e in exts]}), Workload(precision="nvfp4"))
    assert g.code == "G7.nvfp4-sm121a" and "flashinfer-python ships sm_121a kernels" in g.summary
