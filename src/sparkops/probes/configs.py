"""Tensor-parallel and multi-node settings in the workload's files (G10).

Walks the given paths within the limits of ``thresholds.g10`` (file count, file size, depth,
time), parses YAML/JSON/TOML properly and searches launch scripts, compose files, Dockerfiles,
``.env``, Makefiles, Python and Markdown by pattern. What could not be read is reported, never
taken as "no tensor parallelism"; limits that cut the scan short set ``truncated`` and a note.

A setting whose value is a reference rather than a number (``--tensor-parallel-size $TP``,
``tp_size: ${TP_SIZE:-2}``, ``{{ .Values.tp }}``) is still a hit, with the raw text as its value, so
that G10 can say "TP found, value unknown" with file and line. YAML is walked as an event stream
(aliases are not expanded, so an anchor/alias bomb costs no more than its text) and every walk
checks the scan's deadline. Symlinked directories are followed once each, by resolved real path.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import json
import os
import re
import stat
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
except ImportError:  # pragma: no cover - Python 3.10: the same parser from PyPI (a dependency there)
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ImportError:
        _toml = None  # type: ignore[assignment]  # then TOML is searched by pattern only

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
# A value that is set elsewhere: shell/compose variables, command substitution, CI/Helm/Jinja
# templates, str.format fields. Recorded raw: the setting exists even though its number is unknown.
_REF = (r"(?:\$\{\{[^{}\n]{1,80}\}\}"                    # ${{ matrix.tp }} (GitHub Actions)
        r"|\$\{(?:[^{}\n]|\$\{[^{}\n]{0,80}\}){1,80}\}"  # ${TP}, ${TP_SIZE:-2}, ${TP:-${DEFAULT_TP}}
        r"|\$\(\([^()\n]{1,80}\)\)|\$\([^()\n]{1,80}\)"  # $((N * 2)), $(nproc)
        r"|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9]"            # $TP, $1
        r"|\{\{[^{}\n]{1,80}\}\}"                        # {{ .Values.tp }} (Helm, Jinja)
        r"|\{[A-Za-z_][\w.]*\})")                        # {tp} (str.format, f-strings)
_REF_RX = re.compile(_REF)
# torchrun accepts --nnodes=1:4 (elastic range)
_NUM = r"[\"']?([0-9]+(?::[0-9]+)?\b|" + _REF + ")"
_TP_ASSIGN = r"tensor[-_]parallel[-_]size|tensor[-_]model[-_]parallel[-_]size|tp[-_]size"
_PATTERNS: tuple[tuple[re.Pattern[str], str, str], ...] = tuple((re.compile(rx, re.I), key, kind) for rx, key, kind in (
    # (pattern with the value in the last group, canonical key, kind); case-insensitive, so that
    # TENSOR_PARALLEL_SIZE=2 and export TP_SIZE=4 count as well
    (r"(?<![\w-])--tensor[-_]parallel[-_]size" + _SEP + _NUM, "tensor_parallel_size", "tensor_parallel"),
    (r"(?<![\w-])--tensor[-_]model[-_]parallel[-_]size" + _SEP + _NUM, "tensor_model_parallel_size",
     "tensor_parallel"),
    (r"(?<![\w-])(?:--tp[-_]size|--tp|-tp)" + _SEP + _NUM, "tp_size", "tensor_parallel"),
    (r"(?<![\w-])--num[-_]shard" + _SEP + _NUM, "num_shard", "tensor_parallel"),
    (r"(?<![\w.\-])[\"']?(" + _TP_ASSIGN + r")[\"']?\s*[:=]\s*" + _NUM, "", "tensor_parallel"),
    (r"(?<![\w-])--nnodes" + _SEP + _NUM, "nnodes", "nodes"),
    (r"(?<![\w-])--num[-_]machines" + _SEP + _NUM, "num_machines", "nodes"),
    (r"(?<![\w-])--num[-_]nodes" + _SEP + _NUM, "num_nodes", "nodes"),
    (r"(?<![\w-])--nodes" + _SEP + _NUM, "nodes", "nodes"),  # #SBATCH --nodes=2
    (r"(?<![\w.\-])[\"']?(num[-_]machines|nnodes|num[-_]nodes)[\"']?\s*[:=]\s*" + _NUM, "", "nodes"),
    (r"(?<![\w-])--world[-_]size" + _SEP + _NUM, "world_size", "world"),
    (r"(?<![\w])(?-i:WORLD_SIZE)[\"']?\s*[:=]\s*" + _NUM, "WORLD_SIZE", "world"),
))
_KEY_KIND = {**{k: "tensor_parallel" for k in TP_KEYS}, **{k: "nodes" for k in NODE_KEYS},
             **{k: "world" for k in WORLD_KEYS}}
_MAX_RAW = 200  # characters of a raw (non-numeric) value kept
_MAX_NODES = 500_000  # containers, items and YAML events one file's structured walk may visit
_MAX_HITS_PER_FILE = 1000
_MAX_NESTING = 64
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
    visited: set[str] = field(default_factory=set)  # real paths of the directories walked
    roots_real: list[Path] = field(default_factory=list)
    links: list[tuple[Path, int]] = field(default_factory=list)  # symlinked directories to follow, at depth

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


def _ref_value(value: Any) -> str | None:
    """The raw text of a string that takes its value from elsewhere (``$TP``, ``${TP:-2}``, ``{{ x }}``)."""
    if isinstance(value, str) and _REF_RX.search(value):
        return value.strip()[:_MAX_RAW]
    return None


def _classify(key: Any, value: Any) -> tuple[str, str] | None:
    """(value, kind) when ``key`` is a TP / node / world key and ``value`` a number or a reference."""
    kind = _KEY_KIND.get(str(key).strip().lower().replace("-", "_"))
    if kind is None:
        return None
    found = _int_value(value)
    if found is None:
        found = _ref_value(value)
    return (found, kind) if found is not None else None


@dataclass
class WalkLimit:
    """What one file's structured walk may spend; ``cut`` says why it stopped early ("" when it did not)."""

    deadline: float | None = None  # time.monotonic() value
    max_nodes: int = _MAX_NODES
    nodes: int = 0
    cut: str = ""

    def tick(self) -> bool:
        """Count one visited node; False (and ``cut`` set) once a limit is reached."""
        if self.cut:
            return False
        self.nodes += 1
        if self.nodes > self.max_nodes:
            self.cut = f"stopped after {self.max_nodes} nodes"
        elif self.deadline is not None and not self.nodes & 0xFF and time.monotonic() > self.deadline:
            self.cut = "stopped at the time budget"
        return not self.cut


