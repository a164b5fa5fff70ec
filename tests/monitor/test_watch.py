"""``watch``: real child processes (small Python scripts), fake samplers and detectors.

The watcher itself is run in a subprocess wherever a signal has to reach it, in its own session so
that no controlling terminal makes it take our signal for a terminal's (see ``_Forwarder``).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.monitor import csvlog
from sparkops.monitor import watch as w
from sparkops.monitor.events import COLUMNS, Event, Sample

SRC = str(Path(__file__).resolve().parents[2] / "src")


# ------------------------------------------------------------------------------------ helpers
def script(tmp_path: Path, body: str, name: str = "child.py") -> list[str]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


class FakeSampler:
    """Rows like the real sampler's, with a climbing temperature; counts calls."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    def __call__(self) -> Sample:
        self.calls += 1
        if self.fail:
            raise RuntimeError("NVML exploded")
        row: Sample = dict.fromkeys(COLUMNS)
        row.update({"timestamp": csvlog.stamp(1_700_000_000 + self.calls), "temperature.gpu": 60.0 + self.calls,
                    "power.draw [W]": 100.5, "clocks.sm [MHz]": 2400.0, "mem.available [B]": 9.0e10})
        return row


class NoEvents:
    def feed(self, sample: Sample) -> list[Event]:
        return []

    def finish(self) -> list[Event]:
        return []


class EventOnSecond:
    """Reports a throttling event at the second sample, and repeats it (watch must print it once)."""

    def __init__(self) -> None:
        self.n = 0
        self.first: Event | None = None

    def feed(self, sample: Sample) -> list[Event]:
        self.n += 1
        if self.n == 2:
            self.first = Event(gotcha="G4", kind="throttling", start=str(sample["timestamp"]),
                               summary="power flat at 100 W, 85 °C, clock 2400 -> 1900 MHz")
        return [self.first] if self.first is not None else []

    def finish(self) -> list[Event]:
        if self.first is None:
            return []
        return [self.first.model_copy(update={"end": "2023/11/14 22:13:30.000"})]


def run_watch(argv: list[str], tmp_path: Path, **kw):
    """watch() in process, stdout and stderr into separate byte buffers."""
    out, err = io.BytesIO(), io.BytesIO()
    kw.setdefault("sample", FakeSampler())
    kw.setdefault("detector_factory", NoEvents)
    kw.setdefault("interval_s", 0.1)
    kw.setdefault("log_path", tmp_path / "watch.csv")
    res = w.watch(argv, out=out, err=err, **kw)
    return res, out.getvalue(), err.getvalue().decode()


WATCHER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {src!r})
    from sparkops.monitor import watch as w
    from sparkops.monitor.events import COLUMNS
    def sample():
        row = dict.fromkeys(COLUMNS)
        row["timestamp"] = "2025/11/24 20:25:50.123"
        return row
    class NoEvents:
        def feed(self, s): return []
        def finish(self): return []
    res = w.watch(sys.argv[1:], sample=sample, detector_factory=NoEvents, interval_s=0.2,
                  log_path={log!r}, kill_grace_s=0.5)
    sys.exit(res.exit_code)
""")


def start_watcher(tmp_path: Path, child: list[str]) -> subprocess.Popen[str]:
    """The watcher in its own session (no controlling terminal), as a user's shell would start it."""
    code = WATCHER.format(src=SRC, log=str(tmp_path / "w.csv"))
    return subprocess.Popen([sys.executable, "-c", code, *child], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 20.0) -> str:
    """Lines of the watcher's stdout up to the one holding ``marker`` (a bounded wait)."""
    assert proc.stdout is not None
    got: list[str] = []
    done = threading.Event()

    def reader() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            got.append(line)
            if marker in line:
                break
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    assert done.wait(timeout), f"no {marker!r} within {timeout} s; got {got!r}"
    return "".join(got)


def finish(proc: subprocess.Popen[str], timeout: float = 20.0) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"watcher did not finish: {err}")
    return proc.returncode, out, err


