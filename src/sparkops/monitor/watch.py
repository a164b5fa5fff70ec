"""``spark-ops watch -- COMMAND...``: run the user's command, sample alongside, flag events live.

The child comes first. It is started as an ordinary child (same process group, our stdin, so the
terminal's Ctrl-C reaches it as it would from a shell), its stdout/stderr are copied to ours as
bytes arrive (binary-safe, no line buffering), and we exit with its exit code (128+N when it died
on signal N, as a shell reports it). Sampling runs on a thread with everything it touches wrapped:
a sampler or detector that fails is reported once and switched off; the child never notices.

Sampling and judging are injected (``sample``, ``detector_factory``) so this module is testable
alone; the defaults import :mod:`sparkops.monitor.sampler` and :mod:`sparkops.monitor.analyze`
lazily. The child is started by ``probes._run.start_foreground``: unlike the probes' bounded
children it stays in our process group (a terminal's Ctrl-C reaches it) and has no deadline.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field

from sparkops.monitor import csvlog
from sparkops.monitor.events import Event, Sample
from sparkops.probes import _run

if TYPE_CHECKING:
    from sparkops.knowledge.thresholds import Monitor

PREFIX = "[spark-ops]"
EXIT_NOT_FOUND = 127  # as a shell: command not found
EXIT_CANNOT_EXECUTE = 126  # as a shell: found but not executable
# Signals a terminal sends to its whole foreground process group (the child already got them).
_TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The columns a plot shows: (column, axis label, scale)
_PLOT_SERIES: tuple[tuple[str, str, float], ...] = (
    ("temperature.gpu", "temperature (°C)", 1.0),
    ("power.draw [W]", "power (W)", 1.0),
    ("clocks.sm [MHz]", "SM clock (MHz)", 1.0),
    ("mem.available [B]", "MemAvailable (GiB)", 1 / 1024**3),  # GiB, as analyze and the summaries
)
_MAX_NOTES = 5  # notes taken over from the sampler / detector
_PLOT_KEYS = ("timestamp", *(c for c, _l, _s in _PLOT_SERIES))


class DetectorLike(Protocol):
    """What watch needs from :class:`sparkops.monitor.analyze.Detector`."""

    def feed(self, sample: Sample) -> list[Event]: ...  # events that start at this sample

    def finish(self) -> list[Event]: ...  # every event of the run, with its end when it ended


class WatchResult(BaseModel):
    """How the watched command ended and what was seen meanwhile."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    argv: list[str]
    exit_code: int  # the child's, 128+N for death by signal N, 126/127 when it could not start
    signal: int | None = None  # the signal that killed the child, if one did
    duration_s: float
    samples: int  # rows sampled (and logged, when the log could be written)
    interval_s: float
    events: list[Event] = Field(default_factory=list)
    log_path: Path | None = None
    plot_path: Path | None = None
    notes: list[str] = Field(default_factory=list)  # what did not work, said once each


# --------------------------------------------------------------------------------------- settings
def _monitor() -> Monitor:
    """The ``monitor:`` section of thresholds.yaml (typed: ``sparkops.knowledge.thresholds.Monitor``)."""
    from sparkops import knowledge

    return knowledge.load().thresholds.monitor


def default_interval_s() -> float:
    """Seconds between samples when ``--interval`` is not given."""
    return _monitor().watch_interval_s


def default_log_path(now: datetime | None = None) -> Path:
    """``./spark-ops-watch-YYYYmmdd-HHMMSS.csv``: next to where the user ran the job."""
    return Path.cwd() / f"spark-ops-watch-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}.csv"


