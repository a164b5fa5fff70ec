"""Reading and writing snapshots and reports: the one module that writes files.

A regular file is written atomically (a temporary file in the target directory, then
``os.replace``) so a crash never leaves half a report; a device, a FIFO or a standard stream is
written through, never replaced. Reading a snapshot is bounded (size, depth), refuses a newer schema
major rather than misjudging it, and ignores, naming them, the fields a newer minor added.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

from sparkops.core.errors import OutputError, SnapshotError
from sparkops.core.modeling import BaseModel, ValidationError
from sparkops.facts import model as _facts_model
from sparkops.facts.model import FACTS_SCHEMA_VERSION, Facts, ProbeRecord
from sparkops.facts.redact import redact_obj

__all__ = ["OutputError", "SnapshotError", "write_atomic", "dump_model", "save_facts", "load_facts"]


# Paths that name this process's own standard streams: written through the open descriptor,
# never opened again (reopening /dev/stdout on a redirected file would truncate it).
_STD_FDS = {"/dev/stdout": 1, "/dev/stderr": 2, "/dev/fd/1": 1, "/dev/fd/2": 2,
            "/proc/self/fd/1": 1, "/proc/self/fd/2": 2}
FIFO_OPEN_TIMEOUT_S = 10.0  # a FIFO with no reader is waited for this long, then refused


def write_atomic(path: Path, text: str, fifo_timeout_s: float = FIFO_OPEN_TIMEOUT_S) -> None:
    """Write ``text`` to ``path`` without ever destroying what ``path`` is.

    A regular file (or a missing one) is replaced atomically: a temporary file in the same
    directory, then a rename, so a crash never leaves half a file; a symlink to one is followed (the
    link stays a link). A character device (``/dev/null``, a terminal), a FIFO or this process's own
    standard streams (``/dev/stdout``, ``/dev/stderr``) are written through, never replaced. Any other
    target (a directory, a socket, a block device) is refused with :class:`OutputError`, and so is
    every failure to write (read-only place, full disk), with the path and the reason.
    """
    path = Path(path)
    fd = _std_fd(path)
    if fd is not None:
        _write_fd(fd, text, path)
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISCHR(st.st_mode):
            _write_through(path, text, os.O_WRONLY)
            return
        if stat.S_ISFIFO(st.st_mode):
            _write_fifo(path, text, fifo_timeout_s)
            return
        raise OutputError(f"cannot write {path}: it is {_kind(st.st_mode)}, not a file; "
                          "give a file name (or /dev/stdout)")
    if path.is_symlink():  # write the file the link names, keep the link
        path = Path(os.path.realpath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a report is as readable as any new file
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def _std_fd(path: Path) -> int | None:
    fd = _STD_FDS.get(os.path.normpath(str(path)))
    if fd is None:
        return None
    try:
        os.fstat(fd)
    except OSError:
        return None  # closed: open the path like any other
    return fd


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def _write_fd(fd: int, text: str, path: Path) -> None:
    data = text.encode("utf-8")
    with contextlib.suppress(OSError, ValueError):  # what Python buffered for this stream goes first
        (sys.stdout if fd == 1 else sys.stderr).flush()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BlockingIOError as exc:
        raise OutputError(f"cannot write {path}: the stream would block") from exc
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _write_through(path: Path, text: str, flags: int) -> None:
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        _write_fd(fd, text, path)
    finally:
        os.close(fd)


def _write_fifo(path: Path, text: str, timeout_s: float) -> None:
    """A FIFO: wait (bounded) for a reader, then write through it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
            if time.monotonic() >= deadline:
                raise OutputError(f"cannot write {path}: it is a FIFO and nothing read it within "
                                  f"{timeout_s:g} s") from exc
            time.sleep(0.05)
    try:
        os.set_blocking(fd, True)
        _write_fd(fd, text, path)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def dump_model(model: BaseModel) -> str:
    return model.model_dump_json(indent=2) + "\n"


def save_facts(facts: Facts, path: Path) -> None:
    write_atomic(path, dump_model(facts))


MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024  # a real snapshot is tens of kB; 64 MB is far past any honest one
_MAX_DEPTH = 64  # a snapshot nests about 8 deep


