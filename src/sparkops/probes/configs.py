"""Tensor-parallel and multi-node settings in the workload's files (G10).

Walks the given paths within the limits of ``thresholds.g10`` (file count, file size, depth,
time), parses YAML/JSON/TOML properly and searches launch scripts, compose files, Dockerfiles,
``.env``, Makefiles, Python and Markdown by pattern. What could not be read is reported, never
taken as "no tensor parallelism"; limits that cut the scan short set ``truncated`` and a note.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkops.facts.model import ConfigHit, ConfigScanFacts
from sparkops.facts.reading import Why
from sparkops.knowledge import load as load_kb

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - 3.10 falls back to the pattern scan
    _toml = None  # type: ignore[assignment]

SECTION = "configs"

# Structured keys (normalised: lower case, "-" -> "_") and what they mean.
TP_KEYS = {"tensor_parallel_size", "tensor_model_parallel_size", "tp_size", "tp", "tensor_parallel",
           "autotp_size", "num_shard"}
NODE_KEYS = {"num_machines", "nnodes", "num_nodes", "nodes"}
WORLD_KEYS = {"world_size"}

_STRUCTURED = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
_TEXT_SUFFIXES = {".sh", ".bash", ".zsh", ".env", ".py", ".md", ".ipynb", ".cfg", ".ini", ".conf",
                  ".slurm", ".sbatch", ".sub", ".mk", ".dockerfile", ".txt"}
_TEXT_NAMES = {"dockerfile", "containerfile", "makefile", "gnumakefile", "justfile", "procfile", "hostfile"}

_SEP = r"(?:[ \t]+|[ \t]*\\\r?\n[ \t]*|=)"  # a flag's value after spaces, "=" or a line continuation
_NUM = r"[\"']?([0-9]+(?::[0-9]+)?)\b"  # torchrun accepts --nnodes=1:4 (elastic range)
_PATTERNS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    # (pattern with the value in the last group, canonical key, kind)
    (re.compile(r"(?<![\w-])--tensor[-_]parallel[-_]size" + _SEP + _NUM), "tensor_parallel_size",
     "tensor_parallel"),
    (re.compile(r"(?<![\w-])--tensor[-_]model[-_]parallel[-_]size" + _SEP + _NUM), "tensor_model_parallel_size",
     "tensor_parallel"),
    (re.compile(r"(?<![\w-])(?:--tp[-_]size|--tp|-tp)" + _SEP + _NUM), "tp_size", "tensor_parallel"),
    (re.compile(r"(?<![\w-])--num[-_]shard" + _SEP + _NUM), "num_shard", "tensor_parallel"),
    (re.compile(r"(?<![\w.\-])[\"']?(tensor[-_]parallel[-_]size|tensor[-_]model[-_]parallel[-_]size|tp[-_]size)"
                r"[\"']?\s*[:=]\s*" + _NUM), "", "tensor_parallel"),
    (re.compile(r"(?<![\w-])--nnodes" + _SEP + _NUM), "nnodes", "nodes"),
    (re.compile(r"(?<![\w-])--num[-_]machines" + _SEP + _NUM), "num_machines", "nodes"),
    (re.compile(r"(?<![\w-])--num[-_]nodes" + _SEP + _NUM), "num_nodes", "nodes"),
    (re.compile(r"(?<![\w-])--nodes" + _SEP + _NUM), "nodes", "nodes"),  # #SBATCH --nodes=2
    (re.compile(r"(?<![\w.\-])[\"']?(num[-_]machines|nnodes|num[-_]nodes)[\"']?\s*[:=]\s*" + _NUM), "", "nodes"),
    (re.compile(r"(?<![\w-])--world[-_]size" + _SEP + _NUM), "world_size", "world"),
    (re.compile(r"(?<![\w])WORLD_SIZE[\"']?\s*[:=]\s*" + _NUM), "WORLD_SIZE", "world"),
)
_MAX_UNREADABLE = 100
_HOSTFILE_LINE = re.compile(r"^\s*[A-Za-z0-9_.\-]+\s+slots\s*=\s*[0-9]+\s*$", re.M)


@dataclass
class Limits:
    """How far the scan may go (``thresholds.g10``)."""

    max_files: int = 2000
    max_file_bytes: int = 1 << 20
    max_depth: int = 8
    time_budget_s: float = 2.0
    ignore_dirs: frozenset[str] = frozenset()

    @classmethod
    def from_kb(cls) -> Limits:
        t = load_kb().t
        return cls(int(t("g10.max_files")), int(t("g10.max_file_bytes")), int(t("g10.max_depth")),
                   float(t("g10.time_budget_s")), frozenset(t("g10.ignore_dirs")))


@dataclass
class _Scan:
    limits: Limits
    deadline: float
    facts: ConfigScanFacts = field(default_factory=ConfigScanFacts)
    dropped: int = 0  # unreadable paths beyond _MAX_UNREADABLE

    def note(self, text: str) -> None:
        if text not in self.facts.notes and len(self.facts.notes) < 20:
            self.facts.notes.append(text)

    def unreadable(self, path: str | Path) -> None:
        """Record a path that could not be read (bounded: a scan of a foreign tree can hit many)."""
        f = self.facts
        if len(f.unreadable) < _MAX_UNREADABLE:
            f.unreadable.append(str(path))
        else:
            self.dropped += 1

    def out_of_budget(self) -> bool:
        f = self.facts
        if f.files_read + f.files_skipped >= self.limits.max_files:
            f.truncated = True
            self.note(f"stopped at max_files={self.limits.max_files}")
            return True
        if time.monotonic() > self.deadline:
            f.truncated = True
            self.note(f"stopped at the {self.limits.time_budget_s:g} s time budget")
            return True
        return False


# --------------------------------------------------------------------------- pure parts
def file_kind(path: Path) -> str | None:
    """"yaml"/"json"/"toml"/"text" for a file worth reading, ``None`` otherwise."""
    name = path.name.lower()
    suffix = path.suffix.lower()
    if suffix in _STRUCTURED:
        return _STRUCTURED[suffix]
    if suffix in _TEXT_SUFFIXES or name in _TEXT_NAMES or name.startswith((".env", "dockerfile", "containerfile",
                                                                              "makefile", "docker-compose")):
        return "text"
    if name.endswith("hostfile"):
        return "text"
    return None


def _int_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if value >= 0 else None  # -1 means "auto" in some launchers, not a size
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
        return value.strip()
    return None


def walk_structured(data: Any, depth: int = 0) -> Iterator[tuple[str, str, str]]:
    """(key, value, kind) for every TP / node / world key with an integer value, at any depth."""
    if depth > 64:
        return
    if isinstance(data, Mapping):
        for k, v in data.items():
            key = str(k).strip().lower().replace("-", "_")
            value = _int_value(v)
            if value is not None:
                if key in TP_KEYS:
                    yield str(k), value, "tensor_parallel"
                elif key in NODE_KEYS:
                    yield str(k), value, "nodes"
                elif key in WORLD_KEYS:
                    yield str(k), value, "world"
            elif isinstance(v, (Mapping, list, tuple)):
                yield from walk_structured(v, depth + 1)
    elif isinstance(data, (list, tuple)):
        for item in data:
            yield from walk_structured(item, depth + 1)


def parse_structured(text: str, kind: str) -> list[Any] | None:
    """The documents in a YAML (multi-doc) / JSON / TOML text, or ``None`` when it does not parse."""
    try:
        if kind == "yaml":
            return [d for d in yaml.safe_load_all(text) if d is not None]
        if kind == "json":
            return [json.loads(text)]
        if kind == "toml" and _toml is not None:
            return [_toml.loads(text)]
    except Exception:  # any parser error: the pattern scan still runs over the text
        return None
    return None


def find_line(lines: list[str], key: str, value: str, used: set[int]) -> int:
    """1-based line of ``key`` (with ``value`` when possible) not yet claimed; 0 when not found."""
    k = re.escape(key)
    exact = re.compile(r"(?<![\w-])[\"']?" + k + r"[\"']?\s*[:=]\s*[\"']?" + re.escape(value) + r"\b")
    loose = re.compile(r"(?<![\w-])[\"']?" + k + r"[\"']?\s*[:=]")
    for rx in (exact, loose):
        for i, line in enumerate(lines, 1):
            if i not in used and rx.search(line):
                used.add(i)
                return i
    return 0


def scan_text(text: str) -> list[tuple[int, str, str, str]]:
    """(line, key, value, kind) for every flag/assignment pattern in free text."""
    hits: list[tuple[int, str, str, str]] = []
    for rx, key, kind in _PATTERNS:
        for m in rx.finditer(text):
            name = key or m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            hits.append((line, name, m.group(m.lastindex or 1), kind))
    return hits


def hostfile_hosts(text: str) -> int:
    """Hosts in a DeepSpeed hostfile (``host slots=N`` lines)."""
    return len(_HOSTFILE_LINE.findall(text))


def hits_in_file(path: Path, text: str, kind: str) -> tuple[list[ConfigHit], bool]:
    """All hits in one file's text, and whether a structured file failed to parse."""
    found: dict[tuple[int, str, str], ConfigHit] = {}
    lines = text.splitlines()
    failed = False
    if kind in ("yaml", "json", "toml"):
        docs = parse_structured(text, kind)
        if docs is None:
            failed = kind != "toml" or _toml is not None
        else:
            used: set[int] = set()
            for doc in docs:
                for key, value, hit_kind in walk_structured(doc):
                    line = find_line(lines, key, value, used)
                    norm = key.lower().replace("-", "_")
                    found[(line, norm, value)] = ConfigHit(file=str(path), line=line, key=key, value=value,
                                                           kind=hit_kind)  # type: ignore[arg-type]
    for line, key, value, hit_kind in scan_text(text):
        norm = key.lower().replace("-", "_")
        if any(k[0] == line and k[2] == value for k in found):
            continue  # the structured walk already has it
        found[(line, norm, value)] = ConfigHit(file=str(path), line=line, key=key, value=value,
                                               kind=hit_kind)  # type: ignore[arg-type]
    if path.name.lower().endswith("hostfile"):
        n = hostfile_hosts(text)
        if n:
            found[(1, "hostfile", str(n))] = ConfigHit(file=str(path), line=1, key="hostfile", value=str(n),
                                                       kind="nodes")
    return sorted(found.values(), key=lambda h: (h.line, h.key)), failed


