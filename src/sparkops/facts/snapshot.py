"""Reading and writing snapshots and reports: the one module that writes files.

Writes are atomic (a temporary file in the target directory, then ``os.replace``) so a crash
never leaves half a report. Reading a snapshot refuses a newer schema major rather than
misjudging it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ValidationError

from sparkops.errors import SnapshotError
from sparkops.facts.model import FACTS_SCHEMA_VERSION, Facts

__all__ = ["SnapshotError", "write_atomic", "dump_model", "save_facts", "load_facts"]


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a report is as readable as any new file
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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


def load_facts(path: Path) -> Facts:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise SnapshotError(f"{path} is not a facts snapshot (top level is not an object)")
    version = raw.get("schema_version")
    if not isinstance(version, int) or version > FACTS_SCHEMA_VERSION:
        raise SnapshotError(f"{path}: facts schema_version {version!r} is not supported "
                            f"(this tool reads <= {FACTS_SCHEMA_VERSION}); upgrade dgx-spark-ops")
    try:
        return Facts.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SnapshotError(f"{path} is not a valid facts snapshot: {where}: {first['msg']} "
                            f"({exc.error_count()} problem(s))") from exc