# ------------------------------------------------------------------------------------ output sinks
class _Sink:
    """One of our output streams, shared by the copy threads and our own messages.

    Bytes go to the binary buffer under the stream when there is one (the terminal case), else
    they are decoded incrementally (a text stream in tests). A broken stream (our reader went
    away) is dropped quietly, and the copier stops draining the child's pipe into it and closes
    its end (see :func:`_copy`): the child's next write then fails with SIGPIPE/EPIPE, as it
    would had our reader been its own (``watch -- yes | head -1`` ends like ``yes | head -1``).
    """

    def __init__(self, stream: Any, lock: threading.RLock) -> None:
        self.lock = lock  # RLock: a signal handler may print while the main thread holds it
        self.broken = False
        self.at_line_start = True
        self._bin = getattr(stream, "buffer", None)
        if self._bin is None and not isinstance(stream, io.TextIOBase) and hasattr(stream, "write"):
            # a binary stream itself (BytesIO, a raw file) when writing bytes works
            self._bin = stream if isinstance(stream, io.BufferedIOBase | io.RawIOBase) else None
        self._text = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write_bytes(self, data: bytes) -> None:
        if not data:
            return
        with self.lock:
            if self.broken:
                return
            try:
                if self._bin is not None:
                    with contextlib.suppress(AttributeError, ValueError):
                        self._text.flush()  # our own text written earlier goes first
                    self._bin.write(data)
                    self._bin.flush()
                else:
                    self._text.write(self._decoder.decode(data))
                    self._text.flush()
            except (OSError, ValueError):
                self.broken = True
                return
            self.at_line_start = data.endswith(b"\n")

    def end(self) -> None:
        """The copied stream ended: a cut-off multi-byte character comes out as U+FFFD (text only)."""
        if self._bin is None:
            with self.lock, contextlib.suppress(OSError, ValueError):
                if tail := self._decoder.decode(b"", final=True):
                    self._text.write(tail)
                    self._text.flush()

    def line(self, text: str) -> None:
        """One message line of ours, on a line of its own even if the child left one open."""
        lead = "" if self.at_line_start else "\n"
        self.write_bytes(f"{lead}{text}\n".encode("utf-8", errors="replace"))


def _sinks(out: Any, err: Any) -> tuple[_Sink, _Sink]:
    lock = threading.RLock()
    o = _Sink(out, lock)
    e = _Sink(err, lock) if err is not out else o
    return o, e


def _copy(fd: int, sink: _Sink) -> None:
    """Copy a pipe to a sink as bytes arrive (``os.read`` returns what is there, no waiting for
    a newline: progress bars drawn with ``\\r`` show up at once).

    Once the sink is broken (our reader went away) the copy stops and our read end is closed,
    so the child's next write to that stream gets SIGPIPE/EPIPE, as it would without watch;
    draining on would keep a ``yes``-like command running forever.
    """
    try:
        while not sink.broken and (chunk := os.read(fd, 65536)):
            sink.write_bytes(chunk)
    except OSError:
        pass
    finally:
        sink.end()
        with contextlib.suppress(OSError):
            os.close(fd)


