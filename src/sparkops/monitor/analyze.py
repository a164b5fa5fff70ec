"""Judge a run's samples into events (G3, G4, G6): live, one sample at a time, or on a whole log.

The judging works on columns: a :class:`~sparkops.monitor.csvlog.Block` of rows at a time (a log's reader
gives them; ``watch``'s one sample is a block of one), with only aggregate state between blocks (smoothing
windows, running extremes, episodes, trend windows), so a million-row log is judged in bounded memory; a
block where no judgment can change is recognised on bounds and passed over in bulk. Every path decides what
the row-by-row judge decided (tests/monitor/test_columnar_equivalence.py holds them equal).

Pure: no I/O, no clock (``analyze_log`` only drives a LogStream, whose reads are its own); the numbers come
from ``thresholds.monitor.analyze`` (plus the existing
``g3``/``g4``/``g6`` keys, so a threshold lives in one place). Every judgment works on rolling
medians over a few samples and must hold for several samples in a row, so one noisy reading
makes no event. A sample without a column simply does not feed the judgments that need it: a
seeds log (timestamp, temperature, power) is judged on temperature and power, and says the
clocks are unknown rather than guessing.

G4 in short (gotchas.md): a ~100 W plateau with stable clocks is the platform's normal cap
(``power-plateau``, info); temperature climbing at full power with clocks holding is not yet
throttling (``rising-temperature``, info); throttling is the GPU busy while temperature
climbs or sits high AND the SM clock falls from the run's early level (``throttling``); without
clock columns (seeds' logs) it is high temperature at the plateau, or high temperature with power
pulled well below the run's peak (thermal throttling lowers power; it does not hold it).
"""

from __future__ import annotations

import gc
import math
import re
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import compress, islice, repeat
from operator import add, ge, itemgetter, le, sub
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops import knowledge
from sparkops.checks.g04_thermal_power import low_clock_state
from sparkops.core.units import GIB
from sparkops.monitor.csvlog import Block, LogStream, read_log, seconds
from sparkops.monitor.events import Event, EventKind, Sample

Profile = Literal["gb10", "generic"]
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*[A-Za-z%]*\s*$")
_COUNTERS = {"sw_thermal": "violation.sw_thermal [us]", "hw_thermal": "violation.hw_thermal [us]",
             "sw_power_cap": "violation.sw_power_cap [us]"}


