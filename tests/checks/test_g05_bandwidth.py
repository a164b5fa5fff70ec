"""G5 — the bandwidth budget from the GPU's profile, and the judgment of a measurement."""

from __future__ import annotations

import json
import subprocess
import sys

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import g05_bandwidth
from sparkops.core.findings import Status
from sparkops.facts.model import BandwidthFacts, BandwidthMethod, Facts
from sparkops.facts.reading import Why, missing
from sparkops.knowledge import load


def test_gb10_budget_is_the_measured_range_not_the_spec():
    f = run_check("G5", load_facts_fixture("gb10_ngc_2509_healthy"))
    assert f.status is Status.info
    assert "273 GB/s" in f.summary and "180–234 GB/s" in f.summary


def test_generic_profile_reports_its_spec():
    f = run_check("G5", load_facts_fixture("h200_generic"))
    assert f.status is Status.info and "4800 GB/s" in f.summary


def test_unknown_model_reports_without_a_ratio():
    facts = patch(load_facts_fixture("h200_generic"), {"gpu.devices.0.name": "Tesla T4",
                                                       "target.live.device_name": "Tesla T4"})
    f = run_check("G5", facts)
    assert f.status is Status.info and "no spec bandwidth" in f.summary and "%" not in f.summary


def test_no_gpu_skips():
    assert run_check("G5", load_facts_fixture("no_gpu")).status is Status.skip


# ---------------------------------------------------------------- with a measurement (issue 7)
GB10_READINGS = {"copy": 186.4, "read": 232.6}  # inside the public ranges: clone copy 180-192, read 231-234


def method(name: str, gbs: float, spread: float = 1.0) -> BandwidthMethod:
    return BandwidthMethod(method=name, operation="dst.copy_(src)" if name == "copy" else "torch.sum(src)",
                           counts="bytes read + bytes written" if name == "copy" else "bytes read",
                           bytes_per_iteration=2 * 10**9 if name == "copy" else 10**9, iterations_per_rep=1, reps=15,
                           gbs_median=gbs, gbs_q1=gbs - spread, gbs_q3=gbs + spread, gbs_min=gbs - 2 * spread,
                           gbs_max=gbs + 2 * spread)


def measured(facts, name: str = "NVIDIA GB10", forced: bool = False, **gbs: float):
    bw = BandwidthFacts(python="/usr/bin/python", device_name=name, buffer_bytes=998244352, buffers=2,
                        sizing="L2 size unknown: the cap", methods=[method(k, v) for k, v in gbs.items()],
                        peak_allocated_bytes=1996489216, allocated_after_bytes=0, gpu_time_s=0.7, wall_s=0.75,
                        forced=forced)
    # through JSON, as a snapshot replay would load it
    return Facts.model_validate_json(facts.model_copy(update={"bandwidth": bw}).model_dump_json())


def test_gb10_measured_inside_the_public_ranges_passes():
    f = run_check("G5", measured(load_facts_fixture("gb10_ngc_2509_healthy"), **GB10_READINGS))
    assert f.status is Status.passed
    assert "copy 186 GB/s" in f.summary and "read 233 GB/s" in f.summary
    assert "68% of the 273 GB/s spec" in f.summary and "85% of the 273 GB/s spec" in f.summary
    assert "expected copy 180–192 GB/s" in f.summary and "expected read 231–234 GB/s" in f.summary
    assert "bytes read + bytes written" in f.summary and "(median of 15" in f.summary


def test_gb10_far_below_the_range_warns_with_the_number_the_method_and_the_fix():
    facts = measured(load_facts_fixture("gb10_ngc_2509_healthy"), copy=71.3, read=90.2)
    f = run_check("G5", facts)
    assert f.status is Status.warn
    assert f.summary.startswith("NVIDIA GB10: copy 71 GB/s (median, dst.copy_(src)) is far below the expected copy "
                                "180–192 GB/s")
    assert "degraded" in f.summary and "low-clock state" in f.fix and "spark-ops bandwidth" in f.fix
    j = g05_bandwidth.judge_measurement(facts.bandwidth, load().profile_for("NVIDIA GB10"), load())
    assert j.far_below and [m.level for m in j.methods] == ["far-below", "far-below"]


def test_gb10_moderately_below_warns_but_is_not_far_below():
    facts = measured(load_facts_fixture("gb10_ngc_2509_healthy"), copy=150.0, read=232.0)
    f = run_check("G5", facts)
    assert f.status is Status.warn and "copy 150 GB/s" in f.summary and "well below" in f.summary
    j = g05_bandwidth.judge_measurement(facts.bandwidth, load().profile_for("NVIDIA GB10"), load())
    assert not j.far_below and j.level == "below"


def test_slightly_below_the_range_still_passes_and_says_so():
    f = run_check("G5", measured(load_facts_fixture("gb10_ngc_2509_healthy"), copy=170.0, read=232.0))
    assert f.status is Status.passed and "(slightly below the range: copy)" in f.summary


