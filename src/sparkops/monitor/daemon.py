"""``spark-ops thermal start|stop|status``: the seeds' ``thermal-sample.sh`` as a managed process.

One sampler per log. The daemon (``python -m sparkops.monitor.daemon --log FILE --interval S``)
claims ``<log>.pid`` itself, exclusively, when it starts, and removes it when it ends: the pid
file exists exactly while a sampler owns the log, and two racing ``start`` calls cannot both win.
The pid file holds JSON (pid, interval, start time, log). A pid file whose process is gone, is a
zombie, or whose pid now belongs to another program (its command line does not name this module
and this log) is stale and removed by whoever finds it.

The daemon fsyncs every row by default: the failure it watches for (G4) can end in a thermal
reboot, and a row only in the page cache would be lost with it. Its stderr goes to ``<log>.err``.

Default log: ``thermal-<YYYYMMDD>.csv`` in the working directory (one file per day you start it,
next to the job you are watching, as the seed script's ``> thermal.csv`` redirect did).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import stat as stat_mod
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from sparkops import knowledge
from sparkops.probes import _run

MODULE = "sparkops.monitor.daemon"
EXIT_OK, EXIT_ALREADY, EXIT_ERROR = 0, 3, 2


class DaemonStatus(BaseModel):
    """What ``thermal status`` reports (and ``start``/``stop`` return)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    running: bool
    pid: int | None = None
    log: str
    interval_s: float | None = None
    started_at: str | None = None  # local ISO time the daemon started
    samples: int = 0  # data rows in the log (header not counted)
    last_sample: str | None = None  # timestamp cell of the last row
    note: str = ""  # what happened ("already running", "stale pid file removed", an error)


# --------------------------------------------------------------------------- paths
def default_log(now: datetime | None = None, cwd: Path | None = None) -> Path:
    """``thermal-<YYYYMMDD>.csv`` in the working directory."""
    return (cwd or Path.cwd()) / f"thermal-{(now or datetime.now()):%Y%m%d}.csv"


def default_interval() -> float:
    return knowledge.load().thresholds.monitor.sampler_interval_s


def _abs(log: Path | str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(str(log))))


def pid_path(log: Path) -> Path:
    return log.with_name(log.name + ".pid")


def err_path(log: Path) -> Path:
    return log.with_name(log.name + ".err")


# --------------------------------------------------------------------------- processes
def _proc_state(pid: int) -> str | None:
    """The state letter from /proc/<pid>/stat, None when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    tail = stat.rsplit(")", 1)[-1].split()
    return tail[0] if tail else None


def _reap(pid: int) -> None:
    """Collect our own exited child (a test, or a CLI that started it and is still alive)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no process id is larger
PID_FILE_MAX_BYTES = 4096  # a pid file holds one small JSON object


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    if not 0 < pid <= PID_MAX:
        return False
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, someone else's
    except OSError:
        return False
    return _proc_state(pid) not in ("Z", "X")


def is_our_daemon(pid: int, log: Path) -> bool:
    """The live process ``pid`` is this module sampling ``log`` (a reused pid is not)."""
    if not alive(pid):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:
        return not Path("/proc/self/cmdline").exists()  # no procfs (not Linux): trust the pid
    argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    if MODULE not in argv or "--log" not in argv[:-1]:
        return False
    given = argv[argv.index("--log") + 1]
    if not os.path.isabs(given):  # started by hand with a relative path: resolve in its cwd
        try:
            given = os.path.join(os.readlink(f"/proc/{pid}/cwd"), given)
        except OSError:
            return Path(given).name == log.name
    return os.path.normpath(given) == str(log)


def _read_pid_file(path: Path) -> dict[str, object] | None:
    """The pid file's JSON object, or None: bounded (a FIFO, a device or a huge file planted there
    is not waited on nor read whole)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat_mod.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            raw = fh.read(PID_FILE_MAX_BYTES + 1)
        if len(raw) > PID_FILE_MAX_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _pid_of(data: dict[str, object] | None) -> int | None:
    """The pid a pid file names, when it could be one (1..PID_MAX)."""
    pid = data.get("pid") if data else None
    ok = isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= PID_MAX
    return pid if ok else None  # type: ignore[return-value]


def _owner(log: Path) -> tuple[dict[str, object] | None, str]:
    """The live owner's pid-file data, or None; a stale pid file is removed (note says so)."""
    path = pid_path(log)
    if not path.exists():
        return None, ""
    data = _read_pid_file(path)
    pid = _pid_of(data)
    if pid is not None and is_our_daemon(pid, log):
        return data, ""
    # unreadable/half-written files are young for a moment while a daemon claims them
    with contextlib.suppress(OSError):
        if pid is None and time.time() - path.stat().st_mtime < 2.0:
            return None, "pid file being written"
    with contextlib.suppress(OSError):
        path.unlink()
    what = f"pid {pid} is gone or is not this sampler" if pid is not None else "unreadable"
    return None, f"stale pid file removed ({what})"


