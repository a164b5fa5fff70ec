"""DT_NEEDED reading: real linker-made files, our test writer cross-checked with readelf, and
hostile input (non-ELF, truncated, corrupted) that must never raise."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakeenv import write_elf_so
from sparkops.probes import elf
from sparkops.probes.elf import (
    ELF_MAGIC,
    cuda_needs,
    dynamic_info,
    expand_origin,
    is_cuda_library,
    is_elf,
    needed_libraries,
    toolkit_major,
)

GCC = shutil.which("gcc")
READELF = shutil.which("readelf")


def readelf_needed(path: Path | str) -> list[str]:
    out = subprocess.run([READELF, "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


@pytest.fixture(scope="module")
def gcc_so(tmp_path_factory) -> Path:
    """A real shared object linked by gcc against stub libraries named like CUDA's."""
    if not GCC:
        pytest.skip("gcc not available")
    d = tmp_path_factory.mktemp("gcc")
    (d / "empty.c").write_text("int sparkops_probe_marker(void) { return 0; }\n")
    libs = ["libcudart.so.12", "libcublas.so.12", "libc10_cuda.so"]
    for soname in libs:
        subprocess.run([GCC, "-shared", "-fPIC", "-o", str(d / soname), str(d / "empty.c"),
                        f"-Wl,-soname,{soname}"], check=True)
    out = d / "ext_cuda.so"
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(out), str(d / "empty.c"), "-Wl,--no-as-needed",
                    f"-L{d}", *[f"-l:{s}" for s in libs]], check=True)
    return out


def test_gcc_built_extension(gcc_so):
    needed = needed_libraries(gcc_so)
    assert needed[:3] == ["libcudart.so.12", "libcublas.so.12", "libc10_cuda.so"]
    assert cuda_needs(needed) == ["libcudart.so.12", "libcublas.so.12", "libc10_cuda.so"]
    if READELF:
        assert needed == readelf_needed(gcc_so)


@pytest.mark.skipif(not READELF, reason="readelf not available")
def test_real_system_files_match_readelf():
    real = [os.path.realpath(sys.executable), *glob.glob(os.path.join(
        os.path.dirname(os.__file__), "lib-dynload", "*.so"))[:5]]
    checked = 0
    for path in real:
        expected = readelf_needed(path)
        assert needed_libraries(path) == expected, path
        checked += bool(expected)
    assert checked, "no real file with DT_NEEDED was found to compare against"


@pytest.mark.parametrize("sections", [True, False])
def test_writer_output_reads_back(tmp_path, sections):
    needs = ["libcudart.so.13", "libnvrtc.so.13", "libstdc++.so.6"]
    path = write_elf_so(tmp_path / "x.so", needs, soname="libx.so.1", sections=sections)
    assert needed_libraries(path) == needs  # sections=False: read through PT_DYNAMIC only
    if READELF:
        assert readelf_needed(path) == needs


@pytest.mark.parametrize("content", [b"", b"\x7fEL", b"#!/bin/sh\necho hi\n", b"\x7fELF", ELF_MAGIC + b"\0" * 60,
                                     b"PK\x03\x04zipfile"])
def test_non_elf_and_tiny_files_give_nothing(tmp_path, content):
    p = tmp_path / "f.so"
    p.write_bytes(content)
    assert needed_libraries(p) == []


def test_missing_path_and_directory_give_nothing(tmp_path):
    assert needed_libraries(tmp_path / "nope.so") == []
    assert needed_libraries(tmp_path) == []
    assert not is_elf(tmp_path / "nope.so")


def test_every_truncation_of_a_real_file_is_handled(tmp_path, gcc_so):
    data = gcc_so.read_bytes()
    full = needed_libraries(gcc_so)
    p = tmp_path / "t.so"
    for n in range(0, len(data), 7):
        p.write_bytes(data[:n])
        got = needed_libraries(p)
        assert isinstance(got, list) and all(isinstance(x, str) for x in got)
        assert got == [] or len(got) <= len(full)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=600), st.booleans())
def test_random_bytes_never_raise(tmp_path, blob, magic):
    p = tmp_path / "r.so"
    p.write_bytes((ELF_MAGIC + blob) if magic else blob)
    got = needed_libraries(p)
    assert isinstance(got, list) and all(isinstance(x, str) for x in got)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=8))
def test_corrupted_real_layout_never_raises(tmp_path, flips):
    data = bytearray(write_elf_so(tmp_path / "base.so", ["libcudart.so.12", "libc.so.6"]).read_bytes())
    for pos, val in flips:
        data[pos % len(data)] = val
    p = tmp_path / "c.so"
    p.write_bytes(bytes(data))
    assert isinstance(needed_libraries(p), list)


@pytest.mark.parametrize(
    "name",
    ["libcudart.so.12", "libcudart.so.13", "libcudart.so", "libcuda.so.1", "libcublas.so.12", "libcublasLt.so.13",
     "libnvrtc.so.13", "libnvrtc-builtins.so.13.0", "libcudnn.so.9", "libcudnn_ops.so.9", "libnccl.so.2",
     "libcusolver.so.11", "libnvJitLink.so.13", "libc10_cuda.so", "libtorch_cuda.so", "libcufft.so.12",
     "libcudart-d0da41ae.so.12", "libcublasLt-b6d14a74.so.12"],  # auditwheel-renamed copies
)
def test_cuda_libraries_are_recognised(name):
    assert is_cuda_library(name)


@pytest.mark.parametrize(
    "name",
    ["libc.so.6", "libstdc++.so.6", "libcudadebugger-notreal", "libtorch.so", "libc10.so", "libgomp.so.1",
     "libcudart_static.a", "cudart.so.12", "", "libffi.so.8", "libcuda_fake_x.so", "libcudart-xyz.so.12"],
)
def test_other_libraries_are_not(name):
    assert not is_cuda_library(name)


