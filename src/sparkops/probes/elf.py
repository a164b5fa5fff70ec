"""Which shared libraries an ELF file needs (DT_NEEDED): program headers read with ``struct``,
pyelftools for the files that path cannot read.

G1 evidence: an extension module that needs ``libcudart.so.12`` will not import on a CUDA-13-only
Spark, and pip never checks that. Reading the dynamic section is cheap (a few header reads, no
loading), works on any architecture's files and never runs the library's code.

``needed_libraries`` never raises: a non-ELF, truncated or hostile file gives ``[]``.

Why two readers: pyelftools parses every section header through ``construct``, about 25 ms per
large library (a cu130 torch has two dozen), which alone would break ``--quick``'s half-second
budget. The loader itself only needs PT_DYNAMIC and the string table it points to; reading those
with ``struct`` takes well under a millisecond. pyelftools stays as the fallback (and the
reference the tests compare against) for files without a usable PT_DYNAMIC.
"""

from __future__ import annotations

import os
import re
import struct
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

    PT_DYNAMIC is read first (fast, what the loader uses); pyelftools reads the rest.
    """
    try:
        with open(path, "rb") as f:
            if f.read(4) != ELF_MAGIC:
                return DynamicInfo()
            fast = _program_header_dynamic(f)
            if fast is not None:
                return fast
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


_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 10, 15, 29
_MAX_DYN_ENTRIES = 4096
_MAX_STR = 4096


def _program_header_dynamic(f) -> DynamicInfo | None:  # noqa: ANN001 - a binary file object
    """DT_NEEDED/RUNPATH through PT_DYNAMIC, as the loader reads them; None when this path cannot
    tell (no PT_DYNAMIC, odd layout): the caller then asks pyelftools."""
    f.seek(0)
    ident = f.read(64)
    if len(ident) < 52 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    is64, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
    if is64:
        phoff, = struct.unpack_from(end + "Q", ident, 0x20)
        phentsize, phnum = struct.unpack_from(end + "HH", ident, 0x36)
        ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
    else:
        phoff, = struct.unpack_from(end + "I", ident, 0x1C)
        phentsize, phnum = struct.unpack_from(end + "HH", ident, 0x2A)
        ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
    if phnum == 0 or phnum > 512 or phentsize < struct.calcsize(ph_fmt):
        return None
    f.seek(phoff)
    table = f.read(phentsize * phnum)
    if len(table) < phentsize * phnum:
        return None
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None  # (offset, filesz)
    for i in range(phnum):
        fields = struct.unpack_from(ph_fmt, table, i * phentsize)
        if is64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = fields[:5]
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return None
    entry = struct.calcsize(dyn_fmt)
    f.seek(dynamic[0])
    raw = f.read(min(dynamic[1], entry * _MAX_DYN_ENTRIES))
    needed_at: list[int] = []
    runpath_at: list[int] = []
    rpath_at: list[int] = []
    strtab: int | None = None
    for off in range(0, len(raw) - entry + 1, entry):
        tag, val = struct.unpack_from(dyn_fmt, raw, off)
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed_at.append(val)
        elif tag == _DT_STRTAB:
            strtab = val
        elif tag == _DT_RUNPATH:
            runpath_at.append(val)
        elif tag == _DT_RPATH:
            rpath_at.append(val)
    if strtab is None:
        return None
    base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + max(size, 1)), None)
    if base is None:
        return None

    def string(at: int) -> str:
        f.seek(base + at)
        chunk = f.read(_MAX_STR)
        nul = chunk.find(b"\0")
        if nul < 0:
            raise ValueError("unterminated string in DT_STRTAB")
        return chunk[:nul].decode("utf-8", errors="replace")

    try:
        needed = [string(v) for v in needed_at]
        paths = [p for v in (runpath_at or rpath_at) for p in string(v).split(":") if p]
    except ValueError:
        return None  # odd string table: let pyelftools try
    return DynamicInfo(needed, paths)


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


# --------------------------------------------------------------------------- CUDA fatbin targets (G7)
_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_SECTIONS = (b".nv_fatbin", b".nvFatBinSegment")
_FATBIN_KIND = {1: "compute", 2: "sm"}  # 1 = PTX, 2 = ELF (SASS)
_FATBIN_ARCH_SPECIFIC = 0x100000  # sm_121a: code that runs only on that exact architecture
_FATBIN_FAMILY_SPECIFIC = 0x200000  # sm_120f: family-portable arch features


def fatbin_targets(path: str | os.PathLike[str], max_entries: int = 4096) -> list[str]:
    """The GPU code targets embedded in an ELF file's ``.nv_fatbin`` section: ``sm_121a`` (SASS built
    for that exact architecture), ``sm_120`` (SASS), ``compute_120`` (PTX the driver JIT-compiles).

    Reads the section header table and then only the fatbin's entry headers, seeking over the code
    itself, so a 500 MB kernel library costs a few hundred small reads. The header layout was checked
    against nvcc 13.0 output (kind at 0, header size at 4, payload size at 8, arch at 28, flags at 40;
    flag 0x100000 marks an ``a`` target, 0x200000 an ``f`` one). Never raises: no section, a non-ELF
    or truncated file gives ``[]``."""
    try:
        with open(path, "rb") as f:
            section = _section_by_name(f, _FATBIN_SECTIONS)
            if section is None:
                return []
            start, size = section
            return sorted(_walk_fatbin(f, start, start + size, max_entries))
    except (OSError, struct.error, ValueError):
        return []


def _section_by_name(f, names: tuple[bytes, ...]) -> tuple[int, int] | None:  # noqa: ANN001
    """(offset, size) of the first section named in ``names``, from a 64-bit little-endian ELF."""
    head = f.read(64)
    if len(head) < 64 or head[:4] != ELF_MAGIC or head[4] != 2 or head[5] != 1:
        return None  # 64-bit little-endian only: aarch64 and x86-64, the platforms CUDA wheels ship for
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if not shoff or shentsize < 64 or shnum == 0 or shnum > 65535 or shstrndx >= shnum:
        return None
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    if len(table) < shentsize * shnum:
        return None
    str_off, str_size = struct.unpack_from("<QQ", table, shstrndx * shentsize + 0x18)
    f.seek(str_off)
    names_blob = f.read(min(str_size, 1 << 20))
    for i in range(shnum):
        name_at, = struct.unpack_from("<I", table, i * shentsize)
        end = names_blob.find(b"\0", name_at)
        if names_blob[name_at:end] in names:
            off, sz = struct.unpack_from("<QQ", table, i * shentsize + 0x18)
            return off, sz
    return None


def _walk_fatbin(f, start: int, end: int, max_entries: int) -> set[str]:  # noqa: ANN001
    targets: set[str] = set()
    pos, seen = start, 0
    while pos + 16 <= end and seen < max_entries:
        f.seek(pos)
        head = f.read(16)
        if len(head) < 16:
            break
        magic, _version, header_size, fat_size = struct.unpack("<IHHQ", head)
        if magic != _FATBIN_MAGIC or header_size < 16:
            aligned = (pos + 15) & ~15  # a container may be padded to the next 16 bytes
            if aligned != pos and aligned + 16 <= end:
                pos = aligned
                continue
            break
        entry, container_end = pos + header_size, min(pos + header_size + fat_size, end)
        while entry + 48 <= container_end and seen < max_entries:
            f.seek(entry)
            eh = f.read(48)
            if len(eh) < 48:
                break
            kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", eh, 0)
            arch, = struct.unpack_from("<I", eh, 28)
            flags, = struct.unpack_from("<Q", eh, 40)
            if entry_header < 48:
                break
            if kind in _FATBIN_KIND and 0 < arch < 1000:
                suffix = "a" if flags & _FATBIN_ARCH_SPECIFIC else "f" if flags & _FATBIN_FAMILY_SPECIFIC else ""
                targets.add(f"{_FATBIN_KIND[kind]}_{arch}{suffix}")
            seen += 1
            entry += entry_header + payload
        pos = max(container_end, pos + 16)
    return targets
