"""thermal soak: metrics on recorded logs, the run with a fake target python (no GPU here), Ctrl-C."""

from __future__ import annotations

import _thread
import csv
import json
import signal
import statistics
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops import knowledge
from sparkops.core.errors import InputError
from sparkops.monitor.csvlog import read_log, seconds, stamp
from sparkops.soak import _load_script, run
from sparkops.soak.metrics import SoakMetrics, compare, compute

TESTS = Path(__file__).parents[1]
THERMAL = TESTS / "fixtures" / "raw" / "thermal"
BIN = TESTS / "fixtures" / "bin"


def _loaded_window(rows):
    t0 = seconds(rows[0]["timestamp"])
    busy = [seconds(r["timestamp"]) - t0 for r in rows if (r["utilization.gpu [%]"] or 0) >= 50]
    return busy[0], busy[-1]


def test_metrics_on_the_recorded_h200_matmul_log():
    text = (THERMAL / "h200_watch_matmul_20261203.csv").read_text()
    rows, _ = read_log(text)
    start, end = _loaded_window(rows)
    m = compute(rows, start, end, cap_w=700.0, cap_source="h200 board_power_w")
    # independent reading of the same file with the csv module
    with open(THERMAL / "h200_watch_matmul_20261203.csv", newline="") as fh:
        table = [[c.strip() for c in r] for r in csv.reader(fh)][1:]
    t0 = seconds(table[0][0])
    mid = start + (end - start) / 2
    steady_power = [float(r[2].split()[0]) for r in table if mid <= seconds(r[0]) - t0 <= end]
    assert m.power_plateau_w == pytest.approx(statistics.median(steady_power), abs=1e-3)
    assert m.plateau_vs_cap == pytest.approx(m.power_plateau_w / 700.0, abs=1e-4)
    assert m.ramp_up_s is not None and 0 <= m.ramp_up_s <= end - start
    assert m.clock_cv_pct is not None and m.clock_cv_pct >= 0
    assert m.temp_max_c >= m.temp_start_c
    assert m.loaded_samples == sum(1 for r in table if start <= seconds(r[0]) - t0 <= end)


def test_metrics_see_thermal_reason_bits_and_counters():
    rows, _ = read_log((THERMAL / "gb10_throttling.csv").read_text())
    m = compute(rows, 0.0, None, cap_w=100.0)
    assert "SwThermalSlowdown" in m.reason_names and m.reasons_seen & 0x20
    assert m.clock_cv_pct > 0


def test_metrics_without_a_load_measure_nothing():
    rows, _ = read_log((THERMAL / "gb10_idle.csv").read_text())
    m = compute(rows, None, None)
    assert m.samples == len(rows) and m.loaded_samples == 0 and m.power_plateau_w is None


TH = {"tflops_drop_fraction": 0.1, "clock_drop_fraction": 0.08, "power_drop_fraction": 0.1, "temp_rise_c": 5.0,
      "cv_rise_pct": 2.0}


def test_compare_flags_only_what_got_worse():
    base = SoakMetrics(tflops_median=100.0, clock_median_mhz=2450, power_plateau_w=101, temp_max_c=74,
                       clock_cv_pct=1.0)
    assert not any(r["worse"] for r in compare(base, base, TH))
    now = base.model_copy(update={"tflops_median": 85.0, "temp_max_c": 81.0})
    worse = {r["metric"] for r in compare(now, base, TH) if r["worse"]}
    assert worse == {"tflops_median", "temp_max_c"}
    none = compare(SoakMetrics(), base, TH)
    assert all(r["worse"] is None for r in none)


