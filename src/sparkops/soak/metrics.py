"""A soak run's numbers, from the sampled rows and the load's heartbeats. Pure; never raises on data.

Steady state is the second half of the loaded window: the plateau power, the clock's median and
coefficient of variation, the throughput, and the thermal slope are taken there, so the ramp-up
does not count against stability. The G4 verdict itself comes from :mod:`sparkops.monitor.analyze`
(the one owner of G4 log judgment) run over the loaded rows; this module only measures.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sparkops.monitor.analyze import number, reasons
from sparkops.monitor.csvlog import seconds
from sparkops.monitor.events import Sample

COUNTERS = ("sw_power_cap", "sw_thermal", "hw_thermal")
REASON_NAMES = {0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown",
                0x10: "SyncBoost", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown",
                0x80: "HwPowerBrakeSlowdown", 0x100: "DisplayClockSetting"}


class SoakMetrics(BaseModel):
    """Measured over one soak (seconds relative to the first sample; None: not measurable)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    samples: int = 0
    loaded_samples: int = 0
    loaded_s: float | None = None
    ramp_up_s: float | None = None  # load start -> power first within ramp_fraction of the plateau
    power_plateau_w: float | None = None  # median power, second half of the load
    power_cap_w: float | None = None  # the profile's sustained cap (GB10 ~100 W), else its board power
    power_cap_source: str = ""
    plateau_vs_cap: float | None = None
    clock_median_mhz: float | None = None
    clock_cv_pct: float | None = None  # stdev / mean of the SM clock, second half, in %
    temp_start_c: float | None = None
    temp_max_c: float | None = None
    temp_end_c: float | None = None
    thermal_slope_c_per_min: float | None = None  # least squares, second half
    util_median_pct: float | None = None
    reasons_seen: int = 0  # OR of the clock-event reason bits over the load
    reason_names: list[str] = Field(default_factory=list)
    violation_growth_us: dict[str, float] = Field(default_factory=dict)  # counter -> growth over the load
    tflops_median: float | None = None  # bf16 matmul throughput, second half
    tflops_cv_pct: float | None = None


def _cv(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return round(100.0 * statistics.pstdev(values) / mean, 3) if mean else None


def _slope_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    if den <= 0:
        return None
    return round(60.0 * sum((t - mt) * (v - mv) for t, v in points) / den, 3)


def _med(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if bits & bit] + ([hex(bits)] if bits >> 9 else [])


def relative_times(samples: Sequence[Sample]) -> list[float | None]:
    """Seconds from the first stamped sample (None for unstamped rows)."""
    raw = [seconds(s.get("timestamp")) for s in samples]
    first = next((t for t in raw if t is not None), None)
    return [None if t is None or first is None else t - first for t in raw]


def compute(samples: Sequence[Sample], load_start_s: float | None, load_end_s: float | None,
            beats: Sequence[tuple[float, float]] = (), cap_w: float | None = None, cap_source: str = "",
            ramp_fraction: float = 0.9) -> SoakMetrics:
    """``beats``: (seconds from the first sample, TFLOPS). Load window [load_start_s, load_end_s]."""
    times = relative_times(samples)
    m = SoakMetrics(samples=len(samples), power_cap_w=cap_w, power_cap_source=cap_source)
    if load_start_s is None:
        return m
    end = load_end_s if load_end_s is not None else max((t for t in times if t is not None), default=load_start_s)
    loaded = [(t, s) for t, s in zip(times, samples, strict=False) if t is not None and load_start_s <= t <= end]
    m.loaded_samples = len(loaded)
    m.loaded_s = round(end - load_start_s, 3)
    if not loaded:
        return m
    mid = load_start_s + (end - load_start_s) / 2
    steady = [(t, s) for t, s in loaded if t >= mid]

    def col(rows: Sequence[tuple[float, Sample]], key: str) -> list[tuple[float, float]]:
        return [(t, v) for t, s in rows if (v := number(s.get(key))) is not None]

    power_all, power_ss = col(loaded, "power.draw [W]"), col(steady, "power.draw [W]")
    m.power_plateau_w = _med([v for _, v in power_ss])
    if m.power_plateau_w:
        target = ramp_fraction * m.power_plateau_w
        first = next((t for t, v in power_all if v >= target), None)
        m.ramp_up_s = round(first - load_start_s, 3) if first is not None else None
        if cap_w:
            m.plateau_vs_cap = round(m.power_plateau_w / cap_w, 4)
    clocks = [v for _, v in col(steady, "clocks.sm [MHz]")]
    m.clock_median_mhz, m.clock_cv_pct = _med(clocks), _cv(clocks)
    temps_all, temps_ss = col(loaded, "temperature.gpu"), col(steady, "temperature.gpu")
    if temps_all:
        m.temp_start_c, m.temp_end_c = temps_all[0][1], temps_all[-1][1]
        m.temp_max_c = max(v for _, v in temps_all)
    m.thermal_slope_c_per_min = _slope_per_min(temps_ss)
    m.util_median_pct = _med([v for _, v in col(loaded, "utilization.gpu [%]")])
    bits = 0
    for _, s in loaded:
        r = reasons(s.get("clocks_event_reasons.active"))
        bits |= r or 0
    m.reasons_seen, m.reason_names = bits, reason_names(bits)
    for c in COUNTERS:
        vals = [v for _, v in col(loaded, f"violation.{c} [us]")]
        if len(vals) >= 2:
            m.violation_growth_us[c] = round(max(0.0, vals[-1] - vals[0]), 1)
    tf = [v for t, v in beats if t >= mid]
    m.tflops_median, m.tflops_cv_pct = _med(tf), _cv(tf)
    return m


# --------------------------------------------------------------------------- baselines
COMPARED = (  # metric, direction that is worse, threshold key
    ("tflops_median", "lower", "tflops_drop_fraction"),
    ("clock_median_mhz", "lower", "clock_drop_fraction"),
    ("power_plateau_w", "lower", "power_drop_fraction"),
    ("temp_max_c", "higher", "temp_rise_c"),
    ("clock_cv_pct", "higher", "cv_rise_pct"),
)


def compare(now: SoakMetrics, base: SoakMetrics, th: dict[str, float]) -> list[dict[str, Any]]:
    """Per metric: both values, the change, and whether it is worse beyond the threshold."""
    rows: list[dict[str, Any]] = []
    for key, worse, tkey in COMPARED:
        a, b = getattr(now, key), getattr(base, key)
        if a is None or b is None:
            rows.append({"metric": key, "now": a, "baseline": b, "change": None, "worse": None})
            continue
        limit = float(th[tkey])
        if tkey.endswith("_fraction"):
            change = (a - b) / b if b else 0.0
            bad = change < -limit if worse == "lower" else change > limit
        else:
            change = a - b
            bad = change > limit if worse == "higher" else change < -limit
        rows.append({"metric": key, "now": a, "baseline": b, "change": round(change, 4), "worse": bad})
    return rows
