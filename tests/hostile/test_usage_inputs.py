"""Hostile command-line values and side files: a mistyped --python is a usage error, probes leave no
grandchild behind, a pid file cannot crash the sampler's status, an impossible workload is refused
(issue 17, item 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.facts.workload import merge, refusals
from sparkops.monitor import daemon
from sparkops.probes import _run


def spark_ops(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.mark.parametrize("kind", ["missing", "directory", "not-executable", "not-on-path"])
def test_a_mistyped_python_is_a_usage_error_not_a_skip(tmp_path, kind):
    target = {"missing": str(tmp_path / "nope" / "python"), "directory": str(tmp_path),
              "not-executable": str(tmp_path / "python"), "not-on-path": "python-that-does-not-exist-17"}[kind]
    if kind == "not-executable":
        Path(target).write_text("#!/bin/sh\n")
    p = spark_ops("preflight", "--quick", "--offline", "--python", target, "--report", str(tmp_path / "r.json"))
    assert p.returncode == 3
    assert "--python" in p.stderr and "G1" not in p.stdout
    assert not (tmp_path / "r.json").exists()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_probe_child_leaves_no_grandchild_running(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    res = _run.run(["/bin/sh", "-c", f"sleep 300 & echo $! > {pidfile}; echo done"], timeout=30)
    assert res.ok and res.stdout.strip() == "done"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_pending_kill_also_kills_what_an_exited_child_left(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    pending = _run.spawn(["/bin/sh", "-c", f"sleep 300 & echo $! > {pidfile}"])
    pending.proc.wait(10)
    pid = int(pidfile.read_text())
    assert _alive(pid)
    pending.kill()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


@settings(max_examples=60, deadline=None)
@given(content=st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: json.dumps({"pid": n}).encode()),
    st.floats(allow_nan=False).map(lambda n: json.dumps({"pid": n}).encode()),
    st.text(max_size=200).map(str.encode),
    st.binary(max_size=200),
))
def test_any_pid_file_gives_a_status_never_a_crash(tmp_path_factory, content):
    log = tmp_path_factory.mktemp("pid") / "thermal.csv"
    daemon.pid_path(log).write_bytes(content)
    st_ = daemon.status(log)
    assert not st_.running or st_.pid == os.getpid()


def test_a_pid_file_of_two_to_the_fortieth_through_the_cli(tmp_path):
    log = tmp_path / "thermal.csv"
    daemon.pid_path(log).write_text(json.dumps({"pid": 2**40}))
    p = spark_ops("thermal", "status", "--log", str(log), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["running"] is False


def test_a_fifo_as_pid_file_is_not_waited_on(tmp_path):
    log = tmp_path / "thermal.csv"
    os.mkfifo(daemon.pid_path(log))
    p = spark_ops("thermal", "status", "--log", str(log), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["running"] is False


@pytest.mark.parametrize("text,word", [("lora 10000b", "model size"), ("qlora 70b seq -4096", "negative seq"),
                                       ("qlora 8b bs -2", "negative bs"), ("lora 8b tp 0", "tensor-parallel")])
def test_impossible_workloads_are_refused(text, word):
    problems = refusals(merge(text))
    assert problems and any(word in p for p in problems), problems
    p = spark_ops("plan", "-w", text)
    assert p.returncode == 3 and word in p.stderr


@pytest.mark.parametrize("text", ["qlora 70b seq 8192 nvfp4", "lora llama-3.1-8b bs 4 seq 2048", "inference 120b",
                                  "full 8x7b tp 2 on 2 nodes", ""])
def test_real_workloads_are_not_refused(text):
    assert refusals(merge(text)) == []


def test_plan_flags_are_bounded_too():
    p = spark_ops("plan", "-w", "qlora 8b", "--seq-len", "-4096")
    assert p.returncode == 3 and "sequence length" in p.stderr
