"""Processes that may share the one memory pool (G6): raw facts only, no judgment.

The scan reads /proc as psutil 7 reads it (the same files and fallbacks, tests compare the two on
recorded trees) without importing psutil, which costs a quick preflight more than the scan itself.
It is bounded by time, skips processes that vanish or deny access, and records a
process when it is big (``g6.heavy_neighbour_gb``), in uninterruptible sleep, or when its name or
command line holds one of the words of ``probes.process_record_words`` (a wide net: "vllm",
"train", "ollama"...). What a recorded process *is* (server, trainer, its memory cap) is decided by
:mod:`sparkops.checks.processes` when the snapshot is judged, so a replay uses today's knowledge.
Command lines are redacted argument by argument before anything is cut (a cut token would slip
past the patterns).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkops.facts.model import HostProcess, ProcessFacts
from sparkops.facts.reading import Why, missing
from sparkops.facts.redact import redact_argv, redact_text
from sparkops.knowledge import load as load_kb

SECTION = "processes"

CMDLINE_MAX = 300  # the display text
ARGV_MAX_ARGS = 128  # the raw argv the checks read: a vLLM command line has a few dozen
ARGV_MAX_CHARS = 512  # per argument, after redaction


def recorded_argv(argv: Sequence[Any]) -> list[str]:
    """The argv as a snapshot keeps it: strings only, redacted whole, then bounded."""
    return [a[:ARGV_MAX_CHARS] for a in redact_argv([a for a in argv if isinstance(a, str)])[:ARGV_MAX_ARGS]]


def wanted(name: str, argv: Sequence[str], words: Iterable[str]) -> bool:
    """The recording rule's word test: one of ``words`` (lower case) in the name or the command line."""
    text = (name + "\0" + "\0".join(a for a in argv if isinstance(a, str))).lower()
    return any(w in text for w in words)


def scan(infos: Iterable[Mapping[str, Any]], own_pid: int, heavy_bytes: int, words: Iterable[str],
         deadline: float | None = None) -> ProcessFacts:
    """Pick the processes worth recording out of psutil-style info dicts (pure apart from the clock)."""
    kept: list[HostProcess] = []
    scanned = denied = 0
    truncated = False
    words = tuple(w.lower() for w in words)
    for info in infos:
        if deadline is not None and time.monotonic() > deadline:
            truncated = True
            break
        pid = info.get("pid")
        if not isinstance(pid, int) or pid == own_pid:
            continue
        scanned += 1
        name = info.get("name") or ""
        argv = info.get("cmdline")
        if argv is None:
            denied += 1
            argv = []
        mem = info.get("memory_info")
        rss = int(getattr(mem, "rss", 0) or 0)
        state = info.get("status") or ""
        if state != "disk-sleep" and rss <= heavy_bytes and not wanted(str(name), argv, words):
            continue
        # argument by argument first (a secret with spaces is masked whole), then the joined text
        raw = recorded_argv(argv)
        text = redact_text(" ".join(redact_argv([a for a in argv if isinstance(a, str)])) or name)
        ppid, exe = info.get("ppid"), info.get("exe")
        kept.append(HostProcess(pid=pid, name=str(name)[:100], exe=exe[:ARGV_MAX_CHARS] if isinstance(exe, str) else "",
                                cmdline=text[:CMDLINE_MAX], argv=raw, rss_bytes=rss, state=str(state),
                                ppid=ppid if isinstance(ppid, int) else None))
    return ProcessFacts(processes=kept, scanned=scanned, denied=denied, truncated=truncated)


# /proc/PID/stat's state letter as a status word (psutil's names: the snapshot keeps psutil's words)
STATUSES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop",
            "Z": "zombie", "X": "dead", "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked"}
ATTRS = ("pid", "ppid", "name", "exe", "cmdline", "status", "memory_info")


class _Gone(Exception):
    """The process ended while it was read: it is left out (psutil's NoSuchProcess)."""


class _Denied(Exception):
    """A reading the kernel refuses, or a zombie's: the attribute is None (psutil's ad_value)."""

    def __init__(self, zombie: bool = False) -> None:
        super().__init__()
        self.zombie = zombie


DENIED, ZOMBIE = "denied", "zombie"  # why a command line could not be read


@dataclass(frozen=True)
class Memory:
    rss: int  # bytes


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


