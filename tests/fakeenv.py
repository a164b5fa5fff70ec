"""Build throw-away *target* Python environments for probe, check and CLI tests.

``make_fake_env`` makes a real virtual environment (a ``pyvenv.cfg`` plus a ``bin/python``
symlink to the interpreter running the tests: exactly what ``python -m venv --without-pip``
makes, in milliseconds) and fills its site-packages with what a test needs:

* one ``<name>-<version>.dist-info`` (METADATA, RECORD) per distribution, plus an importable
  package ``<name with - as _>/__init__.py`` holding ``__version__``;
* ``torch`` (when ``torch_version`` is given): ``torch/version.py`` written like the real file
  (``cuda: Optional[str] = '13.0'``) and a fake ``torch/__init__.py`` whose behaviour on import
  is chosen by ``live`` (see below);
* extension modules: real little-endian ELF64 shared objects whose dynamic section lists the
  given DT_NEEDED names (``readelf -d`` reads them as a linker-made file; no compiler needed).

The interpreter sees exactly that site-packages (and its stdlib): ``importlib.metadata`` lists
only these distributions, ``sys.prefix`` is the env folder, ``sys.base_prefix`` is the real
Python's, so the probe reports a venv (or ``uv`` with ``kind="uv"``).

``live`` decides what ``import torch`` does (used by the full-depth probe):

* ``None`` — a CUDA torch on a GB10 with the defaults in ``LIVE_DEFAULTS``: cuda available,
  capability (12, 1), arch list up to sm_120 (verbatim from a real torch 2.11.0+cu130 on GB10),
  the "(8.0) - (12.0)" capability warning, mem_get_info, SDP flags.
* a ``dict`` — the same, with these keys of ``LIVE_DEFAULTS`` overridden (e.g.
  ``{"cuda_available": False}`` or ``{"capability": [9, 0], "device_name": "NVIDIA H100"}``).
* ``"segfault"`` — the child kills itself with SIGSEGV during ``import torch``.
* ``"hang"`` — ``import torch`` sleeps forever (the probe must kill it at its timeout).
* ``"garbage"`` — ``import torch`` prints junk and exits 0 before any result is printed.
* ``"noisy"`` — prints junk (including JSON-looking lines) and then works as ``None``.
* ``"raise"`` — ``import torch`` raises the ImportError a CUDA-12 wheel gives on CUDA 13.

Examples::

    py = make_fake_env(tmp_path, {"torchao": "0.13.0", "peft": "0.19.1"}, "2.9.0+cu130", "13.0")
    py = make_fake_env(tmp_path, {}, "2.8.0+cu128", "12.8")                       # a cu128 torch
    py = make_fake_env(tmp_path, {"flash-attn": "2.8.3"}, "2.11.0+cu130", "13.0",
                       extensions={"flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so":
                                   ["libcudart.so.12", "libc10_cuda.so", "libc.so.6"]})

Pass the returned path as ``--python`` / ``CollectOptions(python=...)``; give the probe an env
built with ``clean_env()`` so the outer PYTHONPATH/VIRTUAL_ENV do not leak in.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# Real GB10 values where recorded (gb10-readings.md §5.1, §5.2); mem_get_info free is made up
# (no raw tuple was ever published) but consistent with total.
LIVE_DEFAULTS: dict[str, object] = {
    "cuda_available": True,
    "device_count": 1,
    "device_name": "NVIDIA GB10",
    "capability": [12, 1],
    "arch_list": ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120"],
    "total_memory": 128452014080,
    "mem_get_info": [110866546688, 128452014080],
    "flash_sdp": True,
    "mem_efficient_sdp": True,
    "math_sdp": True,
    "capability_warning": (
        "Found GPU0 NVIDIA GB10 which is of cuda capability 12.1. Minimum and Maximum cuda "
        "capability supported by this version of PyTorch is (8.0) - (12.0)"
    ),
}
CUDA12_IMPORT_ERROR = "libcudart.so.12: cannot open shared object file: No such file or directory"
BEHAVIOURS = ("segfault", "hang", "garbage", "noisy", "raise")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def import_name(dist: str) -> str:
    return canonical(dist).replace("-", "_")


def base_python() -> str:
    """The real interpreter behind the one running the tests (a venv's python is a symlink)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without the variables that would point a child at another environment."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "CONDA_PREFIX",
            "PYTHONSAFEPATH", "PYTHONNOUSERSITE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------- ELF writer
def write_elf_so(path: Path, needed: Iterable[str], soname: str | None = None, *, sections: bool = True,
                 runpath: str | None = None) -> Path:
    """A minimal valid ELF64 LE shared object whose dynamic section lists ``needed`` (DT_NEEDED),
    and ``runpath`` (DT_RUNPATH, e.g. ``"$ORIGIN/../nvidia/cuda_runtime/lib"``) when given.

    One PT_LOAD maps the file at address 0 (so addresses equal offsets) and PT_DYNAMIC points at
    ``.dynamic``; with ``sections=False`` the section header table is left out, as in a stripped
    file read through program headers only.
    """
    needed = list(needed)
    dynstr = b"\0"
    offsets = []
    extra = [x for x in (soname, runpath) if x]
    for name in [*needed, *extra]:
        offsets.append(len(dynstr))
        dynstr += name.encode() + b"\0"
    ehsize, phentsize, phnum, shentsize = 64, 56, 2, 64
    dynstr_off = ehsize + phentsize * phnum
    dyn_off = _align(dynstr_off + len(dynstr), 8)
    entries = [(1, off) for off in offsets[: len(needed)]]  # DT_NEEDED
    if soname:
        entries.append((14, offsets[len(needed)]))  # DT_SONAME
    if runpath:
        entries.append((29, offsets[-1]))  # DT_RUNPATH
    entries += [(5, dynstr_off), (10, len(dynstr)), (11, 24), (0, 0)]  # STRTAB, STRSZ, SYMENT, NULL
    dynamic = b"".join(struct.pack("<qQ", tag, val) for tag, val in entries)
    shstr = b"\0.dynstr\0.dynamic\0.shstrtab\0"
    shstr_off = dyn_off + len(dynamic)
    sh_off = _align(shstr_off + len(shstr), 8) if sections else 0
    shnum = 4 if sections else 0
    end = sh_off + shentsize * shnum if sections else shstr_off + len(shstr)
    machine = 183 if os.uname().machine in ("aarch64", "arm64") else 62  # EM_AARCH64 / EM_X86_64
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, ehsize, sh_off, 0, ehsize, phentsize,
                               phnum, shentsize if sections else 0, shnum, 3 if sections else 0)
    ph_load = struct.pack("<IIQQQQQQ", 1, 4 | 2, 0, 0, 0, end, end, 0x1000)  # PT_LOAD, R|W
    ph_dyn = struct.pack("<IIQQQQQQ", 2, 4 | 2, dyn_off, dyn_off, dyn_off, len(dynamic), len(dynamic), 8)
    buf = bytearray(ehdr + ph_load + ph_dyn)
    buf += dynstr
    buf += b"\0" * (dyn_off - len(buf))
    buf += dynamic + shstr
    if sections:
        buf += b"\0" * (sh_off - len(buf))
        # name, type, flags, addr, offset, size, link, info, addralign, entsize
        shdrs = [
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
            (1, 3, 2, dynstr_off, dynstr_off, len(dynstr), 0, 0, 1, 0),  # .dynstr SHT_STRTAB A
            (9, 6, 3, dyn_off, dyn_off, len(dynamic), 1, 0, 8, 16),  # .dynamic SHT_DYNAMIC WA
            (18, 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0),  # .shstrtab
        ]
        for sh in shdrs:
            buf += struct.pack("<IIQQQQIIQQ", *sh)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(buf))
    return path


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


