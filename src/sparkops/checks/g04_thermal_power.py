"""G4 — thermal throttling and the sustained power cap.

A preflight sees one snapshot: temperature, power, SM clock, the live clock-event reasons and the
violation counters read twice. On GB10 the counters are the reliable signal (the live mask often
reads 0x0), sustained power settles at a ~100 W platform cap (not a fault), no power limit is
reported (normal), and the SW power-cap counter is cumulative since boot. A real verdict on
throttling needs 10–15 minutes of samples under load.
"""

from __future__ import annotations

from sparkops.checks.base import CheckContext, Reason, ev, reason
from sparkops.core.findings import Evidence, Finding
from sparkops.facts.model import GpuDevice
from sparkops.facts.reading import Unavailable, Why, known

GID = "G4"

# NVML clock-event reason bits (nvmlClocksEventReason*): names, not thresholds.
REASONS = {
    0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown",
    0x10: "SyncBoost", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}


def low_clock_state(kb, util: float | None, clock_mhz: float | None, power_w: float | None = None,  # noqa: ANN001
                    power_max_w: float | None = None) -> bool:
    """GB10's low-clock state: busy, yet the SM clock far down (and, where the power is judged, the power
    too), with no reason bit. One predicate for the snapshot (preflight) and the samples (watch)."""
    if util is None or clock_mhz is None:
        return False
    busy = util >= kb.thresholds.g4.busy_util_pct and clock_mhz < kb.thresholds.g4.low_clock_mhz
    return busy and (power_max_w is None or power_w is None or power_w < power_max_w)