def load_facts(path: Path, max_bytes: int = MAX_SNAPSHOT_BYTES) -> Facts:
    """Read a facts snapshot back, or raise :class:`SnapshotError` with one plain sentence.

    Refused: an unreadable or oversized file, non-UTF-8 or non-JSON text, nesting deeper than any
    snapshot, a ``schema_version`` that is not a positive integer or is newer than this tool's.
    Tolerated with a note (a ``snapshot`` probe record the report shows): fields this version does
    not know (a newer minor's additions) are ignored and named. A reading outside physical bounds
    (NaN, infinity, a negative or absurd temperature, power, clock or byte count) becomes an
    unavailable reading with the reason, by the model's own validators.
    """
    path = Path(path)
    data = _read_capped(path, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{path} is not a facts snapshot: not UTF-8 text (byte {exc.start})") from exc
    try:
        raw = json.loads(text)
    except RecursionError as exc:
        raise SnapshotError(f"{path} is not a facts snapshot: JSON nested too deeply") from exc
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except ValueError as exc:  # e.g. an integer literal with too many digits for Python to convert
        raise SnapshotError(f"{path} is not JSON this tool can read: {exc}") from exc
    if not isinstance(raw, dict):
        raise SnapshotError(f"{path} is not a facts snapshot (top level is not an object)")
    if _depth(raw) > _MAX_DEPTH:
        raise SnapshotError(f"{path} is not a facts snapshot: nested deeper than {_MAX_DEPTH} levels")
    version = raw.get("schema_version", _MISSING)
    if version is _MISSING:
        raise SnapshotError(f"{path} is not a facts snapshot: it has no schema_version")
    if type(version) is not int or version < 1:
        raise SnapshotError(f"{path}: schema_version {_short(version)} is not a facts schema version "
                            "(a positive integer)")
    if version > FACTS_SCHEMA_VERSION:
        raise SnapshotError(f"{path}: facts schema_version {version} is not supported (newer than this "
                            f"tool reads, <= {FACTS_SCHEMA_VERSION}); upgrade dgx-spark-ops")
    raw = redact_obj(raw)  # a snapshot written by an older tool may hold what today's rules mask
    ignored: list[str] = []
    for _round in range(8):  # each round removes every unknown field pydantic reported
        try:
            facts = Facts.model_validate(raw)
            break
        except ValidationError as exc:
            extra = [e["loc"] for e in exc.errors() if e["type"] == "extra_forbidden"]
            removed = [where for where in (_remove(raw, loc) for loc in extra) if where]
            if not removed:
                raise SnapshotError(_plain(path, exc)) from None
            ignored += removed
    else:  # pragma: no cover - a snapshot would need unknown fields nested 8 deep
        raise SnapshotError(f"{path} is not a valid facts snapshot: too many unknown fields")
    if ignored:
        names = sorted(set(ignored))
        shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        facts.probes["snapshot"] = ProbeRecord(
            name="snapshot", ok=False, source="replay",
            reason=f"ignored {len(names)} field(s) this version does not know (a newer tool wrote them?): {shown}")
    return facts


_MISSING = object()


def _read_capped(path: Path, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of a regular file (a FIFO or device is refused: it could never end)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores the flag
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
                raise SnapshotError(f"cannot read {path}: {what}")
            if st.st_size > max_bytes:
                raise SnapshotError(f"{path} is not a facts snapshot: {st.st_size} bytes is over the "
                                    f"{max_bytes // (1024 * 1024)} MiB limit")
            data = fh.read(max_bytes + 1)
    except IsADirectoryError as exc:
        raise SnapshotError(f"cannot read {path}: a directory") from exc
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise SnapshotError(f"{path} is not a facts snapshot: over the {max_bytes // (1024 * 1024)} MiB limit")
    return data


def _depth(obj: object) -> int:
    """Nesting depth, iteratively (json.loads already bounded recursion; this bounds ours)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if d > _MAX_DEPTH:
            return d
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


def _remove(raw: dict, loc: tuple) -> str:
    """Delete the field at a pydantic error location; its dotted path, or "" when not found.
    Location parts that are not keys (a union member's name, e.g. ``BandwidthFacts``) are skipped."""
    node: object = raw
    path: list[str] = []
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, dict) and part in node:
            if last:
                del node[part]
                path.append(str(part))
                return ".".join(path)
            node = node[part]
            path.append(str(part))
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node) and not last:
            node = node[part]
            path.append(str(part))
    return ""


def _short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _plain(path: Path, exc: ValidationError) -> str:
    """One sentence for a snapshot pydantic refused: the first real problem, where and what was
    there, and how many places are wrong. Errors from trying the ``Unavailable`` member of a union
    (``unavailable: Field required``) say nothing to a user and are left out when others exist."""
    errors = exc.errors()
    real = [e for e in errors if "Unavailable" not in e["loc"]] or errors
    where = lambda e: ".".join(_key(p) for p in e["loc"] if p != "Unavailable" and not _is_type_tag(p))  # noqa: E731
    places = sorted({where(e) for e in real})
    first = real[0]
    got = "" if first["type"] == "missing" else f", found {_short(first.get('input'))}"
    more = f" (and {len(places) - 1} other place(s))" if len(places) > 1 else ""
    return f"{path} is not a valid facts snapshot: {where(first) or 'top level'}: {first['msg']}{got}{more}"


def _key(part: object) -> str:
    """A location part as one line: a key holding a newline or another control character is shown escaped."""
    text = str(part)
    return text if text.isprintable() else ascii(text)[1:-1]


def _is_type_tag(part: object) -> bool:
    """pydantic names the union member it tried in the location: ``float``, ``int``, ``str``, a
    ``list[str]`` or a model class name."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part)


_TYPE_TAGS = frozenset({"float", "int", "str", "bool", "none", "dict", "list", "tuple", "literal_error",
                        *(name for name, obj in vars(_facts_model).items()
                          if isinstance(obj, type) and issubclass(obj, BaseModel))})
