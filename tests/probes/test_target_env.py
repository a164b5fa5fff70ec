"""The target-environment probe against real (fake-content) virtual environments and hostile
interpreters. Every test runs the probe script in a real child interpreter."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import FIXTURES
from fakeenv import clean_env, make_fake_env, site_packages
from sparkops.facts.model import TargetEnvFacts, TorchLive, TorchStatic
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.probes import CollectOptions, _run, _target_script, target_env
from sparkops.probes._target_script import RESULT_MARKER, STAGE_MARKER, env_kind
from sparkops.probes.target_env import Limits, inspect_target

BIN = FIXTURES / "bin"
FAST = Limits(quick_timeout_s=10.0, live_timeout_s=20.0, elf_max_files=400, elf_budget_s=5.0)

# Real torch/version.py files as found in public repositories (code index file ids; repo unknown).
VERSION_PY_SOURCE_BUILD_CU13 = (  # index file id 28332315701
    "from typing import Optional\n\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
    "__version__ = '2.10.0a0+gite67e3d9'\n"
    "debug = False\n"
    "cuda: Optional[str] = '13.0'\n"
    "git_version = 'e67e3d95f3ab863c8b44a6b16ce9f25d40b0d517'\n"
    "hip: Optional[str] = None\n"
    "xpu: Optional[str] = None\n"
)
VERSION_PY_NIGHTLY_CU128 = (  # index file id 62126722969
    "from typing import Optional\n\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
    "__version__ = '2.11.0.dev20260104+cu128'\n"
    "debug = False\n"
    "cuda: Optional[str] = '12.8'\n"
    "git_version = 'c6bcb25d8bfe09da372676d68d3502d9e57fef7b'\n"
    "hip: Optional[str] = None\n"
    "rocm: Optional[str] = None\n"
    "xpu: Optional[str] = None\n"
)
VERSION_PY_CU121 = (  # index file id 1154203139
    "from typing import Optional\n\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
    "__version__ = '2.4.0+cu121'\n"
    "debug = False\n"
    "cuda: Optional[str] = '12.1'\n"
    "git_version = 'e4ee3be4063b7c430974252fdf7db42273388d86'\n"
    "hip: Optional[str] = None\n"
)
# Read on the device machine (H200, a uv venv with the torch 2.11.0+cu130 wheel), verbatim.
VERSION_PY_2_11_CU130 = (
    "from typing import Optional\n\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
    "__version__ = '2.11.0+cu130'\n"
    "debug = False\n"
    "cuda: Optional[str] = '13.0'\n"
    "git_version = '70d99e998b4955e0049d13a98d77ae1b14db1f45'\n"
    "hip: Optional[str] = None\n"
    "rocm: Optional[str] = None\n"
    "xpu: Optional[str] = None\n"
)
# The live script's output there (stage lines and result line), verbatim.
LIVE_STDOUT_H200 = (
    "\n@@sparkops-stage@@import torch\n\n@@sparkops-stage@@cuda queries\n\n@@sparkops-stage@@sdp flags\n\n"
    "@@sparkops-stage@@import flash_attn\n\n"
    '@@sparkops-result@@{"mode": "live", "import_ok": true, "python_version": "3.12.3", "import_duration_s": 4.202, '
    '"version": "2.11.0+cu130", "cuda": "13.0", "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", '
    '"sm_120"], "cuda_available": true, "device_count": 1, "device_name": "NVIDIA H200", "capability": [9, 0], '
    '"total_memory_bytes": 150109880320, "mem_get_info_bytes": [149557477376, 150109880320], '
    '"flash_sdp_enabled": true, "mem_efficient_sdp_enabled": true, "math_sdp_enabled": true, '
    '"flash_attn_import": null, "warnings": [], "stage": "done"}\n'
)
VERSION_PY_NO_LOCAL_TAG = (  # index file id 67335186091 (a distro build)
    "from typing import Optional\n\n"
    "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n"
    "__version__ = '2.7.1-700'\n"
    "debug = False\n"
    "cuda: Optional[str] = '12.9'\n"
    "git_version = 'Unknown'\n"
    "hip: Optional[str] = None\n"
    "xpu: Optional[str] = None\n"
)


@pytest.fixture
def env() -> dict[str, str]:
    return clean_env()


def _quick(py: Path, env: dict[str, str], **kw) -> TargetEnvFacts:
    return inspect_target(str(py), env, depth="quick", limits=kw.pop("limits", FAST))


def _full(py: Path, env: dict[str, str], limits: Limits = FAST) -> TargetEnvFacts:
    return inspect_target(str(py), env, depth="full", limits=limits)


# --------------------------------------------------------------------------- pure parsers
@pytest.mark.parametrize(
    ("text", "version", "cuda", "git"),
    [
        (VERSION_PY_SOURCE_BUILD_CU13, "2.10.0a0+gite67e3d9", "13.0", "e67e3d95f3ab863c8b44a6b16ce9f25d40b0d517"),
        (VERSION_PY_NIGHTLY_CU128, "2.11.0.dev20260104+cu128", "12.8", "c6bcb25d8bfe09da372676d68d3502d9e57fef7b"),
        (VERSION_PY_CU121, "2.4.0+cu121", "12.1", "e4ee3be4063b7c430974252fdf7db42273388d86"),
        (VERSION_PY_2_11_CU130, "2.11.0+cu130", "13.0", "70d99e998b4955e0049d13a98d77ae1b14db1f45"),
        (VERSION_PY_NO_LOCAL_TAG, "2.7.1-700", "12.9", "Unknown"),
    ],
)
def test_parse_real_torch_version_files(text, version, cuda, git):
    fields = target_env.parse_torch_version_py(text)
    assert fields["__version__"] == version
    assert fields["cuda"] == cuda
    assert fields["git_version"] == git
    assert fields["hip"] is None


def test_parse_cpu_build_and_old_plain_assignment():
    cpu = VERSION_PY_CU121.replace("'12.1'", "None").replace("+cu121", "+cpu")
    assert target_env.parse_torch_version_py(cpu)["cuda"] is None
    old = "__version__ = '1.13.1+cu117'\ncuda = '11.7'\ngit_version = 'abc'\n"
    assert target_env.parse_torch_version_py(old)["cuda"] == "11.7"


def test_parse_falls_back_to_lines_when_the_file_is_not_valid_python():
    broken = VERSION_PY_NIGHTLY_CU128 + "def oops(:\n"
    fields = target_env.parse_torch_version_py(broken)
    assert fields["__version__"] == "2.11.0.dev20260104+cu128"
    assert fields["cuda"] == "12.8"


@pytest.mark.parametrize(
    ("version", "tag"),
    [("2.11.0+cu130", "cu130"), ("2.9.0+cpu", "cpu"), ("2.9.0a0+50eac811a6.nv25.09", "50eac811a6.nv25.09"),
     ("2.7.1-700", ""), ("2.5.1", "")],
)
def test_local_tag(version, tag):
    assert target_env.local_tag(version) == tag


@given(st.text(max_size=2000))
def test_version_parser_never_raises(text):
    fields = target_env.parse_torch_version_py(text)
    assert all(v is None or isinstance(v, (str, bool)) for v in fields.values())
    target_env.local_tag(text)


@given(st.text(max_size=3000))
def test_result_parser_never_raises(stdout):
    payload, why = target_env.parse_result(stdout)
    assert (payload is None) == bool(why)
    target_env.last_stage(stdout)


def test_result_parser_takes_the_last_marked_line_anywhere_in_a_line():
    out = f"noise {RESULT_MARKER}{{\"a\": 1}}\ntorch says hi{RESULT_MARKER}{{\"a\": 2}}\n{STAGE_MARKER}x\n"
    assert target_env.parse_result(out) == ({"a": 2}, "")
    assert target_env.last_stage(out) == "x"
    assert target_env.parse_result(f"{RESULT_MARKER}[1]")[0] is None
    assert "unparseable" in target_env.parse_result(f"{RESULT_MARKER}{{oops")[1]


@pytest.mark.parametrize(
    ("prefix", "base", "cfg", "meta", "conda_prefix", "real", "kind"),
    [
        ("/v", "/usr", "home = /usr/bin\n", False, "", None, "venv"),
        ("/v", "/usr", "home = /usr/bin\nuv = 0.8.17\n", False, "", None, "uv"),
        ("/opt/conda/envs/x", "/opt/conda/envs/x", None, True, "", None, "conda"),
        ("/opt/c", "/opt/c", None, False, "/opt/c", None, "conda"),
        ("/usr", "/usr", None, False, "/opt/other", None, "system"),
        ("/usr", "/usr", None, False, "", "/usr", "venv"),  # virtualenv < 20 sets sys.real_prefix
    ],
)
def test_env_kind(prefix, base, cfg, meta, conda_prefix, real, kind):
    assert env_kind(prefix, base, cfg, meta, conda_prefix, real) == kind


# --------------------------------------------------------------------------- quick depth
def test_quick_reads_distributions_torch_and_venv(tmp_path, env):
    py = make_fake_env(tmp_path, {"Flash_Attn": "2.8.3", "torchao": "0.13.0", "peft": "0.19.1"},
                       "2.11.0+cu130", "13.0")
    facts = _quick(py, env)
    assert facts.python == str(py) and facts.chosen_because == "--python"
    assert facts.python_version == ".".join(map(str, sys.version_info[:3]))
    assert facts.distributions == {"flash-attn": "2.8.3", "torchao": "0.13.0", "peft": "0.19.1",
                                   "torch": "2.11.0+cu130"}
    assert isinstance(facts.torch, TorchStatic)
    assert (facts.torch.version, facts.torch.cuda, facts.torch.local_tag) == ("2.11.0+cu130", "13.0", "cu130")
    assert facts.torch.location == str(site_packages(py) / "torch")
    assert facts.env.kind == "venv"
    assert facts.env.prefix == str(py.parent.parent)
    assert facts.env.site_packages == [str(site_packages(py))]
    assert isinstance(facts.live, Unavailable) and facts.live.unavailable is Why.not_collected


def test_quick_never_imports_torch(tmp_path, env):
    # a torch whose import would hang for the whole test: quick must not notice it
    py = make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0", live="hang")
    t0 = time.monotonic()
    facts = _quick(py, env)
    assert time.monotonic() - t0 < 5
    assert isinstance(facts.torch, TorchStatic) and facts.torch.cuda == "13.0"


@pytest.mark.parametrize(
    ("version", "cuda", "tag"),
    [("2.8.0+cu128", "12.8", "cu128"), ("2.11.0+cu130", "13.0", "cu130"), ("2.9.0+cpu", None, "cpu"),
     ("2.9.0a0+50eac811a6.nv25.09", "13.0", "50eac811a6.nv25.09")],
)
def test_quick_reads_torch_build_from_version_py(tmp_path, env, version, cuda, tag):
    facts = _quick(make_fake_env(tmp_path, {}, version, cuda), env)
    assert isinstance(facts.torch, TorchStatic)
    assert (facts.torch.version, facts.torch.cuda, facts.torch.local_tag) == (version, cuda, tag)


def test_quick_without_torch_says_not_found(tmp_path, env):
    facts = _quick(make_fake_env(tmp_path, {"numpy": "2.3.1"}, None, None), env)
    assert facts.distributions == {"numpy": "2.3.1"}
    assert isinstance(facts.torch, Unavailable) and facts.torch.unavailable is Why.not_found


def test_quick_uv_env(tmp_path, env):
    assert _quick(make_fake_env(tmp_path, {}, None, None, kind="uv"), env).env.kind == "uv"


def test_quick_finds_cuda_needs_of_extensions(tmp_path, env):
    py = make_fake_env(
        tmp_path, {"flash-attn": "2.8.3", "bitsandbytes": "0.48.1", "peft": "0.19.1"}, "2.11.0+cu130", "13.0",
        extensions={
            "flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so": ["libcudart.so.12", "libc10_cuda.so", "libc.so.6"],
            "bitsandbytes/libbitsandbytes_cuda130.so": ["libcublasLt.so.13", "libstdc++.so.6"],
            "torch/lib/libtorch_cuda.so": ["libcudart.so.13", "libnccl.so.2", "libgomp.so.1"],
            "torch/lib/libshm.so": ["libc.so.6"],  # no CUDA need: not listed
            "peft/not_cuda.so": ["libcudart.so.12"],  # peft is not a package of interest: not scanned
        },
    )
    facts = _quick(py, env)
    sp = site_packages(py)
    got = {(e.package, Path(e.file).relative_to(sp).as_posix()): e.needed for e in facts.extensions}
    assert got == {
        ("flash-attn", "flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so"): ["libcudart.so.12", "libc10_cuda.so"],
        ("bitsandbytes", "bitsandbytes/libbitsandbytes_cuda130.so"): ["libcublasLt.so.13"],
        ("torch", "torch/lib/libtorch_cuda.so"): ["libcudart.so.13", "libnccl.so.2"],
    }
    assert facts.extensions_truncated is False
    # torch is scanned last: the packages G1 cannot learn from version.py come first
    assert facts.extensions[-1].package == "torch"


def test_quick_resolves_needs_through_runpath(tmp_path, env):
    """A pip wheel finds its CUDA libs via RUNPATH into nvidia/*/lib: record where each need resolves."""
    ext = "flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so"
    py = make_fake_env(tmp_path, {"flash-attn": "2.8.3"}, None, None,
                       extensions={ext: ["libcudart.so.12", "libcublas.so.12"]},
                       runpaths={ext: "$ORIGIN/nvidia/cuda_runtime/lib:/nonexistent/lib"},
                       libraries=["nvidia/cuda_runtime/lib/libcudart.so.12"])
    (e,) = _quick(py, env).extensions
    sp = site_packages(py)
    assert e.runpath == [str(sp / "nvidia" / "cuda_runtime" / "lib"), "/nonexistent/lib"]
    assert e.resolved == {"libcudart.so.12": str(sp / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12")}


def test_quick_walks_package_folders_when_a_distribution_has_no_record(tmp_path, env):
    py = make_fake_env(tmp_path, {"xformers": "0.0.32"}, None, None,
                       extensions={"xformers/_C.so": ["libcudart.so.12"], "xformers/ops/deep/_k.so": ["libcublas.so.12"]})
    (site_packages(py) / "xformers-0.0.32.dist-info" / "RECORD").unlink()
    facts = _quick(py, env)
    assert sorted((Path(e.file).name, tuple(e.needed)) for e in facts.extensions) == [
        ("_C.so", ("libcudart.so.12",)), ("_k.so", ("libcublas.so.12",))]


def test_quick_extension_scan_respects_file_and_time_budgets(tmp_path, env):
    exts = {f"vllm/_k{i}.so": ["libcudart.so.12"] for i in range(5)}
    py = make_fake_env(tmp_path, {"vllm": "0.11.0"}, None, None, extensions=exts)
    few = _quick(py, env, limits=Limits(10.0, 20.0, elf_max_files=2, elf_budget_s=5.0))
    assert few.extensions_truncated is True and len(few.extensions) == 2
    none = _quick(py, env, limits=Limits(10.0, 20.0, elf_max_files=400, elf_budget_s=-1.0))
    assert none.extensions_truncated is True and none.extensions == []
    full = _quick(py, env)
    assert full.extensions_truncated is False and len(full.extensions) == 5


def test_quick_is_fast(tmp_path, env):
    py = make_fake_env(tmp_path, {f"pkg-{i}": "1.0" for i in range(150)} | {"flash-attn": "2.8.3"},
                       "2.11.0+cu130", "13.0",
                       extensions={f"torch/lib/l{i}.so": ["libcudart.so.13"] for i in range(30)})
    _quick(py, env)  # warm the page cache
    t0 = time.monotonic()
    facts = _quick(py, env)
    elapsed = time.monotonic() - t0
    assert known(facts.distributions) and len(facts.distributions) == 152
    # bounded, not timed: the speed goal lives in benchmarks/bench_cli.py (this only catches a probe that reads
    # every file of every distribution, which takes many seconds even here)
    assert elapsed < 5.0, f"quick probe took {elapsed:.2f} s"


def test_collect_uses_options(tmp_path, env):
    py = make_fake_env(tmp_path, {}, "2.8.0+cu128", "12.8")
    facts = target_env.collect(CollectOptions(depth="quick", python=str(py), env=env))
    assert facts.chosen_because == "--python" and facts.torch.cuda == "12.8"
    assert isinstance(facts.live, Unavailable)


def test_collect_keeps_a_hanging_import_inside_the_collection_budget(tmp_path, env):
    py = make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0", live="hang")
    t0 = time.monotonic()
    facts = target_env.collect(CollectOptions(depth="full", python=str(py), env=env, budget_s=3.0))
    assert time.monotonic() - t0 < 3.0 + 1.0
    assert facts.live.timed_out and "2 s" in facts.live.error


def test_limits_within_budget():
    lim = Limits(5.0, 45.0, 400, 1.5)
    assert lim.within(12.0) == Limits(5.0, 11.0, 400, 1.5)
    assert lim.within(0) == lim
    assert lim.within(0.5).live_timeout_s == 1.0


# --------------------------------------------------------------------------- choosing the interpreter
def test_python3_on_path_is_chosen(tmp_path, env):
    py = make_fake_env(tmp_path, {}, None, None)
    exe, why = target_env.choose_interpreter(None, {**env, "PATH": str(py.parent)})
    assert (exe, why) == (str(py.parent / "python3"), "python3 on PATH")
    exe, why = target_env.choose_interpreter("python3", {**env, "PATH": str(py.parent)})
    assert (exe, why) == (str(py.parent / "python3"), "--python")


def test_own_interpreter_is_the_last_resort(tmp_path):
    assert target_env.choose_interpreter(None, {"PATH": str(tmp_path)}) == (sys.executable, "the tool's own interpreter")


@pytest.mark.parametrize("depth", ["quick", "full"])
def test_missing_interpreter_is_unavailable_not_an_exception(tmp_path, env, depth):
    ghost = tmp_path / "nope" / "bin" / "python"
    facts = inspect_target(str(ghost), env, depth=depth, limits=FAST)
    assert facts.python == str(ghost) and facts.chosen_because == "--python"
    for reading in (facts.python_version, facts.distributions, facts.torch, facts.extensions, facts.live):
        assert isinstance(reading, Unavailable) and reading.unavailable is Why.not_found
    assert str(ghost) in facts.python_version.detail


# --------------------------------------------------------------------------- hostile interpreters
@pytest.mark.parametrize(
    ("script", "why", "text"),
    [("python-crash", Why.error, "signal 11"), ("python-garbage", Why.error, "no result line"),
     ("python-fails", Why.error, "command not found")],
)
def test_quick_against_a_broken_interpreter(env, script, why, text):
    facts = _quick(BIN / script, env)
    assert isinstance(facts.python_version, Unavailable)
    assert facts.python_version.unavailable is why
    assert text in facts.python_version.detail
    assert isinstance(facts.live, Unavailable) and facts.live.unavailable is Why.not_collected


def test_hanging_interpreter_is_bounded_in_both_depths(env):
    limits = Limits(quick_timeout_s=1.0, live_timeout_s=1.5, elf_max_files=10, elf_budget_s=1.0)
    t0 = time.monotonic()
    facts = inspect_target(str(BIN / "python-hang"), env, depth="full", limits=limits)
    assert time.monotonic() - t0 < 1.5 + 3.0
    assert isinstance(facts.python_version, Unavailable) and facts.python_version.unavailable is Why.timeout
    assert isinstance(facts.live, TorchLive) and facts.live.timed_out and not facts.live.import_ok


# --------------------------------------------------------------------------- full depth
def test_full_reads_a_working_cuda_torch(tmp_path, env):
    py = make_fake_env(tmp_path, {"flash-attn": "2.7.4.post1"}, "2.11.0+cu130", "13.0")
    facts = _full(py, env)
    live = facts.live
    assert isinstance(live, TorchLive), live
    assert live.import_ok and live.error == "" and live.stage == "done"
    assert (live.version, live.cuda, live.cuda_available, live.device_count) == ("2.11.0+cu130", "13.0", True, 1)
    assert live.device_name == "NVIDIA GB10" and live.capability == (12, 1)
    assert live.arch_list == ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"]
    assert live.mem_get_info_bytes == (110866546688, 128452014080)
    assert live.total_memory_bytes == 128452014080
    assert (live.flash_sdp_enabled, live.mem_efficient_sdp_enabled, live.math_sdp_enabled) == (True, True, True)
    assert live.flash_attn_import is True
    assert any("(8.0) - (12.0)" in w for w in live.warnings)
    assert live.import_duration_s is not None and live.duration_s >= live.import_duration_s
    # the static half is there too
    assert isinstance(facts.torch, TorchStatic) and facts.distributions["flash-attn"] == "2.7.4.post1"


def test_full_with_cuda_unavailable_and_other_values(tmp_path, env):
    py = make_fake_env(tmp_path, {}, "2.9.0+cpu", None,
                       live={"cuda_available": False, "flash_sdp": False, "capability_warning": ""})
    live = _full(py, env).live
    assert live.import_ok and live.cuda is None and live.cuda_available is False
    assert live.device_count is None and live.capability is None and live.mem_get_info_bytes is None
    assert live.arch_list == [] and live.flash_sdp_enabled is False
    assert live.flash_attn_import is None  # not installed
    assert live.warnings == []


def test_full_flash_attn_that_fails_to_import(tmp_path, env):
    py = make_fake_env(tmp_path, {"flash-attn": "2.8.3"}, "2.11.0+cu130", "13.0", broken_imports=["flash_attn"])
    live = _full(py, env).live
    assert live.import_ok and live.flash_attn_import is False
    assert "ImportError" in live.flash_attn_error and "libcudart.so.12" in live.flash_attn_error


def test_full_segfault_on_import(tmp_path, env):
    py = make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0", live="segfault")
    t0 = time.monotonic()
    facts = _full(py, env)
    assert time.monotonic() - t0 < FAST.live_timeout_s
    live = facts.live
    assert live.import_ok is False and live.died_by_signal == 11 and not live.timed_out
    assert "SIGSEGV" in live.error and "import torch" in live.error and live.stage == "import torch"
    assert isinstance(facts.torch, TorchStatic)  # the static facts survive the crash


def test_full_hang_is_killed_at_the_timeout(tmp_path, env):
    py = make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0", live="hang")
    limits = Limits(quick_timeout_s=10.0, live_timeout_s=1.5, elf_max_files=10, elf_budget_s=1.0)
    t0 = time.monotonic()
    facts = _full(py, env, limits)
    elapsed = time.monotonic() - t0
    assert elapsed < 1.5 + 3.0, elapsed
    assert facts.live.timed_out and facts.live.import_ok is False
    assert "import torch" in facts.live.error and "1.5 s" in facts.live.error
    assert isinstance(facts.torch, TorchStatic)


def test_full_garbage_instead_of_a_result(tmp_path, env):
    live = _full(make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0", live="garbage"), env).live
    assert live.import_ok is False and live.died_by_signal is None and not live.timed_out
    assert "no result line" in live.error and "not json" in live.error


def test_full_ignores_stray_prints_from_torch(tmp_path, env):
    live = _full(make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0", live="noisy"), env).live
    assert live.import_ok and live.version == "2.11.0+cu130" and live.capability == (12, 1)


def test_full_import_error_is_reported_with_its_type(tmp_path, env):
    live = _full(make_fake_env(tmp_path, {}, "2.8.0+cu128", "12.8", live="raise"), env).live
    assert live.import_ok is False and live.stage == "import torch"
    assert live.error.startswith("ImportError: ") and "libcudart.so.12" in live.error


def test_full_on_a_real_interpreter_without_torch(env, tmp_path):
    # this very interpreter, run with -S (no site-packages): no torch even where the test venv has one
    py = tmp_path / "python-nosite"
    py.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    py.chmod(0o755)
    facts = inspect_target(str(py), env, depth="full", limits=FAST)
    assert facts.python == str(py)
    assert isinstance(facts.torch, Unavailable) and facts.torch.unavailable is Why.not_found
    assert facts.live.import_ok is False
    assert facts.live.error.startswith("ModuleNotFoundError") and "torch" in facts.live.error


def test_full_and_quick_run_concurrently(tmp_path, env, monkeypatch):
    """Full costs about one torch import: the static probe runs while the import is slow."""
    py = make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0", live="hang")
    real_quick = target_env.run_quick

    def slow_quick(*args, **kwargs):
        time.sleep(1.5)
        return real_quick(*args, **kwargs)

    monkeypatch.setattr(target_env, "run_quick", slow_quick)
    limits = Limits(quick_timeout_s=10.0, live_timeout_s=2.0, elf_max_files=10, elf_budget_s=1.0)
    t0 = time.monotonic()
    facts = _full(py, env, limits)
    # one after the other would take 1.5 + 2.0 s; overlapped it is ~2.0 s plus kill/join slack
    assert time.monotonic() - t0 < 3.0
    assert isinstance(facts.torch, TorchStatic) and facts.live.timed_out


# --------------------------------------------------------------------------- result mapping
def _res(stdout: str = "", error: str = "", sig: int | None = None) -> _run.RunResult:
    return _run.RunResult(("python",), error == "", -sig if sig else 0, stdout, "", error, 0.5, signal=sig)


def test_real_live_output_from_a_cuda_torch():
    live = target_env.live_from_result(_res(LIVE_STDOUT_H200), 45)
    assert live.import_ok and live.stage == "done" and live.duration_s == 0.5
    assert (live.version, live.cuda, live.device_name, live.capability) == ("2.11.0+cu130", "13.0", "NVIDIA H200", (9, 0))
    assert live.arch_list[-1] == "sm_120" and live.mem_get_info_bytes == (149557477376, 150109880320)
    assert live.total_memory_bytes == 150109880320 and live.flash_attn_import is None
    assert live.import_duration_s == 4.202


def test_live_result_that_does_not_validate_is_a_failure():
    live = target_env.live_from_result(_res(RESULT_MARKER + '{"import_ok": true, "capability": "twelve"}'), 5)
    assert live.import_ok is False and "does not validate" in live.error


def test_signal_after_import_keeps_import_ok_and_names_the_stage():
    out = f"{STAGE_MARKER}import torch\n{STAGE_MARKER}import flash_attn\n"
    live = target_env.live_from_result(_res(out, "signal", 11), 5)
    assert live.import_ok is True and live.died_by_signal == 11 and "import flash_attn" in live.error


def test_script_is_runnable_directly(env):
    res = _run.run([sys.executable, str(target_env.SCRIPT), "quick", "[]"], timeout=10, env=env)
    payload, _ = target_env.parse_result(res.stdout)
    assert payload is not None and payload["mode"] == "quick" and isinstance(payload["distributions"], dict)


def test_script_hides_its_own_folder_from_imports(monkeypatch):
    """Run as a file, the probes folder would come first on sys.path and shadow `gpu`, `memory`..."""
    here = str(target_env.SCRIPT.parent)
    monkeypatch.setattr(sys, "path", [here, "/elsewhere", here + os.sep])
    _target_script._drop_own_dir_from_path()
    assert sys.path == ["/elsewhere"]


# --------------------------------------------------------------------------- untrusted child output
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_QUICK_KEYS = ["mode", "python_version", "prefix", "base_prefix", "env_kind", "site_packages", "distributions",
               "extension_sources", "errors", "torch_dir", "torch_version_py", "torch_error"]
_LIVE_KEYS = [k for k in TorchLive.model_fields]


@given(st.dictionaries(st.sampled_from(_QUICK_KEYS), _json, max_size=12))
def test_any_quick_payload_gives_facts(payload):
    facts = target_env.facts_from_quick(payload, Limits(1.0, 1.0, elf_max_files=5, elf_budget_s=0.2))
    assert isinstance(facts, TargetEnvFacts)


@given(st.dictionaries(st.sampled_from(_LIVE_KEYS), _json, max_size=12))
def test_any_live_payload_gives_a_torch_live(payload):
    import json

    res = _res(RESULT_MARKER + json.dumps(payload))
    assert isinstance(target_env.live_from_result(res, 5), TorchLive)


def test_a_walk_that_finds_nothing_still_stops_at_the_deadline(tmp_path):
    for i in range(30):
        (tmp_path / f"d{i}" / "x").mkdir(parents=True)
    found, truncated = target_env.scan_extensions({"xformers": {"files": [], "roots": [str(tmp_path)]}}, 400, -1.0)
    assert (found, truncated) == ([], True)
    found, truncated = target_env.scan_extensions({"xformers": {"files": [], "roots": [str(tmp_path)]}}, 400, 5.0)
    assert (found, truncated) == ([], False)


def test_discrete_gpu_skips_cuda_mem_get_info_to_spare_a_context(tmp_path, env):
    """cudaMemGetInfo creates a CUDA context; it is G3 evidence only where memory is shared."""
    py = make_fake_env(tmp_path, {}, "2.11.0+cu130", "13.0",
                       live={"device_name": "NVIDIA H200", "capability": [9, 0], "capability_warning": ""})
    live = _full(py, env).live
    assert live.device_name == "NVIDIA H200" and live.mem_get_info_bytes is None
    assert live.total_memory_bytes is not None