class _Proc:
    """One /proc/PID read as ``psutil.Process(pid).as_dict(ATTRS, ad_value=None)`` reads it (psutil
    7's Linux rules: the same files, the same fallbacks), without importing psutil."""

    def __init__(self, proc: str, pid: int, page: int) -> None:
        self.base, self.pid, self.page = f"{proc}/{pid}", pid, page
        self._stat: bytes | None = None

    def _failed(self, exc: OSError) -> Exception:
        """psutil's wrap_exceptions: denied, a zombie (denied), gone, or an error it would not hide."""
        if isinstance(exc, PermissionError):
            return _Denied()
        if isinstance(exc, (FileNotFoundError, ProcessLookupError)):
            if self._zombie():
                return _Denied(zombie=True)
            if isinstance(exc, ProcessLookupError) or not os.path.exists(f"{self.base}/stat"):
                return _Gone()
        return exc

    def _zombie(self) -> bool:
        """psutil's zombie test, on the stat this read already holds (one open less per kernel thread)."""
        try:
            data = self._stat if self._stat is not None else _read(f"{self.base}/stat")
        except OSError:
            return False
        rpar = data.rfind(b")")
        return data[rpar + 2:rpar + 3] == b"Z"

    def stat(self) -> bytes:
        if self._stat is None:
            try:
                self._stat = _read(f"{self.base}/stat")
            except OSError as exc:
                raise self._failed(exc) from None
        return self._stat

    def stat_fields(self) -> list[bytes]:
        data = self.stat()
        return data[data.rfind(b")") + 2:].split()

    def short_name(self) -> str:
        data = self.stat()
        return os.fsdecode(data[data.find(b"(") + 1:data.rfind(b")")])

    def cmdline(self) -> list[str] | str:
        """The argv; or DENIED / ZOMBIE when psutil would raise AccessDenied / ZombieProcess."""
        try:
            data = _read(f"{self.base}/cmdline")
        except OSError as exc:
            err = self._failed(exc)
            if isinstance(err, _Denied):
                return ZOMBIE if err.zombie else DENIED
            raise err from None
        # decoded as psutil reads it, a text file: the file-system encoding, universal newlines
        text = os.fsdecode(data).replace("\r\n", "\n").replace("\r", "\n")
        if not text:
            return ZOMBIE if self._zombie() else []
        sep = "\x00" if text.endswith("\x00") else " "
        if text.endswith(sep):
            text = text[:-1]
        argv = text.split(sep)
        if sep == "\x00" and len(argv) == 1 and " " in text:
            argv = text.split(" ")
        return argv

    def name(self, argv: list[str] | str) -> str:
        name = self.short_name()
        if len(name) >= 15 and isinstance(argv, list) and argv:  # the kernel cuts names at 15 characters
            whole = os.path.basename(argv[0])
            if whole.startswith(name):
                name = whole
        return name

    def exe(self, argv: list[str] | str) -> str:
        denied = False
        try:
            path = os.readlink(f"{self.base}/exe").split("\x00")[0]
            if path.endswith(" (deleted)"):
                try:
                    os.stat(path)
                except PermissionError:
                    raise
                except OSError:
                    path = path[:-10]
        except (FileNotFoundError, ProcessLookupError) as exc:
            if not os.path.lexists(self.base):
                raise self._failed(exc) from None
            if self._zombie():
                raise _Denied(zombie=True) from None
            path = ""
        except PermissionError:
            denied, path = True, ""
        except OSError as exc:
            raise self._failed(exc) from None
        if path:
            return path
        # no link to read: psutil guesses from an absolute, executable argv[0]
        if argv == ZOMBIE:
            raise _Denied(zombie=True)
        if isinstance(argv, list) and argv and os.path.isabs(argv[0]) and os.path.isfile(argv[0]) \
                and os.access(argv[0], os.X_OK):
            return argv[0]
        if denied:
            raise _Denied()
        return ""

    def status(self) -> str:
        return STATUSES.get(self.stat_fields()[0].decode(), "?")

    def memory(self) -> Memory:
        try:
            with open(f"{self.base}/statm", "rb") as fh:
                fields = fh.readline().split()[:7]
        except OSError as exc:
            raise self._failed(exc) from None
        return Memory(rss=int(fields[1]) * self.page)

    def info(self) -> _Info:
        """The attributes of :data:`ATTRS`; None for one the kernel refuses. Raises _Gone. ``exe``
        (a readlink, and for a kernel thread two more calls) is read when first asked for: the
        scan asks only for the processes it keeps."""
        with contextlib.suppress(_Denied):
            self.stat()  # psutil opens a Process by its stat file: one that is gone is skipped
        argv = self.cmdline()
        readers: tuple[tuple[str, Callable[[], Any]], ...] = (
            ("ppid", lambda: int(self.stat_fields()[1])), ("name", lambda: self.name(argv)),
            ("cmdline", lambda: argv if isinstance(argv, list) else None),
            ("status", self.status), ("memory_info", self.memory))
        out: dict[str, Any] = {"pid": self.pid}
        for key, read in readers:
            try:
                out[key] = read()
            except _Denied:
                out[key] = None
        return _Info(out, lambda: self.exe(argv))


