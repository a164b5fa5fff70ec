"""``spark-ops bandwidth`` and ``preflight --measure`` end to end: real subprocesses, fake target pythons.

This box has no GPU: the facts the command collects show none, so free memory is left to the child
(the fake answers as a GB10 would) and G5 judges the measurement by the device the child names.
The process table is this box's real one: a test about launching and reading passes ``--force`` so a
job running here (another test session's trainer) cannot turn it into a refusal; the refusal itself
is tested with a trainer the test starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

BIN = FIXTURES / "bin"


def fake(name: str) -> str:
    return str(BIN / f"python-bandwidth-{name}")


def spark_ops(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 180):
    # the tool's own environment as it is (an in-tree run may need PYTHONPATH); the fakes ignore it
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, cwd=cwd)


def test_measured_in_range_exits_0_with_the_json_contract():
    p = spark_ops("bandwidth", "--force", "--python", fake("gb10"), "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] == "measured" and rep["exit_code"] == 0 and rep["G5"]["status"] == "pass"
    assert [m["method"] for m in rep["methods"]] == ["copy", "read"]
    copy = rep["methods"][0]
    assert copy["gbs_median"] == 186.4 and copy["expected_gbs"] == [180.0, 192.0] and copy["level"] == "in-range"
    assert copy["counts"] == "bytes read + bytes written" and round(copy["fraction_of_spec"], 3) == 0.683
    assert rep["measurement"]["peak_allocated_bytes"] <= 2_000_000_000
    assert rep["measurement"]["allocated_after_bytes"] == 0
    assert rep["target_python"] == fake("gb10")


def test_text_output_names_methods_what_they_count_and_the_g5_line():
    p = spark_ops("bandwidth", "--force", "--python", fake("gb10"))
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "device memory bandwidth of NVIDIA GB10" in out
    assert "copy: dst.copy_(src), fp32, preallocated; GB/s counts bytes read + bytes written" in out
    assert "read: torch.sum(src) into a preallocated scalar, fp32; GB/s counts bytes read" in out
    assert "G5 PASS: NVIDIA GB10: measured copy 186 GB/s" in out


def test_far_below_the_expected_range_exits_2():
    p = spark_ops("bandwidth", "--force", "--python", fake("degraded"), "--json")
    assert p.returncode == 2, p.stdout
    rep = json.loads(p.stdout)
    assert rep["G5"]["status"] == "warn" and {m["level"] for m in rep["methods"]} == {"far-below"}


@pytest.mark.parametrize("name, kind", [("notorch", "no_torch"), ("nogpu", "no_gpu"), ("crash", "crash"),
                                        ("garbage", "garbage")])
def test_could_not_run_exits_3_with_the_reason(name, kind):
    p = spark_ops("bandwidth", "--force", "--python", fake(name), "--json")
    assert p.returncode == 3, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] == "failed" and rep["kind"] == kind and rep["reason"]
    assert "Traceback" not in p.stderr


def test_missing_interpreter_exits_3_in_words():
    p = spark_ops("bandwidth", "--force", "--python", "/nonexistent/bin/python3")
    assert p.returncode == 3
    assert "target interpreter /nonexistent/bin/python3 does not exist" in p.stdout


@pytest.mark.parametrize("size", ["lots", "-2", "0"])
def test_a_bad_size_is_a_usage_error(size):
    p = spark_ops("bandwidth", "--python", fake("gb10"), "--size", size)
    assert p.returncode == 3 and "--size" in p.stderr


def test_an_explicit_size_reaches_the_child(tmp_path):
    log = tmp_path / "args.log"
    p = spark_ops("bandwidth", "--force", "--python", fake("gb10"), "--size", "0.5", "--json",
                  env={"FAKE_BW_LOG": str(log)})
    assert p.returncode == 0, p.stderr
    config = json.loads(log.read_text().strip().split(" ", 1)[1])
    assert config["explicit_bytes"] == 500_000_000 and config["force"] is True


def test_inside_a_container_the_script_comes_on_stdin(tmp_path):
    b = tmp_path / "bin"
    b.mkdir()
    (b / "docker").symlink_to(BIN / "docker-container")
    log = tmp_path / "docker.log"
    env = {"PATH": f"{b}:/usr/bin:/bin", "FAKE_DOCKER_LOG": str(log)}
    p = spark_ops("bandwidth", "--force", "--container", "nvcr.io/nvidia/pytorch:25.09-py3", "--python", fake("gb10"),
                  "--json", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] == "measured" and rep["container"] == "nvcr.io/nvidia/pytorch:25.09-py3"
    assert rep["measurement"]["container_ref"] == "nvcr.io/nvidia/pytorch:25.09-py3"
    run = next(c for c in log.read_text().splitlines() if c.startswith("run "))
    assert "--gpus all" in run and "--pull never" in run and f"--entrypoint {fake('gb10')}" in run
    assert " - {" in run  # the script from stdin, its configuration as the one argument


def test_no_docker_exits_3_in_words(tmp_path):
    p = spark_ops("bandwidth", "--force", "--container", "ngc", "--json", env={"PATH": str(tmp_path)})
    assert p.returncode == 3
    assert "docker CLI not found" in json.loads(p.stdout)["reason"]


def _gb10_smi_path(tmp_path: Path) -> dict:
    """A fake GB10 nvidia-smi first on PATH (NVML off): the facts this box collects then show a GPU."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(BIN / "nvidia-smi-gb10")
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "SPARKOPS_NO_NVML": "1"}