# --------------------------------------------------------------------------- fake torch
# The layout of a real torch 2.11.0+cu130 wheel's torch/version.py.
_TORCH_VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = {version!r}
debug = False
cuda: Optional[str] = {cuda!r}
git_version = {git!r}
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""

_TORCH_INIT = '''"""Fake torch written by tests/fakeenv.py (behaviour: {behaviour})."""
import json as _json
import os as _os
import sys as _sys
import time as _time
import types as _types
import warnings as _warnings

_BEHAVIOUR = {behaviour!r}
_V = _json.loads({values!r})

if _BEHAVIOUR == "segfault":
    import signal as _signal
    _os.kill(_os.getpid(), _signal.SIGSEGV)
    _time.sleep(5)
if _BEHAVIOUR == "hang":
    _time.sleep(1e6)
if _BEHAVIOUR == "garbage":
    print("Traceback? no: \\x00\\x01 {{{{not json at all")
    _sys.stdout.flush()
    _os._exit(0)
if _BEHAVIOUR == "raise":
    raise ImportError({import_error!r})
if _BEHAVIOUR == "noisy":
    print('{{"mode": "live", "import_ok": true, "version": "fake-noise"}}')
    print("NCCL INFO noise", end="")
    _sys.stdout.flush()

from torch import version  # noqa: E402
from torch.version import __version__  # noqa: E402


class _Props:
    def __init__(self, total):
        self.total_memory = total
        self.name = _V["device_name"]
        self.major, self.minor = _V["capability"]
        self.multi_processor_count = 48


def _need_cuda():
    if not _V["cuda_available"]:
        raise RuntimeError("Found no NVIDIA driver on your system.")


def _get_device_capability(i=0):
    _need_cuda()
    if _V.get("capability_warning"):
        _warnings.warn(_V["capability_warning"], UserWarning)
    return tuple(_V["capability"])


def _mem_get_info(i=0):
    _need_cuda()
    return tuple(_V["mem_get_info"])


def _get_device_properties(i=0):
    _need_cuda()
    return _Props(_V["total_memory"])


def _get_device_name(i=0):
    _need_cuda()
    return _V["device_name"]


cuda = _types.SimpleNamespace(
    is_available=lambda: bool(_V["cuda_available"]),
    device_count=lambda: int(_V["device_count"]) if _V["cuda_available"] else 0,
    get_device_name=_get_device_name,
    get_device_capability=_get_device_capability,
    get_arch_list=lambda: list(_V["arch_list"]) if version.cuda else [],
    mem_get_info=_mem_get_info,
    get_device_properties=_get_device_properties,
)
backends = _types.SimpleNamespace(cuda=_types.SimpleNamespace(
    flash_sdp_enabled=lambda: _V["flash_sdp"],
    mem_efficient_sdp_enabled=lambda: _V["mem_efficient_sdp"],
    math_sdp_enabled=lambda: _V["math_sdp"],
))
'''