@given(st.text(max_size=200))
def test_classifier_never_raises(name):
    assert isinstance(is_cuda_library(name), bool)


def test_cuda_needs_keeps_order():
    assert cuda_needs(["libc.so.6", "libnccl.so.2", "libm.so.6", "libcudart.so.12"]) == ["libnccl.so.2",
                                                                                         "libcudart.so.12"]


@pytest.mark.parametrize("sections", [True, False])
def test_runpath_is_read_and_origin_expanded(tmp_path, sections):
    path = write_elf_so(tmp_path / "pkg" / "ext.so", ["libcudart.so.12"], sections=sections,
                        runpath="$ORIGIN/../nvidia/cuda_runtime/lib:${ORIGIN}:/opt/cuda/lib64")
    info = dynamic_info(path)
    assert info.needed == ["libcudart.so.12"]
    assert info.runpath == ["$ORIGIN/../nvidia/cuda_runtime/lib", "${ORIGIN}", "/opt/cuda/lib64"]
    assert expand_origin(info.runpath, path) == [str(tmp_path / "nvidia" / "cuda_runtime" / "lib"),
                                                 str(tmp_path / "pkg"), "/opt/cuda/lib64"]
    if READELF:
        out = subprocess.run([READELF, "-d", str(path)], capture_output=True, text=True, check=True).stdout
        assert "Library runpath: [$ORIGIN/../nvidia/cuda_runtime/lib:${ORIGIN}:/opt/cuda/lib64]" in out


def test_gcc_rpath_is_read(tmp_path, gcc_so):
    out = tmp_path / "rp.so"
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(out), "-x", "c", "/dev/null", "-Wl,--no-as-needed",
                    f"-L{gcc_so.parent}", "-l:libcudart.so.12", "-Wl,-rpath,$ORIGIN/lib", "-Wl,--enable-new-dtags"],
                   check=True)
    assert dynamic_info(out).runpath == ["$ORIGIN/lib"]


@pytest.mark.parametrize(
    ("soname", "major"),
    [("libcudart.so.12", 12), ("libcudart.so.13", 13), ("libcublasLt.so.13", 13), ("libnvrtc.so.12", 12),
     ("libnvrtc-builtins.so.13.0", 13), ("libnvJitLink.so.13", 13), ("libcudart.so.11.0", 11),
     ("libcudart-d0da41ae.so.12", 12), ("libcupti.so.13", 13),
     # needed by a real torch 2.11.0+cu130 wheel (read on the device machine): NOT CUDA 12
     ("libcusolver.so.12", None), ("libcusparse.so.12", None), ("libcufft.so.12", None), ("libcurand.so.10", None),
     ("libcudnn.so.9", None), ("libnccl.so.2", None), ("libcudart.so", None), ("libc10_cuda.so", None),
     ("libc.so.6", None)],
)
def test_toolkit_major_only_for_libraries_that_follow_the_toolkit(soname, major):
    assert toolkit_major(soname) == major


@given(st.text(max_size=100))
def test_toolkit_major_never_raises(soname):
    assert toolkit_major(soname) is None or toolkit_major(soname) >= 0


def _pyelftools_reference(path: str) -> list[str] | None:
    """DT_NEEDED as pyelftools reads it through the section table (None: not a dynamic ELF)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        if f.read(4) != ELF_MAGIC:
            return None
        f.seek(0)
        for section in ELFFile(f).iter_sections():
            if isinstance(section, DynamicSection):
                return [str(t.needed) for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    return None


def test_fast_program_header_reader_agrees_with_pyelftools_on_real_libraries():
    """The struct fast path must read exactly what pyelftools reads, on real system libraries."""
    paths = sorted(p for p in glob.glob("/usr/lib/*-linux-gnu/*.so*") + glob.glob("/lib/*-linux-gnu/*.so*")
                   if os.path.isfile(p))[:150]
    compared = 0
    for p in paths:
        ref = _pyelftools_reference(p)
        if ref is None:
            continue
        with open(p, "rb") as f:
            fast = elf._program_header_dynamic(f)
        assert fast is not None, p
        assert fast.needed == ref, p
        compared += 1
    if compared < 10:
        pytest.skip(f"only {compared} system libraries to compare here")


# --------------------------------------------------------------------------- fatbin targets (G7)
FATBIN = Path(__file__).parents[1] / "fixtures" / "raw" / "fatbin"


@pytest.mark.parametrize(("name", "targets"), [
    ("sm121a_sm120_ptx120.o", ["compute_120", "sm_120", "sm_121a"]),
    ("sm90a_sm120f.o", ["sm_120f", "sm_90a"]),
    ("sm90_sm100_sm120_compressed.o", ["sm_100", "sm_120", "sm_90"]),
])
def test_fatbin_targets_of_nvcc_output(name, targets):
    assert elf.fatbin_targets(FATBIN / name) == targets


def test_fatbin_targets_of_files_without_gpu_code(tmp_path):
    assert elf.fatbin_targets(FATBIN / "k.cu") == []
    assert elf.fatbin_targets(sys.executable) == []
    assert elf.fatbin_targets(tmp_path / "missing.so") == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=4096), st.integers(min_value=0, max_value=18000))
def test_fatbin_reader_never_raises_on_damaged_files(tmp_path_factory, junk, at):
    data = bytearray((FATBIN / "sm121a_sm120_ptx120.o").read_bytes())
    data[at:at + len(junk)] = junk
    path = tmp_path_factory.mktemp("fb") / "damaged.o"
    path.write_bytes(bytes(data))
    out = elf.fatbin_targets(path)
    assert all(t.split("_")[0] in ("sm", "compute") for t in out)
