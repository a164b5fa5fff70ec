"""Launching the measurement in the target interpreter and reading what comes back.

The target "pythons" are fake executables in ``tests/fixtures/bin/python-bandwidth-*``: a healthy
GB10, a degraded one, one that hangs, one that crashes, one that prints garbage, one without torch,
one whose torch sees no GPU. Parsing is property-tested: no stdout makes it raise.
"""

from __future__ import annotations

import json
import os

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from build_fixtures import patch
from conftest import FIXTURES, load_facts_fixture
from sparkops.bandwidth import probe
from sparkops.facts.model import BandwidthFacts, TorchLive
from sparkops.facts.reading import Unavailable, Why
from sparkops.knowledge import load
from sparkops.probes import CollectOptions
from sparkops.probes._run import RunResult

BIN = FIXTURES / "bin"
KB = load()
FAST = KB.thresholds.bandwidth.model_copy(update={"timeout_s": 3.0})


def fake(name: str) -> str:
    return str(BIN / f"python-bandwidth-{name}")


def healthy_gb10():
    return load_facts_fixture("gb10_ngc_2509_healthy")


def run(name: str, facts=None, **kw) -> probe.Outcome:
    return probe.measure(facts or healthy_gb10(), KB, python=fake(name), env={"PATH": "/usr/bin:/bin"},
                         settings=FAST, alive=lambda pid: True, **kw)


# ---------------------------------------------------------------- outcomes of real child processes
def test_a_healthy_gb10_measurement_becomes_the_facts_section():
    out = run("gb10")
    assert out.status == "measured" and out.kind == ""
    bw = out.section
    assert isinstance(bw, BandwidthFacts)
    assert [m.method for m in bw.methods] == ["copy", "read"]
    assert bw.methods[0].gbs_median == 186.4 and bw.methods[0].counts == "bytes read + bytes written"
    assert bw.methods[1].gbs_median == 232.6 and bw.methods[1].counts == "bytes read"
    assert bw.device_name == "NVIDIA GB10" and bw.capability == (12, 1)
    assert bw.l2_cache_bytes == Unavailable(unavailable=Why.not_supported, detail="torch reports no L2 size")
    assert bw.peak_allocated_bytes <= 2_000_000_000 and bw.allocated_after_bytes == 0
    assert not bw.forced and bw.notes == []


def test_the_child_is_given_the_sizing_inputs_from_the_facts(tmp_path):
    log = tmp_path / "args.log"
    probe.measure(healthy_gb10(), KB, python=fake("gb10"), env={"PATH": "/usr/bin:/bin", "FAKE_BW_LOG": str(log)},
                  settings=FAST, alive=lambda pid: True, size_bytes=500_000_000)
    script, config = log.read_text().strip().split(" ", 1)
    assert script == str(probe.SCRIPT)
    cfg = json.loads(config)
    # GB10: the free memory is MemAvailable (NVML has none), and the child re-checks cudaMemGetInfo
    assert cfg["free_bytes"] == 123315515392
    assert cfg["min_free_bytes"] == int(FAST.min_free_gb * 1024**3)
    assert cfg["explicit_bytes"] == 500_000_000 and cfg["force"] is False
    assert (cfg["floor_bytes"], cfg["buffer_cap_bytes"], cfg["total_cap_bytes"]) == (
        256 * 2**20, FAST.buffer_cap_bytes, FAST.total_cap_bytes)
    assert cfg["methods"] == ["copy", "read"]


def test_a_hang_is_killed_at_the_timeout_and_says_where():
    out = run("hang")
    assert out.status == "failed" and out.kind == "timeout"
    assert out.section.unavailable is Why.timeout
    assert "did not finish within 3 s" in out.reason and "while: allocate" in out.reason
    assert out.duration_s < 10


def test_a_crash_is_reported_with_its_signal_and_stage():
    out = run("crash")
    assert out.status == "failed" and out.kind == "crash"
    assert "signal 11" in out.reason and "while: copy" in out.reason


def test_garbage_is_a_failure_not_an_exception():
    out = run("garbage")
    assert out.status == "failed" and out.kind == "garbage"
    assert "does not validate" in out.reason