def reason_names(mask: int) -> list[str]:
    """Decode an NVML clock-event bitmask into reason names (unknown bits as hex)."""
    names = [n for bit, n in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    if rest:
        names.append(hex(rest))
    return names


def _device(ctx: CheckContext, dev: GpuDevice, warns: list[Reason], notes: list[str],
            evidence: list[Evidence]) -> str | None:
    """One device's reading; appends its warnings and notes. None when nothing was read."""
    kb = ctx.kb
    spark = ctx.platform == "dgx-spark"
    parts: list[str] = []
    p = f"gpu.devices[{dev.index}]"
    label = f"GPU{dev.index}: " if len(ctx.facts.gpu.devices) > 1 else ""
    if known(dev.temperature_c):
        parts.append(f"{dev.temperature_c:.0f} °C")
        evidence.append(ev(f"{p}.temperature_c", dev.temperature_c))
        if dev.temperature_c >= kb.thresholds.g4.hot_c:  # type: ignore[operator]
            warns.append(reason("G4.hot", label=label, temp_c=dev.temperature_c, hot_c=kb.thresholds.g4.hot_c))
    if known(dev.power_draw_w):
        evidence.append(ev(f"{p}.power_draw_w", dev.power_draw_w))
        if known(dev.power_limit_w):
            parts.append(f"{dev.power_draw_w:.0f} W of a {dev.power_limit_w:.0f} W limit")
        else:
            parts.append(f"{dev.power_draw_w:.0f} W (limit N/A)")
    if isinstance(dev.power_limit_w, Unavailable) and spark and dev.power_limit_w.unavailable is Why.not_supported:
        prof = ctx.profile
        plateau = f"~{prof.sustained_power_w:.0f} W" if prof and prof.sustained_power_w else "sustained"
        rating = f" against the {prof.board_power_w:.0f} W system rating" if prof and prof.board_power_w else ""
        notes.append(f"GB10 reports no enforced power limit (N/A): normal. A {plateau} plateau under sustained "
                     f"load is the platform's cap{rating}, not a fault")
    if known(dev.sm_clock_mhz):
        clock = f"SM {dev.sm_clock_mhz:.0f} MHz"
        if known(dev.sm_clock_max_mhz):
            clock += f" of {dev.sm_clock_max_mhz:.0f}"
        parts.append(clock)
        evidence.append(ev(f"{p}.sm_clock_mhz", dev.sm_clock_mhz))
    if known(dev.pstate):
        parts.append(str(dev.pstate))
    if known(dev.clock_event_reasons):
        mask = int(dev.clock_event_reasons)  # type: ignore[arg-type]
        names = reason_names(mask)
        parts.append(f"reasons {mask:#x}" + (f" ({', '.join(names)})" if names else " (none)"))
        evidence.append(ev(f"{p}.clock_event_reasons", mask))
        thermal = mask & kb.thresholds.g4.thermal_reason_mask
        if thermal:
            warns.append(reason("G4.thermal-reasons", label=label, reasons=", ".join(reason_names(thermal)),
                                temp=f"{dev.temperature_c:.0f} °C" if known(dev.temperature_c) else "temperature unread"))
    if not parts:
        return None
    # counters: growth during the collection window is heat now; the totals are history
    start, end = dev.violation_us, dev.violation_us_end
    if start or end:
        evidence.append(ev(f"{p}.violation_us", start))
        evidence.append(ev(f"{p}.violation_us_end", end))
    for key in kb.thresholds.g4.thermal_counters:
        if key in start and key in end:
            grew = end[key] - start[key]
            if grew >= kb.thresholds.g4.counter_growth_warn_us:
                warns.append(reason("G4.thermal-counter-growing", label=label, counter=key, grew_ms=grew / 1000,
                                    window_s=dev.violation_window_s))
    if start and not any(k in end for k in kb.thresholds.g4.thermal_counters):
        notes.append("violation counters were read once only: growth during the check is unknown")
    cap_us = end.get("sw_power_cap", start.get("sw_power_cap"))
    if cap_us:
        notes.append(f"SW power-cap counter {cap_us / 1e6:,.0f} s: cumulative since boot (the ~100 W cap at work), "
                     "not a problem by itself" if spark else f"SW power-cap counter {cap_us / 1e6:,.0f} s since boot")
    # GB10's low-clock state: busy, P0, clocks far down, no reason bit
    util = dev.utilization_pct
    if spark and known(util) and known(dev.sm_clock_mhz) and low_clock_state(kb, util, dev.sm_clock_mhz):  # type: ignore[arg-type]
        warns.append(reason("G4.low-clock-state", label=label, util=util, clock_mhz=dev.sm_clock_mhz,
                            power=f", {dev.power_draw_w:.0f} W" if known(dev.power_draw_w) else "",
                            pstate=f", {dev.pstate}" if known(dev.pstate) else ""))
    return label + ", ".join(parts)


# what leads the summary: a state that needs a power cycle, then live slowdown evidence, then heat
_ORDER = {"G4.low-clock-state": 0, "G4.thermal-reasons": 1, "G4.thermal-counter-growing": 2, "G4.hot": 3}


def check(ctx: CheckContext) -> Finding:
    if ctx.platform == "none":
        return ctx.decide(GID, "G4.no-gpu")
    if not ctx.facts.gpu.devices:
        return ctx.decide(GID, "G4.unread", why=ctx.facts.gpu.nvml_error or ctx.facts.gpu.smi_error or "no device listed")
    warns: list[Reason] = []
    notes: list[str] = []
    evidence: list[Evidence] = [ev("gpu.source", ctx.facts.gpu.source)]
    readings = [r for dev in ctx.facts.gpu.devices if (r := _device(ctx, dev, warns, notes, evidence))]
    if not readings:
        dev = ctx.facts.gpu.devices[0]
        return ctx.decide(GID, "G4.no-reading", source=str(ctx.facts.gpu.source), temp=str(dev.temperature_c),
                          power=str(dev.power_draw_w), evidence=evidence)
    notes.append("a snapshot cannot show throttling: judge 10–15 minutes of samples under a representative load")
    reading = "; ".join(readings)
    if warns:
        warns.sort(key=lambda r: _ORDER[r.code])
        return ctx.conclude(GID, warns, reading=reading, evidence=evidence, notes=notes)
    return ctx.decide(GID, "G4.snapshot", reading_now=reading, evidence=evidence, notes=notes)
