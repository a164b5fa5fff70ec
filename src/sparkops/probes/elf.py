"""Which shared libraries an ELF file needs (DT_NEEDED), read with pyelftools.

G1 evidence: an extension module that needs ``libcudart.so.12`` will not import on a CUDA-13-only
Spark, and pip never checks that. Reading the dynamic section is cheap (a few header reads, no
loading), works on any architecture's files and never runs the library's code.

``needed_libraries`` never raises: a non-ELF, truncated or hostile file gives ``[]``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyelftools is imported on first use: a --quick run without extensions never pays for it
    from elftools.elf.dynamic import DynamicSection, DynamicSegment
    from elftools.elf.elffile import ELFFile

ELF_MAGIC = b"\x7fELF"

# Library stems (the name before ".so") that tie a file to a CUDA major version.
_CUDA_STEMS = frozenset({
    "libcuda", "libcudart", "libcublas", "libcublasLt", "libnvrtc", "libnvrtc-builtins",
    "libcusparse", "libcusparseLt", "libcufft", "libcufftw", "libcurand", "libcusolver",
    "libcusolverMg", "libnvJitLink", "libnvToolsExt", "libnvtx3interop", "libcupti", "libcufile",
    "libnvidia-ml", "libc10_cuda", "libtorch_cuda", "libtorch_cuda_linalg", "libcaffe2_nvrtc",
})
_CUDA_STEM_PREFIXES = ("libcudnn", "libnccl", "libnvshmem", "libcutensor")
_STEM = re.compile(r"^(?P<stem>[^/]+?)\.so(?:\.|$)")
_AUDITWHEEL_HASH = re.compile(r"-[0-9a-f]{8}$")  # libcudart-d0da41ae.so.12 in a repaired wheel


def is_cuda_library(soname: str) -> bool:
    """True for a soname from the CUDA toolkit/driver family (``libcudart.so.12``, ``libcudnn_ops.so.9``)."""
    m = _STEM.match(soname)
    if not m:
        return False
    stem = _AUDITWHEEL_HASH.sub("", m.group("stem"))
    return stem in _CUDA_STEMS or stem.startswith(_CUDA_STEM_PREFIXES)


# Libraries whose soname major IS the CUDA toolkit major (libcudart.so.12 = CUDA 12). The others
# version on their own: a cu130 torch wheel needs libcusolver.so.12, libcusparse.so.12,
# libcufft.so.12 and libcurand.so.10 (read on a real torch 2.11.0+cu130 install), so their
# suffix says nothing about CUDA 12 vs 13.
_TOOLKIT_STEMS = frozenset({
    "libcudart", "libcublas", "libcublasLt", "libnvblas", "libnvrtc", "libnvrtc-builtins", "libnvJitLink",
    "libcupti",
})
_SONAME_MAJOR = re.compile(r"^(?P<stem>[^/]+?)\.so\.(?P<major>\d+)(?:\.|$)")


def toolkit_major(soname: str) -> int | None:
    """The CUDA toolkit major a soname pins (``libcudart.so.12`` -> 12), or None when its suffix
    does not follow the toolkit (``libcufft.so.12`` on CUDA 13) or it has no version."""
    m = _SONAME_MAJOR.match(soname)
    if not m or _AUDITWHEEL_HASH.sub("", m.group("stem")) not in _TOOLKIT_STEMS:
        return None
    return int(m.group("major"))


def cuda_needs(needed: Iterable[str]) -> list[str]:
    """Keep only the CUDA-family entries of a DT_NEEDED list, in order."""
    return [n for n in needed if is_cuda_library(n)]


def is_elf(path: str | os.PathLike[str]) -> bool:
    """Cheap magic-number test, so the scanner skips scripts and data files without parsing."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class DynamicInfo:
    """What the loader reads from a file's dynamic section."""

    needed: list[str] = field(default_factory=list)  # DT_NEEDED, in order
    runpath: list[str] = field(default_factory=list)  # DT_RUNPATH, else DT_RPATH, split on ':'


def needed_libraries(path: str | os.PathLike[str]) -> list[str]:
    """The DT_NEEDED entries of an ELF file, in file order; ``[]`` when it cannot be read as ELF."""
    return dynamic_info(path).needed


def dynamic_info(path: str | os.PathLike[str]) -> DynamicInfo:
    """DT_NEEDED and the library search path of an ELF file; empty when it cannot be read as ELF.

    The section table is tried first; files stripped of it are read through PT_DYNAMIC.
    """
    try:
        with open(path, "rb") as f:
            if f.read(4) != ELF_MAGIC:
                return DynamicInfo()
            f.seek(0)
            from elftools.elf.elffile import ELFFile

            elf = ELFFile(f)
            for table in _dynamic_tables(elf):
                needed: list[str] = []
                runpath: list[str] = []
                rpath: list[str] = []
                for tag in table.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(str(tag.needed))
                    elif kind == "DT_RUNPATH":
                        runpath.extend(p for p in str(tag.runpath).split(":") if p)
                    elif kind == "DT_RPATH":
                        rpath.extend(p for p in str(tag.rpath).split(":") if p)
                if needed or runpath or rpath:
                    return DynamicInfo(needed, runpath or rpath)  # RUNPATH present: RPATH is ignored
    # pyelftools raises ELFError, but truncated or corrupt input also surfaces as struct.error,
    # ValueError, KeyError, IndexError, UnicodeDecodeError, AssertionError...: a hostile file must
    # only ever cost us its own answer.
    except Exception:
        return DynamicInfo()
    return DynamicInfo()


def expand_origin(runpath: Iterable[str], file: str | os.PathLike[str]) -> list[str]:
    """Search-path entries with ``$ORIGIN`` / ``${ORIGIN}`` replaced by the file's folder."""
    origin = os.path.dirname(os.path.abspath(file))
    return [os.path.normpath(p.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)) for p in runpath]


def _dynamic_tables(elf: ELFFile) -> Iterable[DynamicSection | DynamicSegment]:
    from elftools.elf.dynamic import DynamicSection, DynamicSegment

    found = False
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            found = True
            yield section
    if not found:
        for segment in elf.iter_segments():
            if isinstance(segment, DynamicSegment):
                yield segment
