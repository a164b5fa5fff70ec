"""The one place that spawns processes: bounded, argv-only, own process group, capped output.

``run`` never raises. A missing tool, a hang, a crash or a flood of output all come back as a
:class:`RunResult` whose ``error`` names what happened, so a probe can turn it into an
``Unavailable`` with a reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MAX_OUTPUT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    ok: bool  # exited 0 in time
    returncode: int | None
    stdout: str
    stderr: str
    error: str  # "" | "not_found" | "timeout" | "nonzero_exit" | "signal" | "exception: ..."
    duration_s: float
    signal: int | None = None
    truncated: bool = False

    def describe(self) -> str:
        """One line for a finding or a probe note."""
        name = os.path.basename(self.argv[0]) if self.argv else "?"
        if self.ok:
            return f"{name} ok"
        if self.error == "timeout":
            return f"{name} did not answer within {self.duration_s:.1f} s (killed)"
        if self.error == "not_found":
            return f"{name} not found"
        if self.error == "signal":
            return f"{name} died on signal {self.signal} ({_signame(self.signal)})"
        tail = (self.stderr or self.stdout).strip().splitlines()[-1:] or [""]
        return f"{name} exited {self.returncode}: {tail[0][:200]}"


def _signame(sig: int | None) -> str:
    try:
        return signal.Signals(sig).name if sig else "?"
    except ValueError:
        return "?"


def which(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """Find an executable on the PATH of ``env`` (defaults to this process's)."""
    path = (env or os.environ).get("PATH", os.defpath)
    return shutil.which(name, path=path)


class _Drain:
    """Read a pipe to its end on a daemon thread, keeping at most ``MAX_OUTPUT_BYTES``: a tool that
    floods its output can neither fill our memory nor block on a full pipe while we wait."""

    CHUNK = 65536

    def __init__(self, pipe) -> None:  # noqa: ANN001 - a binary pipe
        self.data = bytearray()
        self.truncated = False
        self._thread = threading.Thread(target=self._run, args=(pipe,), daemon=True, name="run-drain")
        self._thread.start()

    def _run(self, pipe) -> None:  # noqa: ANN001
        try:
            while chunk := pipe.read1(self.CHUNK) if hasattr(pipe, "read1") else pipe.read(self.CHUNK):
                room = MAX_OUTPUT_BYTES - len(self.data)
                if room > 0:
                    self.data += chunk[:room]
                if len(chunk) > max(room, 0):
                    self.truncated = True
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    def text(self, wait_s: float) -> str:
        self._thread.join(wait_s)
        return bytes(self.data).decode("utf-8", errors="replace")


class Pending:
    """A child started now and judged later: its deadline counts from the start, not the wait."""

    def __init__(self, argv: tuple[str, ...], proc: subprocess.Popen | None, error: str = "",
                 stdin_text: str | None = None) -> None:
        self.argv, self.proc, self.error = argv, proc, error
        self.started = time.monotonic()
        self._result: RunResult | None = None
        self._out = self._err = None
        if proc is not None:
            self._out, self._err = _Drain(proc.stdout), _Drain(proc.stderr)
            if proc.stdin is not None:
                threading.Thread(target=_feed, args=(proc.stdin, stdin_text or ""), daemon=True).start()

    def output_so_far(self) -> tuple[bytes, bytes]:
        """What the child has written so far (stdout, stderr), capped as the final result is: for
        callers that stream a long step's output while it runs (``setup bare-pip --exec``)."""
        return (bytes(self._out.data) if self._out is not None else b"",
                bytes(self._err.data) if self._err is not None else b"")

    def kill(self) -> None:
        """Kill the child and its process group (also what it left running after it exited)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            _kill_group(self.proc)
        else:
            _kill_leftovers(self.proc)

    def result(self, timeout: float) -> RunResult:
        """Wait until ``timeout`` seconds after the start; kill the process group past that."""
        if self._result is None:
            self._result = self._wait(timeout)
        return self._result

    def _wait(self, timeout: float) -> RunResult:
        argv, proc, start = self.argv, self.proc, self.started
        if proc is None or self._out is None or self._err is None:
            return RunResult(argv, False, None, "", "", self.error, 0.0)
        remaining = max(0.0, timeout - (time.monotonic() - start))
        timed_out = False
        _until_exit(proc, remaining)
        try:
            proc.wait(timeout=max(0.0, timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
        else:  # it exited: what it left running in its group (a daemonised helper) goes with it
            _kill_leftovers(proc)
        # a grandchild holding the pipe open must not keep us here: bounded joins
        out, err = self._out.text(2.0), self._err.text(2.0)
        duration = time.monotonic() - start
        truncated = self._out.truncated or self._err.truncated
        rc = proc.returncode
        if timed_out:
            return RunResult(argv, False, rc, out, err, "timeout", duration, truncated=truncated)
        if rc is not None and rc < 0:
            return RunResult(argv, False, rc, out, err, "signal", duration, signal=-rc, truncated=truncated)
        if rc != 0:
            return RunResult(argv, False, rc, out, err, "nonzero_exit", duration, truncated=truncated)
        return RunResult(argv, True, rc, out, err, "", duration, truncated=truncated)


def _until_exit(proc: subprocess.Popen, timeout: float) -> None:
    """Sleep until ``proc`` exits or ``timeout`` passes, woken by the exit itself (a pidfd, Linux
    5.3+): ``Popen.wait(timeout)`` polls with sleeps of up to 50 ms, which a quick preflight would
    pay after its slowest child. Where there is no pidfd this returns at once and ``wait`` polls."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or proc.returncode is not None:
        return
    try:
        fd = pidfd_open(proc.pid)
    except OSError:  # an old kernel, or the child already reaped
        return
    try:
        import select

        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000)))
    except OSError:
        pass
    finally:
        os.close(fd)


