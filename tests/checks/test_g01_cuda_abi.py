"""G1 — CUDA 12/13 ABI mismatch: hits and non-hits around real GB10 and H200 snapshots."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import g01_cuda_abi as g1
from sparkops.core.findings import Status
from sparkops.facts.reading import Why, missing
from sparkops.knowledge import load

HEALTHY = "gb10_ngc_2509_healthy"


def test_ngc_build_without_cu_tag_passes():
    f = run_check("G1", load_facts_fixture(HEALTHY))
    assert f.status is Status.passed
    assert "2.9.0a0+50eac811a6.nv25.09" in f.summary and "CUDA 13.0" in f.summary
    assert "NGC build" in f.summary


def test_cu128_torch_on_spark_fails_with_the_reinstall_fix():
    f = run_check("G1", load_facts_fixture("gb10_bare_pip_cu128"))
    assert f.status is Status.fail
    assert "CUDA 12.8" in f.summary and "CUDA 13" in f.summary
    assert f.code == "G1.wheel-cuda12" and f.fix_where == "target-env"
    # every package that must move together, and the CUDA-12 runtime wheels it leaves behind
    assert "--index-url https://download.pytorch.org/whl/cu130" in f.fix
    assert "pip uninstall -y nvidia-cublas-cu12 nvidia-cuda-nvrtc-cu12" in f.fix


def test_cu128_family_moves_together():
    """Issue 15: reinstalling torch alone leaves torchvision/torchaudio +cu128 behind."""
    base = load_facts_fixture("gb10_bare_pip_cu128")
    dists = {**base.target.distributions, "torchvision": "0.24.1+cu128", "torchaudio": "2.9.1+cu128",
             "xformers": "0.0.33+cu128", "transformers": "4.57.1"}
    f = run_check("G1", patch(base, {"target.distributions": dists}))
    assert f.code == "G1.wheel-cuda12"
    assert "pip install --force-reinstall torch torchvision torchaudio xformers --index-url" in f.fix
    assert "torchvision 0.24.1+cu128" in f.fix and "transformers" not in f.fix


def test_cu130_torch_on_a_cuda12_driver_says_upgrade_the_driver_not_reinstall_cu130():
    """Issue 15: a driver that supports only CUDA 12.x with a cu130 torch; the fix is the driver (host)
    or a CUDA-12 wheel, never 'reinstall from the cu130 index'."""
    base = load_facts_fixture("h200_generic")
    facts = patch(base, {"gpu.cuda_driver_version": "12.8", "target.torch.cuda": "13.0",
                         "target.torch.version": "2.9.1+cu130", "target.torch.local_tag": "cu130"})
    f = run_check("G1", facts)
    assert f.status is Status.fail and f.code == "G1.driver-cuda-too-old", f.summary
    assert f.fix_where == "host" and "upgrade the NVIDIA driver" in f.fix
    assert "whl/cu128" in f.fix and "whl/cu130" not in f.fix


def test_cu130_arch_list_ending_at_sm120_is_a_harmless_note_not_a_failure():
    f = run_check("G1", load_facts_fixture("gb10_vllm_default"))
    assert f.status is Status.passed
    assert any("harmless" in n and "sm_120" in n for n in f.notes)


def test_cpu_torch_on_gpu_host_fails():
    facts = patch(load_facts_fixture("gb10_vllm_default"), {
        "target.torch.version": "2.11.0+cpu", "target.torch.cuda": None, "target.torch.local_tag": "cpu",
        "target.live": missing(Why.not_collected)})
    f = run_check("G1", facts)
    assert f.status is Status.fail and "CPU-only" in f.summary


def test_cpu_torch_without_gpu_is_reported_not_failed():
    facts = patch(load_facts_fixture("no_gpu"), {
        "target.torch.version": "2.11.0+cpu", "target.torch.cuda": None, "target.torch.local_tag": "cpu",
        "target.live": missing(Why.not_collected)})
    f = run_check("G1", facts)
    assert f.status is Status.info and "CPU-only" in f.summary


def test_torch_not_installed_skips_naming_the_interpreter():
    facts = patch(load_facts_fixture(HEALTHY), {
        "target.torch": missing(Why.not_found, "no torch/version.py"),
        "target.live": {"import_ok": False, "error": "ModuleNotFoundError: No module named 'torch'"}})
    f = run_check("G1", facts)
    assert f.status is Status.skip
    assert f.summary == "torch not installed in /usr/bin/python"


def test_live_import_that_raises_fails_with_the_error_text():
    err = "ImportError: /usr/lib/libtorch_cuda.so: undefined symbol: cudaGetDriverEntryPointByVersion"
    facts = patch(load_facts_fixture(HEALTHY), {"target.live": {"import_ok": False, "error": err}})
    f = run_check("G1", facts)
    assert f.status is Status.fail and "undefined symbol" in f.summary


def test_live_import_killed_by_a_signal_fails():
    facts = patch(load_facts_fixture(HEALTHY), {"target.live": {"import_ok": False, "died_by_signal": 11}})
    f = run_check("G1", facts)
    assert f.status is Status.fail and "SIGSEGV" in f.summary


def test_live_import_timeout_is_unknown_not_fail():
    facts = patch(load_facts_fixture(HEALTHY), {
        "target.live": {"import_ok": False, "timed_out": True, "duration_s": 45.0}})
    f = run_check("G1", facts)
    assert f.status is Status.unknown and "45 s" in f.summary and "not proof" in f.summary


def test_generic_torch_newer_than_driver_fails():
    facts = patch(load_facts_fixture("h200_generic"), {"gpu.cuda_driver_version": "12.8"})
    f = run_check("G1", facts)
    assert f.status is Status.fail and "newer than the driver supports (CUDA 12.8)" in f.summary


def test_generic_older_torch_on_newer_driver_passes():
    facts = patch(load_facts_fixture("h200_generic"), {
        "target.torch.version": "2.9.1+cu128", "target.torch.cuda": "12.8", "target.torch.local_tag": "cu128",
        "target.live": missing(Why.not_collected)})
    f = run_check("G1", facts)
    assert f.status is Status.passed and "CUDA 12.8" in f.summary and "13.0" in f.summary


def test_h200_passes():
    f = run_check("G1", load_facts_fixture("h200_generic"))
    assert f.status is Status.passed


def _with_cu12_extension(extra_dists: dict[str, str] | None = None):
    base = load_facts_fixture("gb10_vllm_default")
    dists = {**base.target.distributions, **(extra_dists or {})}
    return patch(base, {
        "target.distributions": dists,
        "target.extensions": [{"package": "xformers", "file": "xformers/_C.so",
                               "needed": ["libc10.so", "libcudart.so.12", "libcuda.so.1"]}]})


def test_extension_needing_absent_cudart12_fails_naming_package_and_lib():
    f = run_check("G1", _with_cu12_extension())
    assert f.status is Status.fail
    assert "xformers" in f.summary and "libcudart.so.12" in f.summary
    assert any(e.fact == "target.extensions[xformers]" for e in f.evidence)


def test_extension_whose_cudart12_comes_from_a_wheel_is_not_a_failure_but_a_leftover_warning():
    f = run_check("G1", _with_cu12_extension({"nvidia-cuda-runtime-cu12": "12.8.90"}))
    assert f.status is Status.warn
    assert "nvidia-cuda-runtime-cu12" in f.summary


def test_extension_needs_not_judged_without_ldconfig():
    facts = patch(_with_cu12_extension(), {"cuda_libs.ldconfig": missing(Why.not_found, "ldconfig not on PATH")})
    f = run_check("G1", facts)
    assert f.status is Status.passed
    assert any("ldconfig was not read" in n for n in f.notes)


def test_both_cudart_runtimes_registered_warns():
    base = load_facts_fixture("gb10_vllm_default")
    ldc = {**base.cuda_libs.ldconfig, "libcudart.so.12": ["/usr/local/cuda-12.8/lib64/libcudart.so.12"]}
    f = run_check("G1", patch(base, {"cuda_libs.ldconfig": ldc}))
    assert f.status is Status.warn and "libcudart.so.12 and libcudart.so.13" in f.summary
    assert f.fix and f.fix != load().gotcha("G1").fix


def test_arch_list_without_a_kernel_for_the_device_warns():
    facts = patch(load_facts_fixture("gb10_vllm_default"), {"target.live.arch_list": ["sm_80", "sm_90"]})
    f = run_check("G1", facts)
    assert f.status is Status.warn and "no kernels" in f.summary


def test_torch_that_cannot_see_the_gpu_fails_with_the_triage_not_a_reinstall():
    facts = patch(load_facts_fixture("gb10_vllm_default"), {
        "target.live.cuda_available": False, "target.live.cuda_error": "CUDA driver initialization failed"})
    f = run_check("G1", facts)
    assert f.status is Status.fail and "is_available() is False" in f.summary
    assert "triage" in f.fix and f.fix != load().gotcha("G1").fix


def test_unreadable_torch_skips_with_the_reason():
    facts = patch(load_facts_fixture(HEALTHY), {
        "target.torch": missing(Why.timeout, "target interpreter did not answer"),
        "target.live": missing(Why.not_collected)})
    f = run_check("G1", facts)
    assert f.status is Status.skip and "timeout" in f.summary


@given(st.text(max_size=20))
def test_arch_parser_never_crashes(entry):
    g1._arch(entry)
    g1._covering([entry, "sm_120"], (12, 1))
    g1._major(entry)


def test_arch_coverage_rules():
    assert g1._covering(["sm_80", "sm_120"], (12, 1)) == ("sm_120", "sass")
    assert g1._covering(["sm_80", "sm_121a"], (12, 1)) == ("sm_121a", "sass")
    assert g1._covering(["sm_90", "compute_90"], (12, 1)) == ("compute_90", "ptx")
    assert g1._covering(["sm_90", "sm_100"], (12, 1)) is None
    assert g1._covering(["sm_120"], (9, 0)) is None


def test_extension_need_resolved_through_its_runpath_is_satisfied():
    facts = patch(_with_cu12_extension(), {"target.extensions.0.resolved": {
        "libcudart.so.12": "/opt/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"}})
    assert run_check("G1", facts).status is Status.passed


def _with_bnb_variants(files: dict[str, str]):
    """bitsandbytes 0.50.2 ships libbitsandbytes_cuda118.so ... _cuda132.so and loads only the one
    matching torch.version.cuda (seen on the device H200, where G1 failed on the unused cu12 ones)."""
    base = load_facts_fixture("gb10_ngc_2509_healthy")
    exts = [e.model_dump() for e in base.target.extensions]
    exts += [{"package": "bitsandbytes", "file": f"bitsandbytes/libbitsandbytes_{v}.so", "needed": [lib]}
             for v, lib in files.items()]
    return patch(base, {"target.extensions": exts})


def test_per_cuda_variants_judge_only_the_one_torch_loads():
    f = run_check("G1", _with_bnb_variants({"cuda118": "libcudart.so.11.0", "cuda121": "libcudart.so.12",
                                            "cuda128": "libcudart.so.12", "cuda130": "libcudart.so.13"}))
    assert f.status is Status.passed, f.summary
    assert any("libbitsandbytes_cuda130.so" in n and "4 files" in n for n in f.notes)


def test_per_cuda_variants_without_torchs_cuda_are_all_judged():
    f = run_check("G1", _with_bnb_variants({"cuda121": "libcudart.so.12", "cuda124": "libcudart.so.12"}))
    assert f.status is Status.fail and "bitsandbytes needs libcudart.so.12" in f.summary


def test_a_lone_cuda_named_library_is_still_judged():
    f = run_check("G1", _with_bnb_variants({"cuda121": "libcudart.so.12"}))
    assert f.status is Status.fail