@given(st.one_of(st.none(), st.integers(0, 10**12)), st.integers(1, 10**10))
def test_pick_n_fits(free, cap):
    n = _load_script.pick_n(free, cap)
    assert n % 1024 == 0 and 1024 <= n <= 16384
    limit = cap if free is None else min(cap, free // 4)
    assert 3 * n * n * 2 <= limit or n == 1024


class ReplaySampler:
    """NVML cannot run here: replays a recorded GB10 log's values with the current time."""

    gpu_name = "NVIDIA GB10"

    def __init__(self, name: str = "gb10_normal_plateau.csv") -> None:
        self.rows, _ = read_log((THERMAL / name).read_text())
        self.i = 0

    def sample(self):
        row = dict(self.rows[self.i % len(self.rows)])
        self.i += 1
        row["timestamp"] = stamp()
        return row

    def close(self):
        pass


def _soak(tmp_path, monkeypatch, exe="python-soak-fake", minutes=4 / 60, **kw):
    kb = knowledge.load()
    kb = kb.with_thresholds("soak", preroll_s=0.3, cooldown_s=0.3, start_timeout_s=10.0, stop_grace_s=5.0)
    monkeypatch.setenv("FAKE_SOAK_LOG", str(tmp_path / "fake.log"))
    return run.soak(minutes, str(BIN / exe), kb=kb, sampler=ReplaySampler(), interval_s=0.2,
                    log_path=tmp_path / "soak.csv", assess=kw.pop("assess", lambda *a: ([], None)), **kw)


def test_soak_end_to_end_with_baseline(tmp_path, monkeypatch):
    rep = _soak(tmp_path, monkeypatch, save_baseline=tmp_path / "base.json")
    assert rep.status == "measured", rep.reason
    assert rep.device == "NVIDIA GB10" and rep.profile == "gb10" and rep.matrix_n == 8192
    m = rep.metrics
    assert m.tflops_median == 50.0 and m.power_cap_w == 100.0
    assert 10 <= m.loaded_samples <= 30 and m.power_plateau_w > 90
    assert any(v.startswith("G4") for v in rep.verdict)
    logged, _ = read_log((tmp_path / "soak.csv").read_text())
    assert len(logged) >= m.loaded_samples
    assert json.loads((tmp_path / "base.json").read_text())["metrics"]["tflops_median"] == 50.0
    monkeypatch.setenv("FAKE_SOAK_TFLOPS", "40.0")  # 20 % slower than the baseline
    again = _soak(tmp_path, monkeypatch, compare_path=tmp_path / "base.json")
    assert again.exit_code == 2
    assert [r["metric"] for r in again.comparison if r["worse"]] == ["tflops_median"]
    assert "freed" in (tmp_path / "fake.log").read_text()


def test_busy_gpu_is_refused_without_starting_the_load(tmp_path, monkeypatch):
    busy = lambda *a: (["1 other GPU job(s) running: vllm (pid 4242)"], None)  # noqa: E731
    rep = _soak(tmp_path, monkeypatch, assess=busy)
    assert rep.status == "refused" and rep.exit_code == 1 and "--force" in rep.reason
    assert not (tmp_path / "fake.log").exists()
    forced = _soak(tmp_path, monkeypatch, assess=busy, force=True)
    assert forced.status == "measured" and any("vllm" in n for n in forced.notes)


def test_ctrl_c_stops_the_load_and_frees_it(tmp_path, monkeypatch):
    # Ctrl-C as a terminal delivers it to Python's default handler. A test run started in the background by a
    # non-interactive shell inherits SIGINT ignored, and interrupt_main() then does nothing: install the
    # default handler for this test, so the test does not depend on how pytest was started.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.5, _thread.interrupt_main)
    timer.start()
    try:
        rep = _soak(tmp_path, monkeypatch, minutes=1.0)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert rep.status == "interrupted" and rep.exit_code == 1
    assert "freed" in (tmp_path / "fake.log").read_text()
    assert rep.metrics is not None and rep.metrics.loaded_s < 20


def test_no_gpu_in_the_target_fails_with_the_reason(tmp_path, monkeypatch):
    rep = _soak(tmp_path, monkeypatch, exe="python-soak-nogpu")
    assert rep.status == "failed" and rep.exit_code == 3 and "no_gpu" in rep.reason


def test_bad_minutes_and_bad_baseline(tmp_path, monkeypatch):
    with pytest.raises(InputError):
        _soak(tmp_path, monkeypatch, minutes=0)
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(InputError):
        _soak(tmp_path, monkeypatch, compare_path=tmp_path / "junk.json")


def test_recorded_h200_soak_recomputes_to_what_the_device_reported():
    """The device run of 2026-12-03 (benchmarks/results/soak-h200-20261203.md): its fsynced log, read
    back here with a load window taken from the log alone, gives the figures the run printed."""
    rows, _ = read_log((THERMAL / "h200_soak_20261203.csv").read_text())
    reported = json.loads((THERMAL / "h200_soak_20261203.json").read_text())["metrics"]
    t0 = seconds(rows[0]["timestamp"])
    start = next(seconds(r["timestamp"]) - t0 for r in rows if (r["power.draw [W]"] or 0) > 100) - 0.5
    end = [seconds(r["timestamp"]) - t0 for r in rows if (r["utilization.gpu [%]"] or 0) >= 50][-1]
    m = compute(rows, start, end, cap_w=700.0)
    assert m.power_plateau_w == pytest.approx(reported["power_plateau_w"], abs=2.0)
    assert m.clock_median_mhz == pytest.approx(reported["clock_median_mhz"], abs=15)
    assert m.clock_cv_pct == pytest.approx(reported["clock_cv_pct"], abs=0.3)
    assert m.reason_names == reported["reason_names"] == ["SwPowerCap"]
    assert m.temp_max_c == reported["temp_max_c"]
    assert m.thermal_slope_c_per_min == pytest.approx(reported["thermal_slope_c_per_min"], abs=0.3)
