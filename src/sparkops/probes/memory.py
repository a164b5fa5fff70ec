"""Memory as the kernel sees it (G3): /proc/meminfo, pressure stall info, the cgroup limit.

On GB10 the CPU and GPU share one pool, so these files — not NVML, which answers NOT_SUPPORTED —
are the memory reading. Parsers are pure and never raise; the reads go through ``root`` so tests
can point them at recorded files.
"""

from __future__ import annotations

import re
from pathlib import Path

from sparkops.facts.model import CgroupMemFacts, MemoryFacts, PsiFacts
from sparkops.facts.reading import Unavailable, Why, missing
from sparkops.probes import fragmentation
from sparkops.probes.host import read_small, root_of, under_root

SECTION = "memory"

# Unitless meminfo lines (HugePages_Total/Free/Rsvd/Surp) are page COUNTS, not sizes: they are
# stored under "<name>_count" so nothing in ``meminfo_bytes`` reads as bytes by mistake.
COUNT_SUFFIX = "_count"
_UNITS = {"kb": 1024, "k": 1024, "mb": 1024**2, "gb": 1024**3, "b": 1}
_MEMINFO_LINE = re.compile(r"^\s*([A-Za-z0-9_()]+)\s*:\s*([0-9]+)\s*([A-Za-z]*)\s*$")
# cgroup v1 writes "no limit" as LONG_MAX rounded down to a page (9223372036854771712);
# anything this large is no limit on any real machine.
_V1_UNLIMITED = 1 << 62
_DIGITS = re.compile(r"[0-9]+")  # str.isdigit() also accepts "¹", which int() refuses


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as ``{name: bytes}`` (kB x 1024); unitless counts under ``name_count``."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _MEMINFO_LINE.match(line)
        if not m:
            continue
        name, value, unit = m.group(1), int(m.group(2)), m.group(3).lower()
        if not unit:
            out[name + COUNT_SUFFIX] = value
        elif unit in _UNITS:
            out[name] = value * _UNITS[unit]
    return out


def psi_rows(text: str) -> dict[str, dict[str, float]]:
    """/proc/pressure/memory's ``some``/``full`` lines as {line: {field: value}} (unreadable fields left out)."""
    rows: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] not in ("some", "full"):
            continue
        vals: dict[str, float] = {}
        for f in fields[1:]:
            k, _, v = f.partition("=")
            try:
                vals[k] = float(v)
            except ValueError:
                continue
        rows[fields[0]] = vals
    return rows


def parse_psi(text: str) -> PsiFacts | Unavailable:
    """/proc/pressure/memory: the ``some``/``full`` avg10/avg60 percentages."""
    rows = psi_rows(text)
    try:
        return PsiFacts(some_avg10=rows["some"]["avg10"], some_avg60=rows["some"]["avg60"],
                        full_avg10=rows["full"]["avg10"], full_avg60=rows["full"]["avg60"])
    except (KeyError, ValueError) as exc:
        return missing(Why.error, f"unparseable pressure file (missing {exc})")


def parse_proc_cgroup(text: str) -> list[tuple[str, list[str], str]]:
    """/proc/<pid>/cgroup lines as (hierarchy id, controllers, path)."""
    out: list[tuple[str, list[str], str]] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        out.append((parts[0], [c for c in parts[1].split(",") if c], parts[2]))
    return out


def parse_limit(text: str) -> int | None | Unavailable:
    """A cgroup memory limit file: bytes, ``None`` for no limit ("max", or v1's huge number)."""
    value = text.strip()
    if value == "max":
        return None
    if not _DIGITS.fullmatch(value):
        return missing(Why.error, f"unexpected limit value {value[:40]!r}")
    n = int(value)
    return None if n >= _V1_UNLIMITED else n


def _int_file(path: Path) -> int | Unavailable:
    text = read_small(path)
    if isinstance(text, Unavailable):
        return text
    value = text.strip()
    return int(value) if _DIGITS.fullmatch(value) else missing(Why.error, f"{path}: {value[:40]!r}")