# --------------------------------------------------------------------------- log reading
def _log_stats(log: Path) -> tuple[int, str | None]:
    """(data rows, timestamp cell of the last row) by counting newlines: fast on big logs."""
    try:
        with open(log, "rb") as fh:
            first = fh.readline()
            lines = 1 if first.endswith(b"\n") else 0
            while chunk := fh.read(1 << 20):
                lines += chunk.count(b"\n")
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            tail = fh.read().splitlines()
    except OSError:
        return 0, None
    header = first.lower().startswith(b"timestamp")
    rows = max(0, lines - (1 if header else 0))
    last = next((ln for ln in reversed(tail) if ln.strip()), b"")
    if not rows or last.lower().startswith(b"timestamp"):
        return rows, None
    return rows, last.split(b",", 1)[0].decode("utf-8", "replace").strip() or None


def status(log: Path | str) -> DaemonStatus:
    """Whether a sampler owns ``log``, and how far the log has got. Removes a stale pid file."""
    log = _abs(log)
    data, note = _owner(log)
    rows, last = _log_stats(log)
    if data is None:
        return DaemonStatus(running=False, log=str(log), samples=rows, last_sample=last, note=note)
    interval = data.get("interval_s")
    started = data.get("started_at")
    return DaemonStatus(running=True, pid=_pid_of(data), log=str(log),
                        interval_s=float(interval) if isinstance(interval, (int, float)) else None,
                        started_at=started if isinstance(started, str) else None,
                        samples=rows, last_sample=last, note=note)


# --------------------------------------------------------------------------- start / stop
def start(log: Path | str, interval_s: float | None = None, *, fsync: bool = True,
          env: Mapping[str, str] | None = None, python: str | None = None) -> DaemonStatus:
    """Start a background sampler on ``log`` (or return the one already running there).

    ``env`` is the daemon's environment (default: this process's; ``SPARKOPS_NO_NVML=1`` and
    ``PATH`` reach its sampler), ``python`` the interpreter to run it (default: this one).
    Raises ValueError for an interval below ``monitor.sampler_min_interval_s``. A daemon that
    fails to start comes back as ``running=False`` with the reason (its ``.err`` file) in ``note``.
    """
    from sparkops.monitor.sampler import check_interval

    log = _abs(log)
    interval = check_interval(default_interval() if interval_s is None else interval_s)
    data, note = _owner(log)
    if data is not None:
        st = status(log)
        return st.model_copy(update={"note": f"already running (pid {st.pid}); no second sampler started"})
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [python or sys.executable, "-m", MODULE, "--log", str(log), "--interval", repr(interval)]
        if not fsync:
            argv.append("--no-fsync")
        proc = _run.detach(argv, err_path(log), env)
    except OSError as exc:
        return DaemonStatus(running=False, log=str(log), note=f"could not start the sampler: {exc}")
    deadline = time.monotonic() + knowledge.load().thresholds.monitor.sampler_start_timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        owner = _pid_of(_read_pid_file(pid_path(log)))
        if owner == proc.pid and code is None:
            st = status(log)
            return st.model_copy(update={"note": "; ".join(x for x in (note, "started") if x)})
        if code is not None:
            st = status(log)
            if st.running:  # lost a race to another start: that one is the sampler
                return st.model_copy(update={"note": f"already running (pid {st.pid}); no second sampler started"})
            return st.model_copy(update={"note": f"sampler exited at start (code {code}): {_err_tail(log)}"})
        time.sleep(0.02)
    _kill(proc.pid)
    _reap(proc.pid)
    return DaemonStatus(running=False, log=str(log), note="sampler did not come up in time; killed it")


def _err_tail(log: Path) -> str:
    try:
        lines = err_path(log).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "no error output"
    return lines[-1][:300] if lines else "no error output"


