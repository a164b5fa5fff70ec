"""``spark-ops fleet`` for real: two processes under torchrun (``--standalone``: a free port each run),
gloo on the CPU. Needs torch in the interpreter running the tests; skipped cleanly without it.

Each rank is its own process: it collects (or, with ``--test-fake-facts``, loads) its facts, rank 0
gathers them through torch.distributed, judges, writes fleet-report.json and prints. torchrun exits 0
when every rank exits 0, else 1; the fleet's own verdict is in the report and in rank 0's output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch without torch.distributed/gloo", allow_module_level=True)

FACTS = Path(__file__).parents[1] / "fixtures" / "facts"
SPARK_A = FACTS / "fleet_gb10_spark_a.json"
SPARK_B = FACTS / "fleet_gb10_spark_b_drift.json"


def torchrun(tmp_path: Path, *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, dict, float]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NCCL_DEBUG")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    report = tmp_path / "fleet-report.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "sparkops", "fleet", "--backend", "gloo", "--quick", "--offline", "--report", str(report), *args]
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=timeout)
    took = time.monotonic() - t0
    assert report.exists(), f"no report; rc={res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr[-3000:]}"
    return res, json.loads(report.read_text()), took


def finding(rep: dict, check: str) -> dict:
    return next(f for f in rep["findings"] if f["check"] == check)


def test_two_live_ranks_collect_in_their_own_processes_and_measure(tmp_path):
    res, rep, _ = torchrun(tmp_path, "--collective-timeout", "20")
    assert rep["world_size"] == 2 and rep["backend"] == "gloo" and rep["launcher"] == "torchrun"
    assert [n["rank"] for n in rep["nodes"]] == [0, 1]
    assert all(n["facts_source"] == "live" and n["facts"] is not None and n["report"] for n in rep["nodes"])
    pids = {n["runtime"]["pid"] for n in rep["nodes"]}
    assert len(pids) == 2  # each rank collected in its own process
    assert all(n["facts"]["host"]["env"].get("WORLD_SIZE") == "2" for n in rep["nodes"])  # torchrun's env, seen by the probes
    assert finding(rep, "fleet.membership")["status"] == "pass"
    assert finding(rep, "fleet.torch")["status"] == "pass"
    bw = rep["bandwidth"]
    assert bw["status"] == "measured" and bw["timer"] == "perf_counter"
    assert {r["op"] for r in bw["rows"]} == {"all_reduce", "all_gather"}
    assert all(r["time_us"] > 0 and len(r["rank_time_us"]) == 2 for r in bw["rows"])
    assert "Fleet verdict:" in res.stdout and res.stdout.count("Fleet verdict:") == 1  # only rank 0 prints
    assert (res.returncode == 0) == (rep["verdict"] == "ready")


def test_identical_snapshots_make_a_ready_fleet(tmp_path):
    res, rep, _ = torchrun(tmp_path, "--test-fake-facts", f"0={SPARK_A}", "--test-fake-facts", f"1={SPARK_A}")
    assert rep["verdict"] == "ready", [f for f in rep["findings"] if f["status"] not in ("pass", "info")]
    assert finding(rep, "fleet.bandwidth")["status"] == "info"  # measured, but both ranks share one host
    assert res.returncode == 0
    assert res.stdout.startswith("Fleet verdict: READY")


def test_a_rank_with_different_facts_blocks_and_is_named(tmp_path):
    res, rep, _ = torchrun(tmp_path, "--test-fake-facts", f"0={SPARK_A}", "--test-fake-facts", f"1={SPARK_B}",
                           "--no-bandwidth", "--json")
    assert rep["verdict"] == "blocked" and rep["fleet_verdict"] == "blocked"
    torch = finding(rep, "fleet.torch")
    assert torch["status"] == "fail" and torch["ranks"] == [1]
    assert "2.9.0a0+145a3a7bda.nv25.10 (CUDA 13.0) on rank 1" in torch["summary"]
    assert finding(rep, "fleet.driver")["ranks"] == [1]
    assert json.loads(res.stdout)["verdict"] == "blocked"  # --json: rank 0 printed the report itself
    assert res.returncode != 0


# The asked timeouts are proven by the reports' own words ("within 4 s", "within 5 s"); the wall-clock bounds
# below only say the run ended well before the defaults (120 s to join, 60 s a collective) could have fired,
# with room for two ranks importing torch on a loaded 2-core CI machine.
def test_a_rank_that_never_joins_is_named_within_the_timeout(tmp_path):
    res, rep, took = torchrun(tmp_path, "--test-never-join", "1", "--join-timeout", "4", "--no-bandwidth",
                              timeout=180)
    assert took < 100
    member = finding(rep, "fleet.membership")
    assert member["status"] == "fail" and member["ranks"] == [1]
    assert member["summary"].startswith("rank 1 of world size 2 never joined within 4 s")
    assert [m["joined"] for m in rep["members"]] == [True, False]
    assert rep["verdict"] == "blocked" and res.returncode != 0
    assert "never joined" in res.stdout


def test_a_collective_that_hangs_is_named_not_waited_on(tmp_path):
    res, rep, took = torchrun(tmp_path, "--test-hang-collective", "1", "--collective-timeout", "5", timeout=180)
    assert took < 55
    bw = finding(rep, "fleet.bandwidth")
    assert bw["status"] == "fail" and bw["ranks"] == [1]
    assert "all-reduce of 64 KiB did not complete within 5 s: rank 1 last reported: ready" in bw["summary"]
    member = finding(rep, "fleet.membership")
    assert member["status"] == "fail" and member["ranks"] == [1] and "bandwidth probe" in member["summary"]
    assert rep["bandwidth"]["status"] == "timed-out" and rep["bandwidth"]["stalled_ranks"] == [1]


def test_a_rank_blocked_inside_a_collective_is_reported_by_its_watchdog(tmp_path):
    # rank 0 itself blocks, as NCCL's synchronous communicator setup can: its polling never runs, so the
    # stall guard's thread must write the report, name the rank and end the process
    res, rep, took = torchrun(tmp_path, "--test-block-in-collective", "0", "--collective-timeout", "4", timeout=180)
    assert took < 55
    bw = finding(rep, "fleet.bandwidth")
    assert bw["status"] == "fail" and bw["ranks"] == [0] and "inside the all-reduce of 64 KiB" in bw["summary"]
    assert "Fleet verdict: BLOCKED" in res.stdout