# -------------------------------------------------------------------------------------- CSV log
def _line(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


# ------------------------------------------------------------------------------------ sampling
class _Sampling:
    """The sampling thread: sample at the interval, log each row (flushed), feed the detector,
    print new events. Every failure is caught and said once: a failing sample is retried at the
    next tick, a failing detector or log write is switched off (the other parts go on)."""

    def __init__(self, *, interval_s: float, log_file: Any | None, sample: Callable[[], Sample] | None,
                 make_sample: Callable[[], _Source] | None,
                 detector_factory: Callable[[], DetectorLike] | None, err: _Sink, keep_series: bool,
                 max_points: int, own_pid: Callable[[int], bool] | None = None) -> None:
        self.interval_s = interval_s
        self.log_file = log_file
        self._own_pid = own_pid  # the watched command's process tree: its GPU processes are marked in the log
        self._marked: set[int] = set()
        self._last_procs: object = None
        self._sample = sample
        self._make_sample = make_sample
        self._source: _Source | None = None
        self._detector_factory = detector_factory
        self.detector: DetectorLike | None = None
        self.err = err
        self.keep_series = keep_series
        self.max_points = max(2, max_points)
        self._seen = 0
        self._stride = 1
        self.stop = threading.Event()
        self.samples = 0
        self.failed_samples = 0
        self.notes: list[str] = []
        self.events: dict[tuple[str, str, str], Event] = {}
        self.series: list[Sample] = []  # the plotted columns only, kept only for a plot
        self._thread = threading.Thread(target=self._run, daemon=True, name="watch-sampler")

    # -- what happens once
    def _warn(self, text: str) -> None:
        self.notes.append(text)
        self.err.line(f"{PREFIX} warning: {text}")

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> bool:
        self.stop.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread
    def _setup(self) -> bool:
        if self._sample is None and self._make_sample is not None:
            try:
                self._source = self._make_sample()
                self._sample = self._source.sample
            except Exception as exc:
                self._warn(f"sampling disabled: the sampler could not start ({_exc(exc)}); the command runs unaffected")
                return False
        if self._sample is None:
            return False
        if self._detector_factory is not None:
            try:
                self.detector = self._detector_factory()
                name = self._source.gpu_name() if self._source is not None else None
                if name and hasattr(self.detector, "use_gpu"):  # judge an H200 as an H200, not as a GB10
                    self.detector.use_gpu(name)
            except Exception as exc:
                self._warn(f"event detection disabled: the detector could not start ({_exc(exc)}); still logging")
        return True

    def _run(self) -> None:
        try:
            if not self._setup():
                return
            next_at = time.monotonic()
            while not self.stop.is_set():
                self._tick()
                next_at += self.interval_s
                now = time.monotonic()
                if next_at < now:  # a slow sample: skip the missed slots rather than burst
                    next_at = now + self.interval_s - ((now - next_at) % self.interval_s)
                self.stop.wait(next_at - now)
        except Exception as exc:  # belt and braces: nothing here may reach the child
            self._warn(f"sampling stopped: {_exc(exc)}")
        finally:
            if self._source is not None:
                with contextlib.suppress(Exception):
                    self._source.close()

    def _tick(self) -> None:
        assert self._sample is not None
        try:
            row = self._sample()
            if not isinstance(row, dict):
                raise TypeError(f"sample() returned {type(row).__name__}, not a row")
        except Exception as exc:
            # keep trying at the interval (a driver hiccup passes), but say it only once
            self.failed_samples += 1
            if self.failed_samples == 1:
                self._warn(f"sampling failed: {_exc(exc)}; the command runs unaffected")
            return
        self.samples += 1
        if self.keep_series:
            self._keep(row)
        self._log(row)
        self._detect(row)

    def _keep(self, row: Sample) -> None:
        """Only what the plot draws, thinned by half whenever it gets long (bounded memory)."""
        self._seen += 1
        if (self._seen - 1) % self._stride:
            return
        self.series.append({k: row.get(k) for k in _PLOT_KEYS})
        if len(self.series) >= self.max_points:
            del self.series[1::2]
            self._stride *= 2

    def _log(self, row: Sample) -> None:
        if self.log_file is None:
            return
        try:
            for pid in self._newly_own(row.get("gpu.processes")):
                self.log_file.write(_line(csvlog.job_pid_line(pid)))
            self.log_file.write(_line(csvlog.format_row(row)))
            self.log_file.flush()  # a crash loses nothing
        except Exception as exc:
            self._warn(f"log writing stopped: {_exc(exc)}")
            self.log_file = None

    def _newly_own(self, cell: object) -> list[int]:
        """The watched command's GPU processes in ``cell`` not marked in the log yet (the cell is read only
        when it changed: most rows repeat the one before)."""
        if self._own_pid is None or cell is None or cell == self._last_procs:
            return []
        self._last_procs = cell
        from sparkops.monitor.analyze import processes

        new = []
        for pid in processes(cell) or {}:
            if pid not in self._marked and _safe_own(self._own_pid, pid):
                self._marked.add(pid)
                new.append(pid)
        return new

    def _detect(self, row: Sample) -> None:
        if self.detector is None:
            return
        try:
            new = list(self.detector.feed(row))
        except Exception as exc:
            self._warn(f"event detection disabled: the detector failed ({_exc(exc)}); still logging")
            self.detector = None
            return
        for ev in new:
            key = _key(ev)
            if key in self.events:
                continue
            self.events[key] = ev
            self.err.line(event_line(ev))

    def finish(self) -> list[Event]:
        """Every event of the run: the detector's final word (in its order), plus any live one it
        did not repeat; the sampler's and detector's own notes join ours."""
        final: list[Event] | None = None
        if self.detector is not None:
            try:
                final = list(self.detector.finish())
            except Exception as exc:
                self.notes.append(f"event detection could not finish: {_exc(exc)}")
            with contextlib.suppress(Exception):
                self.notes.extend(str(n) for n in list(getattr(self.detector, "notes", []))[:_MAX_NOTES])
        if self._source is not None:
            with contextlib.suppress(Exception):
                self.notes.extend(f"sampler: {n}" for n in self._source.notes()[:_MAX_NOTES])
        if self.failed_samples > 1:
            self.notes.append(f"{self.failed_samples} samples failed in all")
        if final is None:
            return self.live_events()
        seen = {_key(e) for e in final}
        return final + [e for e in self.live_events() if _key(e) not in seen]

    def live_events(self) -> list[Event]:
        return sorted(self.events.values(), key=lambda e: (csvlog.seconds(e.start) or 0.0, e.start))


def _key(ev: Event) -> tuple[str, str, str]:
    return (ev.gotcha, ev.kind, ev.start)


def _exc(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def event_line(ev: Event) -> str:
    """The live line for a new event: ``[spark-ops] G4 throttling since <ts>: <summary>``."""
    return f"{PREFIX} {ev.gotcha} {ev.kind} since {ev.start}: {ev.summary}"


class _Source(NamedTuple):
    sample: Callable[[], Sample]
    close: Callable[[], None]
    notes: Callable[[], list[str]]  # why a fallback happened (NVML unusable, ...)
    gpu_name: Callable[[], str | None] = lambda: None  # the sampled GPU's name, when the sampler read it


def _default_sample() -> _Source:
    """The real sampler, imported only when used (NVML first, nvidia-smi and /proc as fallback)."""
    from sparkops.monitor.sampler import Sampler

    s = Sampler(dict(os.environ))
    return _Source(s.sample, s.close, lambda: list(s.notes), lambda: s.gpu_name)


def _default_detector(own: Callable[[int], bool]) -> DetectorLike:
    """The real detector, told which GPU processes are the command's own (not G6 neighbours)."""
    from sparkops.monitor.analyze import Detector as RealDetector

    return RealDetector(exclude_pid=own)


def _safe_own(own: Callable[[int], bool], pid: int) -> bool:
    try:
        return bool(own(pid))
    except Exception:  # a /proc read gone wrong: not marked, so still judged as a neighbour
        return False


class OwnTree:
    """``pid -> True`` when it is the watched command or one of its descendants, so the job's own
    CUDA processes are not reported as a new heavy neighbour (G6). Reads ``/proc/<pid>/stat``;
    a process started inside a container is not a descendant and still counts as a neighbour."""

    MAX_DEPTH = 64

    def __init__(self, root: int | None = None, proc: Path = Path("/proc")) -> None:
        self.root = root
        self.proc = proc
        self._own: set[int] = set()  # a descendant stays one after its parent exits

    def __call__(self, pid: int) -> bool:
        if self.root is None or pid <= 0:
            return False
        if pid in self._own:
            return True
        p: int | None = pid
        for _ in range(self.MAX_DEPTH):
            if p == self.root:
                self._own.add(pid)
                return True
            if p is None or p <= 1:
                return False
            p = self._ppid(p)
        return False

    def _ppid(self, pid: int) -> int | None:
        try:
            stat = (self.proc / str(pid) / "stat").read_text(errors="replace")
            return int(stat[stat.rindex(")") + 2:].split()[1])  # after "(comm) ": state, ppid
        except (OSError, ValueError, IndexError):
            return None


# ------------------------------------------------------------------------------------- signals
class _Forwarder:
    """Pass SIGINT/SIGTERM/SIGHUP on to the child; the second one arms a SIGKILL, the third fires it.

    A signal the terminal sent (Ctrl-C, hangup) went to the whole foreground process group, the
    child included; sending it again would deliver it twice (a script that saves a checkpoint on
    its first KeyboardInterrupt would be cut short). So those are forwarded only when they cannot
    have come from the terminal: we are not in its foreground group, or the child left ours.
    """

    def __init__(self, err: _Sink, grace_s: float) -> None:
        self.err = err
        self.grace_s = grace_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.count = 0
        self.pending: list[int] = []
        self._previous: dict[int, Any] = {}
        self._timer: threading.Timer | None = None
        self.installed = False

    def install(self) -> str:
        if threading.current_thread() is not threading.main_thread():
            return "signals are not forwarded: watch was not called from the main thread"
        for sig in _FORWARDED:
            with contextlib.suppress(OSError, ValueError):
                self._previous[sig] = signal.signal(sig, self._handle)
        self.installed = True
        return ""

    def restore(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, prev in self._previous.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        """The child exists now: a signal that came before it is sent to it (it did not get it)."""
        self.proc = proc
        for sig in self.pending:
            self._send(sig, from_terminal_possible=False)
        self.pending.clear()

    def _handle(self, signum: int, frame: Any) -> None:  # noqa: ARG002 - signal handler signature
        self.count += 1
        name = signal.Signals(signum).name
        if self.proc is None:
            self.pending.append(signum)
            return
        if self.proc.poll() is not None:
            return
        if self.count >= 3:
            self.err.line(f"{PREFIX} watch: {name} again: killing the command (SIGKILL)")
            self._kill()
            return
        how = ("passed to the command" if self._send(signum, from_terminal_possible=True)
               else "from the terminal reached the command too")
        if self.count == 1:
            self.err.line(f"{PREFIX} watch: {name} {how} (pid {self.proc.pid}); "
                          f"a second one kills it after {self.grace_s:g} s")
        else:
            self.err.line(f"{PREFIX} watch: second {name} {how}: the command gets {self.grace_s:g} s "
                          "to exit, then SIGKILL")
            if self._timer is None:
                self._timer = threading.Timer(self.grace_s, self._kill)
                self._timer.daemon = True
                self._timer.start()

    def _send(self, signum: int, *, from_terminal_possible: bool) -> bool:
        """Send ``signum`` to the child unless the terminal already did; True when sent."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return False
        if from_terminal_possible and signum in _TERMINAL_SIGNALS and _child_got_terminal_signal(proc.pid):
            return False
        try:
            os.kill(proc.pid, signum)
        except OSError:  # gone meanwhile
            return False
        return True

    def _kill(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                proc.kill()


def _child_got_terminal_signal(pid: int) -> bool:
    """True when we and the child sit in the foreground process group of our terminal: then a
    SIGINT/SIGHUP we got was (almost surely) sent by the terminal to the child as well."""
    try:
        ours = os.getpgrp()
        if os.getpgid(pid) != ours:
            return False
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal: nobody but a sender of kill() signalled us
    try:
        return os.tcgetpgrp(fd) == ours
    except OSError:
        return False
    finally:
        os.close(fd)


# -------------------------------------------------------------------------------------- watch
def watch(
    argv: Sequence[str],
    *,
    interval_s: float | None = None,
    log_path: Path | str | None = None,
    sample: Callable[[], Sample] | None = None,
    detector_factory: Callable[[], DetectorLike] | None = None,
    out: Any = None,
    err: Any = None,
    plot_path: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    use_default_sampler: bool = True,
    kill_grace_s: float | None = None,
) -> WatchResult:
    """Run ``argv`` as a child, tee its output, sample alongside, and return how it ended.

    ``sample``/``detector_factory`` default to the real sampler/detector (imported lazily; when
    they are missing or fail, sampling is off with one warning). ``use_default_sampler=False``
    with no ``sample`` runs the command unsampled. ``kill_grace_s`` overrides
    ``monitor.watch_kill_grace_s`` (second signal -> SIGKILL delay). An existing log is appended to.
    Raises ``ValueError`` for bad usage (empty command, interval below the minimum, a log that
    cannot be opened) before anything starts.
    """
    argv = [str(a) for a in argv]
    if not argv or not argv[0]:
        raise ValueError("watch needs a command: spark-ops watch [--interval S] [--log FILE] -- COMMAND...")
    interval = float(interval_s) if interval_s is not None else default_interval_s()
    min_interval = _monitor().sampler_min_interval_s  # the sampler's own cost sets the floor
    if not (math.isfinite(interval) and interval >= min_interval):
        raise ValueError(f"--interval must be at least {min_interval:g} s (got {interval_s})")
    o, e = _sinks(out if out is not None else sys.stdout, err if err is not None else sys.stderr)
    notes: list[str] = []

    sampling_on = sample is not None or use_default_sampler
    log = (Path(log_path) if log_path is not None else default_log_path()) if sampling_on else None
    log_file, size_before = _open_log(log, notes) if log is not None else (None, 0)

    own = OwnTree()
    sampling = _Sampling(
        interval_s=interval, log_file=log_file, sample=sample,
        make_sample=_default_sample if sample is None and use_default_sampler else None,
        detector_factory=detector_factory if detector_factory is not None else (
            (lambda: _default_detector(own)) if sampling_on else None),
        err=e, keep_series=plot_path is not None,
        max_points=int(_monitor().watch_plot_max_points), own_pid=own)
    forwarder = _Forwarder(e, _monitor().watch_kill_grace_s if kill_grace_s is None else float(kill_grace_s))
    child_env = dict(os.environ if env is None else env)
    # our pipes make a Python child block-buffer its prints; ask for them as they come, as on a terminal
    child_env.setdefault("PYTHONUNBUFFERED", "1")

    start = time.monotonic()
    started = False
    try:
        if note := forwarder.install():
            notes.append(note)
        try:
            proc = _run.start_foreground(argv, env=child_env, cwd=str(cwd) if cwd is not None else None)
        except FileNotFoundError:
            e.line(f"{PREFIX} watch: {argv[0]}: command not found")
            return _not_started(argv, EXIT_NOT_FOUND, interval, log, log_file, size_before, notes)
        except OSError as exc:  # PermissionError, ENOEXEC, a directory...
            e.line(f"{PREFIX} watch: {argv[0]}: cannot execute ({exc.strerror or exc})")
            return _not_started(argv, EXIT_CANNOT_EXECUTE, interval, log, log_file, size_before, notes)
        started = True
        forwarder.attach(proc)
        own.root = proc.pid
        if sampling_on:
            sampling.start()
        exit_code, died_by, left_open = _run_child(proc, o, e)
        if left_open:
            notes.append("the command left processes holding its output open; their output is no longer shown")
    finally:
        forwarder.restore()
        joined = sampling.join(_monitor().watch_stop_timeout_s) if started and sampling_on else True
        if not joined:
            notes.append("the sampler did not stop in time; the last events may be missing")
        if log_file is not None:
            with contextlib.suppress(Exception):
                log_file.close()
    events = sampling.finish() if joined else sampling.live_events()
    plot = None
    if plot_path is not None:
        plot, note = plot_samples(sampling.series, events, Path(plot_path))
        if note:
            notes.append(note)
    res = WatchResult(argv=argv, exit_code=exit_code, signal=died_by, duration_s=time.monotonic() - start,
                      samples=sampling.samples, interval_s=interval, events=events,
                      log_path=log if log_file is not None else None, plot_path=plot,
                      notes=[*sampling.notes, *notes])
    for text in summary_lines(res):
        e.line(text)
    return res


def _open_log(log: Path, notes: list[str]) -> tuple[Any, int]:
    """Open the log now, so a bad path fails before the command starts: (file, its size before).

    An existing log is appended to, never overwritten (a header is written again: ``read_log``
    takes concatenated logs); a new one starts with the header.
    """
    fh = None
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        fh = open(log, "a", encoding="utf-8", newline="")  # noqa: SIM115 - closed by watch()
        size_before = fh.tell()
        fh.write(_line(csvlog.write_header()))
        fh.flush()
    except Exception as exc:
        if fh is not None:
            fh.close()
        raise ValueError(f"cannot write the log {log}: {_exc(exc)}") from exc
    if size_before:
        notes.append(f"appended to the existing log {log}")
    return fh, size_before


def _not_started(argv: list[str], code: int, interval: float, log: Path | None, log_file: Any,
                 size_before: int, notes: list[str]) -> WatchResult:
    """The command could not start: the log goes back to what it was (gone when we created it),
    and the shell's code comes back."""
    if log_file is not None and log is not None:
        with contextlib.suppress(OSError):
            log_file.close()
            if size_before:
                os.truncate(log, size_before)
            else:
                log.unlink()
    return WatchResult(argv=argv, exit_code=code, duration_s=0.0, samples=0, interval_s=interval, notes=notes)


_WAIT_SLICE_S = 0.1


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the child in short slices. A blocking ``waitpid`` is not interrupted when the
    kernel hands a signal to another of our threads (the tee, the sampler): the Python handler
    then runs only when the child ends, and a second Ctrl-C/SIGTERM never escalates. Between
    slices the main thread runs pending handlers within ~0.1 s, however busy the machine."""
    while True:
        try:
            return proc.wait(timeout=_WAIT_SLICE_S)
        except subprocess.TimeoutExpired:
            continue


def _run_child(proc: subprocess.Popen[bytes], o: _Sink, e: _Sink) -> tuple[int, int | None, bool]:
    """Copy the child's output while waiting for it: (exit code, signal, output still held open)."""
    assert proc.stdout is not None and proc.stderr is not None
    copiers = []
    for pipe, sink in ((proc.stdout, o), (proc.stderr, e)):
        fd = os.dup(pipe.fileno())  # the copier owns and closes its own descriptor
        pipe.close()
        t = threading.Thread(target=_copy, args=(fd, sink), daemon=True, name="watch-tee")
        t.start()
        copiers.append(t)
    rc = _wait(proc)
    drain = _monitor().watch_drain_timeout_s
    deadline = time.monotonic() + drain
    for t in copiers:  # a background process the command left may hold the pipe open
        t.join(max(0.0, deadline - time.monotonic()))
    left_open = any(t.is_alive() for t in copiers)
    return (128 - rc, -rc, left_open) if rc < 0 else (rc, None, left_open)


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f} s"
    h, rem = divmod(int(round(s)), 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def summary_lines(res: WatchResult) -> list[str]:
    """The closing summary: how it ended, how long, samples, events with G-number and start, log."""
    cmd = shlex.join(res.argv)
    if len(cmd) > 80:
        cmd = cmd[:77] + "..."
    if res.signal is not None:
        try:
            how = f"died on {signal.Signals(res.signal).name} (exit {res.exit_code})"
        except ValueError:
            how = f"died on signal {res.signal} (exit {res.exit_code})"
    else:
        how = f"exited {res.exit_code}"
    lines = [f"{PREFIX} watch: `{cmd}` {how} after {_duration(res.duration_s)}; "
             f"{res.samples} sample{'s' if res.samples != 1 else ''} every {res.interval_s:g} s"]
    if res.events:
        lines.append(f"{PREFIX} events: {len(res.events)}")
        for ev in res.events:
            until = f" until {ev.end}" if ev.end else " (still going at the end)"
            lines.append(f"{PREFIX}   {ev.gotcha} {ev.kind} since {ev.start}{until}: {ev.summary}")
    elif res.samples:
        lines.append(f"{PREFIX} events: none flagged")
    for note in res.notes:
        lines.append(f"{PREFIX} note: {note}")
    if res.log_path is not None:
        lines.append(f"{PREFIX} log: {res.log_path}")
    if res.plot_path is not None:
        lines.append(f"{PREFIX} plot: {res.plot_path}")
    return lines


# ---------------------------------------------------------------------------------------- plot
def _number(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    try:
        return float(str(v).split()[0])
    except (ValueError, IndexError):
        return None


def plot_samples(samples: Sequence[Sample], events: Sequence[Event], path: Path) -> tuple[Path | None, str]:
    """A PNG of temperature, power, SM clock and MemAvailable over time, events shaded.

    x is seconds since the first sample (from the timestamps; the row number when they do not
    parse). matplotlib is optional: without it, or with nothing to draw, this returns a note and
    never raises. Returns (the PNG written or None, note).
    """
    if not samples:
        return None, "plot skipped: no samples"
    try:
        import matplotlib  # type: ignore[import-not-found]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found]
    except Exception:
        return None, "plot skipped: matplotlib is not installed (pip install matplotlib)"
    try:
        secs = [csvlog.seconds(row.get("timestamp")) for row in samples]
        t0 = secs[0]
        if t0 is not None and all(x is not None for x in secs):
            xs = [x - t0 for x in secs if x is not None]

            def x_of(ts: str | None) -> float | None:
                x = csvlog.seconds(ts)
                return None if x is None else x - t0  # type: ignore[operator]
        else:
            xs = [float(i) for i in range(len(samples))]
            at = {str(row.get("timestamp")): x for x, row in zip(xs, samples, strict=True)}

            def x_of(ts: str | None) -> float | None:
                return at.get(str(ts))
        fig, axes = plt.subplots(len(_PLOT_SERIES), 1, sharex=True, figsize=(10, 8))
        spans = []
        for ev in events:
            x0 = x_of(ev.start)
            if x0 is not None:
                x1 = x_of(ev.end) if ev.end else None
                spans.append((ev, x0, x1 if x1 is not None else xs[-1]))
        for ax, (col, label, scale) in zip(axes, _PLOT_SERIES, strict=True):
            pts = [(x, n * scale) for x, row in zip(xs, samples, strict=True) if (n := _number(row.get(col))) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], linewidth=1)
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
            for ev, x0, x1 in spans:
                ax.axvspan(x0, max(x1, x0 + 1e-3), color="tab:orange" if ev.severity == "info" else "tab:red",
                           alpha=0.15)
        for ev, x0, _x1 in spans:  # one label per event, on the top axis
            axes[0].annotate(f"{ev.gotcha} {ev.kind}", (x0, 1.0), xycoords=("data", "axes fraction"),
                             fontsize=7, rotation=90, va="top")
        axes[-1].set_xlabel("seconds since the first sample")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
        plt.close(fig)
    except Exception as exc:
        return None, f"plot failed: {_exc(exc)}"
    return path, ""


# ------------------------------------------------------------------------------- python -m entry
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparkops.monitor.watch [--interval S] [--log FILE] [--plot FILE.png] -- CMD...``:
    the same as ``spark-ops watch`` (3 for bad usage, else the command's exit code)."""
    p = argparse.ArgumentParser(prog="spark-ops watch")
    p.add_argument("--interval", type=float, default=None)
    p.add_argument("--log", default=None)
    p.add_argument("--plot", default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    ns = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    cmd = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    try:
        return watch(cmd, interval_s=ns.interval, log_path=ns.log, plot_path=ns.plot).exit_code
    except ValueError as exc:
        print(f"spark-ops: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
