"""The background sampler as real processes: start, status, a second start, stop, stale pid files.

The daemon runs ``python -m sparkops.monitor.daemon`` with the fake GB10 nvidia-smi first on PATH
and NVML off, at 0.1-0.2 s, so a whole life cycle takes a second or two.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops.monitor import csvlog, daemon
from sparkops.monitor.daemon import DaemonStatus, pid_path

BIN = Path(__file__).parent.parent / "fixtures" / "bin"


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    d = tmp_path / "bin"
    d.mkdir()
    (d / "nvidia-smi").symlink_to(BIN / "nvidia-smi-gb10")
    return {**os.environ, "PATH": f"{d}{os.pathsep}{os.environ.get('PATH', '')}", "SPARKOPS_NO_NVML": "1"}


def _wait(pred, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_life_cycle(tmp_path, env):
    log = tmp_path / "logs" / "thermal.csv"
    st0 = daemon.start(log, 0.1, env=env)
    try:
        assert st0.running and st0.pid and st0.interval_s == 0.1 and "started" in st0.note
        assert st0.started_at and datetime.fromisoformat(st0.started_at)
        data = json.loads(pid_path(log).read_text())
        assert data["pid"] == st0.pid and data["interval_s"] == 0.1 and data["log"] == str(log)
        a = _wait(lambda: (s := daemon.status(log)).samples >= 2 and s)
        b = _wait(lambda: (s := daemon.status(log)).samples > a.samples and s)
        assert b.running and b.pid == st0.pid and b.last_sample
        again = daemon.start(log, 0.5, env=env)  # no second sampler, the running one comes back
        assert again.running and again.pid == st0.pid and again.interval_s == 0.1
        assert "already running" in again.note
    finally:
        stopped = daemon.stop(log)
    assert not stopped.running and stopped.pid == st0.pid and stopped.note.startswith("stopped")
    assert not pid_path(log).exists() and not daemon.alive(st0.pid)
    after = daemon.status(log)
    assert not after.running and after.pid is None and after.samples == stopped.samples >= 3
    rows, notes = csvlog.read_log(log.read_text())
    assert len(rows) == after.samples and not [n for n in notes if "skipped" in n]
    assert rows[-1]["power.draw [W]"] == pytest.approx(11.17) and rows[-1]["temperature.gpu"] == 42
    assert rows[-1]["violation.sw_power_cap [us]"] == 50_284_264_713
    assert after.last_sample == rows[-1]["timestamp"]
    first = log.read_text().splitlines()[1]
    assert first.split(", ")[1:3] == ["42", "11.17 W"]  # the seeds' first three columns


def test_stop_when_not_running_is_a_clear_no_op(tmp_path):
    st = daemon.stop(tmp_path / "none.csv")
    assert not st.running and st.pid is None and "no sampler running" in st.note
    assert not (tmp_path / "none.csv").exists()


@pytest.mark.parametrize("who", ["gone", "someone-else", "garbage"])
def test_stale_pid_file_is_cleaned(tmp_path, who):
    log = tmp_path / "t.csv"
    pid = {"gone": _dead_pid(), "someone-else": os.getpid(), "garbage": None}[who]
    pf = pid_path(log)
    pf.write_text(json.dumps({"pid": pid, "interval_s": 5}) if pid else "{not json")
    if who == "garbage":
        old = time.time() - 60
        os.utime(pf, (old, old))  # not a file being written this instant
    st = daemon.status(log)
    assert not st.running and "stale pid file removed" in st.note and not pf.exists()


def test_stale_pid_file_does_not_block_a_start(tmp_path, env):
    log = tmp_path / "t.csv"
    pid_path(log).write_text(json.dumps({"pid": os.getpid(), "interval_s": 5}))  # pid reused by pytest
    st = daemon.start(log, 0.2, env=env)
    try:
        assert st.running and st.pid != os.getpid() and "stale pid file removed" in st.note
    finally:
        daemon.stop(log)


def test_start_failure_is_reported_not_raised(tmp_path, env):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    st = daemon.start(blocker / "t.csv", 0.2, env=env)  # parent "directory" is a file
    assert not st.running and "could not start" in st.note


def test_daemon_exit_is_reported(tmp_path, env):
    log = tmp_path / "t.csv"
    log.mkdir()  # the log path is a directory: the daemon claims its pid file, then cannot open the log
    st = daemon.start(log, 0.2, env=env)
    assert not st.running
    assert "exited" in st.note or "Is a directory" in st.note
    assert not pid_path(log).exists()


def test_interval_limits(tmp_path):
    with pytest.raises(ValueError, match="minimum"):
        daemon.start(tmp_path / "t.csv", 0.05)
    assert daemon.main(["--log", str(tmp_path / "t.csv"), "--interval", "0.01"]) == daemon.EXIT_ERROR
    assert daemon.default_interval() == 5.0


def test_default_log_name(tmp_path):
    assert daemon.default_log(datetime(2025, 11, 24, 20, 25), tmp_path) == tmp_path / "thermal-20251124.csv"


def test_render():
    on = DaemonStatus(running=True, pid=7, log="/x.csv", interval_s=5.0, started_at="2025-11-24T20:25:50",
                      samples=3, last_sample="2025/11/24 20:26:05.001")
    assert daemon.render(on) == ("sampling every 5 s (pid 7, since 2025-11-24T20:25:50) -> /x.csv; "
                                 "3 rows, last 2025/11/24 20:26:05.001")
    assert daemon.render(DaemonStatus(running=False, log="/x.csv", note="n")) == "not running -> /x.csv; 0 rows [n]"


@given(st.binary(max_size=3000))
def test_log_stats_never_raises(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("l") / "t.csv"
    path.write_bytes(blob)
    rows, last = daemon._log_stats(path)
    assert 0 <= rows <= blob.count(b"\n") + 1
    assert last is None or isinstance(last, str)


def test_log_stats_counts_rows_not_header(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(csvlog.write_header() + "\n2025/11/24 20:25:50.123, 74, 105.21 W\n"
                    "2025/11/24 20:25:55.123, 75, 105.30 W\n")
    assert daemon._log_stats(path) == (2, "2025/11/24 20:25:55.123")
    path.write_text(csvlog.write_header() + "\n")
    assert daemon._log_stats(path) == (0, None)
    assert daemon._log_stats(tmp_path / "missing.csv") == (0, None)


def test_daemon_started_by_hand_with_a_relative_log_is_recognised(tmp_path, env):
    proc = subprocess.Popen([sys.executable, "-m", daemon.MODULE, "--log", "rel.csv", "--interval", "0.2"],
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    log = tmp_path / "rel.csv"
    try:
        st = _wait(lambda: (s := daemon.status(log)).running and s)
        assert st.pid == proc.pid and pid_path(log).exists()
    finally:
        stopped = daemon.stop(log)
        proc.wait(5)
    assert stopped.note.startswith("stopped") and proc.returncode == 0 and not pid_path(log).exists()