def test_a_training_job_here_refuses_the_measurement_naming_it(tmp_path):
    # the facts must show a GPU for other jobs to share it (a GPU-less box says so instead: next test)
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(120)\n")
    log = tmp_path / "args.log"
    job = subprocess.Popen([sys.executable, str(script)])
    try:
        p = spark_ops("bandwidth", "--python", fake("gb10"), "--json",
                      env={"FAKE_BW_LOG": str(log), **_gb10_smi_path(tmp_path)})
    finally:
        job.kill()
        job.wait()
    assert p.returncode == 1, p.stdout + p.stderr
    rep = json.loads(p.stdout)
    assert rep["status"] == "refused" and f"pid {job.pid}, trainer process" in rep["reason"]
    assert "--force" in rep["reason"] and rep["G5"]["status"] == "skip"
    assert job.pid in {n["pid"] for n in rep["neighbours"]}
    assert not log.exists()  # nothing was started in the target python


def test_a_training_job_on_a_box_without_a_gpu_is_not_a_refusal(tmp_path):
    """Issue 17: this box has no GPU; with a trainer running it answered "refused: other GPU jobs running"."""
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(120)\n")
    job = subprocess.Popen([sys.executable, str(script)])
    try:
        p = spark_ops("bandwidth", "--python", fake("nogpu"), "--json")
    finally:
        job.kill()
        job.wait()
    rep = json.loads(p.stdout)
    assert p.returncode == 3, p.stdout + p.stderr
    assert rep["status"] == "failed" and rep["kind"] == "no_gpu" and "sees no CUDA device" in rep["reason"]
    assert "other GPU job" not in p.stdout and rep["neighbours"] == []


# ---------------------------------------------------------------- preflight --measure
def test_preflight_measure_puts_the_measurement_in_g5(tmp_path):
    rep = tmp_path / "env-report.json"
    # --quick: the fake answers only the measure script, not the live torch probe
    p = spark_ops("preflight", "--quick", "--measure", "--python", fake("gb10"), "--offline", "--config",
                  str(tmp_path), "--report", str(rep), "--format", "lines")
    assert p.returncode in (1, 2), p.stderr  # this box has no GPU: identity blocks, G5 still judges
    g5 = json.loads(rep.read_text())["checks"]["G5"]
    line = next(line for line in p.stdout.splitlines() if line.startswith("G5 "))
    if g5.startswith("skip: "):  # a GPU job runs on this box right now: preflight has no --force
        assert "refused: " in g5 and "other GPU job(s) running" in g5, g5
    else:
        assert g5 == "pass" and line.startswith("G5 PASS: NVIDIA GB10: measured copy 186 GB/s"), line


def test_api_preflight_with_measure_bandwidth_judges_the_measurement(tmp_path):
    from sparkops import api

    opts = api.CollectOptions(depth="quick", python=fake("gb10"), env=dict(os.environ), offline=True,
                              config_paths=(tmp_path,), only=("gpu", "memory", "host", "target"),
                              measure_bandwidth=True)
    rep = api.preflight(opts=opts)
    assert rep.checks["G5"] == "pass"
    g5 = next(f for f in rep.findings if f.gotcha == "G5")
    assert "copy 186 GB/s" in g5.summary and "read 233 GB/s" in g5.summary


def test_preflight_without_measure_never_starts_the_measurement(tmp_path):
    log = tmp_path / "args.log"
    p = spark_ops("preflight", "--quick", "--python", fake("gb10"), "--offline", "--config", str(tmp_path),
                  "--report", str(tmp_path / "r.json"), "--format", "lines", env={"FAKE_BW_LOG": str(log)})
    assert p.returncode in (1, 2), p.stderr
    assert not log.exists() or "l2_multiple" not in log.read_text()


def test_preflight_measure_cannot_replay_a_snapshot(tmp_path):
    p = spark_ops("preflight", "--measure", "--facts", str(FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"),
                  "--report", str(tmp_path / "r.json"))
    assert p.returncode == 3 and "--measure" in (p.stderr + p.stdout)


@pytest.mark.gpu
def test_real_probe_on_this_gpu_stays_within_2_gb_and_frees_it():
    """The real measurement (GPU machines only): torch from $SPARKOPS_TORCH_PYTHON or python3 on PATH."""
    py = os.environ.get("SPARKOPS_TORCH_PYTHON") or "python3"
    p = spark_ops("bandwidth", "--python", py, "--json")
    assert p.stdout.strip(), p.stderr
    rep = json.loads(p.stdout)
    if rep["status"] == "refused":
        pytest.skip(f"refused here: {rep['reason']}")
    assert rep["status"] == "measured", rep["reason"]
    bw = rep["measurement"]
    assert bw["peak_allocated_bytes"] <= 2_000_000_000 and bw["allocated_after_bytes"] == 0
    assert bw["reserved_after_bytes"] == 0 and bw["gpu_time_s"] < 2.0
    assert {m["method"] for m in bw["methods"]} == {"copy", "read"}
    assert all(m["gbs_median"] > 0 and m["gbs_min"] <= m["gbs_median"] <= m["gbs_max"] for m in bw["methods"])
    assert p.returncode in (0, 1, 2)