# --------------------------------------------------------------------------- the environment
def make_fake_env(
    tmp_path: Path,
    dists: dict[str, str],
    torch_version: str | None,
    torch_cuda: str | None,
    extensions: dict[str, list[str]] | None = None,
    live: dict | str | None = None,
    *,
    kind: str = "venv",
    broken_imports: Iterable[str] = (),
    runpaths: Mapping[str, str] | None = None,
    libraries: Iterable[str] = (),
    torch_git_version: str = "0123456789abcdef0123456789abcdef01234567",
    name: str = "fakeenv",
) -> Path:
    """Create ``tmp_path/name`` as a virtual environment; return its ``bin/python``.

    ``dists``: distribution name (any spelling; METADATA keeps it as given) -> version. Do not
    list torch here: ``torch_version`` (None = torch not installed) adds it, with ``torch_cuda``
    written as ``torch.version.cuda`` (None = CPU build).
    ``extensions``: path relative to site-packages -> DT_NEEDED sonames. The file is recorded in
    the RECORD of the distribution whose import name prefixes it (``flash_attn_2_cuda....so`` ->
    flash-attn, ``torch/lib/libtorch_cuda.so`` -> torch); ValueError when none does.
    ``live``: what ``import torch`` does; see the module docstring.
    ``kind``: "venv" or "uv" (pyvenv.cfg then carries ``uv = ...`` as uv writes it).
    ``broken_imports``: import names whose ``__init__`` raises ImportError (e.g. "flash_attn").
    ``runpaths``: extension relpath -> DT_RUNPATH string (``"$ORIGIN/nvidia/cuda_runtime/lib"``).
    ``libraries``: relpaths of plain shared objects to drop in, owned by no distribution, e.g.
    ``"nvidia/cuda_runtime/lib/libcudart.so.12"`` (what an nvidia-*-cu12 wheel provides).
    """
    extensions = dict(extensions or {})
    if live is not None and not isinstance(live, dict) and live not in BEHAVIOURS:
        raise ValueError(f"live must be None, a dict or one of {BEHAVIOURS}, not {live!r}")
    if kind not in ("venv", "uv"):
        raise ValueError("kind must be 'venv' or 'uv'")
    root = tmp_path / name
    real = base_python()
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = root / "lib" / f"python{ver}" / "site-packages"
    site.mkdir(parents=True)
    (root / "bin").mkdir()
    cfg = [f"home = {os.path.dirname(real)}", "include-system-site-packages = false", f"version = {ver}"]
    if kind == "uv":
        cfg += ["implementation = CPython", "uv = 0.8.17", "version_info = " + ".".join(map(str, sys.version_info[:3]))]
    (root / "pyvenv.cfg").write_text("\n".join(cfg) + "\n")
    py = root / "bin" / "python"
    py.symlink_to(real)
    (root / "bin" / "python3").symlink_to("python")

    all_dists = dict(dists)
    if torch_version is not None:
        all_dists["torch"] = torch_version
    records: dict[str, list[str]] = {canonical(d): [] for d in all_dists}
    broken = set(broken_imports)

    for dist, version in dists.items():
        mod = import_name(dist)
        body = f"__version__ = {version!r}\n"
        if mod in broken:
            body = f"raise ImportError({CUDA12_IMPORT_ERROR!r})\n"
        records[canonical(dist)].append(_write(site, f"{mod}/__init__.py", body))

    if torch_version is not None:
        records["torch"].append(_write(site, "torch/version.py", _TORCH_VERSION_PY.format(
            version=torch_version, cuda=torch_cuda, git=torch_git_version)))
        values = dict(LIVE_DEFAULTS)
        if isinstance(live, dict):
            unknown = set(live) - set(values)
            if unknown:
                raise ValueError(f"unknown live keys {sorted(unknown)}; known: {sorted(values)}")
            values.update(live)
        behaviour = live if isinstance(live, str) else "cuda"
        records["torch"].append(_write(site, "torch/__init__.py", _TORCH_INIT.format(
            behaviour=behaviour, values=json.dumps(values), import_error=CUDA12_IMPORT_ERROR)))

    owners = sorted(((import_name(d), canonical(d)) for d in all_dists), key=lambda t: -len(t[0]))
    for rel, needs in extensions.items():
        first = rel.split("/", 1)[0]
        owner = next((c for mod, c in owners if first == mod or first.startswith(mod)), None)
        if owner is None:
            raise ValueError(f"no distribution in {sorted(all_dists)} owns extension {rel!r}")
        write_elf_so(site / rel, needs, runpath=(runpaths or {}).get(rel))
        records[owner].append(rel)
    for rel in libraries:
        write_elf_so(site / rel, ["libc.so.6"], soname=rel.rsplit("/", 1)[-1])

    for dist, version in all_dists.items():
        info = f"{import_name(dist)}-{version}.dist-info"
        meta = _write(site, f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\n")
        inst = _write(site, f"{info}/INSTALLER", "pip\n")
        lines = [_record_line(site, p) for p in [*records[canonical(dist)], meta, inst]]
        (site / info / "RECORD").write_text("\n".join([*lines, f"{info}/RECORD,,"]) + "\n")
    return py


def _write(site: Path, rel: str, text: str) -> str:
    p = site / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return rel


def _record_line(site: Path, rel: str) -> str:
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def site_packages(python: Path) -> Path:
    """The site-packages folder of an env made by ``make_fake_env``."""
    return next((python.parent.parent / "lib").glob("python*/site-packages"))