@pytest.mark.parametrize("name, kind, words", [("notorch", "no_torch", "No module named 'torch'"),
                                               ("nogpu", "no_gpu", "sees no CUDA device")])
def test_no_torch_and_no_gpu_come_from_the_child(name, kind, words):
    out = run(name)
    assert out.status == "failed" and out.kind == kind and words in out.reason
    assert out.section.unavailable is Why.not_found


def test_a_missing_interpreter_is_not_found():
    out = probe.measure(healthy_gb10(), KB, python="/nonexistent/python3", env={}, settings=FAST)
    assert out.status == "failed" and out.kind == "not_found" and "/nonexistent/python3" in out.reason


def test_the_live_probe_already_said_torch_is_missing_so_nothing_starts(tmp_path):
    facts = healthy_gb10()
    facts = facts.model_copy(update={"target": facts.target.model_copy(update={
        "live": TorchLive(import_ok=False, error="ModuleNotFoundError: No module named 'torch'")})})
    log = tmp_path / "args.log"
    out = probe.measure(facts, KB, python=fake("gb10"), env={"FAKE_BW_LOG": str(log)}, settings=FAST,
                        alive=lambda pid: True)
    assert out.status == "failed" and out.kind == "no_torch" and not log.exists()


# ---------------------------------------------------------------- refusals before anything starts
def test_a_running_vllm_refuses_the_measurement_before_a_child_starts(tmp_path):
    log = tmp_path / "args.log"
    out = probe.measure(load_facts_fixture("gb10_vllm_default"), KB, python=fake("gb10"),
                        env={"FAKE_BW_LOG": str(log)}, settings=FAST, alive=lambda pid: True)
    assert out.status == "refused" and not log.exists()
    assert "VLLM::EngineCore (pid 400721" in out.reason and "--force" in out.reason
    assert out.section.unavailable is Why.not_collected and out.section.detail.startswith("refused: ")


def test_force_measures_anyway_and_says_what_it_overrode():
    out = run("gb10", facts=load_facts_fixture("gb10_vllm_default"), force=True)
    assert out.status == "measured"
    assert out.section.forced and any("--force overrode" in n and "VLLM" in n for n in out.section.notes)


def test_memory_too_short_for_the_floor_is_refused_even_with_force():
    facts = patch(healthy_gb10(), {"memory.meminfo_bytes.MemAvailable": 1 * 2**30})
    out = run("gb10", facts=facts, force=True)
    assert out.status == "refused" and "memory is short" in out.reason and "floor" in out.reason


# ---------------------------------------------------------------- parsing (property-tested)
def result(stdout: str, error: str = "", rc: int | None = 0, sig: int | None = None) -> RunResult:
    return RunResult(("py",), not error, rc, stdout, "", error, 0.1, signal=sig)


@settings(max_examples=300)
@given(st.text(max_size=400), st.sampled_from(["", "timeout", "signal", "nonzero_exit"]))
def test_any_stdout_gives_an_outcome(stdout, error):
    out = probe.outcome_from_result(result(stdout, error, None if error == "timeout" else 1, 9), 5.0, "py")
    assert out.status in ("measured", "refused", "failed")
    assert isinstance(out.section, (BandwidthFacts, Unavailable))


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                        max_size=4), max_leaves=20)


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(["mode", "methods", "buffer_bytes", "buffers", "device_name", "refused",
                                        "error", "kind", "peak_allocated_bytes", "gpu_time_s", "capability",
                                        "l2_cache_bytes", "wall_s", "allocated_after_bytes"]), json_values))
def test_any_marked_json_object_gives_an_outcome(payload):
    line = "@@sparkops-result@@" + json.dumps({"mode": "bandwidth", **payload})
    out = probe.outcome_from_result(result(line), 5.0, "py")
    assert out.status in ("measured", "refused", "failed")