# ---------------------------------------------------------------------------------- exit codes
@pytest.mark.parametrize("code", [0, 3, 42])
def test_exit_code_is_the_childs(tmp_path: Path, code: int) -> None:
    res, _out, err = run_watch(script(tmp_path, f"import sys; sys.exit({code})"), tmp_path)
    assert res.exit_code == code
    assert res.signal is None
    assert f"exited {code} after" in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGSEGV])
def test_death_by_signal_is_128_plus_n(tmp_path: Path, sig: signal.Signals) -> None:
    res, _out, err = run_watch(script(tmp_path, f"import os; os.kill(os.getpid(), {int(sig)})"), tmp_path)
    assert res.exit_code == 128 + sig
    assert res.signal == sig
    assert f"died on {sig.name} (exit {128 + sig})" in err


def test_missing_command_is_127_and_leaves_no_log(tmp_path: Path) -> None:
    res, _out, err = run_watch(["no-such-command-sparkops-xyz", "--flag"], tmp_path)
    assert res.exit_code == 127
    assert "no-such-command-sparkops-xyz: command not found" in err
    assert not (tmp_path / "watch.csv").exists()
    assert res.samples == 0


def test_not_executable_is_126(tmp_path: Path) -> None:
    path = tmp_path / "notexec.sh"
    path.write_text("#!/bin/sh\necho hi\n")
    path.chmod(0o644)
    res, _out, err = run_watch([str(path)], tmp_path)
    assert res.exit_code == 126
    assert "cannot execute" in err


def test_empty_command_and_bad_interval_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a command"):
        w.watch([], sample=FakeSampler())
    with pytest.raises(ValueError, match="needs a command"):
        w.watch([""], sample=FakeSampler())
    for bad in (0.01, 0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="interval"):
            w.watch(["true"], interval_s=bad, sample=FakeSampler(), log_path=tmp_path / "x.csv")


def test_unwritable_log_fails_before_the_command_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    marker = tmp_path / "ran"
    argv = script(tmp_path, f"open({str(marker)!r}, 'w').close()")
    with pytest.raises(ValueError, match="cannot write the log"):
        w.watch(argv, sample=FakeSampler(), log_path=blocker / "sub" / "log.csv", out=io.BytesIO(), err=io.BytesIO())
    assert not marker.exists()


# ---------------------------------------------------------------------------------------- tee
def test_output_is_teed_in_order_and_binary_safe(tmp_path: Path) -> None:
    argv = script(tmp_path, r"""
        import sys, time
        for i in range(3):
            sys.stdout.buffer.write(b"out%d\n" % i); sys.stdout.flush()
            time.sleep(0.05)
            sys.stderr.buffer.write(b"err%d\n" % i); sys.stderr.flush()
            time.sleep(0.05)
        sys.stdout.buffer.write(b"\x00\xff\xfe raw \r no newline"); sys.stdout.flush()
    """)
    both = io.BytesIO()  # one terminal for both streams: the interleaving must survive
    res = w.watch(argv, out=both, err=both, sample=FakeSampler(), detector_factory=NoEvents, interval_s=0.1,
                  log_path=tmp_path / "l.csv")
    text = both.getvalue()
    assert res.exit_code == 0
    positions = [text.index(s) for s in (b"out0", b"err0", b"out1", b"err1", b"out2", b"err2")]
    assert positions == sorted(positions)
    assert b"\x00\xff\xfe raw \r no newline" in text
    # our summary starts on a line of its own after the child's unterminated line
    assert b"no newline\n[spark-ops] watch:" in text

    res, out, err = run_watch(argv, tmp_path)
    assert out.startswith(b"out0\nout1\nout2\n\x00\xff\xfe")
    assert "err0\nerr1\nerr2\n" in err and "out0" not in err