def _feed(pipe, text: str) -> None:  # noqa: ANN001
    with contextlib.suppress(OSError, ValueError):
        pipe.write(text.encode())
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    stdin_text: str | None = None,
    cwd: str | None = None,
) -> Pending:
    """Start ``argv`` (own process group, argv only) without waiting; never raises."""
    argv = tuple(str(a) for a in argv)
    exe = argv[0] if os.path.sep in argv[0] else which(argv[0], env)
    if not exe or not os.path.exists(exe):
        return Pending(argv, None, "not_found")
    try:
        proc = subprocess.Popen(
            (exe, *argv[1:]),
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,  # own process group: we can kill grandchildren too
        )
    except OSError as exc:
        return Pending(argv, None, f"exception: {exc}")
    return Pending(argv, proc, stdin_text=stdin_text)


def run(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin_text: str | None = None,
    cwd: str | None = None,
) -> RunResult:
    """Run ``argv`` with a hard deadline; kill its whole process group when it is passed."""
    return spawn(argv, env, stdin_text, cwd).result(timeout)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        with contextlib.suppress(OSError):
            proc.kill()


def _kill_leftovers(proc: subprocess.Popen) -> None:
    """SIGKILL the process group a finished child led (its own session, see :func:`spawn`): a probe
    must not leave a grandchild running after the tool exits. The group id is the reaped leader's
    pid; it names a live group only while one of its members is still running."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


def detach(argv: Sequence[str], err: Path, env: Mapping[str, str] | None) -> subprocess.Popen[bytes]:
    """Start the daemon in its own session, no terminal, stderr to ``err``.

    Unlike :func:`spawn`, nothing here owns the child's pipes or its deadline: it is meant to
    outlive the command that started it (``spark-ops thermal start``).
    """
    with open(err, "ab") as err_fh:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err_fh, start_new_session=True, close_fds=True, cwd="/",
                                env=dict(env) if env is not None else None)


def start_foreground(argv: Sequence[str], env: Mapping[str, str] | None = None,
                     cwd: str | None = None) -> subprocess.Popen[bytes]:
    """Start a child that stays in our process group (so a terminal's Ctrl-C reaches it) with
    unbuffered pipes for a tee (``spark-ops watch``). Raises OSError like Popen: a missing
    command is the caller's exit 127. No deadline: the child is the user's job."""
    return subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                            env=dict(env) if env is not None else None, cwd=cwd)