def test_h200_judged_against_this_probes_recorded_ranges():
    # the device machine's figures (benchmarks/results/suite-h200-20261203.md): copy 4241, read 4199
    facts = measured(load_facts_fixture("h200_generic"), name="NVIDIA H200", copy=4241.1, read=4198.6)
    f = run_check("G5", facts)
    assert f.status is Status.passed and "copy 4241 GB/s" in f.summary and "88% of the 4800 GB/s spec" in f.summary
    assert "expected copy 4212–4282 GB/s (recorded for h200)" in f.summary and "slightly below" not in f.summary
    degraded = run_check("G5", measured(load_facts_fixture("h200_generic"), name="NVIDIA H200", copy=2000.0,
                                        read=2100.0))
    assert degraded.status is Status.warn and "far below" in degraded.summary


def test_without_a_recorded_range_both_methods_use_the_profiles_measured_range():
    kb = load()
    kb2 = kb.with_thresholds("bandwidth", expected_gbs={})
    bw = measured(load_facts_fixture("h200_generic"), name="NVIDIA H200", copy=4195.0, read=3500.0).bandwidth
    j = g05_bandwidth.judge_measurement(bw, kb.profile_for("NVIDIA H200"), kb2)
    assert [(m.low, m.high, m.reference) for m in j.methods] == [(4270, 4283, "h200 profile's measured range")] * 2
    assert [m.level for m in j.methods] == ["near", "below"] and j.status is Status.warn and not j.far_below


def test_a_gpu_with_only_a_spec_figure_is_judged_against_half_of_it():
    facts = patch(load_facts_fixture("h200_generic"), {"gpu.devices.0.name": "NVIDIA L40S",
                                                      "target.live.device_name": "NVIDIA L40S"})
    ok = run_check("G5", measured(facts, name="NVIDIA L40S", copy=750.0, read=780.0))
    assert ok.status is Status.passed and "no measured range on file" in ok.summary
    low = run_check("G5", measured(facts, name="NVIDIA L40S", copy=200.0, read=210.0))
    assert low.status is Status.warn


def test_an_unknown_model_reports_the_measurement_without_judging_it():
    facts = patch(load_facts_fixture("h200_generic"), {"gpu.devices.0.name": "Tesla T4",
                                                      "target.live.device_name": "Tesla T4"})
    f = run_check("G5", measured(facts, name="Tesla T4", copy=250.0, read=280.0))
    assert f.status is Status.info and "copy 250 GB/s" in f.summary and "no spec or expected range" in f.summary


def test_a_refused_measurement_skips_with_its_reason_and_the_budget():
    facts = load_facts_fixture("gb10_vllm_default").model_copy(update={"bandwidth": missing(
        Why.not_collected, "refused: 2 other GPU job(s) running: VLLM::EngineCore (pid 400721); --force to measure anyway")})
    f = run_check("G5", facts)
    assert f.status is Status.skip
    assert "bandwidth not measured: refused: 2 other GPU job(s)" in f.summary and "plan on 180–234 GB/s" in f.summary
    assert "--force` measures anyway" in f.detail


def test_a_measurement_that_could_not_run_skips_with_its_reason():
    facts = load_facts_fixture("gb10_ngc_2509_healthy").model_copy(update={"bandwidth": missing(
        Why.timeout, "the measurement did not finish within 90 s (killed) while: allocate")})
    f = run_check("G5", facts)
    assert f.status is Status.skip and "did not finish within 90 s" in f.summary
    assert "could not run in the target interpreter" in f.detail


def test_forced_measurement_notes_it_when_the_figure_is_low():
    f = run_check("G5", measured(load_facts_fixture("gb10_vllm_default"), forced=True, copy=120.0, read=140.0))
    assert f.status is Status.warn and any("--force" in n for n in f.notes)


def test_a_measurement_stands_where_nvml_saw_no_gpu():
    f = run_check("G5", measured(load_facts_fixture("no_gpu"), **GB10_READINGS))
    assert f.status is Status.passed and f.summary.startswith("NVIDIA GB10: measured copy 186 GB/s")


def test_replayed_snapshot_with_a_measurement_through_the_cli(tmp_path):
    snap = tmp_path / "gb10_measured.json"
    snap.write_text(measured(load_facts_fixture("gb10_ngc_2509_healthy"), **GB10_READINGS).model_dump_json())
    rep = tmp_path / "env-report.json"
    p = subprocess.run([sys.executable, "-m", "sparkops", "preflight", "--facts", str(snap), "--report", str(rep),
                        "--format", "lines"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(rep.read_text())["checks"]["G5"] == "pass"
    assert any(line.startswith("G5 PASS: NVIDIA GB10: measured copy 186 GB/s") for line in p.stdout.splitlines())