# --------------------------------------------------------------------------- the walk
def _is_venv(path: Path) -> bool:
    try:
        return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()
    except OSError:
        return False


def _read_file(scan: _Scan, path: Path, kind: str, size: int) -> None:
    f = scan.facts
    if size > scan.limits.max_file_bytes:
        f.files_skipped += 1
        return
    try:
        with open(path, "rb") as fh:
            data = fh.read(scan.limits.max_file_bytes + 1)
    except PermissionError:
        scan.unreadable(str(path))
        return
    except OSError:
        f.files_skipped += 1
        return
    if b"\x00" in data[:8192]:
        f.files_skipped += 1
        return
    text = data.decode("utf-8", errors="replace")
    hits, failed = hits_in_file(path, text, kind)
    f.files_read += 1
    f.hits.extend(hits)
    if failed:
        scan.note(f"{path}: {kind} did not parse; searched by pattern only")


def _walk(scan: _Scan, directory: Path, depth: int) -> None:
    f = scan.facts
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except PermissionError:
        scan.unreadable(str(directory))
        return
    except FileNotFoundError:
        return  # removed while we walked
    except OSError as exc:
        scan.unreadable(str(directory))
        scan.note(f"{directory}: {exc.strerror or exc}")
        return
    subdirs: list[Path] = []
    for entry in entries:
        if scan.out_of_budget():
            return
        try:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in scan.limits.ignore_dirs:
                    subdirs.append(Path(entry.path))
                continue
            if not entry.is_file():  # follows file symlinks; skips sockets, fifos, dangling links
                continue
            kind = file_kind(Path(entry.path))
            if kind is None:
                continue
            size = entry.stat().st_size
        except OSError:
            scan.unreadable(entry.path)
            continue
        _read_file(scan, Path(entry.path), kind, size)
    for sub in subdirs:
        if scan.out_of_budget():
            return
        if _is_venv(sub):
            continue
        if depth + 1 > scan.limits.max_depth:
            f.truncated = True
            scan.note(f"not entered (deeper than max_depth={scan.limits.max_depth}): {sub}")
            continue
        _walk(scan, sub, depth + 1)