class AnalysisResult(BaseModel):
    """What ``spark-ops thermal analyze`` and ``watch``'s closing summary report."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

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
            mem_min_decline=float(a.mem_min_decline_gb) * GIB,
            mem_recent_s=float(a.mem_recent_s),
            throttle_power_drop=float(a.throttle_power_drop_fraction),
            throttle_power_min=float(a.throttle_power_min_fraction),
            low_available=kb.thresholds.g3.low_available_warn_gb * GIB,
            cuda_free_floor=float(a.cuda_free_floor_gb) * GIB,
            psi_full=kb.thresholds.g3.psi_full_avg10_warn,
            swap_growth=float(a.swap_growth_gb) * GIB,
            heavy_bytes=kb.thresholds.g6.heavy_neighbour_gb * GIB,
        )


# --------------------------------------------------------------------------- columns
_NAN = math.nan
# the judged columns read as numbers (NaN: unknown) and as they are (text, or a number for the reason bits)
NUMERIC_COLUMNS: tuple[str, ...] = (
    "temperature.gpu", "power.draw [W]", "clocks.sm [MHz]", "utilization.gpu [%]", "mem.available [B]",
    "mem.free [B]", "psi.memory.full.avg10", "violation.sw_thermal [us]", "violation.hw_thermal [us]",
    "swap.used [B]")
RAW_COLUMNS: tuple[str, ...] = ("clocks_event_reasons.active", "gpu.processes")
_SMOOTHED = (("temp", "temperature.gpu"), ("power", "power.draw [W]"), ("clock", "clocks.sm [MHz]"),
             ("util", "utilization.gpu [%]"), ("avail", "mem.available [B]"), ("free", "mem.free [B]"),
             ("psi", "psi.memory.full.avg10"))


def columns(samples: Sequence[Mapping[str, Any]]) -> Block:
    """Sample dicts (``watch``'s rows, ``read_log``'s) -> one :class:`Block`, each cell read as the judge
    reads it (:func:`number`; a timestamp only when it is text)."""
    ts: list[str | None] = []
    for s in samples:
        raw = s.get("timestamp")
        ts.append((raw.strip() or None) if isinstance(raw, str) else None)
    t = array("d", [_NAN if x is None or (v := seconds(x)) is None else v for x in ts])
    num: dict[str, array[float]] = {}
    for col in NUMERIC_COLUMNS:
        vals = [number(s.get(col)) for s in samples]
        if any(v is not None for v in vals):
            num[col] = array("d", [_NAN if v is None else v for v in vals])
    raw_cols = {col: [s.get(col) for s in samples] for col in RAW_COLUMNS}
    return Block(len(samples), t, ts, num, raw_cols)


def _rolling_median(carry: list[float], raw: Sequence[float] | None, n: int, w: int) -> tuple[array[float], list[float]]:
    """Each value's median over the last ``w`` readings (its own and the ``carry`` before it; unknown ones left
    out), NaN where the value itself is unknown: what a deque of ``w`` and :func:`_median` give, row by row.
    Returns the medians and the carry for the next block (the last ``w - 1`` readings)."""
    keep = w - 1
    if raw is None:
        ext = carry + [_NAN] * min(n, w)
        return array("d", [_NAN]) * n, (ext[-keep:] if keep else [])
    ext = carry + (raw if isinstance(raw, list) else list(raw))
    k = len(carry)
    total = sum(ext)
    if total == total and k == keep:  # every reading known (a NaN makes the sum NaN): medians of full windows
        if w == 1:
            out = array("d", raw)
        else:
            rows = zip(*[ext[j:j + n] for j in range(w)], strict=True)
            h = w // 2
            if w % 2:
                out = array("d", map(itemgetter(h), map(sorted, rows)))
            else:
                out = array("d", [(s[h - 1] + s[h]) / 2 for s in map(sorted, rows)])
    else:
        out = array("d", [_NAN]) * n
        for i in range(n):
            v = ext[k + i]
            if v != v:
                continue
            known = [x for x in ext[max(0, k + i - keep):k + i + 1] if x == x]
            known.sort()
            m = len(known)
            h = m // 2
            out[i] = known[h] if m % 2 else (known[h - 1] + known[h]) / 2
    return out, (ext[-keep:] if keep else [])


class _Smoothed:
    """A block's rolling medians, each column computed when first asked for (a steady block needs few)."""

    def __init__(self, raw: dict[str, Sequence[float] | None], carry: dict[str, list[float]], n: int, w: int) -> None:
        self.raw, self.carry, self.n, self.w = raw, carry, n, w
        self._done: dict[str, array[float]] = {}

    def __getitem__(self, key: str) -> array[float]:
        got = self._done.get(key)
        if got is None:
            got = self._done[key] = _rolling_median(self.carry[key], self.raw[key], self.n, self.w)[0]
        return got

    def bounds(self, key: str) -> tuple[float, float] | None:
        """The lowest and highest rolling median of the block, bounded without computing them: (a value at most
        the lowest, a value at least the highest), from the order statistics of short stretches; None when the
        window is even or a reading is unknown (the caller computes the medians)."""
        raw, carry, w, n = self.raw[key], self.carry[key], self.w, self.n
        if raw is None or w % 2 == 0 or len(carry) != w - 1 or not (_complete(raw) and _complete(carry)):
            return None
        ext = carry + (raw if isinstance(raw, list) else list(raw))
        r = w // 2
        lo, hi = math.inf, -math.inf
        span = 128  # windows starting in one stretch lie within it and the w - 1 readings after it
        for a in range(0, n, span):
            part = sorted(ext[a:a + span + w - 1])
            lo = min(lo, part[r])  # a window's median is at least its (r+1)-th smallest, so at least this
            hi = max(hi, part[-1 - r])
        return lo, hi


def _complete(values: Sequence[float]) -> bool:
    """Every reading known (no NaN: a NaN makes the sum NaN)."""
    total = sum(values)
    return total == total or all(v == v for v in values)


def _known(values: Sequence[float]) -> bool:
    """Any reading known (not NaN) in the column."""
    return any(map(math.isfinite, values))


# --------------------------------------------------------------------------- episodes
_Pt = tuple[float, str]  # (time on the log's clock, the stamp as logged or "sample N")


class _Episode:
    """One kind's on/off state: opens after ``confirm`` true samples in a row (the event starts
    at the first of them), closes after ``release`` false ones (it ends at the last true one)."""

    __slots__ = ("confirm", "release", "first", "last_true", "trues", "falses", "event")

    def __init__(self, confirm: int, release: int) -> None:
        self.confirm, self.release = confirm, release
        self.first: _Pt | None = None
        self.last_true: _Pt | None = None
        self.trues = 0
        self.falses = 0
        self.event: Event | None = None

    def step(self, cond: bool, pt: _Pt) -> bool:
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
                self.event.end = self.last_true[1] if self.last_true else None
                self.event = None
                self.trues = 0
        else:
            self.trues = 0
        return False

    def idle(self) -> bool:
        """Nothing pending: a false sample changes nothing."""
        return self.event is None and self.trues == 0


# the order events that open on the same sample are created in (as the row-wise judge made them)
_RANK = {"low-clock-state": 0, "power-plateau": 1, "throttling": 2, "rising-temperature": 3, "throttle-reason": 4,
         "memory-pressure": 5, "swap-growth": 6, "new-neighbour": 7}


