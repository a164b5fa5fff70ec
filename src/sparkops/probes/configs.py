"""Tensor-parallel and multi-node settings in the job's configs and launch scripts (G10).

Parses, never greps. YAML/JSON/TOML are read by key (a comment is not a setting); launch scripts,
``.env`` files and notebooks' shell cells are split into commands with ``shlex`` and their flags read
from the argv (``--tensor-parallel-size 2``, ``--nnodes=2``), with the script's own variable
assignments resolved (``TP=2 ... --tp $TP``); a command string inside a YAML file (a compose
``command:``, a Kubernetes ``args:`` list) is a launch command too. Markdown, Python source and
notebooks' prose are not configs and are not read.

Every setting belongs to a *job* (a config file, or one launch command) so that the check pairs a
TP value only with a node count of the same job. The probe records raw facts — the launcher as
written, the key and flag names seen — and the check decides what they mean (serving or training).
What could not be read (too large, binary, did not parse, written by this tool) is listed in
``skipped`` with the reason: it is never taken as "no tensor parallelism".

The default scope, with no ``--config``, is the working directory's own config files (not its
subdirectories: a checkout's tests and docs are not the job). A setting whose value is a reference
(``$TP`` that the script does not assign, ``{{ .Values.tp }}``) is kept raw so that G10 can say
"TP found, value unknown" with file and line. YAML is walked as an event stream (aliases are not
expanded, so an anchor/alias bomb costs no more than its text) and every walk checks the deadline.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import json
import os
import re
import shlex
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sparkops.facts.model import ConfigHit, ConfigJob, ConfigScanFacts, ConfigSkip
from sparkops.facts.reading import Why
from sparkops.knowledge import Knowledge
from sparkops.knowledge import load as load_kb


@cache
def _toml() -> Any:
    """The TOML parser, imported when a TOML file is read (tomllib's regexes cost a run without one
    ~10 ms of this VM's CPU at import); None when there is none: TOML files are then listed as not read."""
    try:  # Python 3.11+
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10: the same parser from PyPI (a dependency there)
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return None
    return tomllib


SECTION = "configs"

# Structured keys (normalised: lower case, "-" -> "_") and what they mean.
TP_KEYS = {"tensor_parallel_size", "tensor_model_parallel_size", "tp_size", "tp", "tensor_parallel",
           "autotp_size", "num_shard"}
NODE_KEYS = {"num_machines", "nnodes", "num_nodes", "nodes"}
WORLD_KEYS = {"world_size"}
# Launcher flags (normalised the same way, leading dashes kept apart) and what they set.
FLAG_KINDS = {"tensor_parallel_size": "tensor_parallel", "tensor_model_parallel_size": "tensor_parallel",
              "tp_size": "tensor_parallel", "tp": "tensor_parallel", "num_shard": "tensor_parallel",
              "nnodes": "nodes", "num_machines": "nodes", "num_nodes": "nodes", "nodes": "nodes",
              "world_size": "world"}
SHORT_FLAGS = {"-tp": "tp", "-N": "nodes"}  # vLLM's/SGLang's -tp; srun/sbatch's -N
# Variables of a .env file that launchers read as settings.
ENV_KEYS = {"tensor_parallel_size": "tensor_parallel", "tp_size": "tensor_parallel",
            "tensor_model_parallel_size": "tensor_parallel", "nnodes": "nodes", "num_nodes": "nodes",
            "num_machines": "nodes", "world_size": "world"}
# YAML keys whose string (or list of strings) value is a command line.
COMMAND_KEYS = {"command", "args", "entrypoint", "cmd", "run", "script", "exec"}
# Wrappers in front of the real program of a command.
WRAPPERS = {"sudo", "exec", "nohup", "env", "time", "nice", "ionice", "stdbuf", "taskset", "numactl", "srun",
            "mpirun", "mpiexec", "uv", "conda", "mamba", "micromamba", "pixi", "poetry", "pipenv", "xargs"}

_STRUCTURED = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
_SHELL_SUFFIXES = {".sh", ".bash", ".zsh", ".ksh", ".slurm", ".sbatch", ".sub", ".pbs", ".job", ".mk",
                   ".dockerfile", ".command"}
_SHELL_NAMES = {"dockerfile", "containerfile", "makefile", "gnumakefile", "justfile", "procfile"}
# Files people mean as documentation or code, not configuration: not read (named with --config,
# they are listed as not read, with this reason).
_NOT_CONFIG = {".md": "Markdown is documentation, not a config", ".markdown": "Markdown is documentation, not a config",
               ".rst": "reStructuredText is documentation, not a config", ".txt": "plain text is not a config",
               ".py": "Python source is not read for settings (its launch command is)"}

_REF = (r"(?:\$\{\{[^{}\n]{1,80}\}\}"                    # ${{ matrix.tp }} (GitHub Actions)
        r"|\$\{(?:[^{}\n]|\$\{[^{}\n]{0,80}\}){1,80}\}"  # ${TP}, ${TP_SIZE:-2}, ${TP:-${DEFAULT_TP}}
        r"|\$\(\([^()\n]{1,80}\)\)|\$\([^()\n]{1,80}\)"  # $((N * 2)), $(nproc)
        r"|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9]"            # $TP, $1
        r"|\{\{[^{}\n]{1,80}\}\}"                        # {{ .Values.tp }} (Helm, Jinja)
        r"|\{[A-Za-z_][\w.]*\})")                        # {tp} (str.format)
_REF_RX = re.compile(_REF)
_VALUE_RX = re.compile(r"[0-9]{1,9}(?::[0-9]{1,9})?|" + _REF)  # 2, 1:4 (torchrun's elastic range), a reference
_KEY_KIND = {**{k: "tensor_parallel" for k in TP_KEYS}, **{k: "nodes" for k in NODE_KEYS},
             **{k: "world" for k in WORLD_KEYS}}
_MAX_RAW = 200  # characters of a raw (non-numeric) value kept
_MAX_NODES = 500_000  # containers, items and YAML events one file's structured walk may visit
_MAX_HITS_PER_FILE = 1000
_MAX_NESTING = 64
_MAX_UNREADABLE = 100
_MAX_KEYS = 64  # key/flag names kept per job (its role evidence)
_MAX_JOBS = 500
_HOSTFILE_LINE = re.compile(r"^\s*[A-Za-z0-9_.\-]+\s+slots\s*=\s*[0-9]+\s*$", re.M)


@dataclass
class Limits:
    """How far the scan may go (``thresholds.g10``)."""

    max_files: int = 2000
    max_file_bytes: int = 1 << 20
    max_depth: int = 8
    time_budget_s: float = 2.0
    ignore_dirs: frozenset[str] = frozenset()
    tool_json_keys: frozenset[str] = frozenset({"tool_version", "schema_version"})
    not_config_names: frozenset[str] = frozenset()

    @classmethod
    def from_kb(cls, kb: Knowledge | None = None) -> Limits:
        """From ``kb`` (the one the caller loaded), else the packaged knowledge (direct library callers)."""
        g10 = (kb or load_kb()).thresholds.g10
        return cls(g10.max_files, g10.max_file_bytes, g10.max_depth, g10.time_budget_s, frozenset(g10.ignore_dirs),
                   frozenset(g10.tool_json_keys), frozenset(n.lower() for n in g10.not_config_names))


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

    def skip(self, path: Path, reason: str, named: bool, unread: bool = True) -> None:
        """A config file found and not read, with the reason (bounded like ``unreadable``)."""
        self.facts.files_skipped += 1
        if len(self.facts.skipped) < _MAX_UNREADABLE:
            self.facts.skipped.append(ConfigSkip(path=str(path), reason=reason, named=named, unread=unread))
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
    """"yaml"/"json"/"toml"/"shell"/"env"/"notebook"/"hostfile" for a config worth reading, ``None`` otherwise."""
    name = path.name.lower()
    suffix = path.suffix.lower()
    if suffix in _STRUCTURED:
        return _STRUCTURED[suffix]
    if suffix == ".ipynb":
        return "notebook"
    if name == ".env" or name.startswith(".env.") or suffix == ".env":
        return "env"
    if name.endswith("hostfile"):
        return "hostfile"
    if suffix in _SHELL_SUFFIXES or name in _SHELL_NAMES or name.startswith(("dockerfile", "containerfile",
                                                                              "makefile", "docker-compose")):
        return "shell"
    return None


def not_config_reason(path: Path) -> str:
    """Why a file named with --config is not read ("" when it is a config kind)."""
    if file_kind(path) is not None:
        return ""
    return _NOT_CONFIG.get(path.suffix.lower(), f"not a config format this scan reads ({path.suffix or path.name})")


def _norm(key: Any) -> str:
    return str(key).strip().lower().replace("-", "_")


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
    kind = _KEY_KIND.get(_norm(key))
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


def walk_structured(data: Any, depth: int = 0, limit: WalkLimit | None = None,
                    keys: set[str] | None = None) -> Iterator[tuple[str, str, str]]:
    """(key, value, kind) for every TP / node / world key with an integer or reference value, at any
    depth. A container reached twice (shared or recursive objects) is walked once; ``limit`` bounds
    the nodes visited and the time, and says in ``limit.cut`` when it stopped the walk. ``keys``, when
    given, collects the (normalised) key names seen, bounded."""
    yield from _walk_node(data, depth, limit if limit is not None else WalkLimit(), set(), keys)


def _walk_node(data: Any, depth: int, limit: WalkLimit, seen: set[int],
               keys: set[str] | None) -> Iterator[tuple[str, str, str]]:
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
        if k is not None and keys is not None and len(keys) < _MAX_KEYS:
            keys.add(_norm(k))
        hit = _classify(k, v) if k is not None else None
        if hit is not None:
            yield str(k), hit[0], hit[1]
        elif isinstance(v, (Mapping, list, tuple)):
            yield from _walk_node(v, depth + 1, limit, seen, keys)
            if limit.cut:
                return


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when there is one


@dataclass
class _Frame:
    mapping: bool
    want_key: bool = True
    key: str | None = None
    key_line: int = 0
    argv: list[str] | None = None  # a sequence under a command key: its items, in order
    line: int = 0


@dataclass(frozen=True)
class YamlCommand:
    """A command line found inside a YAML file (a string or a list of strings under a command key)."""

    line: int
    text: str | None = None  # a string command ("vllm serve m --tp 2")
    argv: tuple[str, ...] = ()  # a list command (["--tensor-parallel-size", "2"])


def walk_yaml(text: str, limit: WalkLimit | None = None, keys: set[str] | None = None,
              commands: list[YamlCommand] | None = None) -> Iterator[tuple[int, str, str, str]]:
    """(line, key, value, kind) for every TP / node / world key in every YAML document of ``text``.

    Walks the parser's events instead of building objects: an alias is never expanded (what it
    names was walked where its anchor stands), so the walk is linear in the text, and ``limit`` is
    checked between events. Comments never reach the events, so a commented-out setting is not one.
    ``keys`` collects the key names seen; ``commands`` the command lines under command keys
    (``command:``, ``args:``). Raises ``yaml.YAMLError`` where the text stops parsing; hits before
    that point have been yielded."""
    limit = limit if limit is not None else WalkLimit()
    loader = _YAML_LOADER(text)
    stack: list[_Frame] = []
    try:
        while loader.check_event():
            event = loader.get_event()
            if not limit.tick():
                return
            top = stack[-1] if stack and stack[-1].mapping else None
            seq = stack[-1] if stack and not stack[-1].mapping else None
            if isinstance(event, yaml.DocumentStartEvent):
                stack.clear()
            elif isinstance(event, yaml.ScalarEvent):
                if seq is not None:
                    if seq.argv is not None and len(seq.argv) < 4096:
                        seq.argv.append(event.value)
                    continue
                if top is None:
                    continue
                if top.want_key:
                    top.key, top.key_line, top.want_key = event.value, event.start_mark.line + 1, False
                    if keys is not None and len(keys) < _MAX_KEYS:
                        keys.add(_norm(event.value))
                    continue
                hit = _classify(top.key, event.value) if top.key is not None else None
                if hit is not None:
                    yield top.key_line, str(top.key), hit[0], hit[1]
                elif commands is not None and top.key is not None and _norm(top.key) in COMMAND_KEYS \
                        and isinstance(event.value, str) and len(commands) < _MAX_JOBS:
                    commands.append(YamlCommand(top.key_line, text=event.value))
                top.want_key = True
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent, yaml.AliasEvent)):
                parent_key = None
                if top is not None:
                    if top.want_key:  # a complex key (or an aliased one): not a setting name
                        top.key, top.want_key = None, False
                    else:
                        parent_key = top.key
                        top.want_key = True
                if not isinstance(event, yaml.AliasEvent):
                    frame = _Frame(mapping=isinstance(event, yaml.MappingStartEvent))
                    if isinstance(event, yaml.SequenceStartEvent) and parent_key is not None \
                            and _norm(parent_key) in COMMAND_KEYS and commands is not None:
                        frame.argv, frame.line = [], top.key_line if top else event.start_mark.line + 1
                    stack.append(frame)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)) and stack:
                frame = stack.pop()
                if frame.argv and commands is not None and len(commands) < _MAX_JOBS:
                    commands.append(YamlCommand(frame.line, argv=tuple(frame.argv)))
    finally:
        loader.dispose()