def _kill(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the daemon's process group (a running nvidia-smi child goes too), else the pid."""
    try:
        os.killpg(pid, sig)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def stop(log: Path | str) -> DaemonStatus:
    """SIGTERM the sampler on ``log`` and wait (bounded); SIGKILL past that. No-op if none runs."""
    log = _abs(log)
    data, note = _owner(log)
    pid = _pid_of(data)
    if data is None or pid is None:
        st = status(log)
        return st.model_copy(update={"note": "; ".join(x for x in (note, f"no sampler running for {log}") if x)})
    timeout = knowledge.load().thresholds.monitor.sampler_stop_timeout_s
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)  # the daemon finishes its row and removes its pid file
    how = "stopped"
    if not _wait_gone(pid, timeout):
        _kill(pid)
        _wait_gone(pid, 2.0)
        how = f"did not stop within {timeout:g} s; killed"
    path = pid_path(log)
    if _pid_of(_read_pid_file(path)) == pid:
        with contextlib.suppress(OSError):
            path.unlink()
    st = status(log)
    return st.model_copy(update={"pid": pid, "note": f"{how} (pid {pid})"})


def render(st: DaemonStatus) -> str:
    """One line for the terminal."""
    if st.running:
        head = f"sampling every {st.interval_s:g} s (pid {st.pid}, since {st.started_at}) -> {st.log}"
    else:
        head = f"not running -> {st.log}"
    rows = f"{st.samples} rows" + (f", last {st.last_sample}" if st.last_sample else "")
    return f"{head}; {rows}" + (f" [{st.note}]" if st.note else "")


# --------------------------------------------------------------------------- the daemon itself
def _claim(log: Path, interval: float) -> bool:
    """Create the pid file exclusively with our pid; False when a live sampler holds it."""
    path = pid_path(log)
    body = json.dumps({"pid": os.getpid(), "interval_s": interval, "log": str(log),
                       "started_at": datetime.now().isoformat(timespec="seconds")})
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            data, _note = _owner(log)  # removes it when stale
            if data is not None:
                return False
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body)
        return True
    return False


def _release(log: Path) -> None:
    path = pid_path(log)
    if _pid_of(_read_pid_file(path)) == os.getpid():
        with contextlib.suppress(OSError):
            path.unlink()


def serve(log: Path, interval: float, fsync: bool = True) -> int:
    """Sample into ``log`` until SIGTERM/SIGINT/SIGHUP; the current row is finished first."""
    from sparkops.monitor.sampler import Sampler, run_sampling

    try:  # fail before claiming the log, so `start` sees the reason rather than a brief "running"
        with open(log, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        print(f"cannot write the log {log}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not _claim(log, interval):
        print(f"another sampler already writes {log}", file=sys.stderr)
        return EXIT_ALREADY
    stop_event = threading.Event()
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    failure: list[BaseException] = []

    def loop() -> None:
        try:
            with Sampler(os.environ) as sampler:
                for n in sampler.notes:
                    print(f"sampler: {n}", file=sys.stderr, flush=True)
                run_sampling(log, interval, stop_event, sampler, fsync=fsync)
        except BaseException as exc:  # noqa: BLE001 - reported on stderr, exit code says it
            failure.append(exc)

    try:
        # signals are received by this thread only (sigtimedwait); the worker never sees them
        use_wait = hasattr(signal, "sigtimedwait") and hasattr(signal, "pthread_sigmask")
        if use_wait:
            signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        else:
            for s in signals:
                signal.signal(s, lambda *_: stop_event.set())
        worker = threading.Thread(target=loop, name="sampling")
        worker.start()
        while worker.is_alive():
            if use_wait:
                if signal.sigtimedwait(signals, 0.5) is not None:
                    stop_event.set()
            else:
                worker.join(0.5)
        worker.join()
    finally:
        _release(log)
    if failure:
        print(f"sampler failed: {type(failure[0]).__name__}: {failure[0]}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="background thermal sampler")
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--interval", type=float, default=None)
    ap.add_argument("--no-fsync", action="store_true", help="flush rows but do not fsync them")
    args = ap.parse_args(argv)
    from sparkops.monitor.sampler import check_interval

    try:
        interval = check_interval(default_interval() if args.interval is None else args.interval)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_ERROR
    return serve(_abs(args.log), interval, fsync=not args.no_fsync)


if __name__ == "__main__":
    sys.exit(main())