def _own_dir(mount: Path, path: str) -> Path:
    """The process's cgroup directory under ``mount``; the mount itself when the path is not
    visible there (a container without a cgroup namespace shows the host path)."""
    candidate = mount / path.lstrip("/")
    try:
        return candidate if path.strip("/") and candidate.is_dir() else mount
    except OSError:
        return mount


def cgroup_memory(root: Path) -> CgroupMemFacts:
    """The memory limit and usage of this process's own cgroup (v2, or v1's memory controller)."""
    text = read_small(under_root(root, "/proc/self/cgroup"))
    if isinstance(text, Unavailable):
        return CgroupMemFacts(version=text, limit_bytes=text, usage_bytes=text)
    entries = parse_proc_cgroup(text)
    fs = under_root(root, "/sys/fs/cgroup")
    v1 = next((e for e in entries if "memory" in e[1]), None)
    if v1 is not None and (fs / "memory").is_dir():
        d = _own_dir(fs / "memory", v1[2])
        limit: int | None | Unavailable = missing(Why.not_found, "no v1 limit file")
        stat = read_small(d / "memory.stat")
        if isinstance(stat, str):  # hierarchical_memory_limit already folds in the ancestors
            m = re.search(r"^hierarchical_memory_limit\s+([0-9]+)", stat, re.M)
            if m:
                limit = parse_limit(m.group(1))
        if isinstance(limit, Unavailable):
            raw = read_small(d / "memory.limit_in_bytes")
            limit = parse_limit(raw) if isinstance(raw, str) else raw
        return CgroupMemFacts(version=1, limit_bytes=limit, usage_bytes=_int_file(d / "memory.usage_in_bytes"),
                              path=v1[2])
    v2 = next((e for e in entries if e[0] == "0" and not e[1]), None)
    if v2 is None or not (fs / "cgroup.controllers").exists():
        why = missing(Why.not_found, "no memory cgroup for this process")
        return CgroupMemFacts(version=why, limit_bytes=why, usage_bytes=why)
    d = _own_dir(fs, v2[2])
    # the effective v2 limit is the smallest memory.max from here up to the mount root
    limits: list[int] = []
    problem: Unavailable | None = None  # an unreadable/odd memory.max on the way up
    node = d
    while True:
        raw = read_small(node / "memory.max")
        val = parse_limit(raw) if isinstance(raw, str) else raw
        if isinstance(val, int):
            limits.append(val)
        elif isinstance(val, Unavailable) and val.unavailable != Why.not_found and problem is None:
            problem = val  # memory.max is absent at the root and where the controller is off: no limit
        if node == fs or fs not in node.parents:
            break
        node = node.parent
    limit_v2: int | None | Unavailable = min(limits) if limits else problem
    usage = _int_file(d / "memory.current")
    return CgroupMemFacts(version=2, limit_bytes=limit_v2, usage_bytes=usage, path=v2[2])


def gather(root: Path = Path("/")) -> MemoryFacts:
    """meminfo, PSI and the cgroup reading from ``root``."""
    text = read_small(under_root(root, "/proc/meminfo"))
    if isinstance(text, str):
        parsed = parse_meminfo(text)
        meminfo: dict[str, int] | Unavailable = parsed or missing(Why.error, "no meminfo lines parsed")
    else:
        meminfo = text
    psi_text = read_small(under_root(root, "/proc/pressure/memory"))
    psi = parse_psi(psi_text) if isinstance(psi_text, str) else psi_text
    try:
        cg = cgroup_memory(root)
    except OSError as exc:  # a racing cgroup removal; the rest of the section still stands
        err = missing(Why.error, f"cgroup: {exc}")
        cg = CgroupMemFacts(version=err, limit_bytes=err, usage_bytes=err)
    return MemoryFacts(meminfo_bytes=meminfo, psi=psi, cgroup=cg, fragmentation=fragmentation.gather(root))


def collect(opts) -> MemoryFacts:
    """The memory section for the runner."""
    return gather(root_of(opts.env))


def unavailable(why: Why, detail: str) -> MemoryFacts:
    m = missing(why, detail)
    return MemoryFacts(meminfo_bytes=m, psi=m, cgroup=CgroupMemFacts(version=m, limit_bytes=m, usage_bytes=m))