def walk_structured(data: Any, depth: int = 0, limit: WalkLimit | None = None) -> Iterator[tuple[str, str, str]]:
    """(key, value, kind) for every TP / node / world key with an integer or reference value, at any
    depth. A container reached twice (shared or recursive objects) is walked once; ``limit`` bounds
    the nodes visited and the time, and says in ``limit.cut`` when it stopped the walk."""
    yield from _walk_node(data, depth, limit if limit is not None else WalkLimit(), set())


def _walk_node(data: Any, depth: int, limit: WalkLimit, seen: set[int]) -> Iterator[tuple[str, str, str]]:
    if not isinstance(data, (Mapping, list, tuple)) or id(data) in seen:
        return
    if depth > _MAX_NESTING:
        limit.cut = limit.cut or f"nested deeper than {_MAX_NESTING} levels"
        return
    seen.add(id(data))
    pairs: Iterable[tuple[Any, Any]] = data.items() if isinstance(data, Mapping) else ((None, v) for v in data)
    for k, v in pairs:
        if not limit.tick():
            return
        hit = _classify(k, v) if k is not None else None
        if hit is not None:
            yield str(k), hit[0], hit[1]
        elif isinstance(v, (Mapping, list, tuple)):
            yield from _walk_node(v, depth + 1, limit, seen)
            if limit.cut:
                return


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when there is one


@dataclass
class _Frame:
    mapping: bool
    want_key: bool = True
    key: str | None = None
    key_line: int = 0


def walk_yaml(text: str, limit: WalkLimit | None = None) -> Iterator[tuple[int, str, str, str]]:
    """(line, key, value, kind) for every TP / node / world key in every YAML document of ``text``.

    Walks the parser's events instead of building objects: an alias is never expanded (what it
    names was walked where its anchor stands), so the walk is linear in the text, and ``limit`` is
    checked between events. Raises ``yaml.YAMLError`` where the text stops parsing; hits before that
    point have been yielded."""
    limit = limit if limit is not None else WalkLimit()
    loader = _YAML_LOADER(text)
    stack: list[_Frame] = []
    try:
        while loader.check_event():
            event = loader.get_event()
            if not limit.tick():
                return
            top = stack[-1] if stack and stack[-1].mapping else None
            if isinstance(event, yaml.DocumentStartEvent):
                stack.clear()
            elif isinstance(event, yaml.ScalarEvent):
                if top is None:
                    continue
                if top.want_key:
                    top.key, top.key_line, top.want_key = event.value, event.start_mark.line + 1, False
                    continue
                hit = _classify(top.key, event.value) if top.key is not None else None
                if hit is not None:
                    yield top.key_line, str(top.key), hit[0], hit[1]
                top.want_key = True
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent, yaml.AliasEvent)):
                if top is not None:
                    if top.want_key:  # a complex key (or an aliased one): not a setting name
                        top.key, top.want_key = None, False
                    else:
                        top.want_key = True
                if not isinstance(event, yaml.AliasEvent):
                    stack.append(_Frame(mapping=isinstance(event, yaml.MappingStartEvent)))
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)) and stack:
                stack.pop()
    finally:
        loader.dispose()


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


