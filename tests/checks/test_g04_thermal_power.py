"""G4 — thermal snapshot, reason bits, counters, GB10's power-cap normalities."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import g04_thermal_power as g4
from sparkops.core.findings import Status
from sparkops.facts.reading import Why, missing

HEALTHY = "gb10_ngc_2509_healthy"


def test_idle_gb10_is_info_with_the_reading_and_the_normalities():
    f = run_check("G4", load_facts_fixture(HEALTHY))
    assert f.status is Status.info
    assert f.summary.startswith("42 °C, 10 W (limit N/A), SM 2522 MHz of 3003, P0")
    assert any("no enforced power limit" in n and "~100 W" in n for n in f.notes)
    assert any("cumulative since boot" in n for n in f.notes)


def test_hot_now_warns():
    f = run_check("G4", patch(load_facts_fixture(HEALTHY), {"gpu.devices.0.temperature_c": 91.0}))
    assert f.status is Status.warn and "91 °C" in f.summary


def test_thermal_reason_bits_warn_by_name():
    # 0x68 = HwSlowdown | SwThermalSlowdown | HwThermalSlowdown (gb10-readings §2.2)
    f = run_check("G4", patch(load_facts_fixture(HEALTHY), {"gpu.devices.0.clock_event_reasons": 0x68}))
    assert f.status is Status.warn and "SwThermalSlowdown" in f.summary and "HwThermalSlowdown" in f.summary


def test_power_cap_reason_alone_does_not_warn():
    f = run_check("G4", patch(load_facts_fixture(HEALTHY), {"gpu.devices.0.clock_event_reasons": 0x4}))
    assert f.status is Status.info and "SwPowerCap" in f.summary


def test_thermal_counter_growth_during_the_check_warns():
    base = load_facts_fixture(HEALTHY)
    end = {**base.gpu.devices[0].violation_us, "sw_thermal": 27_600}
    f = run_check("G4", patch(base, {"gpu.devices.0.violation_us_end": end}))
    assert f.status is Status.warn and "sw_thermal" in f.summary


def test_power_cap_counter_growth_alone_does_not_warn():
    base = load_facts_fixture(HEALTHY)
    end = {**base.gpu.devices[0].violation_us, "sw_power_cap": base.gpu.devices[0].violation_us["sw_power_cap"] + 400_000}
    f = run_check("G4", patch(base, {"gpu.devices.0.violation_us_end": end}))
    assert f.status is Status.info


def test_low_clock_state_under_load_warns():
    facts = patch(load_facts_fixture(HEALTHY), {"gpu.devices.0.utilization_pct": 96.0,
                                                "gpu.devices.0.sm_clock_mhz": 690.0, "gpu.devices.0.power_draw_w": 17.0})
    f = run_check("G4", facts)
    assert f.status is Status.warn and "low-clock" in f.summary


def test_generic_gpu_shows_its_power_limit():
    f = run_check("G4", load_facts_fixture("h200_generic"))
    assert f.status is Status.info and "76 W of a 700 W limit" in f.summary and "GpuIdle" in f.summary
    assert not any("GB10" in n for n in f.notes)


def test_missing_readings_skip():
    gone = missing(Why.error, "NVML: Unknown Error")
    facts = patch(load_facts_fixture(HEALTHY), {f"gpu.devices.0.{k}": gone for k in (
        "temperature_c", "power_draw_w", "sm_clock_mhz", "pstate", "clock_event_reasons")})
    f = run_check("G4", facts)
    assert f.status is Status.skip


def test_no_gpu_skips():
    assert run_check("G4", load_facts_fixture("no_gpu")).status is Status.skip


@given(st.integers(min_value=0, max_value=2**64))
def test_reason_decoder_never_crashes(mask):
    names = g4.reason_names(mask)
    assert isinstance(names, list)
    assert (mask == 0) == (names == [])


def test_low_clock_state_fix_is_a_power_cycle_not_cooling():
    """Issue 15: GB10's low-clock state (~700 MHz, ~17 W, P0, no reason bit while busy)."""
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {
        "gpu.devices.0.utilization_pct": 98.0, "gpu.devices.0.sm_clock_mhz": 699.0, "gpu.devices.0.power_draw_w": 17.0,
        "gpu.devices.0.pstate": "P0", "gpu.devices.0.clock_event_reasons": 0})
    f = run_check("G4", facts)
    assert f.code == "G4.low-clock-state" and f.fix_where == "host"
    assert "699 MHz, 17 W, P0" in f.summary
    assert f.fix.startswith("A full power cycle clears it") and "improve cooling" not in f.fix


def test_active_reasons_lead_the_summary_before_the_temperature():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {
        "gpu.devices.0.temperature_c": 91.0, "gpu.devices.0.clock_event_reasons": 0x20})
    f = run_check("G4", facts)
    assert f.codes[:2] == ["G4.thermal-reasons", "G4.hot"]
    assert f.summary.startswith("thermal/HW-slowdown reasons active now: SwThermalSlowdown (91 °C)")