def test_output_arrives_while_the_child_runs(tmp_path: Path) -> None:
    """No buffering: a partial line (and an unflushed print) shows up before the child exits."""
    go = tmp_path / "go"
    argv = script(tmp_path, f"""
        import os, sys, time
        print("plain print, never flushed")
        sys.stdout.write("partial"); sys.stdout.flush()
        deadline = time.time() + 15
        while not os.path.exists({str(go)!r}) and time.time() < deadline:
            time.sleep(0.02)
        print(" done")
    """)
    out, err = io.BytesIO(), io.BytesIO()
    box: dict[str, w.WatchResult] = {}
    t = threading.Thread(target=lambda: box.setdefault("r", w.watch(
        argv, out=out, err=err, sample=FakeSampler(), detector_factory=NoEvents, interval_s=0.1,
        log_path=tmp_path / "l.csv")))
    t.start()
    deadline = time.time() + 15
    while b"partial" not in out.getvalue() and time.time() < deadline:
        time.sleep(0.02)
    seen = out.getvalue()
    go.touch()
    t.join(20)
    assert seen == b"plain print, never flushed\npartial"
    assert box["r"].exit_code == 0
    assert out.getvalue().endswith(b"partial done\n")
    # called off the main thread: runs, but says it cannot forward signals
    assert any("main thread" in n for n in box["r"].notes)


def test_flood_of_output_is_copied_whole(tmp_path: Path) -> None:
    argv = script(tmp_path, """
        import sys
        chunk = b"x" * 65535 + b"\\n"
        for _ in range(160):  # 10 MiB on stdout, 1 MiB on stderr
            sys.stdout.buffer.write(chunk)
            if _ % 10 == 0:
                sys.stderr.buffer.write(chunk)
        sys.exit(5)
    """)
    res, out, err = run_watch(argv, tmp_path)
    assert res.exit_code == 5
    assert len(out) == 160 * 65536
    assert err.count("x" * 65535 + "\n") == 16


def test_leftover_background_process_does_not_hold_the_watch(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    argv = script(tmp_path, f"""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # inherits our stdout
        open({str(pidfile)!r}, "w").write(str(p.pid))
        print("parent leaving")
    """)
    try:
        t0 = time.monotonic()
        res, out, _err = run_watch(argv, tmp_path)
        assert time.monotonic() - t0 < 15
        assert res.exit_code == 0
        assert b"parent leaving" in out
        assert any("holding its output open" in n for n in res.notes)
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)


# ------------------------------------------------------------------------------------ signals
SIGINT_CHILD = """
    import os, signal, sys, time
    # count deliveries at the C level: Python runs a handler once for signals close together
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGINT, lambda s, f: None)
    print("ready", flush=True)
    got = b""
    deadline = time.time() + 15
    while not got and time.time() < deadline:
        time.sleep(0.01)
        os.set_blocking(r, False)
        try:
            got += os.read(r, 64)
        except BlockingIOError:
            pass
    time.sleep(0.5)  # a second, duplicated SIGINT would land here
    try:
        got += os.read(r, 64)
    except BlockingIOError:
        pass
    print(f"child got SIGINT x{got.count(bytes([signal.SIGINT]))}", flush=True)
    sys.exit(130)
"""


def test_sigint_to_the_watcher_reaches_the_child_once(tmp_path: Path) -> None:
    proc = start_watcher(tmp_path, script(tmp_path, SIGINT_CHILD))
    read_until(proc, "ready")
    proc.send_signal(signal.SIGINT)
    rc, out, err = finish(proc)
    assert rc == 130
    assert "child got SIGINT x1" in out
    assert "SIGINT passed to the command" in err  # no terminal: we sent it
    assert "Traceback" not in err


def test_sigterm_to_the_watcher_is_forwarded(tmp_path: Path) -> None:
    child = script(tmp_path, """
        import time
        print("ready", flush=True)
        time.sleep(30)
    """)
    proc = start_watcher(tmp_path, child)
    read_until(proc, "ready")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc, _out, err = finish(proc)
    assert rc == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 10
    assert "died on SIGTERM" in err


def test_second_sigint_escalates_to_sigkill(tmp_path: Path) -> None:
    child = script(tmp_path, """
        import signal, time
        signal.signal(signal.SIGINT, lambda s, f: print("ignoring SIGINT", flush=True))
        print("ready", flush=True)
        time.sleep(30)
    """)
    proc = start_watcher(tmp_path, child)
    read_until(proc, "ready")
    proc.send_signal(signal.SIGINT)
    read_until(proc, "ignoring SIGINT")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc, _out, err = finish(proc)
    assert rc == 128 + signal.SIGKILL
    assert 0.3 < time.monotonic() - t0 < 10  # after the 0.5 s grace, not at once
    assert "then SIGKILL" in err


