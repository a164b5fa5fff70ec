"""The monitor commands end to end: thermal analyze/start/status/stop and watch, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES
from sparkops.monitor.events import EVENT_KINDS

THERMAL = FIXTURES / "raw" / "thermal"


def spark_ops(*args: str, env: dict | None = None, timeout: float = 60, cwd: Path | None = None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True,
                          env=e, timeout=timeout, cwd=cwd)


def _fake_gpu_env(tmp_path: Path) -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    link = bindir / "nvidia-smi"
    if not link.exists():
        link.symlink_to(FIXTURES / "bin" / "nvidia-smi-gb10")
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "SPARKOPS_NO_NVML": "1"}


def test_analyze_json_contract_and_exit_codes():
    p = spark_ops("thermal", "analyze", str(THERMAL / "gb10_throttling.csv"), "--json")
    assert p.returncode == 1, p.stderr
    data = json.loads(p.stdout)
    kinds = [e["kind"] for e in data["events"]]
    assert "throttling" in kinds
    for e in data["events"]:
        assert {"gotcha", "kind", "start", "end", "summary"} <= set(e)
        assert e["kind"] in EVENT_KINDS
    normal = spark_ops("thermal", "analyze", str(THERMAL / "gb10_normal_plateau.csv"))
    assert normal.returncode == 0 and "power-plateau" in normal.stdout and "throttling" not in normal.stdout


def test_the_issue_names_are_the_public_kinds():
    for kind in ("throttling", "power-plateau", "low-clock-state", "memory-pressure", "new-neighbour",
                 "insufficient-load"):
        assert kind in EVENT_KINDS


def test_analyze_a_missing_file_is_a_usage_error(tmp_path):
    p = spark_ops("thermal", "analyze", str(tmp_path / "nope.csv"))
    assert p.returncode == 3 and "Traceback" not in p.stderr


def test_thermal_start_status_stop(tmp_path):
    env = _fake_gpu_env(tmp_path)
    log = tmp_path / "t.csv"
    started = spark_ops("thermal", "start", "--interval", "0.2", "--log", str(log), "--json", env=env)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert json.loads(started.stdout)["running"] is True
        time.sleep(1.5)
        st = json.loads(spark_ops("thermal", "status", "--log", str(log), "--json", env=env).stdout)
        assert st["running"] and st["samples"] >= 2
        assert log.read_text().splitlines()[0].startswith("timestamp, temperature.gpu, power.draw [W]")
    finally:
        stopped = spark_ops("thermal", "stop", "--log", str(log), "--json", env=env)
    assert stopped.returncode == 0 and json.loads(stopped.stdout)["running"] is False


def test_watch_exits_with_the_childs_code_and_logs(tmp_path):
    env = _fake_gpu_env(tmp_path)
    log = tmp_path / "w.csv"
    p = spark_ops("watch", "--interval", "0.2", "--log", str(log), "--", sys.executable, "-c",
                  "import time; print('hello from the job'); time.sleep(1); raise SystemExit(3)", env=env)
    assert p.returncode == 3, p.stderr
    assert "hello from the job" in p.stdout
    assert len(log.read_text().splitlines()) >= 3


def test_watch_without_a_command_is_a_usage_error():
    p = spark_ops("watch")
    assert p.returncode == 3 and "Traceback" not in p.stderr


def test_analyze_logs_without_timestamps_or_rows_do_not_crash(tmp_path):
    cases = {"empty.csv": "", "one.csv": "timestamp, temperature.gpu, power.draw [W]\n"
                                          "2025/11/24 20:25:50.123, 74, 105.21 W\n",
             "nots.csv": "temperature.gpu, power.draw [W]\n74, 105.21 W\n75, 104.9 W\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        p = spark_ops("thermal", "analyze", str(tmp_path / name))
        assert p.returncode == (3 if name == "empty.csv" else 0), (name, p.stderr)  # empty: no samples
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr


def test_stop_without_log_finds_the_sampler_started_on_an_earlier_day(tmp_path):
    env = _fake_gpu_env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    old = "thermal-20261201.csv"  # started "yesterday": today's default name would miss it
    started = spark_ops("thermal", "start", "--interval", "0.2", "--log", old, "--json", env=env, cwd=work)
    assert json.loads(started.stdout)["running"], started.stderr
    try:
        st = json.loads(spark_ops("thermal", "status", "--json", env=env, cwd=work).stdout)
        assert st["running"] and st["log"].endswith(old)
    finally:
        stopped = spark_ops("thermal", "stop", "--json", env=env, cwd=work)
    assert json.loads(stopped.stdout)["running"] is False
    assert not (work / (old + ".pid")).exists()


def test_analyze_of_a_file_with_no_samples_is_exit_3_not_all_clear(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("this is not a log\nat all\n")
    p = spark_ops("thermal", "analyze", str(f))
    assert p.returncode == 3 and "no samples could be read" in p.stderr
    assert "nothing to judge" in p.stdout  # the reason is still said
