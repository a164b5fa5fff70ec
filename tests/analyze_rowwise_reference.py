"""The row-wise judge and stream reader as they were before issue 17 item 6 (commit 15f909b): the reference that
tests/monitor/test_columnar_equivalence.py holds the shipped column-wise path equal to. Not shipped; do not import
from src. Copied verbatim apart from this docstring and the imports of the reader's helpers."""


from __future__ import annotations

import contextlib
import math
import os
import re
import select
import stat
import tempfile
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops import knowledge
from sparkops.checks.g04_thermal_power import low_clock_state
from sparkops.monitor.csvlog import LineParser, _order_note, read_log, seconds
from sparkops.monitor.events import Event, EventKind, Sample

Profile = Literal["gb10", "generic"]
GB = 1024**3
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*[A-Za-z%]*\s*$")
_COUNTERS = {"sw_thermal": "violation.sw_thermal [us]", "hw_thermal": "violation.hw_thermal [us]",
             "sw_power_cap": "violation.sw_power_cap [us]"}


class AnalysisResult(BaseModel):
    """What ``spark-ops thermal analyze`` and ``watch``'s closing summary report."""

    model_config = ConfigDict(extra="forbid")

    profile: str
    events: list[Event] = Field(default_factory=list)
    samples: int = 0
    duration_s: float | None = None  # from the first to the last timestamp (None: not stamped)
    verdict: list[str] = Field(default_factory=list)  # one line per gotcha judged (G4, G3, G6)
    notes: list[str] = Field(default_factory=list)  # what could not be read or judged, and why


# --------------------------------------------------------------------------- values
def number(value: object) -> float | None:
    """A sample cell as a finite float: numbers as is, ``"105.21 W"`` parsed, else None."""
    if type(value) is float:  # what the reader gives: no other check needed
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, str):
        m = _NUMBER.match(value)
        if m and m.group(1).isascii():
            v = float(m.group(1))
            return v if math.isfinite(v) else None
    return None


def reasons(value: object) -> int | None:
    """``clocks_event_reasons.active`` (``"0x0000000000000020"``, a decimal, or a number) -> int."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value) if math.isfinite(float(value)) and value >= 0 else None
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            if text.startswith("0x") and text[2:].isascii():
                return int(text[2:], 16)
            if text.isascii() and text.isdigit():
                return int(text)
        except ValueError:
            return None
    return None


def processes(value: object) -> dict[int, tuple[str, float]] | None:
    """``"pid:name:bytes;pid:name:bytes"`` -> {pid: (name, bytes)}; ``"none"`` -> {}; else None.

    The name may itself hold ':' (the pid is the first field, the bytes the last); a malformed
    entry is skipped; bytes that are unknown read as 0.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.lower() in ("none", "[]"):
        return {}
    out: dict[int, tuple[str, float]] = {}
    for entry in text.split(";"):
        parts = entry.strip().split(":")
        if len(parts) < 2 or not (parts[0].strip().isascii() and parts[0].strip().isdigit()):
            continue
        name = ":".join(parts[1:-1]).strip() if len(parts) > 2 else ""
        size = number(parts[-1]) if len(parts) > 2 else None
        out[int(parts[0].strip())] = (name or "?", size if size is not None and size > 0 else 0.0)
    return out if out or not text else None