def scan_paths(roots: Iterable[Path], limits: Limits | None = None) -> ConfigScanFacts:
    """Scan files and directories for TP / multi-node settings within ``limits``."""
    limits = limits or Limits.from_kb()
    scan = _Scan(limits=limits, deadline=time.monotonic() + limits.time_budget_s)
    f = scan.facts
    for root in roots:
        root = Path(root)
        with contextlib.suppress(OSError, RuntimeError):
            root = root.resolve()
        f.roots.append(str(root))
        try:
            if root.is_dir():
                if _is_venv(root):
                    scan.note(f"{root} is a virtualenv; not scanned")
                    continue
                _walk(scan, root, 0)
            elif root.is_file():
                _read_file(scan, root, file_kind(root) or "text", root.stat().st_size)
            else:
                scan.unreadable(str(root))
                scan.note(f"{root}: does not exist")
        except PermissionError:
            scan.unreadable(str(root))
        except OSError as exc:
            scan.unreadable(str(root))
            scan.note(f"{root}: {exc}")
    if scan.dropped:
        scan.note(f"{scan.dropped} more unreadable paths not listed")
    f.scanned = True
    return f


def collect(opts) -> ConfigScanFacts:
    """The configs section for the runner: ``opts.config_paths`` or the working directory."""
    roots = list(opts.config_paths) or [Path.cwd()]
    return scan_paths(roots)


def unavailable(why: Why, detail: str) -> ConfigScanFacts:
    return ConfigScanFacts(scanned=False, notes=[f"{why.value}: {detail}"[:300]])