def test_second_signal_escalates_under_cpu_load(tmp_path: Path) -> None:
    """Issue 17: with the machine busy, the kernel may hand the signal to a tee or sampler thread;
    a main thread blocked in waitpid then never ran the handler (17 of 20 rounds never escalated).
    Three busy loops run for the whole test; every round must escalate to SIGKILL."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        child = script(tmp_path, """
            import signal, time
            signal.signal(signal.SIGINT, lambda s, f: print("ignoring SIGINT", flush=True))
            signal.signal(signal.SIGTERM, lambda s, f: print("ignoring SIGTERM", flush=True))
            print("ready", flush=True)
            time.sleep(60)
        """)
        for sig in (signal.SIGINT, signal.SIGTERM):
            proc = start_watcher(tmp_path, child)
            read_until(proc, "ready", timeout=60)
            proc.send_signal(sig)
            read_until(proc, "ignoring", timeout=60)
            t0 = time.monotonic()
            proc.send_signal(sig)
            rc, _out, err = finish(proc, timeout=60)
            assert rc == 128 + signal.SIGKILL, err
            assert time.monotonic() - t0 < 30  # the 0.5 s grace, plus a loaded machine's delays
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def test_a_signal_landing_on_another_thread_still_escalates(tmp_path: Path) -> None:
    """The mechanism behind the loaded-machine failure, made deterministic: the kernel may deliver a
    process signal to any thread; one delivered to a helper thread does not interrupt the main
    thread's waitpid, so a blocking wait ran the handler only when the child ended (60 s here)."""
    child = script(tmp_path, """
        import signal, time
        signal.signal(signal.SIGINT, lambda s, f: print("ignoring SIGINT", flush=True))
        print("ready", flush=True)
        time.sleep(60)
    """)
    poke = textwrap.dedent("""
        import signal, threading, time
        def poke():
            time.sleep(3)
            for _ in range(2):
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread, not main
                time.sleep(1)
        threading.Thread(target=poke, daemon=True).start()
    """)
    code = WATCHER.format(src=SRC, log=str(tmp_path / "w.csv")).replace("res = w.watch(", poke + "res = w.watch(", 1)
    assert "pthread_kill" in code
    proc = subprocess.Popen([sys.executable, "-c", code, *child], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    t0 = time.monotonic()
    rc, _out, err = finish(proc, timeout=40)
    assert rc == 128 + signal.SIGKILL, err
    assert time.monotonic() - t0 < 30


def test_python_m_entry_point(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    r = subprocess.run([sys.executable, "-m", "sparkops.monitor.watch", "--"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 3
    assert "needs a command" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sparkops.monitor.watch", "--log", str(tmp_path / "m.csv"), "--",
                        "no-such-command-sparkops-xyz"], capture_output=True, text=True, env=env, timeout=30,
                       cwd=tmp_path)
    assert r.returncode == 127
    assert "command not found" in r.stderr


# ---------------------------------------------------------------------- sampling never harms
def test_a_raising_sampler_warns_once_and_the_child_completes(tmp_path: Path) -> None:
    sampler = FakeSampler(fail=True)
    argv = script(tmp_path, "import time, sys; time.sleep(0.6); print('finished'); sys.exit(7)")
    res, out, err = run_watch(argv, tmp_path, sample=sampler)
    assert res.exit_code == 7
    assert out == b"finished\n"
    assert sampler.calls >= 3  # retried at each tick...
    assert err.count("[spark-ops] warning:") == 1  # ...said once
    assert "sampling failed: RuntimeError: NVML exploded" in err
    assert res.samples == 0
    assert any("samples failed in all" in n for n in res.notes)


def test_a_sampler_that_cannot_start_disables_sampling_only(tmp_path: Path, monkeypatch) -> None:
    def broken() -> tuple:
        raise ImportError("No module named 'sparkops.monitor.sampler'")

    monkeypatch.setattr(w, "_default_sample", broken)
    res, _out, err = run_watch(script(tmp_path, "import sys; sys.exit(4)"), tmp_path, sample=None)
    assert res.exit_code == 4
    assert err.count("[spark-ops] warning:") == 1
    assert "sampling disabled" in err


@pytest.mark.parametrize("where", ["factory", "feed", "finish"])
def test_a_failing_detector_keeps_logging(tmp_path: Path, where: str) -> None:
    class Bad(NoEvents):
        def feed(self, sample: Sample) -> list[Event]:
            if where == "feed":
                raise KeyError("temperature")
            return []

        def finish(self) -> list[Event]:
            if where == "finish":
                raise ZeroDivisionError("no samples")
            return []

    def factory() -> Bad:
        if where == "factory":
            raise RuntimeError("bad thresholds")
        return Bad()

    res, _out, err = run_watch(script(tmp_path, "import time; time.sleep(0.4)"), tmp_path,
                               detector_factory=factory)
    assert res.exit_code == 0
    assert res.samples >= 2
    rows = (tmp_path / "watch.csv").read_text().splitlines()
    assert len(rows) == res.samples + 1
    assert err.count("[spark-ops] warning:") == (0 if where == "finish" else 1)
    assert any("detect" in n for n in res.notes)


def test_new_event_is_printed_live_once_and_summarised(tmp_path: Path) -> None:
    argv = script(tmp_path, """
        import sys, time
        time.sleep(1.0)
        sys.stderr.write("child done\\n")
    """)
    res, _out, err = run_watch(argv, tmp_path, detector_factory=EventOnSecond)
    start = csvlog.stamp(1_700_000_002)
    live = f"[spark-ops] G4 throttling since {start}: power flat at 100 W, 85 °C, clock 2400 -> 1900 MHz"
    assert live + "\n" in err
    assert err.count(live) == 1  # repeated by the detector, printed once
    assert err.index(live) < err.index("child done")  # live, not at the end
    # closing summary: G-number, start and end from finish()
    assert f"G4 throttling since {start} until 2023/11/14 22:13:30.000" in err
    assert "[spark-ops] events: 1" in err
    assert [e.kind for e in res.events] == ["throttling"]
    assert res.events[0].end == "2023/11/14 22:13:30.000"


def test_no_events_said_as_such(tmp_path: Path) -> None:
    res, _out, err = run_watch(script(tmp_path, "import time; time.sleep(0.25)"), tmp_path)
    assert res.events == []
    assert "[spark-ops] events: none flagged" in err


# ------------------------------------------------------------------------------------ the log
def test_log_has_header_and_a_flushed_row_per_sample(tmp_path: Path) -> None:
    log = tmp_path / "sub" / "run.csv"
    seen_during = tmp_path / "seen"
    argv = script(tmp_path, f"""
        import time
        time.sleep(0.6)
        open({str(seen_during)!r}, "w").write(open({str(log)!r}).read())  # rows are on disk mid-run
    """)
    res, _out, err = run_watch(argv, tmp_path, log_path=log)
    lines = log.read_text().splitlines()
    assert lines[0] == csvlog.write_header()
    assert lines[0].startswith("timestamp, temperature.gpu, power.draw [W]")
    assert len(lines) == res.samples + 1
    assert 3 <= res.samples <= 15  # 0.1 s interval over ~0.6-1 s
    assert len(seen_during.read_text().splitlines()) >= 3
    rows, _notes = csvlog.read_log(log.read_text())
    assert rows[0]["temperature.gpu"] == 61.0
    assert rows[0]["power.draw [W]"] == 100.5
    assert f"[spark-ops] log: {log}" in err
    assert res.log_path == log


def test_default_log_lands_in_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res, _out, _err = run_watch(script(tmp_path, "pass"), tmp_path, log_path=None)
    assert res.log_path is not None and res.log_path.parent == tmp_path
    assert res.log_path.name.startswith("spark-ops-watch-") and res.log_path.suffix == ".csv"


def test_unsampled_watch_writes_no_log(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    out, err = io.BytesIO(), io.BytesIO()
    res = w.watch(script(tmp_path, "print('hi')"), use_default_sampler=False, out=out, err=err)
    assert res.exit_code == 0 and res.log_path is None and res.samples == 0
    assert list(tmp_path.glob("*.csv")) == []


# --------------------------------------------------------------------------------------- plot
def test_plot_without_matplotlib_is_a_note(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    res, _out, err = run_watch(script(tmp_path, "import time; time.sleep(0.3)"), tmp_path,
                               plot_path=tmp_path / "p.png")
    assert res.exit_code == 0
    assert res.plot_path is None
    assert "matplotlib is not installed" in err
    assert not (tmp_path / "p.png").exists()


def test_plot_with_matplotlib(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    res, _out, err = run_watch(script(tmp_path, "import time; time.sleep(0.4)"), tmp_path,
                               plot_path=tmp_path / "p.png", detector_factory=EventOnSecond)
    assert res.plot_path == tmp_path / "p.png"
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_memavailable_is_in_gib_as_everywhere_else() -> None:
    (label, scale), = [(lb, sc) for col, lb, sc in w._PLOT_SERIES if col == "mem.available [B]"]
    assert "GiB" in label
    assert 119.7 * 1024**3 * scale == pytest.approx(119.7)


def test_plot_series_is_thinned_not_unbounded() -> None:
    s = w._Sampling(interval_s=0.1, log_file=None, sample=None, make_sample=None, detector_factory=None,
                    err=w._sinks(io.BytesIO(), io.BytesIO())[1], keep_series=True, max_points=100)
    fake = FakeSampler()
    for _ in range(10_000):
        s._keep(fake())
    assert 50 <= len(s.series) <= 100
    assert s.series[0]["temperature.gpu"] == 61.0  # the first sample is kept
    assert set(s.series[0]) == set(w._PLOT_KEYS)


# --------------------------------------------------------------------------------------- sinks
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_sink_keeps_bytes_whole_however_they_are_chunked(data: bytes, cuts: list[int]) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    raw, text = io.BytesIO(), io.StringIO()
    o, _ = w._sinks(raw, raw)
    t, _ = w._sinks(text, text)
    for c in chunks:
        o.write_bytes(c)
        t.write_bytes(c)
    t.end()
    assert raw.getvalue() == data
    assert text.getvalue() == data.decode("utf-8", errors="replace")


class Closed(io.RawIOBase):
    """An output stream whose reader went away."""

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # noqa: ANN001
        raise BrokenPipeError(32, "Broken pipe")


# writes to one stream for up to 30 s, then exits 9: it ends sooner only when its writes fail
FLOOD = """
import sys, time
stream = getattr(sys, {name!r})
end = time.monotonic() + 30
while time.monotonic() < end:
    stream.write("line\\n" * 100)
    stream.flush()
sys.exit(9)
"""


@pytest.mark.parametrize("name", ["stdout", "stderr"])
def test_broken_output_stream_is_broken_for_the_child_too(tmp_path: Path, name: str) -> None:
    """Our reader gone, watch stops draining that stream and closes its end: the child's next write
    fails (EPIPE; a Python child raises BrokenPipeError) as it would without watch, and watch
    itself ends normally with the child's code."""
    out, err = (Closed(), io.BytesIO()) if name == "stdout" else (io.BytesIO(), Closed())
    res = w.watch(script(tmp_path, FLOOD.format(name=name)), out=out, err=err, sample=FakeSampler(),
                  detector_factory=NoEvents, interval_s=0.1, log_path=tmp_path / "l.csv")
    assert res.exit_code not in (0, 9)  # died of the broken pipe, not drained to the end
    assert res.duration_s < 15
    if name == "stdout":  # the other stream still works: the child's traceback and our summary
        text = err.getvalue().decode()
        assert "BrokenPipeError" in text
        assert f"exited {res.exit_code}" in text


def test_piped_to_a_reader_that_quits_early_the_watch_ends(tmp_path: Path) -> None:
    """``spark-ops watch -- CMD | head -1`` ends as ``CMD | head -1`` does, instead of running on."""
    code = WATCHER.format(src=SRC, log=str(tmp_path / "w.csv"))
    endless = [sys.executable, "-c", "while True: print('y')"]
    with open(tmp_path / "err.txt", "w") as errf:
        proc = subprocess.Popen([sys.executable, "-c", code, *endless], stdout=subprocess.PIPE, stderr=errf,
                                start_new_session=True)
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline() == b"y\n"
            proc.stdout.close()  # the reader quits, as head -1 does
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail("the watch kept running after its reader went away")
    err = (tmp_path / "err.txt").read_text()
    # the child ended on the broken pipe: SIGPIPE (128+13), or 1 from Python's BrokenPipeError
    assert "exited 1 " in err or "died on SIGPIPE (exit 141)" in err, err
    assert rc in (1, 128 + signal.SIGPIPE, 120), err  # 120: our own exit-time flush found the pipe shut


def test_summary_lines_name_duration_samples_events_and_log(tmp_path: Path) -> None:
    ev = Event(gotcha="G3", kind="memory-pressure", start="2025/11/24 20:25:50.123",
               summary="MemAvailable 3.1 GB of 119.7 GB")
    res = w.WatchResult(argv=["python", "train.py"], exit_code=0, duration_s=3723.0, samples=3723,
                        interval_s=1.0, events=[ev], log_path=tmp_path / "l.csv")
    lines = w.summary_lines(res)
    assert lines[0] == "[spark-ops] watch: `python train.py` exited 0 after 1h02m03s; 3723 samples every 1 s"
    assert ("[spark-ops]   G3 memory-pressure since 2025/11/24 20:25:50.123 (still going at the end): "
            "MemAvailable 3.1 GB of 119.7 GB") in lines
    assert lines[-1] == f"[spark-ops] log: {tmp_path / 'l.csv'}"
    assert w.event_line(ev) == ("[spark-ops] G3 memory-pressure since 2025/11/24 20:25:50.123: "
                                "MemAvailable 3.1 GB of 119.7 GB")


def test_ctrl_c_on_a_terminal_reaches_the_child_once(tmp_path: Path) -> None:
    """On a real terminal, Ctrl-C goes to the whole foreground group: the watcher must not send
    it a second time (a script saving a checkpoint on its first KeyboardInterrupt would be cut)."""
    import fcntl
    import termios

    master, slave = os.openpty()

    def take_terminal() -> None:  # the watcher as a shell's foreground job: session + controlling tty
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    code = WATCHER.format(src=SRC, log=str(tmp_path / "w.csv"))
    proc = subprocess.Popen([sys.executable, "-c", code, *script(tmp_path, SIGINT_CHILD)], stdin=slave,
                            stdout=slave, stderr=slave, start_new_session=True, preexec_fn=take_terminal)
    os.close(slave)
    seen = b""

    def read_for(marker: bytes, timeout: float) -> bytes:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen and time.monotonic() < deadline:
            import select

            if select.select([master], [], [], 0.1)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        return seen

    try:
        assert b"ready" in read_for(b"ready", 20)
        os.write(master, b"\x03")  # Ctrl-C typed on the terminal
        assert proc.wait(20) == 130
        out = read_for(b"SIGINT x", 5)
        assert b"child got SIGINT x1" in out
        assert b"SIGINT from the terminal reached the command too" in out  # and was not sent again
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)


# ------------------------------------------------------------------- the command's own processes
def test_own_tree_knows_the_command_and_its_descendants(tmp_path: Path) -> None:
    pidfile = tmp_path / "gc.pid"
    child = subprocess.Popen(script(tmp_path, f"""
        import subprocess, sys, time
        gc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        open({str(pidfile)!r}, "w").write(str(gc.pid))
        time.sleep(30)
    """))
    try:
        deadline = time.time() + 15
        while not (pidfile.exists() and pidfile.read_text()) and time.time() < deadline:
            time.sleep(0.02)
        grandchild = int(pidfile.read_text())
        own = w.OwnTree(child.pid)
        assert own(child.pid) and own(grandchild)
        assert not own(os.getpid()) and not own(1) and not own(0) and not own(2**22 + 12345)
        assert not w.OwnTree(None)(child.pid)
    finally:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        child.kill()
        child.wait()


def test_own_tree_reads_a_recorded_proc(tmp_path: Path) -> None:
    for pid, ppid in ((100, 1), (200, 100), (300, 200), (400, 1)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (python3 (x) y) S {ppid} {pid} {pid} 0 -1 4194560\n")
    own = w.OwnTree(100, proc=tmp_path)
    assert [own(p) for p in (100, 200, 300, 400, 999)] == [True, True, True, False, False]


def test_default_detector_excludes_the_commands_own_processes(tmp_path: Path, monkeypatch) -> None:
    from sparkops.monitor import analyze

    made: list = []

    class Recorder(NoEvents):
        def __init__(self, exclude_pid=None) -> None:  # noqa: ANN001
            made.append(exclude_pid)

    monkeypatch.setattr(analyze, "Detector", Recorder)
    pidfile = tmp_path / "me.pid"
    argv = script(tmp_path, f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(0.3)")
    res, _out, err = run_watch(argv, tmp_path, detector_factory=None)
    assert res.exit_code == 0 and "warning" not in err
    assert len(made) == 1
    assert made[0](int(pidfile.read_text())) is True
    assert made[0](os.getpid()) is False


def test_an_existing_log_is_appended_to_never_overwritten(tmp_path: Path) -> None:
    log = tmp_path / "run.csv"
    first, _o, _e = run_watch(script(tmp_path, "import time; time.sleep(0.25)"), tmp_path, log_path=log)
    before = log.read_text()
    second, _o, err = run_watch(script(tmp_path, "import time; time.sleep(0.25)"), tmp_path, log_path=log)
    after = log.read_text()
    assert after.startswith(before)
    assert after.count(csvlog.write_header()) == 2
    rows, _notes = csvlog.read_log(after)
    assert len(rows) == first.samples + second.samples
    assert f"appended to the existing log {log}" in err
    # a command that cannot start leaves an existing log as it was
    missing, _o, _e = run_watch(["no-such-command-sparkops-xyz"], tmp_path, log_path=log)
    assert missing.exit_code == 127 and log.read_text() == after


def test_watch_judges_the_sampled_gpu_by_its_own_profile() -> None:
    """On an H200 the detector must not speak of GB10's ~100 W cap: the sampler's GPU name picks it."""
    from sparkops.monitor.analyze import Detector

    fake = FakeSampler()
    src = w._Source(fake, lambda: None, list, lambda: "NVIDIA H200")
    s = w._Sampling(interval_s=0.1, log_file=None, sample=None, make_sample=lambda: src,
                    detector_factory=Detector, err=w._sinks(io.BytesIO(), io.BytesIO())[1],
                    keep_series=False, max_points=100)
    assert s._setup() and s.detector.profile == "generic" and s.detector.gpu_name == "NVIDIA H200"
    s = w._Sampling(interval_s=0.1, log_file=None, sample=None,
                    make_sample=lambda: w._Source(fake, lambda: None, list), detector_factory=Detector,
                    err=w._sinks(io.BytesIO(), io.BytesIO())[1], keep_series=False, max_points=100)
    assert s._setup() and s.detector.profile == "gb10"  # no name read: the Spark rules, as before


def test_watch_marks_its_own_gpu_process_once_and_never_a_foreign_one(tmp_path):
    """The log names the watched command's own GPU process once (its cell changes every row) and never a process
    outside its tree; `thermal analyze` of that log then judges no G6 neighbour on the command's own pid."""
    from sparkops.monitor.analyze import analyze_log
    from sparkops.monitor.csvlog import LogStream, job_pid_line

    pidfile = tmp_path / "child.pid"
    foreign = os.getpid()  # this test's own process: not in the watched tree

    class WithProcesses(FakeSampler):
        def __call__(self):
            row = super().__call__()
            child = int(pidfile.read_text()) if pidfile.exists() and pidfile.read_text() else None
            procs = [f"{foreign}:python:{20 << 30}"] if self.calls > 3 else []
            if child:
                procs.append(f"{child}:python:{(1 + self.calls) << 30}")  # grows: a new cell every row
            row["gpu.processes"] = ";".join(procs) or "none"
            return row

    argv = script(tmp_path, f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(1.0)")
    log = tmp_path / "watch.csv"
    res, _out, _err = run_watch(argv, tmp_path, sample=WithProcesses(), detector_factory=NoEvents, log_path=log)
    assert res.exit_code == 0 and res.samples >= 5
    text = log.read_text()
    child = int(pidfile.read_text())
    assert text.count(job_pid_line(child)) == 1
    assert job_pid_line(foreign) not in text
    judged = analyze_log(LogStream(log), profile="generic")
    assert child not in {int(e.evidence["pid"]) for e in judged.events if e.kind == "new-neighbour"}