def test_the_last_result_line_wins_and_foreign_results_are_garbage():
    ok = (BIN / "python-bandwidth-gb10").read_text().split("echo '", 1)[1].split("'\n", 1)[0]
    out = probe.outcome_from_result(result("torch warning\n@@sparkops-result@@{}\n" + ok), 5.0, "py")
    assert out.status == "measured"
    live = probe.outcome_from_result(result('@@sparkops-result@@{"mode": "live", "import_ok": true}'), 5.0, "py")
    assert live.status == "failed" and live.kind == "garbage"


@pytest.mark.parametrize("text, want", [("auto", None), ("AUTO", None), ("", None), ("0.5", 500_000_000),
                                        ("2GB", 2_000_000_000), (" 1.25 gb ", 1_250_000_000)])
def test_size_option(text, want):
    assert probe.parse_size(text) == want


@pytest.mark.parametrize("text", ["-1", "0", "nan", "inf", "lots", "4000"])
def test_size_option_rejects_nonsense(text):
    with pytest.raises(ValueError):
        probe.parse_size(text)


# ---------------------------------------------------------------- preflight --measure glue
def test_attach_adds_the_section_and_a_probe_record():
    opts = CollectOptions(python=fake("gb10"), env={"PATH": "/usr/bin:/bin"}, measure_bandwidth=True)
    facts = probe.attach(healthy_gb10(), opts)
    assert isinstance(facts.bandwidth, BandwidthFacts)
    rec = facts.probes["bandwidth"]
    assert rec.ok and rec.source == "target python" and rec.duration_s > 0


def test_attach_records_a_refusal_as_a_failed_probe_with_the_reason():
    # the recorded vLLM engine's pid given to a process alive here (the test runner's parent)
    facts = patch(load_facts_fixture("gb10_vllm_default"), {"gpu.devices.0.processes.2.pid": os.getppid()})
    opts = CollectOptions(python=fake("gb10"), env={}, measure_bandwidth=True)
    facts = probe.attach(facts, opts)
    assert isinstance(facts.bandwidth, Unavailable)
    assert not facts.probes["bandwidth"].ok and facts.probes["bandwidth"].reason.startswith("refused: ")
    assert f"pid {os.getppid()}" in facts.bandwidth.detail


@pytest.mark.skipif(any(psutil.pid_exists(p) for p in (400650, 400721)), reason="the recorded pids exist here")
def test_neighbours_that_ended_since_the_facts_were_taken_do_not_refuse():
    # the recorded pids (400650, 400721) do not exist here: psutil says so, the measurement runs
    opts = CollectOptions(python=fake("gb10"), env={}, measure_bandwidth=True)
    facts = probe.attach(load_facts_fixture("gb10_vllm_default"), opts)
    assert isinstance(facts.bandwidth, BandwidthFacts)


def test_own_process_is_never_a_neighbour():
    facts = load_facts_fixture("gb10_vllm_default")
    out = probe.measure(facts, KB, python=fake("gb10"), env={}, settings=FAST, alive=lambda pid: True,
                        own_pids={400721, 400650, os.getpid()})
    assert out.status == "measured"


def test_no_gpu_with_a_trainer_running_says_no_gpu_not_refused(tmp_path):
    """Issue 17: a GPU-less box with trainers in its process table answered "refused: other GPU jobs"."""
    facts = patch(load_facts_fixture("no_gpu"), {"processes.processes": [
        {"pid": 4242, "name": "python", "cmdline": "python train.py", "argv": ["python", "train.py"]}]})
    out = run("nogpu", facts=facts)
    assert out.status == "failed" and out.kind == "no_gpu", out
    assert "sees no CUDA device" in out.reason and "other GPU job" not in out.reason
    assert out.assessment.no_gpu.startswith("no NVIDIA GPU visible")


def test_no_gpu_in_the_facts_is_noted_when_the_child_measures_anyway():
    facts = load_facts_fixture("no_gpu")  # without its live torch reading (which already says no CUDA device)
    facts = facts.model_copy(update={"target": facts.target.model_copy(update={
        "live": Unavailable(unavailable=Why.not_collected)})})
    out = run("gb10", facts=facts)
    assert out.status == "measured" and not out.section.forced
    assert any(n.startswith("the facts show no NVIDIA GPU visible") for n in out.section.notes)