# --------------------------------------------------------------------------- detector
class Detector:
    """Streaming judge over columns: ``feed_block`` a :class:`~sparkops.monitor.csvlog.Block` of rows (a
    log), or ``feed`` one sample (``watch``: the events that open on it come back, for live display); then
    ``finish`` (every event, ``end`` filled where it ended; ``insufficient-load`` added).

    The state between blocks is aggregates only (the smoothing windows, running minima and maxima, the
    episodes, the trend windows): a log of any length is judged in bounded memory, apart from the packed
    whole-run readings the verdict's medians need (8 bytes a sample)."""

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
        self._carry: dict[str, list[float]] = {k: [] for k, _col in _SMOOTHED}
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
        # whole-run readings for the medians the verdict quotes: packed doubles (8 bytes a sample)
        # whole-run readings for the medians the verdict may quote (utilisation and power, as read: 8 bytes a
        # sample each, NaN unknown; loaded or not, 1 byte), smoothed only when the verdict asks (_series)
        self._util_raw = array("d")
        self._power_raw = array("d")
        self._loaded_rows = bytearray()
        self._whole: tuple[array[float], array[float], array[float], array[float]] | None = None
        self._loaded_s = 0.0
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
        self._plateau_since: _Pt | None = None
        self._start_t: dict[int, float] = {}
        self._first_pt: _Pt | None = None
        self._last_pt: _Pt | None = None
        self._opened: list[tuple[int, int, int, Event]] = []  # events opened in the block being judged
        self._clocks_seen = False  # an SM clock read in an earlier block

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
        before = len(self.events)
        self.feed_block(columns([sample]))
        return [e.model_copy() for e in self.events[before:]]

    def feed_block(self, blk: Block) -> None:
        """Judge a block of rows (in time order), column by column."""
        n = blk.n
        if n <= 0:
            return
        base = self.count
        labels = blk.ts

        def pt(i: int, t: float) -> _Pt:
            return (t, labels[i] or f"sample {base + i + 1}")

        times, dts = self._times(blk)
        self.count += n
        if self._first_pt is None:
            self._first_pt = pt(0, times[0])
        self._last_pt = pt(n - 1, times[n - 1])
        w = self.c.window
        keep = w - 1
        raws = {key: blk.num.get(col) for key, col in _SMOOTHED}
        sm = _Smoothed(raws, dict(self._carry), n, w)
        for key, raw in raws.items():
            carry = self._carry[key]
            if raw is None:
                tail = carry + [_NAN] * min(n, w)
            else:
                tail = carry + list(raw[-keep:] if keep else [])
                if key not in self._seen and _known(raw):  # a median is known where its own reading is
                    self._seen.add(key)
            self._carry[key] = tail[-keep:] if keep else []
        nan_block = array("d", [_NAN]) * n
        self._util_raw.extend(raws["util"] if raws["util"] is not None else nan_block)
        self._power_raw.extend(raws["power"] if raws["power"] is not None else nan_block)
        self._whole = None
        self._opened = []
        self._judge_g4(blk, times, dts, sm, pt)
        self._judge_reasons(blk, times, pt)
        self._judge_memory(blk, times, sm, pt)
        self._judge_processes(blk, times, pt)
        self._opened.sort(key=lambda o: o[:3])
        self.events.extend(o[3] for o in self._opened)
        self._opened = []

    def _times(self, blk: Block) -> tuple[array[float], array[float]]:
        """Each row's time (a missing, unreadable or backward stamp: the previous one plus the last interval)
        and the interval in force at it."""
        n = blk.n
        st = blk.t
        times = array("d", st)
        dts = array("d", [0.0]) * n
        prev, dt = self._prev_t, self._dt
        if _complete(st) and (prev is None or st[0] >= prev) and all(map(le, st, islice(st, 1, None))):
            # every row stamped, none earlier than the one before: the stamps are the times
            steps = list(map(sub, islice(st, 1, None), st))
            if prev is not None:
                steps.insert(0, st[0] - prev)
            if not steps or min(steps) > 0:  # the interval in force: each step, clamped
                clamped = (steps if min(steps, default=1.0) >= 0.001 and max(steps, default=1.0) <= 3600.0  # no clamp to do
                           else map(min, map(max, steps, repeat(0.001)), repeat(3600.0)))
                dts = array("d", clamped) if prev is not None else array("d", [dt, *clamped])
                self._prev_t, self._dt = st[n - 1], dts[n - 1]
                if self._stamped_first is None:
                    self._stamped_first = st[0]
                self._stamped_last = st[n - 1]
                self._stamped_n += n
                return array("d", st), dts
        first, last, stamped, unstamped = self._stamped_first, self._stamped_last, 0, 0
        for i in range(n):
            t = st[i]
            if t != t or (prev is not None and t < prev):
                unstamped += 1
                t = prev + dt if prev is not None else 0.0
                times[i] = t
            else:
                if first is None:
                    first = t
                last = t
                stamped += 1
                if prev is not None and t > prev:
                    dt = min(max(t - prev, 0.001), 3600.0)
            prev = t
            dts[i] = dt
        self._prev_t, self._dt = prev, dt
        self._stamped_first, self._stamped_last = first, last
        self._stamped_n += stamped
        self._unstamped += unstamped
        return times, dts

    def _open(self, i: int, kind: EventKind, gotcha: str, ep: _Episode, pt: _Pt, summary: str,
              severity: str = "warn", evidence: dict[str, float | str | None] | None = None) -> Event:
        start = ep.first or ep.last_true or pt
        ev = Event(gotcha=gotcha, kind=kind, start=start[1],  # type: ignore[arg-type]
                   summary=summary, severity=severity, evidence=evidence or {})  # type: ignore[arg-type]
        ep.event = ev
        self._opened.append((i, _RANK[kind], len(self._opened), ev))
        self._start_t[id(ev)] = start[0]
        return ev

    def _series(self) -> tuple[array[float], array[float], array[float], array[float]]:
        """The run's smoothed utilisation and power (known ones), and those of the loaded samples."""
        if self._whole is None:
            utils, powers, lu, lp = array("d"), array("d"), array("d"), array("d")
            cu: list[float] = []
            cp: list[float] = []
            w, size = self.c.window, 1 << 16
            for a in range(0, len(self._util_raw), size):
                part_u, part_p = self._util_raw[a:a + size], self._power_raw[a:a + size]
                m = len(part_u)
                su, cu = _rolling_median(cu, part_u, m, w)
                sp, cp = _rolling_median(cp, part_p, m, w)
                loaded = self._loaded_rows[a:a + size]
                utils.extend(v for v in su if v == v)
                powers.extend(v for v in sp if v == v)
                lu.extend(v for v, ld in zip(su, loaded, strict=True) if ld and v == v)
                lp.extend(v for v, ld in zip(sp, loaded, strict=True) if ld and v == v)
            self._whole = (utils, powers, lu, lp)
        return self._whole

    # ---------------------------------------------------------------- G4
    def _judge_g4(self, blk: Block, times: array[float], dts: array[float], sm: _Smoothed,
                  pt: Callable[[int, float], _Pt]) -> None:
        c = self.c
        n = blk.n
        if self._steady_g4(times, dts, sm, pt):
            return
        temps, powers, clocks, utils = sm["temp"], sm["power"], sm["clock"], sm["util"]
        loaded_rows = self._loaded_rows
        gb10 = c.plateau_w is not None
        plateau_min = c.plateau_fraction * c.plateau_w if gb10 else 0.0
        kb = self.kb
        low_clock_mhz = kb.thresholds.g4.low_clock_mhz
        ep_low, ep_plat = self._ep["low-clock-state"], self._ep["power-plateau"]
        ep_thr, ep_rise = self._ep["throttling"], self._ep["rising-temperature"]
        tq = self._temps
        peak = self._peak_power
        ref_clock_l, ref_temp_l = self._ref_clock, self._ref_temp
        ref_clock = _median(ref_clock_l) if len(ref_clock_l) >= min(3, c.ref_samples) else None
        ref_temp = _median(ref_temp_l) if ref_temp_l else None
        loaded_s = self._loaded_s
        seen = self._seen
        # "clock" in _seen from the first row that had one: before it, rows are judged without clocks
        first_clock = next((i for i, v in enumerate(clocks) if v == v), n) if "clock" in seen else n
        clocks_before = self._clocks_seen
        for i in range(n):
            t = times[i]
            temp, power, clock, util = temps[i], powers[i], clocks[i], utils[i]
            has_t, has_p, has_c, has_u = temp == temp, power == power, clock == clock, util == util
            if has_p:
                peak = power if peak is None else max(peak, power)
                if not gb10:
                    pq = self._powers
                    pq.append((t, power))
                    while pq and t - pq[0][0] > c.plateau_min_s:
                        pq.popleft()
            if has_t:
                while tq and tq[-1][1] >= temp:
                    tq.pop()
                tq.append((t, temp))
                while tq and t - tq[0][0] > c.climb_window_s:
                    tq.popleft()
            if has_u:
                loaded = util >= c.load_util
            elif not has_p:
                loaded = False
            elif gb10:
                loaded = power >= c.load_power_w
            else:
                loaded = peak is not None and power >= c.plateau_fraction * peak
            loaded_rows.append(loaded)
            if loaded:
                loaded_s += dts[i]
                if has_c and len(ref_clock_l) < c.ref_samples:
                    ref_clock_l.append(clock)
                    ref_clock = _median(ref_clock_l) if len(ref_clock_l) >= min(3, c.ref_samples) else None
                if has_t and len(ref_temp_l) < c.ref_samples:
                    ref_temp_l.append(temp)
                    ref_temp = _median(ref_temp_l)
            # at the plateau
            if not has_p:
                at_plateau = False
            elif gb10:
                at_plateau = power >= plateau_min
            elif peak is None or power < c.plateau_fraction * peak or (has_u and util < c.busy_util):
                at_plateau = False
            else:
                recent = [p for _, p in self._powers]
                at_plateau = len(recent) >= 2 and (max(recent) - min(recent)) <= c.flat_fraction * max(recent)
            clocks_logged = clocks_before or i >= first_clock
            # (d) GB10 low-clock state: busy, yet clock and power low (the owner's rule; a clock at or above
            # g4.low_clock_mhz is never in it, so those rows are not asked)
            low_clock = False
            if gb10 and has_u and has_c and has_p:
                low_clock = clock < low_clock_mhz and low_clock_state(kb, util, clock, power, c.low_power_w)
                if ep_low.step(low_clock, pt(i, t)) if (low_clock or not ep_low.idle()) else False:
                    self._open(i, "low-clock-state", "G4", ep_low, pt(i, t),
                               f"GB10 low-clock state: {_fmt(clock, ' MHz')} and {_fmt(power, ' W', 1)} at "
                               f"{_fmt(util, '%')} utilisation (no reason bit; only a full power-cycle clears it)",
                               evidence={"clocks.sm [MHz]": clock, "power.draw [W]": power,
                                         "utilization.gpu [%]": util})
            if not (has_t and has_p):
                continue
            rise = temp - tq[0][1]
            climbing = rise >= c.climb_c
            high = temp >= c.hot_c
            risen = ref_temp is not None and temp - ref_temp >= c.risen_c
            busy = at_plateau or (has_u and util >= c.busy_util and not low_clock)
            # (a) the normal plateau: at the plateau for plateau_min_s; it starts where it began
            p = pt(i, t)
            if not at_plateau:
                self._plateau_since = None
            elif self._plateau_since is None:
                self._plateau_since = p
            since = self._plateau_since
            sustained = since is not None and t - since[0] >= c.plateau_min_s
            if ep_plat.step(at_plateau and (ep_plat.event is not None or sustained), p):
                ep_plat.first = since or p
                cap = (f"GB10's sustained cap (~{c.plateau_w:.0f} W)" if gb10 else "this GPU's sustained level")
                clk = f"SM clock ~{clock:.0f} MHz" if has_c else "clocks not logged"
                self._open(i, "power-plateau", "G4", ep_plat, p,
                           f"power flat at ~{power:.0f} W, {cap}; {clk}: the platform's normal cap, not a bug",
                           severity="info",
                           evidence={"power.draw [W]": power, "clocks.sm [MHz]": clock if has_c else None,
                                     "temperature.gpu": temp})
            # (b) throttling / (c) rising temperature
            if clocks_logged:
                if not has_c or ref_clock is None:
                    continue
                falling = clock <= ref_clock * (1.0 - c.clock_drop)
                throttle = busy and (high or climbing or risen) and falling
                rising = at_plateau and climbing and not falling
            else:
                # no clocks: real thermal throttling pulls power down, so hot with power fallen well
                # below the run's peak (yet still working) counts, not only hot at the plateau
                pulled = (peak is not None and c.throttle_power_min * peak <= power
                          <= (1.0 - c.throttle_power_drop) * peak)
                throttle = high and (at_plateau or pulled)
                rising = at_plateau and climbing and not high
            if ep_thr.step(throttle, p):
                heat = (f"{temp:.0f} °C (hot)" if high else f"{temp:.0f} °C, up {rise:.0f} °C" if climbing
                        else f"{temp:.0f} °C, {temp - (ref_temp or temp):.0f} °C above the run's start")
                if clocks_logged and ref_clock is not None and has_c:
                    clk = f"SM clock {ref_clock:.0f} -> {clock:.0f} MHz"
                else:
                    clk = "clocks not logged (judged on temperature and power alone; log clocks.sm to confirm)"
                self._open(i, "throttling", "G4", ep_thr, p,
                           f"throttling: {self._power_words(power, peak)} while {heat}; {clk}",
                           evidence={"power.draw [W]": power, "temperature.gpu": temp,
                                     "clocks.sm [MHz]": clock if has_c else None, "reference_clock_mhz": ref_clock,
                                     "clocks": "logged" if clocks_logged else "unknown"})
            if ep_rise.step(rising and not throttle, p):
                clk = (f"SM clock holding at {clock:.0f} MHz" if clocks_logged and has_c
                       else "clocks not logged, so throttling cannot be ruled out")
                self._open(i, "rising-temperature", "G4", ep_rise, p,
                           f"temperature rising ({temp - rise:.0f} -> {temp:.0f} °C) at full power "
                           f"({power:.0f} W); {clk}: not yet throttling, keep watching",
                           severity="info",
                           evidence={"temperature.gpu": temp, "power.draw [W]": power,
                                     "clocks.sm [MHz]": clock if has_c else None})
        self._peak_power = peak
        self._loaded_s = loaded_s
        self._clocks_seen = clocks_before or first_clock < n

    def _steady_g4(self, times: array[float], dts: array[float], sm: _Smoothed,
                   pt: Callable[[int, float], _Pt]) -> bool:
        """A block where no G4 judgment can change, judged column-wise (True), else False (the caller judges
        it row by row). Every reading known; GB10; the run's early clock and temperature settled; no clock
        below g4.low_clock_mhz (never the low-clock state) or fallen below the early level (never throttling);
        temperature nowhere up by climb_c over its window (never rising); at the plateau all along with its
        event open, or nowhere near it with nothing pending. Decided on bounds of the medians where they
        suffice, so most steady blocks compute none."""
        c = self.c
        n = len(times)
        if c.plateau_w is None or len(self._ref_clock) < c.ref_samples or len(self._ref_temp) < c.ref_samples:
            return False
        ep_low, ep_plat = self._ep["low-clock-state"], self._ep["power-plateau"]
        ep_thr, ep_rise = self._ep["throttling"], self._ep["rising-temperature"]
        if not (ep_low.idle() and ep_thr.idle() and ep_rise.idle()):
            return False
        bounds = {k: sm.bounds(k) for k in ("clock", "temp", "power", "util")}
        if any(b is None for b in bounds.values()):
            return False
        (low_clock, _hc), (low_t, high_t) = bounds["clock"], bounds["temp"]  # type: ignore[misc]
        (low_p, high_p), (low_u, _hu) = bounds["power"], bounds["util"]  # type: ignore[misc]
        ref_clock = _median(self._ref_clock)
        if low_clock < self.kb.thresholds.g4.low_clock_mhz or low_clock <= ref_clock * (1.0 - c.clock_drop):  # type: ignore[operator]
            return False
        tq = self._temps
        floor = min(low_t, tq[0][1]) if tq else low_t
        if high_t - floor >= c.climb_c:
            return False
        plateau_min = c.plateau_fraction * c.plateau_w
        at_plateau = low_p >= plateau_min
        if at_plateau:
            if ep_plat.event is None:
                return False
        elif high_p >= plateau_min or not ep_plat.idle():
            return False
        # nothing opens or closes: the state moves on in bulk. The run's peak power is not carried here: on GB10
        # only the judgments without clocks read it (and the generic profile's), and clocks are logged here
        # for good, so no later row reads it
        self._clocks_seen = True
        if low_u >= c.load_util:
            self._loaded_s = reduce(add, dts, self._loaded_s)
            self._loaded_rows.extend(b"\x01" * n)
        else:
            loaded = list(map(ge, sm["util"], repeat(c.load_util)))
            self._loaded_s = reduce(add, compress(dts, loaded), self._loaded_s)
            self._loaded_rows.extend(loaded)
        # the temperature window: what the row-by-row deque holds after the last row (the strict suffix minima
        # of the readings within climb_window_s of it), rebuilt from the block's tail
        t_end = times[n - 1]
        start = bisect_left(times, t_end - c.climb_window_s)
        while start > 0 and t_end - times[start - 1] <= c.climb_window_s:
            start -= 1
        w = sm.w
        ext = sm.carry["temp"] + list(sm.raw["temp"])  # type: ignore[arg-type]
        tail, _ = _rolling_median(ext[start:start + w - 1], ext[start + w - 1:], n - start, w)
        for i in range(start, n):
            t, temp = times[i], tail[i - start]
            while tq and tq[-1][1] >= temp:
                tq.pop()
            tq.append((t, temp))
            while tq and t - tq[0][0] > c.climb_window_s:
                tq.popleft()
        if at_plateau:  # at the plateau, its event open: every row a true one
            if self._plateau_since is None:
                self._plateau_since = pt(0, times[0])
            ep_plat.trues += n
            ep_plat.falses = 0
            ep_plat.last_true = pt(n - 1, t_end)
        else:
            self._plateau_since = None
        return True

    def _power_words(self, power: float, peak: float | None) -> str:
        """``power 100 W at the plateau`` only when it is; else ``power 65 W (plateau ~100 W)``."""
        level = self.c.plateau_w if self.c.plateau_w is not None else peak
        if level is None:
            return f"power {power:.0f} W"
        if power >= self.c.plateau_fraction * level:
            return f"power {power:.0f} W at the plateau"
        return f"power {power:.0f} W (plateau ~{level:.0f} W)"

    # ---------------------------------------------------------------- G4: reasons and counters
    def _judge_reasons(self, blk: Block, times: array[float], pt: Callable[[int, float], _Pt]) -> None:
        c = self.c
        n = blk.n
        raw_bits = blk.raw.get("clocks_event_reasons.active")
        bits_col: list[int | None] | None = None
        if raw_bits is not None and any(v is not None for v in raw_bits):
            cache: dict[Any, int | None] = {}
            bits_col = []
            for v in raw_bits:
                try:
                    b = cache[v]
                except KeyError:
                    b = cache[v] = reasons(v)
                except TypeError:  # an unhashable cell (a dict sample's odd value)
                    b = reasons(v)
                bits_col.append(b)
        counters = [(k, col) for k in ("sw_thermal", "hw_thermal")
                    if (col := blk.num.get(_COUNTERS[k])) is not None]
        if bits_col is None and not counters:
            return
        ep = self._ep["throttle-reason"]
        prev = self._prev_counters
        mask, floor = c.reason_mask, c.counter_growth_us
        if ep.idle() and floor > 0 and all(_complete(col) for _k, col in counters):
            # nothing pending: a block without a thermal bit or a counter step of floor changes nothing but
            # the counters' last readings
            hot = bits_col is not None and any(b & mask for b in set(bits_col) if b)
            grew = False
            for key, col in counters:
                before = prev.get(key)
                steps = map(sub, islice(col, 1, None), col)
                if max(steps, default=-math.inf) >= floor or (before is not None and col[0] - before >= floor):
                    grew = True
            if not (hot or grew):
                for key, col in counters:
                    prev[key] = col[n - 1]
                return
        for i in range(n):
            bits = bits_col[i] if bits_col is not None else None
            growth: dict[str, float] = {}
            for key, col in counters:
                v = col[i]
                if v != v:
                    continue
                before = prev.get(key)
                prev[key] = v
                if before is not None and v >= before:
                    growth[key] = v - before
            if bits is None and not growth:
                continue
            hot_bits = (bits or 0) & mask
            grew = {k: g for k, g in growth.items() if g >= floor}
            cond = bool(hot_bits or grew)
            if not cond and ep.idle():
                continue
            if ep.step(cond, pt(i, times[i])):
                what = []
                if hot_bits:
                    what.append(f"reasons {hex(bits or 0)} ({_reason_names(hot_bits)})")
                for k, g in grew.items():
                    what.append(f"{k} counter +{g / 1000:.0f} ms")
                self._open(i, "throttle-reason", "G4", ep, pt(i, times[i]),
                           "thermal slowdown reported: " + ", ".join(what),
                           evidence={"clocks_event_reasons.active": hex(bits) if bits is not None else None,
                                     **{f"{k}_growth_us": g for k, g in growth.items()}})

    # ---------------------------------------------------------------- G3
    def _judge_memory(self, blk: Block, times: array[float], sm: _Smoothed,
                      pt: Callable[[int, float], _Pt]) -> None:
        c = self.c
        n = blk.n
        have = [k for k in ("avail", "free", "psi") if (raw := sm.raw[k]) is not None and _known(raw)]
        swaps = blk.num.get("swap.used [B]")
        if have:
            avails, frees, psis = sm["avail"], sm["free"], sm["psi"]
            ep = self._ep["memory-pressure"]
            aq = self._avail
            low_avail = self._mins.get("avail")
            for i in range(n):
                avail, free, psi = avails[i], frees[i], psis[i]
                has_a, has_f, has_s = avail == avail, free == free, psi == psi
                if not (has_a or has_f or has_s):
                    continue
                t = times[i]
                if has_a:
                    low_avail = avail if low_avail is None else min(low_avail, avail)
                    aq.append((t, avail))
                    while aq and t - aq[0][0] > c.mem_window_s:
                        aq.popleft()
                why: list[str] = []
                if has_a and avail < c.low_available:
                    why.append(f"MemAvailable {avail / GIB:.1f} GiB (< {c.low_available / GIB:.0f} GiB)")
                elif has_a and len(aq) >= 2:
                    trend = self._mem_trend()
                    if trend:
                        why.append(trend)
                if has_f and free < c.cuda_free_floor and has_a and avail >= c.low_available:
                    why.append(f"MemFree {free / GIB:.1f} GiB (what CUDA sees on GB10) while MemAvailable is "
                               f"{avail / GIB:.1f} GiB: page cache holds the rest (drop caches between runs)")
                if has_s and psi >= c.psi_full:
                    why.append(f"PSI full avg10 {psi:.2f}%")
                if any(not w.startswith("MemAvailable falling") for w in why):
                    self._mem_hard = True
                if not why and ep.idle():
                    continue
                if ep.step(bool(why), pt(i, t)):
                    self._open(i, "memory-pressure", "G3", ep, pt(i, t), "memory pressure: " + "; ".join(why),
                               evidence={"mem.available [B]": avail if has_a else None,
                                         "mem.free [B]": free if has_f else None,
                                         "psi.memory.full.avg10": psi if has_s else None})
            if low_avail is not None:
                self._mins["avail"] = low_avail
        if swaps is not None:
            ep = self._ep["swap-growth"]
            smin = self._swap_min
            for i in range(n):
                swap = swaps[i]
                if swap != swap:
                    continue
                smin = swap if smin is None else min(smin, swap)
                grown = swap - smin
                cond = grown >= c.swap_growth
                if not cond and ep.idle():
                    continue
                if ep.step(cond, pt(i, times[i])):
                    self._open(i, "swap-growth", "G3", ep, pt(i, times[i]),
                               f"swap in use grew by {grown / GIB:.2f} GiB to {swap / GIB:.2f} GiB: the pool is short",
                               evidence={"swap.used [B]": swap, "swap_growth_bytes": grown})
            self._swap_min = smin

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
        return (f"MemAvailable falling {drop / GIB:.1f} GiB in {span:.0f} s (now {rate * 60 / GIB:.1f} GiB/min), "
                f"{a1 / GIB:.1f} GiB left: below {c.low_available / GIB:.0f} GiB in ~{eta:.0f} s at this rate")

    # ---------------------------------------------------------------- G6
    def _judge_processes(self, blk: Block, times: array[float], pt: Callable[[int, float], _Pt]) -> None:
        raw = blk.raw.get("gpu.processes")
        if raw is None:
            return
        c = self.c
        cache: dict[Any, dict[int, tuple[str, float]] | None] = {}
        for i, value in enumerate(raw):
            if value is None:
                continue
            try:
                procs = cache[value]
            except KeyError:
                procs = cache[value] = processes(value)
            except TypeError:
                procs = processes(value)
            if procs is None:
                continue
            if self._baseline_pids is None:
                self._baseline_pids = set(procs)
                continue
            for pid in procs:
                if pid in self._baseline_pids or pid in self._proc_eps:
                    continue
                if self.exclude_pid is not None and _safe_call(self.exclude_pid, pid):
                    self._baseline_pids.add(pid)
                    continue
                self._proc_eps[pid] = _Episode(max(2, c.reason_confirm), c.release)
            for pid, ep in self._proc_eps.items():
                name, size = procs.get(pid, ("?", 0.0))
                cond = pid in procs and size > c.heavy_bytes
                if not cond and ep.idle():
                    continue
                if ep.step(cond, pt(i, times[i])):
                    where = "the shared pool" if self.profile == "gb10" else "GPU memory"
                    self._open(i, "new-neighbour", "G6", ep, pt(i, times[i]),
                               f"new GPU process {name} (pid {pid}) holds {size / GIB:.1f} GiB of {where}",
                               evidence={"pid": float(pid), "name": name, "bytes": size})

    # ---------------------------------------------------------------- finish
    def finish(self) -> list[Event]:
        """All events, in start order; ``insufficient-load`` added when G4 cannot be judged."""
        if self.count and not any(e.kind == "insufficient-load" for e in self.events):
            why = self._insufficient()
            if why:
                ev = Event(gotcha="G4", kind="insufficient-load", start=self._first_ts(),
                           end=self._last_ts(), summary=why, severity="info",
                           evidence={"median_util_pct": _median(self._series()[0]),
                                     "median_power_w": _median(self._series()[1]),
                                     "loaded_s": round(self._loaded_s, 1)})
                self.events.append(ev)
                self._start_t[id(ev)] = self._first_pt[0] if self._first_pt else 0.0
        if not self._mem_hard:  # a fall that stopped above the floor (a model load), not pressure
            for ev in self.events:
                if ev.kind == "memory-pressure" and ev.end is not None and ev.severity == "warn":
                    low = self._mins.get("avail")
                    ev.severity = "info"
                    ev.summary += (f" (stopped by {ev.end}, MemAvailable never below "
                                   f"{_fmt(None if low is None else low / GIB, ' GiB', 1)}: a load, not a leak)")
        ranked = sorted(enumerate(self.events), key=lambda ne: (self._start_t.get(id(ne[1]), 0.0), ne[0]))
        return [e.model_copy() for _, e in ranked]

    def _first_ts(self) -> str:
        return self._first_pt[1] if self._first_pt else "sample 1"

    def _last_ts(self) -> str:
        return self._last_pt[1] if self._last_pt else f"sample {self.count}"

    def _insufficient(self) -> str | None:
        """Why G4 cannot be judged, or None. Load is judged on the loaded stretch, not the whole
        log: a G4 event that fired, or ``verdict_min_s`` under load, is enough however long the
        idle part before or after it was."""
        c = self.c
        if any(e.kind in _G4_JUDGED for e in self.events) or self._loaded_s >= c.verdict_min_s:
            return None
        mu, mp = _median(self._series()[0]), _median(self._series()[1])
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
        utils, powers, loaded_utils, loaded_powers = det._series()
        mu = _median(loaded_utils or utils)
        mp = _median(loaded_powers or powers)
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
        lines.append("G3 pass: no memory pressure" + (f" (MemAvailable never below {low / GIB:.1f} GiB)"
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


_BLOCK_ROWS = 4096  # sample dicts judged per block


def analyze(samples: Iterable[Sample], kb: knowledge.Knowledge | None = None,
            profile: Profile = "gb10", notes: Iterable[str] = ()) -> AnalysisResult:
    """Judge a whole recorded run given as sample dicts (``read_log``'s rows); ``notes`` from the
    reader are carried into the result."""
    return analyze_blocks(_blocks_of(samples), kb, profile, notes)


def _blocks_of(samples: Iterable[Sample]) -> Iterable[Block]:
    it = iter(samples)
    while chunk := list(islice(it, _BLOCK_ROWS)):
        yield columns([s for s in chunk if isinstance(s, Mapping)])


def analyze_blocks(blocks: Iterable[Block], kb: knowledge.Knowledge | None = None,
                   profile: Profile = "gb10", notes: Iterable[str] = ()) -> AnalysisResult:
    """Judge a whole recorded run given as column blocks (``spark-ops thermal analyze``: a
    :class:`~sparkops.monitor.csvlog.LogStream`'s ``blocks()``); ``notes`` are read after the last block."""
    det = Detector(kb, profile)
    for blk in blocks:
        det.feed_block(blk)
    return result(det, notes)


def analyze_log(stream: LogStream, kb: knowledge.Knowledge | None = None,
                profile: Profile = "gb10") -> AnalysisResult:
    """Judge a log file (``spark-ops thermal analyze``): parsed once in file order, and judged again from the
    start in time order only when it turns out not to be in it (a newest-first or shuffled log)."""
    def marked(pid: int) -> bool:  # the watched command's own processes, as `watch` marked them in the log
        return pid in stream.parser.job_pids

    det = [Detector(kb, profile, exclude_pid=marked)]

    def restart() -> None:
        det[0] = Detector(det[0].kb, profile, exclude_pid=marked)

    collecting = gc.isenabled()
    gc.disable()  # a block is ~100,000 short-lived strings and lists with no cycles: nothing for the collector
    try:
        for blk in stream.blocks(on_reorder=restart):
            det[0].feed_block(blk)
    finally:
        if collecting:
            gc.enable()
    own = sorted(stream.parser.job_pids)
    said = ([f"GPU process(es) {', '.join(map(str, own[:5]))}{' ...' if len(own) > 5 else ''} marked by watch as the "
             "watched command's own: not judged as neighbours (G6)"] if own else [])
    return result(det[0], [*stream, *said])


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
