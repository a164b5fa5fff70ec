"""What the previous boot left behind, read-only and bounded. Never raises.

Sources, each a :class:`Source` that says what was read or why it could not be: the previous
boot's kernel journal (``journalctl -b -1 -k``) and its warnings (``-p warning``), the classic
``/var/log/kern.log`` files (when the journal is not persistent), pstore (``/sys/fs/pstore``:
what a panicking kernel saved), ``last -x`` (shutdown/reboot/crash records), and this tool's own
fsynced sampler logs (``thermal-*.csv``, ``soak-*.csv``). Without root some are unreadable: the
report says which and why, and judges on the rest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkops.probes import _run
from sparkops.probes.host import under_root

MAX_JOURNAL_LINES = 4000  # the previous boot's last kernel lines
MAX_SYSTEM_LINES = 1500
MAX_FILE_BYTES = 2 * 1024 * 1024  # tail of each kern.log / pstore record / sampler log
MAX_PSTORE_FILES = 16
MAX_OWN_LOGS = 4
TIMEOUT_S = 10.0


@dataclass
class Source:
    """One place looked at. ``status``: read | empty | unreadable | absent."""

    name: str
    status: str
    reason: str = ""
    lines: list[str] = field(default_factory=list)
    path: str = ""


def _tail(path: Path, limit: int = MAX_FILE_BYTES) -> str:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - limit))
        data = fh.read(limit)
    text = data.decode("utf-8", errors="replace")
    return text.split("\n", 1)[1] if size > limit and "\n" in text else text


_NO_PREV = ("no persistent journal", "Data from the specified boot", "invalid boot", "No journal files",
            "Failed to look up boot", "has no effect")
_NO_PERM = ("insufficient permissions", "Permission denied", "not seeing messages from other users")


def journal(name: str, args: Sequence[str], env: Mapping[str, str], limit: int) -> Source:
    res = _run.run(("journalctl", "--no-pager", "-o", "short-iso", "-n", str(limit), *args), timeout=TIMEOUT_S,
                   env=env)
    if res.error == "not_found":
        return Source(name, "absent", "journalctl is not installed (no systemd journal)")
    if res.error == "timeout":
        return Source(name, "unreadable", f"journalctl did not answer within {TIMEOUT_S:g} s")
    text = res.stdout
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("-- ")]
    err = (res.stderr or "") + "\n" + "\n".join(ln for ln in text.splitlines() if ln.startswith("-- "))
    if not lines:
        if any(s in err for s in _NO_PERM):
            return Source(name, "unreadable", "no permission to read the system journal (run as root or a "
                          "member of the adm / systemd-journal group)")
        if any(s in err for s in _NO_PREV):
            return Source(name, "absent", "no journal of the previous boot (the journal is not persistent: "
                          "/var/log/journal missing, or this is the first boot)")
        if not res.ok:
            return Source(name, "unreadable", f"journalctl failed: {res.describe()}"[:300])
        return Source(name, "empty", "no lines")
    note = "only this user's messages (not root / adm)" if any(s in err for s in _NO_PERM) else ""
    return Source(name, "read", note, lines)


def kern_logs(root: Path) -> list[Source]:
    out = []
    for rel in ("/var/log/kern.log", "/var/log/kern.log.1"):
        p = under_root(root, rel)
        try:
            text = _tail(p)
        except FileNotFoundError:
            out.append(Source(rel, "absent", "no such file", path=str(p)))
            continue
        except PermissionError:
            out.append(Source(rel, "unreadable", "permission denied (root or group adm)", path=str(p)))
            continue
        except OSError as exc:
            out.append(Source(rel, "unreadable", str(exc)[:200], path=str(p)))
            continue
        lines = [ln for ln in text.splitlines() if ln.strip()]
        out.append(Source(rel, "read" if lines else "empty", "", lines, str(p)))
    return out


def pstore(root: Path) -> Source:
    d = under_root(root, "/sys/fs/pstore")
    try:
        names = sorted(os.listdir(d))[:MAX_PSTORE_FILES]
    except FileNotFoundError:
        return Source("pstore", "absent", "/sys/fs/pstore is not mounted", path=str(d))
    except PermissionError:
        return Source("pstore", "unreadable", "permission denied (root)", path=str(d))
    except OSError as exc:
        return Source("pstore", "unreadable", str(exc)[:200], path=str(d))
    if not names:
        return Source("pstore", "empty", "no records: the kernel saved nothing (no panic caught, or records "
                      "already cleared)", path=str(d))
    lines: list[str] = []
    problems: list[str] = []
    for n in names:
        try:
            lines += [f"[{n}] {ln}" for ln in _tail(d / n, MAX_FILE_BYTES // 4).splitlines() if ln.strip()]
        except OSError as exc:
            problems.append(f"{n}: {exc.strerror or exc}")
    status = "read" if lines else "unreadable"
    return Source("pstore", status, "; ".join(problems)[:300], lines, str(d))


def last_x(env: Mapping[str, str]) -> Source:
    res = _run.run(("last", "-x", "-F", "-n", "20", "shutdown", "reboot"), timeout=TIMEOUT_S, env=env)
    if res.error == "not_found":
        return Source("last -x", "absent", "`last` is not installed")
    if not res.ok:
        return Source("last -x", "unreadable", res.describe()[:300])
    lines = [ln for ln in res.stdout.splitlines() if ln.strip() and not ln.startswith("wtmp begins")]
    return Source("last -x", "read" if lines else "empty", "" if lines else "no shutdown/reboot records", lines)


def own_logs(paths: Sequence[Path]) -> list[Source]:
    """The newest of this tool's sampler logs among ``paths`` (files, or folders searched for
    thermal-*.csv / soak-*.csv)."""
    files: list[Path] = []
    for p in paths:
        try:
            if p.is_dir():
                files += [f for pat in ("thermal-*.csv", "soak-*.csv") for f in p.glob(pat)]
            elif p.exists():
                files.append(p)
        except OSError:
            continue
    try:
        files = sorted(set(files), key=lambda f: f.stat().st_mtime, reverse=True)[:MAX_OWN_LOGS]
    except OSError:
        files = files[:MAX_OWN_LOGS]
    out = []
    for f in files:
        try:
            text = _tail(f)
        except OSError as exc:
            out.append(Source(f"log {f.name}", "unreadable", str(exc)[:200], path=str(f)))
            continue
        out.append(Source(f"log {f.name}", "read", "", text.splitlines(), str(f)))
    return out


def gather(env: Mapping[str, str] | None = None, root: Path = Path("/"),
           log_paths: Sequence[Path] = ()) -> list[Source]:
    env = dict(os.environ) if env is None else env
    return [
        journal("journal -b -1 -k", ("-b", "-1", "-k"), env, MAX_JOURNAL_LINES),
        journal("journal -b -1 -p warning", ("-b", "-1", "-p", "warning"), env, MAX_SYSTEM_LINES),
        *kern_logs(root),
        pstore(root),
        last_x(env),
        *own_logs(log_paths),
    ]