def parse_structured(text: str, kind: str) -> list[Any] | None:
    """The documents in a YAML (multi-doc) / JSON / TOML text, or ``None`` when it does not parse."""
    try:
        if kind == "yaml":
            return [d for d in yaml.safe_load_all(text) if d is not None]
        if kind == "json":
            return [json.loads(text)]
        if kind == "toml" and _toml() is not None:
            return [_toml().loads(text)]
    except Exception:  # any parser error: the file is listed as not read
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


def decode_text(data: bytes) -> tuple[str | None, str]:
    """The text of a file's bytes and its encoding, or (None, why) for a file that is not text.

    A byte-order mark decides (UTF-8, UTF-16, UTF-32: Windows editors write UTF-16 configs); BOM-less
    UTF-16 is recognised by its zero bytes in every other position; other NULs mean binary."""
    for bom, enc in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                     (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            try:
                return data.decode(enc), enc
            except UnicodeDecodeError:
                return None, f"not valid {enc} text"
    head = data[:8192]
    if b"\x00" in head:
        even, odd = head[0::2], head[1::2]
        for zeros, enc in ((odd, "utf-16-le"), (even, "utf-16-be")):
            if zeros and zeros.count(0) >= 0.9 * len(zeros):
                try:
                    return data.decode(enc), enc
                except UnicodeDecodeError:
                    break
        return None, "binary (NUL bytes)"
    return data.decode("utf-8", errors="replace"), "utf-8"


# ---- launch commands
_OPERATORS = {";", "&&", "||", "|", "&", "(", ")", ";;", "|&", "{", "}", "then", "do", "else", "elif"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^{}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_PYTHON = re.compile(r"^(?:python|python3|python3\.\d+|pypy3?)$")


@dataclass(frozen=True)
class Command:
    """One simple command of a script: its first line and its words."""

    line: int
    argv: tuple[str, ...]
    physical: tuple[str, ...] = ()  # the lines it was continued over, to place a flag on its own line

    def line_of(self, word: str) -> int:
        """The physical line a word stands on (the command's first line when it cannot tell)."""
        for i, text in enumerate(self.physical):
            if word in text:
                return self.line + i
        return self.line


def _logical_lines(text: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(first line number, text, physical lines) with backslash continuations joined."""
    buf: list[str] = []
    first = 0
    for i, raw in enumerate(text.splitlines(), 1):
        if not buf:
            first = i
        if raw.endswith("\\") and not raw.endswith("\\\\"):
            buf.append(raw[:-1])
            continue
        buf.append(raw)
        yield first, " ".join(buf), tuple(buf)
        buf = []
    if buf:
        yield first, " ".join(buf), tuple(buf)


def _words(line: str) -> list[str]:
    """shlex words of one logical line, comments dropped, operators as their own words; a line
    with unbalanced quotes falls back to whitespace words (still never a comment)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:
        return line.split("#", 1)[0].split()


def shell_commands(text: str) -> tuple[list[Command], list[Command]]:
    """(commands, directives) of a shell script: every simple command with its first line, and the
    scheduler directives (``#SBATCH --nodes=2``, ``#PBS -l nodes=2``) that apply to the whole script."""
    commands: list[Command] = []
    directives: list[Command] = []
    for line_no, line, physical in _logical_lines(text):
        stripped = line.strip()
        if stripped.startswith(("#SBATCH", "#PBS", "#BSUB", "#$ ")):
            directives.append(Command(line_no, tuple(_words(stripped[1:].split(None, 1)[-1] if " " in stripped
                                                            else ""))))
            continue
        if stripped.startswith(("RUN ", "CMD ", "ENTRYPOINT ")):  # Dockerfile instructions
            rest = stripped.split(None, 1)[1] if " " in stripped else ""
            if rest.startswith("["):
                with contextlib.suppress(ValueError):
                    items = json.loads(rest)
                    if isinstance(items, list):
                        commands.append(Command(line_no, tuple(str(x) for x in items), physical))
                        continue
            stripped = rest
        current: list[str] = []
        for word in _words(stripped):
            if word in _OPERATORS or set(word) <= set(";&|()"):
                if current:
                    commands.append(Command(line_no, tuple(current), physical))
                current = []
            else:
                current.append(word)
        if current:
            commands.append(Command(line_no, tuple(current), physical))
    return commands, directives


def resolve(word: str, variables: Mapping[str, str]) -> str:
    """``$TP`` / ``${TP}`` / ``${TP:-2}`` with the script's own assignments; a reference the script does
    not assign stays as written, a default included (the environment may set the variable)."""
    def sub(m: re.Match[str]) -> str:
        return variables.get(m.group(1) or m.group(3), m.group(0))
    return _VAR.sub(sub, word)


def launcher_of(argv: tuple[str, ...]) -> str:
    """The program a command runs, as written: wrappers and assignments skipped, ``python -m X`` as X."""
    i = 0
    while i < len(argv):
        w = argv[i]
        base = os.path.basename(w)
        if _ASSIGN.match(w) or w.startswith("-") or base in WRAPPERS or w in ("run", "export") or w.isdigit():
            i += 1
            continue
        if _PYTHON.match(base):
            if i + 2 < len(argv) and argv[i + 1] == "-m":
                return argv[i + 2]
            return os.path.basename(argv[i + 1]) if i + 1 < len(argv) else base
        return base
    return ""


def command_settings(argv: tuple[str, ...], variables: Mapping[str, str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(flag, value, kind) for every TP / node / world flag of one command, and the flag and word names
    it carries (bounded: the job's role evidence). ``--flag value`` and ``--flag=value`` both count; a
    flag followed by another flag has no value and is no setting."""
    hits: list[tuple[str, str, str]] = []
    words: list[str] = []
    value_next = False  # the word after a flag without "=" is that flag's value, not a word of its own
    for i, raw in enumerate(argv):
        w = raw
        after_flag, value_next = value_next, False
        if w.startswith("-"):
            name, eq, inline = w.partition("=")
            value_next = not eq
            key = SHORT_FLAGS.get(name) if not name.startswith("--") else _norm(name[2:])
            if key is not None and len(words) < _MAX_KEYS:
                words.append(key)
            kind = FLAG_KINDS.get(key or "")
            if kind is None:
                continue
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if not eq and value.startswith("-"):
                continue
            value = resolve(value, variables).strip()
            if key == "nodes" and "=" in value:  # #PBS -l nodes=2:ppn=1
                value = value.split("=", 1)[1].split(":", 1)[0]
            if _VALUE_RX.fullmatch(value):
                hits.append((name.lstrip("-"), value[:_MAX_RAW], kind))
        elif len(words) < _MAX_KEYS and not _ASSIGN.match(w) and not after_flag:
            words.append(_norm(os.path.basename(w)))
    return hits, words


def script_jobs(path: Path, text: str) -> tuple[list[ConfigJob], list[ConfigHit]]:
    """The launch commands of a script as jobs; scheduler directives belong to every job of the script."""
    commands, directives = shell_commands(text)
    variables: dict[str, str] = {}
    jobs: list[ConfigJob] = []
    hits: list[ConfigHit] = []
    shared: list[ConfigHit] = []
    for d in directives:
        found, _ = command_settings(d.argv, variables)
        shared += [ConfigHit(file=str(path), line=d.line, key=k, value=v, kind=kind, job=str(path))  # type: ignore[arg-type]
                   for k, v, kind in found]
    for cmd in commands:
        argv = cmd.argv
        if argv and argv[0] in ("export", "declare", "local", "readonly"):
            argv = argv[1:]
        assigns = [w for w in argv if _ASSIGN.match(w)]
        if assigns and len(assigns) == len(argv):  # TP=2 (a plain assignment)
            for a in assigns:
                name, value = _ASSIGN.match(a).groups()  # type: ignore[union-attr]
                variables[name] = resolve(value, variables)
            continue
        found, words = command_settings(argv, variables)
        if not found or len(jobs) >= _MAX_JOBS:
            continue
        job = f"{path}:{cmd.line}"
        jobs.append(ConfigJob(id=job, file=str(path), line=cmd.line, launcher=launcher_of(argv), keys=words))
        hits += [ConfigHit(file=str(path), line=cmd.line_of(k), key=k, value=v, kind=kind, job=job)  # type: ignore[arg-type]
                 for k, v, kind in found]
    if shared:
        if not jobs:
            jobs.append(ConfigJob(id=str(path), file=str(path), keys=[]))
        for j in jobs:
            hits += [h.model_copy(update={"job": j.id}) for h in shared]
    return jobs, sorted(hits, key=lambda h: (h.line, h.key, h.job))


def env_jobs(path: Path, text: str) -> tuple[list[ConfigJob], list[ConfigHit]]:
    """A ``.env`` file: one job; its TP / node variables are settings."""
    hits: list[ConfigHit] = []
    for i, line in enumerate(text.splitlines(), 1):
        words = _words(line)
        if words and words[0] == "export":
            words = words[1:]
        if len(words) != 1 or not (m := _ASSIGN.match(words[0])):
            continue
        kind = ENV_KEYS.get(_norm(m.group(1)))
        value = m.group(2).strip()
        if kind and _VALUE_RX.fullmatch(value):
            hits.append(ConfigHit(file=str(path), line=i, key=m.group(1), value=value, kind=kind,  # type: ignore[arg-type]
                                  job=str(path)))
    jobs = [ConfigJob(id=str(path), file=str(path))] if hits else []
    return jobs, hits


def notebook_shell(text: str) -> str | None:
    """The shell lines of a notebook's code cells (``!cmd`` lines and ``%%bash`` cells), one per line,
    with blank lines keeping each cell apart; prose and Python are not configs. None if not a notebook."""
    try:
        nb = json.loads(text)
        cells = nb.get("cells", []) if isinstance(nb, dict) else None
    except (ValueError, AttributeError):
        return None
    if not isinstance(cells, list):
        return None
    out: list[str] = []
    for cell in cells[:10_000]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        lines = "".join(src).splitlines() if isinstance(src, list) else str(src).splitlines()
        if lines and lines[0].strip().startswith(("%%bash", "%%sh", "%%script bash")):
            out += lines[1:]
        else:
            out += [ln.strip()[1:] for ln in lines if ln.strip().startswith("!")]
        out.append("")
    return "\n".join(out)


def hostfile_hosts(text: str) -> int:
    """Hosts in a DeepSpeed hostfile (``host slots=N`` lines)."""
    return len(_HOSTFILE_LINE.findall(text))


def _yaml_command_jobs(path: Path, commands: list[YamlCommand]) -> tuple[list[ConfigJob], list[ConfigHit]]:
    jobs: list[ConfigJob] = []
    hits: list[ConfigHit] = []
    for c in commands:
        if c.text is not None:
            parsed, _ = shell_commands(c.text)
            argvs = [p.argv for p in parsed]
        else:
            argvs = [c.argv]
        for argv in argvs:
            found, words = command_settings(argv, {})
            if not found:
                continue
            job = f"{path}:{c.line}"
            jobs.append(ConfigJob(id=job, file=str(path), line=c.line, launcher=launcher_of(argv), keys=words))
            hits += [ConfigHit(file=str(path), line=c.line, key=k, value=v, kind=kind, job=job)  # type: ignore[arg-type]
                     for k, v, kind in found]
    return jobs, hits


def settings_in_file(path: Path, text: str, kind: str,
                     limit: WalkLimit | None = None) -> tuple[list[ConfigJob], list[ConfigHit], str]:
    """The jobs and settings of one config file, and why it could not be read ("" when it was).

    A structured file is one job (its keys are its role evidence); every command line inside it, and
    every command of a script, is a job of its own."""
    limit = limit if limit is not None else WalkLimit()
    if kind == "shell":
        jobs, hits = script_jobs(path, text)
        return jobs, hits, ""
    if kind == "env":
        jobs, hits = env_jobs(path, text)
        return jobs, hits, ""
    if kind == "notebook":
        shell = notebook_shell(text)
        if shell is None:
            return [], [], "did not parse as a notebook"
        jobs, hits = script_jobs(path, shell)
        return jobs, hits, ""
    if kind == "hostfile":
        n = hostfile_hosts(text)
        hits = [ConfigHit(file=str(path), line=1, key="hostfile", value=str(n), kind="nodes", job=str(path))] if n else []
        return ([ConfigJob(id=str(path), file=str(path))] if n else []), hits, ""
    keys: set[str] = set()
    found: list[ConfigHit] = []
    commands: list[YamlCommand] = []
    if kind == "yaml":
        try:
            for line, key, value, hit_kind in walk_yaml(text, limit, keys, commands):
                found.append(ConfigHit(file=str(path), line=line, key=key, value=value, kind=hit_kind,  # type: ignore[arg-type]
                                       job=str(path)))
        except Exception as exc:  # a YAML error (or the C parser's own): not read, and said so
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            return [], [], f"did not parse as YAML{where}: a template or a broken file is not read"
    else:
        if kind == "toml" and _toml() is None:
            return [], [], "no TOML parser in this Python"
        docs = parse_structured(text, kind)
        if docs is None:
            return [], [], f"did not parse as {kind.upper()}"
        finder = LineFinder(text.splitlines())
        for doc in docs:
            for key, value, hit_kind in walk_structured(doc, limit=limit, keys=keys):
                found.append(ConfigHit(file=str(path), line=finder.find(key, value), key=key, value=value,
                                       kind=hit_kind, job=str(path)))  # type: ignore[arg-type]
    jobs: list[ConfigJob] = []
    if found:
        jobs.append(ConfigJob(id=str(path), file=str(path), keys=sorted(keys)))
    cjobs, chits = _yaml_command_jobs(path, commands)
    return jobs + cjobs, sorted(found, key=lambda h: (h.line, h.key)) + chits, ""


def written_by_this_tool(data: Any, marker_keys: frozenset[str]) -> bool:
    """A JSON document this tool wrote (env-report.json, a facts snapshot): it has all the marker keys."""
    return isinstance(data, dict) and bool(marker_keys) and marker_keys <= data.keys()


# --------------------------------------------------------------------------- the walk
def _is_venv(path: Path) -> bool:
    try:
        return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()
    except OSError:
        return False


def _read_file(scan: _Scan, path: Path, kind: str, size: int, named: bool = False) -> None:
    f = scan.facts
    if size > scan.limits.max_file_bytes:
        scan.skip(path, f"over {scan.limits.max_file_bytes} bytes ({size} bytes): a config that large is not read",
                  named)
        return
    try:
        with open(path, "rb") as fh:
            data = fh.read(scan.limits.max_file_bytes + 1)
    except PermissionError:
        scan.unreadable(str(path))
        return
    except OSError as exc:
        scan.skip(path, f"could not be read: {exc.strerror or exc}", named)
        return
    text, encoding = decode_text(data)
    if text is None:
        scan.skip(path, encoding, named)
        return
    if kind == "json" and scan.limits.tool_json_keys:
        with contextlib.suppress(ValueError, RecursionError):
            if written_by_this_tool(json.loads(text), scan.limits.tool_json_keys):
                scan.skip(path, "written by spark-ops (a report or facts snapshot), not a launch config", named,
                          unread=False)
                return
    limit = WalkLimit(deadline=scan.deadline, max_nodes=_MAX_NODES)
    jobs, hits, why = settings_in_file(path, text, kind, limit)
    if why:
        scan.skip(path, why, named)
        return
    f.files_read += 1
    if len(hits) > _MAX_HITS_PER_FILE:
        f.truncated = True
        scan.note(f"{path}: {len(hits)} settings found; only the first {_MAX_HITS_PER_FILE} are listed")
        hits = hits[:_MAX_HITS_PER_FILE]
    f.hits.extend(hits)
    room = _MAX_JOBS - len(f.jobs)
    f.jobs.extend(jobs[:max(room, 0)])
    if limit.cut:  # the rest of the file was not walked: an incomplete read
        f.truncated = True
        scan.skip(path, f"{kind} walk {limit.cut} ({limit.nodes} nodes): read only in part", named)
        f.files_skipped -= 1  # counted as read above; listed so that G10 does not call it complete
    if encoding not in ("utf-8", "utf-8-sig"):
        scan.note(f"{path}: read as {encoding}")


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
            if kind is None or entry.name.lower() in scan.limits.not_config_names:
                continue
            size = entry.stat().st_size
        except OSError:
            scan.unreadable(entry.path)
            continue
        _read_file(scan, Path(entry.path), kind, size)
    if scan.facts.scope == "default":  # the working directory's own files only: subdirectories are not the job
        scan.links.clear()
        return
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


def scan_paths(roots: Iterable[Path], limits: Limits | None = None, *, default_scope: bool = False) -> ConfigScanFacts:
    """Scan files and directories for TP / multi-node settings within ``limits``. A file named as a
    root is read whatever its name says (and listed as not read, with the reason, when it cannot be);
    ``default_scope`` (no --config given) reads the directory's own files, not its subdirectories."""
    limits = limits or Limits.from_kb()
    scan = _Scan(limits=limits, deadline=time.monotonic() + limits.time_budget_s)
    f = scan.facts
    f.scope = "default" if default_scope else "given"
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
                why = not_config_reason(root)
                if why:
                    scan.skip(root, why, named=True)
                else:
                    _read_file(scan, root, file_kind(root) or "shell", root.stat().st_size, named=True)
            elif root.exists():
                scan.skip(root, "not a regular file or directory", named=True)
            else:
                scan.unreadable(str(root))
                scan.note(f"{root}: does not exist")
        except PermissionError:
            scan.unreadable(str(root))
        except OSError as exc:
            scan.unreadable(str(root))
            scan.note(f"{root}: {exc}")
    if default_scope:
        scan.note("default scope: the working directory's own config files, not its subdirectories "
                  "(name the job's configs and launch scripts with --config)")
    if scan.dropped:
        scan.note(f"{scan.dropped} more unreadable or skipped paths not listed")
    f.scanned = True
    return f


def collect(opts) -> ConfigScanFacts:
    """The configs section for the runner: ``opts.config_paths``, or the working directory's own files."""
    roots = list(opts.config_paths)
    limits = Limits.from_kb(opts.knowledge())
    if not roots:
        return scan_paths([Path.cwd()], limits, default_scope=True)
    return scan_paths(roots, limits)


def unavailable(why: Why, detail: str) -> ConfigScanFacts:
    return ConfigScanFacts(scanned=False, notes=[f"{why.value}: {detail}"[:300]])