_VALUE_AFTER_KEY = re.compile(r"[\"']?\s*[:=]\s*[\"']?([0-9]+(?![\w])|" + _REF + ")?")


class LineFinder:
    """Lines of a text where a key is set, for hits from a parsed (JSON/TOML) document.

    Each key's lines are indexed once (by the value written there as well), and each line is
    handed out once per key (``{"tp_size": 2, "nnodes": 2}`` is one line with two settings), so
    finding the lines of n hits costs one pass per distinct key, not n passes."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.used: dict[str, set[int]] = {}  # lines handed out, by key
        self._by_key: dict[str, list[int]] = {}
        self._by_value: dict[tuple[str, str], list[int]] = {}

    def _index(self, key: str) -> None:
        rx = re.compile(r"(?<![\w-])[\"']?" + re.escape(key) + _VALUE_AFTER_KEY.pattern)
        rows: list[int] = []
        for i, line in enumerate(self.lines, 1):
            m = rx.search(line)
            if m:
                rows.append(i)
                self._by_value.setdefault((key, m.group(1) or ""), []).append(i)
        self._by_key[key] = rows
        for lst in (rows, *(v for (k, _), v in self._by_value.items() if k == key)):
            lst.reverse()  # pop() from the end hands out the first line first

    def _take(self, key: str, rows: list[int] | None) -> int:
        used = self.used.setdefault(key, set())
        while rows:
            i = rows.pop()
            if i not in used:
                used.add(i)
                return i
        return 0

    def find(self, key: str, value: str) -> int:
        """1-based line of ``key`` (with ``value`` when possible) not yet handed out; 0 when not found."""
        if key not in self._by_key:
            self._index(key)
        return self._take(key, self._by_value.get((key, value))) or self._take(key, self._by_key[key])


def find_line(lines: list[str], key: str, value: str, used: set[int]) -> int:
    """1-based line of ``key`` (with ``value`` when possible) not in ``used``; 0 when not found."""
    finder = LineFinder(lines)
    finder.used[key] = used
    return finder.find(key, value)


def scan_text(text: str) -> list[tuple[int, str, str, str]]:
    """(line, key, value, kind) for every flag/assignment pattern in free text; ``value`` is a number
    or, for a setting taken from elsewhere, the raw reference (``$TP``, ``${TP_SIZE:-2}``)."""
    starts = [0]
    starts += [m.end() for m in re.finditer(r"\n", text)]
    hits: list[tuple[int, str, str, str]] = []
    for rx, key, kind in _PATTERNS:
        for m in rx.finditer(text):
            name = key or m.group(1)
            line = bisect.bisect_right(starts, m.start())
            hits.append((line, name, m.group(m.lastindex or 1)[:_MAX_RAW], kind))
    return hits


def hostfile_hosts(text: str) -> int:
    """Hosts in a DeepSpeed hostfile (``host slots=N`` lines)."""
    return len(_HOSTFILE_LINE.findall(text))


def hits_in_file(path: Path, text: str, kind: str, limit: WalkLimit | None = None) -> tuple[list[ConfigHit], bool]:
    """All hits in one file's text, and whether a structured file failed to parse. ``limit`` bounds
    the structured walk (nodes, deadline); ``limit.cut`` says when it stopped that walk early."""
    limit = limit if limit is not None else WalkLimit()
    found: dict[tuple[int, str, str], ConfigHit] = {}
    at: set[tuple[int, str, str]] = set()  # (line, kind, value) already found

    def add(line: int, key: str, value: str, hit_kind: str) -> None:
        found[(line, key.lower().replace("-", "_"), value)] = ConfigHit(
            file=str(path), line=line, key=key, value=value, kind=hit_kind)  # type: ignore[arg-type]

    failed = False
    if kind == "yaml":
        try:
            for line, key, value, hit_kind in walk_yaml(text, limit):
                add(line, key, value, hit_kind)
                at.add((line, hit_kind, value))
        except Exception:  # a YAML error (or the C parser's own): the pattern scan still runs
            failed = True
    elif kind in ("json", "toml"):
        docs = parse_structured(text, kind)
        if docs is None:
            failed = kind != "toml" or _toml is not None
        else:
            finder = LineFinder(text.splitlines())
            for doc in docs:
                for key, value, hit_kind in walk_structured(doc, limit=limit):
                    line = finder.find(key, value)
                    add(line, key, value, hit_kind)
                    at.add((line, hit_kind, value))
    for line, key, value, hit_kind in scan_text(text):
        if (line, hit_kind, value) not in at:  # the structured walk (or another pattern) already has it
            add(line, key, value, hit_kind)
            at.add((line, hit_kind, value))
    if path.name.lower().endswith("hostfile"):
        n = hostfile_hosts(text)
        if n:
            add(1, "hostfile", str(n), "nodes")
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
    limit = WalkLimit(deadline=scan.deadline, max_nodes=_MAX_NODES)
    hits, failed = hits_in_file(path, text, kind, limit)
    f.files_read += 1
    if len(hits) > _MAX_HITS_PER_FILE:
        f.truncated = True
        scan.note(f"{path}: {len(hits)} settings found; only the first {_MAX_HITS_PER_FILE} are listed")
        hits = hits[:_MAX_HITS_PER_FILE]
    f.hits.extend(hits)
    if limit.cut:  # the rest of the file was searched by pattern only
        f.truncated = True
        scan.note(f"{path}: {kind} walk {limit.cut} ({limit.nodes} nodes); the rest searched by pattern only")
    elif failed:
        scan.note(f"{path}: {kind} did not parse; searched by pattern only")


def _broken_link(scan: _Scan, path: str, exc: OSError) -> None:
    """A symlink that cannot be followed. A loop has no content of its own: noted. A dangling link
    (or one we may not follow) may stand for a directory or config that is not there now: unreadable,
    unless its name is one the scan would not read anyway (``model.safetensors``, ``.#file`` locks)."""
    if exc.errno == errno.ELOOP:
        scan.note(f"{path}: symlink loop; not followed")
        return
    name = os.path.basename(path)
    if name.startswith(".#") or (Path(name).suffix and file_kind(Path(name)) is None):
        return
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    scan.unreadable(path)
    what = "dangling symlink" if isinstance(exc, FileNotFoundError) else f"symlink not followed ({exc.strerror or exc})"
    scan.note(f"{path}: {what} to {target}")


def _walk(scan: _Scan, directory: Path, depth: int, real: Path | None = None) -> None:
    f = scan.facts
    real = real or Path(os.path.realpath(directory))
    if str(real) in scan.visited:
        return
    scan.visited.add(str(real))
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
            if entry.is_symlink():
                try:
                    st = os.stat(entry.path)  # follows the link
                except OSError as exc:
                    _broken_link(scan, entry.path, exc)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if entry.name not in scan.limits.ignore_dirs:
                        scan.links.append((Path(entry.path), depth + 1))  # followed after the real tree
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
            elif not entry.is_file():  # sockets, fifos, devices
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
        _walk(scan, sub, depth + 1, real / sub.name)


def _follow_links(scan: _Scan) -> None:
    """Walk the symlinked directories found so far (and those found inside them), each real
    directory once, within the same depth, file and time limits as the rest of the tree."""
    while scan.links:
        link, depth = scan.links.pop(0)
        if scan.out_of_budget():
            return
        try:
            real = link.resolve(strict=True)
        except OSError as exc:  # removed or changed since it was listed
            _broken_link(scan, str(link), exc)
            continue
        except RuntimeError:  # Python < 3.13 reports a loop so
            scan.note(f"{link}: symlink loop; not followed")
            continue
        if str(real) in scan.visited or any(r == real or real in r.parents for r in scan.roots_real):
            parent = Path(os.path.realpath(link.parent))
            above = real == parent or real in parent.parents or any(real in r.parents for r in scan.roots_real)
            scan.note(f"{link}: symlink loop to {real}; not followed" if above
                      else f"{link}: symlink to {real}, scanned there; not followed again")
            continue
        if _is_venv(real):
            continue
        if depth > scan.limits.max_depth:
            scan.facts.truncated = True
            scan.note(f"not entered (deeper than max_depth={scan.limits.max_depth}): {link}")
            continue
        _walk(scan, link, depth, real)


def scan_paths(roots: Iterable[Path], limits: Limits | None = None) -> ConfigScanFacts:
    """Scan files and directories for TP / multi-node settings within ``limits``."""
    limits = limits or Limits.from_kb()
    scan = _Scan(limits=limits, deadline=time.monotonic() + limits.time_budget_s)
    f = scan.facts
    roots = [Path(r) for r in roots]
    for root in roots:
        with contextlib.suppress(OSError, RuntimeError):
            scan.roots_real.append(root.resolve(strict=True))
    for root in roots:
        with contextlib.suppress(OSError, RuntimeError):
            root = root.resolve()
        f.roots.append(str(root))
        try:
            if root.is_dir():
                if _is_venv(root):
                    scan.note(f"{root} is a virtualenv; not scanned")
                    continue
                if str(root) in scan.visited:
                    scan.note(f"{root}: already scanned under another root")
                    continue
                _walk(scan, root, 0, root)
                _follow_links(scan)
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