def _median(values: Iterable[float | None]) -> float | None:
    """statistics.median of the known values (the same arithmetic, without its per-call overhead: it runs
    several times per sample of a million-row log)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    known.sort()
    n = len(known)
    half = n // 2
    return known[half] if n % 2 else (known[half - 1] + known[half]) / 2


def _fmt(v: float | None, unit: str = "", digits: int = 0) -> str:
    return "?" if v is None else f"{v:.{digits}f}{unit}"


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class _Cfg:
    window: int
    confirm: int
    release: int
    plateau_w: float | None  # GB10's sustained power; None on the generic profile
    plateau_fraction: float
    flat_fraction: float
    plateau_min_s: float
    clock_drop: float
    ref_samples: int
    climb_window_s: float
    climb_c: float
    risen_c: float
    hot_c: float
    low_clock_mhz: float
    low_power_w: float
    low_clock_confirm: int
    busy_util: float
    load_util: float
    load_power_w: float
    verdict_min_s: float
    reason_mask: int
    reason_confirm: int
    counter_growth_us: float
    mem_window_s: float
    mem_horizon_s: float
    mem_min_decline: float
    mem_recent_s: float
    throttle_power_drop: float
    throttle_power_min: float
    low_available: float
    cuda_free_floor: float
    psi_full: float
    swap_growth: float
    heavy_bytes: float

    @classmethod
    def load(cls, kb: knowledge.Knowledge, profile: Profile) -> _Cfg:
        a = kb.thresholds.monitor.analyze
        gb10 = next((p for p in kb.profiles if p.key == "gb10"), None)
        plateau = (gb10.sustained_power_w if gb10 else None) if profile == "gb10" else None
        return cls(
            window=max(1, int(a.window_samples)),
            confirm=max(1, int(a.confirm_samples)),
            release=max(1, int(a.release_samples)),
            plateau_w=float(plateau) if plateau else None,
            plateau_fraction=float(a.plateau_fraction),
            flat_fraction=float(a.flat_fraction),
            plateau_min_s=float(a.plateau_min_s),
            clock_drop=float(a.clock_drop_fraction),
            ref_samples=max(1, int(a.ref_samples)),
            climb_window_s=float(a.climb_window_s),
            climb_c=float(a.climb_c),
            risen_c=float(a.risen_c),
            hot_c=kb.thresholds.g4.hot_c,
            low_clock_mhz=kb.thresholds.g4.low_clock_mhz,
            low_power_w=float(a.low_clock_power_w),
            low_clock_confirm=max(1, int(a.low_clock_confirm_samples)),
            busy_util=kb.thresholds.g4.busy_util_pct,
            load_util=float(a.load_util_pct),
            load_power_w=float(a.load_power_w),
            verdict_min_s=float(a.verdict_min_s),
            reason_mask=kb.thresholds.g4.thermal_reason_mask,
            reason_confirm=max(1, int(a.reason_confirm_samples)),
            counter_growth_us=float(kb.thresholds.g4.counter_growth_warn_us),
            mem_window_s=float(a.mem_trend_window_s),
            mem_horizon_s=float(a.mem_horizon_s),
            mem_min_decline=float(a.mem_min_decline_gb) * GB,
            mem_recent_s=float(a.mem_recent_s),
            throttle_power_drop=float(a.throttle_power_drop_fraction),
            throttle_power_min=float(a.throttle_power_min_fraction),
            low_available=kb.thresholds.g3.low_available_warn_gb * GB,
            cuda_free_floor=float(a.cuda_free_floor_gb) * GB,
            psi_full=kb.thresholds.g3.psi_full_avg10_warn,
            swap_growth=float(a.swap_growth_gb) * GB,
            heavy_bytes=kb.thresholds.g6.heavy_neighbour_gb * GB,
        )


# --------------------------------------------------------------------------- episodes
@dataclass
class _Point:
    i: int
    t: float
    ts: str


class _Episode:
    """One kind's on/off state: opens after ``confirm`` true samples in a row (the event starts
    at the first of them), closes after ``release`` false ones (it ends at the last true one)."""

    def __init__(self, confirm: int, release: int) -> None:
        self.confirm, self.release = confirm, release
        self.first: _Point | None = None
        self.last_true: _Point | None = None
        self.trues = 0
        self.falses = 0
        self.event: Event | None = None

    def step(self, cond: bool, pt: _Point) -> bool:
        """Feed one judged sample; True when the episode opens on it (the caller makes the Event)."""
        if cond:
            if self.event is None and self.trues == 0:
                self.first = pt
            self.trues += 1
            self.falses = 0
            self.last_true = pt
            return self.event is None and self.trues >= self.confirm
        if self.event is not None:
            self.falses += 1
            if self.falses >= self.release:
                self.event.end = self.last_true.ts if self.last_true else None
                self.event = None
                self.trues = 0
        else:
            self.trues = 0
        return False


# --------------------------------------------------------------------------- detector
class Detector:
    """Streaming judge: ``feed`` each sample (events that open on it come back, for live display),
    then ``finish`` (every event, ``end`` filled where it ended; ``insufficient-load`` added)."""

    def __init__(
        self,
        kb: knowledge.Knowledge | None = None,
        profile: Profile = "gb10",
        exclude_pid: Callable[[int], bool] | None = None,
    ) -> None:
        """``exclude_pid``: GPU processes that are not neighbours (``watch`` passes the user's
        own command tree, so its own CUDA process is not flagged as a new heavy process)."""
        self.kb = kb or knowledge.load()
        self.profile: Profile = "generic" if profile == "generic" else "gb10"
        self.c = _Cfg.load(self.kb, self.profile)
        self.gpu_name: str | None = None
        self.exclude_pid = exclude_pid
        self.events: list[Event] = []
        self.notes: list[str] = []
        self.count = 0
        self._stamped_first: float | None = None  # the first and last usable timestamps (the duration)
        self._stamped_last: float | None = None
        self._stamped_n = 0
        self._prev_t: float | None = None
        self._dt = 1.0
        self._unstamped = 0
        w = self.c.window
        self._win: dict[str, deque[float | None]] = {k: deque(maxlen=w) for k in (
            "temp", "power", "clock", "util", "avail", "free", "psi")}
        self._seen: set[str] = set()
        self._ref_clock: list[float] = []
        self._ref_temp: list[float] = []
        self._peak_power: float | None = None
        self._temps: deque[tuple[float, float]] = deque()  # (t, temperature), increasing: front = window min
        self._powers: deque[tuple[float, float]] = deque()
        self._avail: deque[tuple[float, float]] = deque()
        self._prev_counters: dict[str, float] = {}
        self._swap_min: float | None = None
        self._baseline_pids: set[int] | None = None
        self._proc_eps: dict[int, _Episode] = {}
        # whole-run readings for the medians the verdict quotes: packed doubles (8 bytes a sample, not a list's
        # ~32), so a million-row log stays within its memory bound
        self._utils = array("d")
        self._powers_all = array("d")
        self._loaded_s = 0.0
        self._loaded_utils = array("d")
        self._loaded_powers = array("d")
        self._mins: dict[str, float] = {}
        self._mem_hard = False  # memory pressure seen beyond a falling trend (low, page cache, PSI)
        ep = _Episode
        c = self.c
        self._ep: dict[str, _Episode] = {
            "power-plateau": ep(c.confirm, c.release),
            "throttling": ep(c.confirm, c.release),
            "rising-temperature": ep(c.confirm, c.release),
            "low-clock-state": ep(c.low_clock_confirm, c.release),
            "throttle-reason": ep(c.reason_confirm, c.release),
            "memory-pressure": ep(c.confirm, c.release),
            "swap-growth": ep(max(2, c.reason_confirm), c.release),
        }
        self._plateau_since: _Point | None = None
        self._start_t: dict[int, float] = {}
        self._first_pt: _Point | None = None
        self._last_pt: _Point | None = None

    # ---------------------------------------------------------------- helpers
    def _time(self, sample: Mapping[str, Any]) -> _Point:
        ts_raw = sample.get("timestamp")
        ts = ts_raw.strip() if isinstance(ts_raw, str) and ts_raw.strip() else None
        t = seconds(ts) if ts else None
        if t is not None and self._prev_t is not None and t < self._prev_t:
            t = None
        if t is None:
            self._unstamped += 1
            t = (self._prev_t + self._dt) if self._prev_t is not None else 0.0
        else:
            if self._stamped_first is None:
                self._stamped_first = t
            self._stamped_last = t
            self._stamped_n += 1
            if self._prev_t is not None and t > self._prev_t:
                self._dt = min(max(t - self._prev_t, 0.001), 3600.0)
        self._prev_t = t
        return _Point(self.count, t, ts or f"sample {self.count + 1}")

    def _smooth(self, key: str, value: float | None) -> float | None:
        """Rolling median over the window; None when this sample lacks the reading."""
        self._win[key].append(value)
        if value is None:
            return None
        self._seen.add(key)
        return _median(self._win[key])

    def _open(self, kind: EventKind, gotcha: str, ep: _Episode, summary: str,
              severity: str = "warn", evidence: dict[str, float | str | None] | None = None) -> Event:
        ev = Event(gotcha=gotcha, kind=kind, start=(ep.first or ep.last_true).ts,  # type: ignore[union-attr]
                   summary=summary, severity=severity, evidence=evidence or {})  # type: ignore[arg-type]
        ep.event = ev
        self.events.append(ev)
        self._start_t[id(ev)] = (ep.first or ep.last_true or _Point(0, 0.0, "")).t
        return ev

    def _track_min(self, key: str, v: float | None) -> None:
        if v is not None:
            self._mins[key] = min(self._mins.get(key, v), v)

    # ---------------------------------------------------------------- feed
    def use_gpu(self, name: str) -> None:
        """Judge by the sampled GPU's profile (call before the first sample): the GB10 rules (its
        ~100 W cap, its low-clock state) only on a GB10, the generic ones elsewhere."""
        prof = self.kb.profile_for(name)
        self.gpu_name = name
        self.profile = "gb10" if prof is not None and prof.key == "gb10" else "generic"
        self.c = _Cfg.load(self.kb, self.profile)

    def feed(self, sample: Mapping[str, Any]) -> list[Event]:
        """Judge one sample; returns the events that open on it (their ``start`` may be a few
        samples back: the first sample of the run that confirmed them)."""
        if not isinstance(sample, Mapping):
            return []
        pt = self._time(sample)
        self.count += 1
        if self._first_pt is None:
            self._first_pt = pt
        self._last_pt = pt
        before = len(self.events)
        c = self.c

        temp = self._smooth("temp", number(sample.get("temperature.gpu")))
        power = self._smooth("power", number(sample.get("power.draw [W]")))
        clock = self._smooth("clock", number(sample.get("clocks.sm [MHz]")))
        util = self._smooth("util", number(sample.get("utilization.gpu [%]")))
        if util is not None:
            self._utils.append(util)
        if power is not None:
            self._powers_all.append(power)
            self._peak_power = power if self._peak_power is None else max(self._peak_power, power)
            self._powers.append((pt.t, power))
            while self._powers and pt.t - self._powers[0][0] > c.plateau_min_s:
                self._powers.popleft()
        if temp is not None:
            # a monotonic deque: the window's minimum at its front, in O(1) per sample (a million-row log)
            while self._temps and self._temps[-1][1] >= temp:
                self._temps.pop()
            self._temps.append((pt.t, temp))
            while self._temps and pt.t - self._temps[0][0] > c.climb_window_s:
                self._temps.popleft()

        loaded = self._loaded(util, power)
        if loaded:
            self._loaded_s += self._dt
            if util is not None:
                self._loaded_utils.append(util)
            if power is not None:
                self._loaded_powers.append(power)
            if clock is not None and len(self._ref_clock) < c.ref_samples:
                self._ref_clock.append(clock)
            if temp is not None and len(self._ref_temp) < c.ref_samples:
                self._ref_temp.append(temp)

        self._judge_g4(pt, temp, power, clock, util, loaded)
        self._judge_reasons(pt, sample)
        self._judge_memory(pt, sample)
        self._judge_processes(pt, sample)
        return [e.model_copy() for e in self.events[before:]]

    def _loaded(self, util: float | None, power: float | None) -> bool:
        c = self.c
        if util is not None:
            return util >= c.load_util
        if power is None:
            return False
        if c.plateau_w is not None:
            return power >= c.load_power_w
        return self._peak_power is not None and power >= c.plateau_fraction * self._peak_power

    def _at_plateau(self, power: float | None, util: float | None) -> bool:
        c = self.c
        if power is None:
            return False
        if c.plateau_w is not None:
            return power >= c.plateau_fraction * c.plateau_w
        # generic: flat near this run's peak, under load
        if self._peak_power is None or power < c.plateau_fraction * self._peak_power:
            return False
        if util is not None and util < c.busy_util:
            return False
        recent = [p for _, p in self._powers]
        return len(recent) >= 2 and (max(recent) - min(recent)) <= c.flat_fraction * max(recent)

    def _judge_g4(self, pt: _Point, temp: float | None, power: float | None, clock: float | None,
                  util: float | None, loaded: bool) -> None:
        c = self.c
        ref_clock = _median(self._ref_clock) if len(self._ref_clock) >= min(3, c.ref_samples) else None
        ref_temp = _median(self._ref_temp) if self._ref_temp else None
        self._track_min("clock", clock if loaded else None)
        at_plateau = self._at_plateau(power, util)
        clocks_logged = "clock" in self._seen

        # (d) GB10 low-clock state: busy, yet clock and power low
        low_clock = False
        if c.plateau_w is not None and None not in (util, clock, power):
            low_clock = low_clock_state(self.kb, util, clock, power, c.low_power_w)
            ep = self._ep["low-clock-state"]
            if ep.step(low_clock, pt):
                self._open("low-clock-state", "G4", ep,
                           f"GB10 low-clock state: {_fmt(clock, ' MHz')} and {_fmt(power, ' W', 1)} at "
                           f"{_fmt(util, '%')} utilisation (no reason bit; only a full power-cycle clears it)",
                           evidence={"clocks.sm [MHz]": clock, "power.draw [W]": power,
                                     "utilization.gpu [%]": util})

        if temp is None or power is None:
            return
        rise = temp - self._temps[0][1] if self._temps else 0.0  # the window's minimum (monotonic deque)
        climbing = rise >= c.climb_c
        high = temp >= c.hot_c
        risen = ref_temp is not None and temp - ref_temp >= c.risen_c
        busy = at_plateau or (util is not None and util >= c.busy_util and not low_clock)

        # (a) the normal plateau: at the plateau for plateau_min_s; it starts where it began
        ep = self._ep["power-plateau"]
        if not at_plateau:
            self._plateau_since = None
        elif self._plateau_since is None:
            self._plateau_since = pt
        since = self._plateau_since
        sustained = since is not None and pt.t - since.t >= c.plateau_min_s
        if ep.step(at_plateau and (ep.event is not None or sustained), pt):
            ep.first = since or pt
            cap = (f"GB10's sustained cap (~{c.plateau_w:.0f} W)" if c.plateau_w is not None
                   else "this GPU's sustained level")
            clk = f"SM clock ~{clock:.0f} MHz" if clock is not None else "clocks not logged"
            self._open("power-plateau", "G4", ep,
                       f"power flat at ~{power:.0f} W, {cap}; {clk}: the platform's normal cap, not a bug",
                       severity="info",
                       evidence={"power.draw [W]": power, "clocks.sm [MHz]": clock, "temperature.gpu": temp})

        # (b) throttling / (c) rising temperature
        if clocks_logged:
            if clock is None or ref_clock is None:
                return
            falling = clock <= ref_clock * (1.0 - c.clock_drop)
            throttle = busy and (high or climbing or risen) and falling
            rising = at_plateau and climbing and not falling
        else:
            # no clocks: real thermal throttling pulls power down, so hot with power fallen well
            # below the run's peak (yet still working) counts, not only hot at the plateau
            peak = self._peak_power
            pulled = (peak is not None and c.throttle_power_min * peak <= power
                      <= (1.0 - c.throttle_power_drop) * peak)
            throttle = high and (at_plateau or pulled)
            rising = at_plateau and climbing and not high
        ep = self._ep["throttling"]
        if ep.step(throttle, pt):
            heat = (f"{temp:.0f} °C (hot)" if high else f"{temp:.0f} °C, up {rise:.0f} °C" if climbing
                    else f"{temp:.0f} °C, {temp - (ref_temp or temp):.0f} °C above the run's start")
            if clocks_logged and ref_clock is not None and clock is not None:
                clk = f"SM clock {ref_clock:.0f} -> {clock:.0f} MHz"
            else:
                clk = ("clocks not logged (judged on temperature and power alone; log clocks.sm to confirm)")
            self._open("throttling", "G4", ep, f"throttling: {self._power_words(power)} while {heat}; {clk}",
                       evidence={"power.draw [W]": power, "temperature.gpu": temp, "clocks.sm [MHz]": clock,
                                 "reference_clock_mhz": ref_clock, "clocks": "logged" if clocks_logged else "unknown"})
        ep = self._ep["rising-temperature"]
        if ep.step(rising and not throttle, pt):
            clk = (f"SM clock holding at {clock:.0f} MHz" if clocks_logged and clock is not None
                   else "clocks not logged, so throttling cannot be ruled out")
            self._open("rising-temperature", "G4", ep,
                       f"temperature rising ({temp - rise:.0f} -> {temp:.0f} °C) at full power "
                       f"({power:.0f} W); {clk}: not yet throttling, keep watching",
                       severity="info",
                       evidence={"temperature.gpu": temp, "power.draw [W]": power, "clocks.sm [MHz]": clock})

    def _plateau_level(self) -> float | None:
        return self.c.plateau_w if self.c.plateau_w is not None else self._peak_power

    def _power_words(self, power: float) -> str:
        """``power 100 W at the plateau`` only when it is; else ``power 65 W (plateau ~100 W)``."""
        level = self._plateau_level()
        if level is None:
            return f"power {power:.0f} W"
        if power >= self.c.plateau_fraction * level:
            return f"power {power:.0f} W at the plateau"
        return f"power {power:.0f} W (plateau ~{level:.0f} W)"

    def _judge_reasons(self, pt: _Point, sample: Mapping[str, Any]) -> None:
        c = self.c
        bits = reasons(sample.get("clocks_event_reasons.active"))
        growth: dict[str, float] = {}
        for key in ("sw_thermal", "hw_thermal"):
            v = number(sample.get(_COUNTERS[key]))
            if v is None:
                continue
            prev = self._prev_counters.get(key)
            self._prev_counters[key] = v
            if prev is not None and v >= prev:
                growth[key] = v - prev
        if bits is None and not growth:
            return
        hot_bits = (bits or 0) & c.reason_mask
        grew = {k: g for k, g in growth.items() if g >= c.counter_growth_us}
        ep = self._ep["throttle-reason"]
        if ep.step(bool(hot_bits or grew), pt):
            what = []
            if hot_bits:
                what.append(f"reasons {hex(bits or 0)} ({_reason_names(hot_bits)})")
            for k, g in grew.items():
                what.append(f"{k} counter +{g / 1000:.0f} ms")
            self._open("throttle-reason", "G4", ep, "thermal slowdown reported: " + ", ".join(what),
                       evidence={"clocks_event_reasons.active": hex(bits) if bits is not None else None,
                                 **{f"{k}_growth_us": g for k, g in growth.items()}})

    def _judge_memory(self, pt: _Point, sample: Mapping[str, Any]) -> None:
        c = self.c
        avail = self._smooth("avail", number(sample.get("mem.available [B]")))
        free = self._smooth("free", number(sample.get("mem.free [B]")))
        psi = self._smooth("psi", number(sample.get("psi.memory.full.avg10")))
        self._track_min("avail", avail)
        if avail is not None:
            self._avail.append((pt.t, avail))
            while self._avail and pt.t - self._avail[0][0] > c.mem_window_s:
                self._avail.popleft()
        why: list[str] = []
        if avail is not None and avail < c.low_available:
            why.append(f"MemAvailable {avail / GB:.1f} GiB (< {c.low_available / GB:.0f} GiB)")
        elif avail is not None and len(self._avail) >= 2:
            trend = self._mem_trend()
            if trend:
                why.append(trend)
        if (free is not None and free < c.cuda_free_floor and avail is not None
                and avail >= c.low_available):
            why.append(f"MemFree {free / GB:.1f} GiB (what CUDA sees on GB10) while MemAvailable is "
                       f"{avail / GB:.1f} GiB: page cache holds the rest (drop caches between runs)")
        if psi is not None and psi >= c.psi_full:
            why.append(f"PSI full avg10 {psi:.2f}%")
        if any(not w.startswith("MemAvailable falling") for w in why):
            self._mem_hard = True
        if avail is not None or free is not None or psi is not None:
            ep = self._ep["memory-pressure"]
            if ep.step(bool(why), pt):
                self._open("memory-pressure", "G3", ep, "memory pressure: " + "; ".join(why),
                           evidence={"mem.available [B]": avail, "mem.free [B]": free,
                                     "psi.memory.full.avg10": psi})
        swap = number(sample.get("swap.used [B]"))
        if swap is not None:
            self._swap_min = swap if self._swap_min is None else min(self._swap_min, swap)
            grown = swap - self._swap_min
            ep = self._ep["swap-growth"]
            if ep.step(grown >= c.swap_growth, pt):
                self._open("swap-growth", "G3", ep,
                           f"swap in use grew by {grown / GB:.2f} GiB to {swap / GB:.2f} GiB: the pool is short",
                           evidence={"swap.used [B]": swap, "swap_growth_bytes": grown})

    def _mem_trend(self) -> str | None:
        """MemAvailable falling over the trend window, STILL falling over the most recent
        ``mem_recent_s`` (faster than the noise floor's rate), and projected at the recent rate to
        go below the low-available threshold within the horizon; else None. A model load that
        takes 70 GB in 90 s and then holds stops counting once the recent stretch is flat."""
        c = self.c
        (t0, a0), (t1, a1) = self._avail[0], self._avail[-1]
        span, drop = t1 - t0, a0 - a1
        if span <= 0 or span < c.mem_window_s / 2 or drop < c.mem_min_decline:
            return None
        recent = [(t, a) for t, a in self._avail if t1 - t <= c.mem_recent_s]
        rspan = recent[-1][0] - recent[0][0]
        if len(recent) < 2 or rspan < c.mem_recent_s / 2:
            return None
        rate = (recent[0][1] - recent[-1][1]) / rspan  # bytes per second, positive = falling
        if rate <= c.mem_min_decline / c.mem_window_s:
            return None
        eta = max(0.0, a1 - c.low_available) / rate
        if eta > c.mem_horizon_s:
            return None
        return (f"MemAvailable falling {drop / GB:.1f} GiB in {span:.0f} s (now {rate * 60 / GB:.1f} GiB/min), "
                f"{a1 / GB:.1f} GiB left: below {c.low_available / GB:.0f} GiB in ~{eta:.0f} s at this rate")

    def _judge_processes(self, pt: _Point, sample: Mapping[str, Any]) -> None:
        procs = processes(sample.get("gpu.processes"))
        if procs is None:
            return
        if self._baseline_pids is None:
            self._baseline_pids = set(procs)
            return
        c = self.c
        for pid in procs:
            if pid in self._baseline_pids or pid in self._proc_eps:
                continue
            if self.exclude_pid is not None and _safe_call(self.exclude_pid, pid):
                self._baseline_pids.add(pid)
                continue
            self._proc_eps[pid] = _Episode(max(2, c.reason_confirm), c.release)
        for pid, ep in self._proc_eps.items():
            name, size = procs.get(pid, ("?", 0.0))
            if ep.step(pid in procs and size > c.heavy_bytes, pt):
                self._open("new-neighbour", "G6", ep,
                           f"new GPU process {name} (pid {pid}) holds {size / GB:.1f} GiB of {'the shared pool' if self.profile == 'gb10' else 'GPU memory'}",
                           evidence={"pid": float(pid), "name": name, "bytes": size})

    # ---------------------------------------------------------------- finish
    def finish(self) -> list[Event]:
        """All events, in start order; ``insufficient-load`` added when G4 cannot be judged."""
        if self.count and not any(e.kind == "insufficient-load" for e in self.events):
            why = self._insufficient()
            if why:
                ev = Event(gotcha="G4", kind="insufficient-load", start=self._first_ts(),
                           end=self._last_ts(), summary=why, severity="info",
                           evidence={"median_util_pct": _median(self._utils),
                                     "median_power_w": _median(self._powers_all),
                                     "loaded_s": round(self._loaded_s, 1)})
                self.events.append(ev)
                self._start_t[id(ev)] = self._first_pt.t if self._first_pt else 0.0
        if not self._mem_hard:  # a fall that stopped above the floor (a model load), not pressure
            for ev in self.events:
                if ev.kind == "memory-pressure" and ev.end is not None and ev.severity == "warn":
                    low = self._mins.get("avail")
                    ev.severity = "info"
                    ev.summary += (f" (stopped by {ev.end}, MemAvailable never below "
                                   f"{_fmt(None if low is None else low / GB, ' GiB', 1)}: a load, not a leak)")
        ranked = sorted(enumerate(self.events), key=lambda ne: (self._start_t.get(id(ne[1]), 0.0), ne[0]))
        return [e.model_copy() for _, e in ranked]

    def _first_ts(self) -> str:
        return self._first_pt.ts if self._first_pt else "sample 1"

    def _last_ts(self) -> str:
        return self._last_pt.ts if self._last_pt else f"sample {self.count}"

    def _insufficient(self) -> str | None:
        """Why G4 cannot be judged, or None. Load is judged on the loaded stretch, not the whole
        log: a G4 event that fired, or ``verdict_min_s`` under load, is enough however long the
        idle part before or after it was."""
        c = self.c
        if any(e.kind in _G4_JUDGED for e in self.events) or self._loaded_s >= c.verdict_min_s:
            return None
        mu, mp = _median(self._utils), _median(self._powers_all)
        loaded = f"~{self._loaded_s:.0f} s under load"
        if mu is not None and mu < c.load_util:
            return (f"too little load to judge G4: median utilisation {mu:.0f}% (< {c.load_util:.0f}%), "
                    f"{loaded}; run a representative load for 10-15 minutes")
        if mu is None and mp is not None and c.plateau_w is not None and mp < c.load_power_w:
            return (f"too little load to judge G4: median power {mp:.0f} W (< {c.load_power_w:.0f} W) "
                    f"and utilisation not logged, {loaded}; run a representative load for 10-15 minutes")
        if mu is None and mp is None:
            return "G4 cannot be judged: the log has neither utilisation nor power"
        return None


def _safe_call(fn: Callable[[int], bool], pid: int) -> bool:
    try:
        return bool(fn(pid))
    except Exception:  # noqa: BLE001 - a failing filter must not stop the judging
        return False


# a G4 event that fired means the run was loaded enough to judge G4
_G4_JUDGED = frozenset({"throttling", "throttle-reason", "power-plateau", "rising-temperature",
                        "low-clock-state"})

_REASON_NAMES = {0x8: "HwSlowdown", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown"}


def _reason_names(bits: int) -> str:
    names = [n for b, n in _REASON_NAMES.items() if bits & b]
    return "|".join(names) or hex(bits)


# --------------------------------------------------------------------------- whole runs
def _verdict(det: Detector, events: list[Event]) -> tuple[list[str], list[str]]:
    """One line per gotcha (G4, G3, G6) and the notes on what could not be judged."""
    c = det.c
    kinds = {e.kind for e in events}
    first = {k: next(e for e in events if e.kind == k) for k in kinds}
    lines: list[str] = []
    notes: list[str] = []
    if "throttling" in kinds:
        lines.append(f"G4 warn: throttling from {first['throttling'].start}: "
                     "improve cooling or cap run length (do not retune batch size or precision)")
    elif "low-clock-state" in kinds:
        lines.append(f"G4 warn [G4.low-clock-state]: GB10 low-clock state from {first['low-clock-state'].start}: "
                     f"clock and power low under load. Fix: {det.kb.subcode('G4.low-clock-state').fix}")
    elif "throttle-reason" in kinds:
        lines.append(f"G4 warn: thermal slowdown reported from {first['throttle-reason'].start}")
    elif "insufficient-load" in kinds:
        lines.append("G4 not judged: " + first["insufficient-load"].summary)
    elif "rising-temperature" in kinds:
        lines.append("G4 info: temperature rising at full power with clocks holding: not yet throttling; "
                     "watch longer")
    elif "power-plateau" in kinds:
        clocks = "with stable clocks" if "clock" in det._seen else "(clocks not logged)"
        lines.append(f"G4 info: normal sustained power plateau {clocks}: the platform's cap, not a bug")
    elif det.count:  # medians over the loaded samples: idle stretches around the load do not count
        mu = _median(det._loaded_utils or det._utils)
        mp = _median(det._loaded_powers or det._powers_all)
        lines.append(f"G4 info: under load (median util {_fmt(mu, '%')}, power {_fmt(mp, ' W')}) "
                     "without reaching the power plateau; no throttling seen")
    if "insufficient-load" not in kinds and det.count and det._loaded_s < c.verdict_min_s:
        notes.append(f"only ~{det._loaded_s:.0f} s under load: a firm G4 verdict needs 10-15 minutes "
                     "of a representative load")
    if det.count and "clock" not in det._seen:
        notes.append("no SM clock in the log: throttling is judged on power and temperature alone "
                     "(log clocks.sm to tell the plateau from throttling)")
    if det.count and "power" not in det._seen:
        notes.append("no power readings in the log: the plateau and throttling cannot be judged")
    if det.count and "temp" not in det._seen:
        notes.append("no temperature in the log: throttling and rising temperature cannot be judged")
    mem_seen = bool({"avail", "free", "psi"} & det._seen) or det._swap_min is not None
    mem_warn = [e for e in events if e.kind in ("memory-pressure", "swap-growth") and e.severity == "warn"]
    if mem_warn:
        k = "memory-pressure" if any(e.kind == "memory-pressure" for e in mem_warn) else "swap-growth"
        first[k] = next(e for e in mem_warn if e.kind == k)
        lines.append(f"G3 warn: {first[k].summary} (from {first[k].start}); flush page cache between "
                     "runs, then shorter sequences / smaller batch, bf16 LoRA before QLoRA")
    elif "memory-pressure" in kinds:
        lines.append(f"G3 info: {first['memory-pressure'].summary}; no memory pressure at the end of the run")
    elif mem_seen:
        low = det._mins.get("avail")
        lines.append("G3 pass: no memory pressure" + (f" (MemAvailable never below {low / GB:.1f} GiB)"
                                                       if low is not None else ""))
    elif det.count:
        notes.append("no memory columns in the log: G3 (memory pressure) not judged")
    if "new-neighbour" in kinds:
        names = "; ".join(e.summary for e in events if e.kind == "new-neighbour")
        lines.append(f"G6 warn: {names}: stop or cap it before a long or full-pool run")
    elif det._baseline_pids is not None:
        lines.append("G6 pass: no new heavy GPU process appeared")
    elif det.count:
        notes.append("no GPU process column in the log: G6 (new heavy neighbours) not judged")
    if det._unstamped:
        notes.append(f"{det._unstamped} sample(s) without a usable timestamp (missing, unreadable or "
                     "going backwards): spaced by the previous interval")
    return lines, notes


def analyze(samples: Iterable[Sample], kb: knowledge.Knowledge | None = None,
            profile: Profile = "gb10", notes: Iterable[str] = ()) -> AnalysisResult:
    """Judge a whole recorded run (``spark-ops thermal analyze``); ``notes`` from the reader
    are carried into the result."""
    det = Detector(kb, profile)
    for sample in samples:
        det.feed(sample)
    return result(det, notes)


def result(det: Detector, notes: Iterable[str] = ()) -> AnalysisResult:
    """Close a detector into the report (``watch`` uses this for its closing summary)."""
    events = det.finish()
    lines, more = _verdict(det, events)
    duration = (det._stamped_last - det._stamped_first  # type: ignore[operator]
                if det._stamped_n >= 2 else None)
    all_notes = list(notes) + more
    if not det.count:
        lines = ["nothing to judge: no samples"]
    return AnalysisResult(profile=det.profile, events=events, samples=det.count,
                          duration_s=duration, verdict=lines, notes=all_notes)


def analyze_text(text: str, kb: knowledge.Knowledge | None = None,
                 profile: Profile = "gb10") -> AnalysisResult:
    """A log's text (any format :func:`~sparkops.monitor.csvlog.read_log` reads) -> the report."""
    rows, notes = read_log(text)
    return analyze(rows, kb, profile, notes)


# --------------------------------------------------------------------------- the stream reader
_MAX_LINE_BYTES = 1 << 16  # a CSV row is a few hundred bytes; a longer "line" is not one
class LogStream:
    """A log file read in two bounded passes, for logs of any length (``thermal analyze``).

    Pass 1 reads every line once, keeping only what ordering needs (timestamp, offset, header, line
    number: about 22 bytes a row); pass 2 parses the data lines one at a time in timestamp order
    (file order when that already is it; a newest-first or shuffled log is read by seeking).
    A FIFO, pipe or device is first copied to a temporary file within ``timeout_s``.
    Iterating the stream itself gives the notes: use it after :meth:`samples` is exhausted.
    """

    def __init__(self, path: Path | str, timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.parser = LineParser()
        self.extra: list[str] = []
        self.error: str | None = None
        self.timed_out = False

    def __iter__(self) -> Iterator[str]:
        yield from self.parser.notes()
        yield from self.extra

    def samples(self) -> Iterator[Sample]:
        fh = self._open()
        if fh is None:
            return
        with fh:
            yield from self._ordered(fh)

    def _open(self) -> BinaryIO | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            self.error = f"cannot read {self.path}: {exc.strerror or exc}"
            return None
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                self.error = f"cannot read {self.path}: it is a directory"
                os.close(fd)
                return None
            if stat.S_ISREG(mode):
                os.set_blocking(fd, True)
                return os.fdopen(fd, "rb")
            return self._spool(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.close(fd)
            self.error = f"cannot read {self.path}: {exc.strerror or exc}"
            return None

    def _spool(self, fd: int) -> BinaryIO:
        """A FIFO/pipe/device into a temporary file, waiting at most ``timeout_s`` in all."""
        tmp = tempfile.TemporaryFile()  # noqa: SIM115 - returned open; samples() closes it
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        deadline = time.monotonic() + self.timeout_s
        got = 0
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.timed_out = True
                    break
                if not poller.poll(min(left, 1.0) * 1000):
                    continue
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                tmp.write(chunk)
                got += len(chunk)
        finally:
            os.close(fd)
        if self.timed_out:
            self.extra.append(f"{self.path} timed out after {self.timeout_s:g} s: judged the {got} bytes "
                              "read by then" if got else
                              f"{self.path}: nothing arrived within {self.timeout_s:g} s (a FIFO with no writer?)")
        tmp.seek(0)
        return tmp

    def _ordered(self, fh: BinaryIO) -> Iterator[Sample]:
        parser = self.parser
        stamps = array("d")
        offsets = array("q")
        linenos = array("l")
        hdrs = array("l")
        last = -math.inf
        disorder = 0
        pos = 0
        lineno = 0
        while raw := fh.readline(_MAX_LINE_BYTES):
            lineno += 1
            start, pos = pos, pos + len(raw)
            if len(raw) == _MAX_LINE_BYTES and not raw.endswith(b"\n"):  # not a CSV row: skip it whole
                while (more := fh.readline(_MAX_LINE_BYTES)) and not more.endswith(b"\n"):
                    pos += len(more)
                pos += len(more)
                parser.problems.add(f"longer than {_MAX_LINE_BYTES} bytes", lineno)
                continue
            header = parser.header
            at = header.stamp_at if header is not None else None
            parts = raw.split(b",", at + 1) if at is not None and lineno > 1 and raw[:1].isdigit() else ()
            if at is not None and len(parts) > at + 1:
                # a data line under a header (it starts with a digit: no header, comment or blank), and its stamp
                # is not its last cell: only that cell is decoded (classify would split and strip every cell)
                t = seconds(parts[at].decode("utf-8", errors="replace"))
            else:
                kind, cells = parser.classify(lineno, raw.decode("utf-8", errors="replace"))
                if kind != "data":
                    continue
                header = parser.header
                at = header.stamp_at if header is not None else None
                t = seconds(cells[at]) if at is not None and at < len(cells) else None
            if t is None:
                t = last  # no stamp: keeps its place after the previous stamped row
            elif t < last:
                disorder += 1
            last = max(last, t)
            stamps.append(t)
            offsets.append(start)
            linenos.append(lineno)
            hdrs.append(len(parser.headers) - 1)
        order: Iterable[int] = range(len(offsets))
        if disorder:
            order = sorted(order, key=stamps.__getitem__)
            self.extra.append(_order_note(disorder))
        del stamps
        headers = parser.headers
        for i in order:
            fh.seek(offsets[i])
            raw = fh.readline().decode("utf-8", errors="replace")
            line = raw.strip().strip("\x00")
            if linenos[i] == 1:
                line = line.lstrip("\ufeff")
            sample = parser.data(linenos[i], [c.strip() for c in line.split(",")], headers[hdrs[i]])
            if sample is not None:
                yield sample