class _Info(Mapping[str, Any]):
    """One process's :data:`ATTRS` as psutil's ``info`` dict holds them, ``exe`` read on first use
    (None when refused, or when the process has ended since it was listed)."""

    def __init__(self, read: dict[str, Any], exe: Callable[[], str]) -> None:
        self._read, self._exe = read, exe

    def __getitem__(self, key: str) -> Any:
        if key == "exe" and key not in self._read:
            try:
                self._read[key] = self._exe()
            except (_Denied, _Gone):
                self._read[key] = None
        return self._read[key]

    def __iter__(self) -> Iterator[str]:
        return iter(ATTRS)

    def __len__(self) -> int:
        return len(ATTRS)


def proc_infos(proc: str = "/proc") -> Iterator[Mapping[str, Any]]:
    """Every process under ``proc`` as ``psutil.process_iter(ATTRS, ad_value=None)`` yields its
    ``info``, in pid order; a process that ends while it is read is left out (one that ends before
    its ``exe`` is asked for keeps its other attributes, with ``exe`` None)."""
    page = os.sysconf("SC_PAGE_SIZE")
    pids = sorted(int(x) for x in os.listdir(os.fsencode(proc)) if x.isdigit())
    for pid in pids:
        try:
            yield _Proc(proc, pid, page).info()
        except _Gone:
            continue


def collect(opts) -> ProcessFacts:
    """The process section for the runner (a bounded scan of /proc)."""
    kb = opts.knowledge()
    heavy = int(kb.thresholds.g6.heavy_neighbour_gb * 1024**3)
    deadline = time.monotonic() + kb.thresholds.probes.subprocess_timeout_s
    words = tuple(kb.thresholds.probes.process_record_words)
    try:
        facts = scan(proc_infos(), os.getpid(), heavy, words, deadline)
    except OSError as exc:
        return unavailable(Why.error, f"process scan failed: {exc}")
    return recheck_disk_sleep(facts, kb.thresholds.g6.dstate_recheck_s, _status_of, heavy, words)


def _status_of(pid: int, proc: str = "/proc") -> str | None:
    """The status word of ``pid`` now; None when it is gone or unreadable."""
    try:
        return _Proc(proc, pid, 1).status()
    except (_Gone, _Denied, OSError, IndexError, ValueError):
        return None


def recheck_disk_sleep(facts: ProcessFacts, wait_s: float, status_of, heavy_bytes: int,  # noqa: ANN001
                       words: Iterable[str] | None = None, sleep=time.sleep) -> ProcessFacts:  # noqa: ANN001
    """A process caught in D state may just be waiting on a disk read. Look again after ``wait_s``:
    only one still in D is recorded as stuck; one that only made the list for its D state and has
    left it is dropped."""
    procs = facts.processes
    if not isinstance(procs, list) or not any(p.state == "disk-sleep" for p in procs):
        return facts
    sleep(wait_s)
    words = tuple(w.lower() for w in (words if words is not None else load_kb().thresholds.probes.process_record_words))
    kept: list[HostProcess] = []
    for p in procs:
        if p.state == "disk-sleep":
            now = status_of(p.pid)
            if now != "disk-sleep":
                argv = p.argv if isinstance(p.argv, list) else p.cmdline.split()
                if p.rss_bytes <= heavy_bytes and not wanted(p.name, argv, words):
                    continue
                p = p.model_copy(update={"state": now or "gone"})
        kept.append(p)
    return facts.model_copy(update={"processes": kept})


def unavailable(why: Why, detail: str) -> ProcessFacts:
    return ProcessFacts(processes=missing(why, detail))
