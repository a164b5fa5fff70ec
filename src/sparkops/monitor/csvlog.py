"""Read and write the monitor's CSV logs, and read plain ``nvidia-smi --query-gpu`` CSV.

Why one module: the seeds' ``thermal-sample.sh`` wrote ``nvidia-smi --query-gpu=timestamp,
temperature.gpu,power.draw --format=csv -l N``; people have months of those, in every variant
nvidia-smi offers (``noheader``, ``nounits``, any field subset and order). ``read_log`` turns any
of them, and this project's own logs (header = :data:`~sparkops.monitor.events.COLUMNS`), into
:data:`~sparkops.monitor.events.Sample` rows; ``write_header``/``format_row`` write the project's
format so old correlation scripts keep reading the first three columns.

Pure and total: ``read_log`` never raises; what it could not read comes back as notes.
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import heapq
import math
import os
import re
import select
import stat
import tempfile
import time
from array import array
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, compress, islice, repeat
from operator import add, gt, le, mul
from pathlib import Path
from typing import BinaryIO

from sparkops.monitor.events import COLUMNS, Sample

# Columns whose value stays text; every other column is a number.
TEXT_COLUMNS = frozenset({"timestamp", "pstate", "gpu.processes", "clocks_event_reasons.active"})
SEEDS_COLUMNS: tuple[str, ...] = COLUMNS[:3]  # timestamp, temperature.gpu, power.draw [W]
SEEDS_HEADER = "timestamp, temperature.gpu, power.draw [W]"

# nvidia-smi field spellings (lower case, unit bracket removed) -> our column name
_FIELD_TO_COLUMN: dict[str, str] = {
    "timestamp": "timestamp",
    "temperature.gpu": "temperature.gpu",
    "power.draw": "power.draw [W]",
    "power.draw.instant": "power.draw [W]",
    "power.draw.average": "power.draw [W]",
    "clocks.sm": "clocks.sm [MHz]",
    "clocks.current.sm": "clocks.sm [MHz]",
    "utilization.gpu": "utilization.gpu [%]",
    "pstate": "pstate",
    "clocks_event_reasons.active": "clocks_event_reasons.active",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
}
# Graphics clock: on GB10 it reads the same as the SM clock; used only when no SM column exists.
_GRAPHICS_CLOCK = frozenset({"clocks.gr", "clocks.current.graphics", "clocks.graphics"})
for _col in COLUMNS:
    _FIELD_TO_COLUMN.setdefault(re.sub(r"\s*\[[^\]]*\]$", "", _col), _col)

# Real nvidia-smi fields this monitor does not judge: recognised (so a header is a header), ignored.
_KNOWN_IGNORED = frozenset({
    "index", "name", "gpu_name", "pci.bus_id", "gpu_bus_id", "uuid", "gpu_uuid", "driver_version",
    "compute_cap", "memory.total", "memory.used", "memory.free", "memory.reserved",
    "utilization.memory", "power.limit", "power.max_limit", "power.min_limit",
    "power.default_limit", "power.management.limit", "enforced.power.limit", "clocks.mem",
    "clocks.current.memory", "clocks.max.sm", "clocks.max.graphics", "clocks.max.gr",
    "clocks.max.memory", "clocks.applications.graphics", "temperature.memory", "fan.speed",
    "persistence_mode", "display_active", "display_mode", "compute_mode", "serial",
    "vbios_version", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
    "pcie.link.width.max", "ecc.mode.current", "mig.mode.current", "count",
})

_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_.]*(\s*\[[^\]]*\])?$")
_NUMBER = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%µμ°/]*)$")
_STAMP = re.compile(
    r"^(\d{4})[/-](\d{1,2})[/-](\d{1,2})[ T](\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$"
)
_MISSING = frozenset({"n/a", "[n/a]", "not supported", "[not supported]", "[unknown error]", "-", ""})
# the spellings nvidia-smi and this tool write for "no value", as written (a subset of _MISSING, compared without
# lower-casing: the per-row fast path)
_MISSING_AS_WRITTEN = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported", "-", ""})
_MAX_NOTED_LINES = 3  # line numbers quoted per kind of problem


# --------------------------------------------------------------------------- units
# Each judged column's unit, and how every unit nvidia-smi or a common logger writes converts to it
# (multiply, then add). A unit not listed for its column is refused with a note, never guessed.
_UNIT_ALIASES = {"µs": "us", "μs": "us", "usec": "us", "msec": "ms", "sec": "s", "secs": "s",
                 "°c": "c", "degc": "c", "celsius": "c", "°f": "f", "degf": "f", "fahrenheit": "f",
                 "kelvin": "k", "watts": "w", "watt": "w", "µw": "uw", "μw": "uw", "percent": "%",
                 "bytes": "b", "byte": "b", "kb": "kb", "kib": "kib"}
_CONVERT: dict[str, dict[str, tuple[float, float]]] = {
    "temperature.gpu": {"": (1, 0), "c": (1, 0), "f": (5 / 9, -32 * 5 / 9), "k": (1, -273.15)},
    "power.draw [W]": {"": (1, 0), "w": (1, 0), "mw": (1e-3, 0), "kw": (1e3, 0), "uw": (1e-6, 0)},
    "clocks.sm [MHz]": {"": (1, 0), "mhz": (1, 0), "ghz": (1e3, 0), "khz": (1e-3, 0), "hz": (1e-6, 0)},
    "utilization.gpu [%]": {"": (1, 0), "%": (1, 0)},
    "psi.memory.full.avg10": {"": (1, 0), "%": (1, 0)},
    **{c: {"": (1, 0), "us": (1, 0), "ns": (1e-3, 0), "ms": (1e3, 0), "s": (1e6, 0)}
       for c in ("violation.sw_power_cap [us]", "violation.sw_thermal [us]", "violation.hw_thermal [us]")},
    **{c: {"": (1, 0), "b": (1, 0), "kib": (1024, 0), "mib": (1024**2, 0), "gib": (1024**3, 0),
           "tib": (1024**4, 0), "kb": (1e3, 0), "mb": (1e6, 0), "gb": (1e9, 0), "tb": (1e12, 0)}
       for c in ("mem.free [B]", "mem.available [B]", "mem.cached [B]", "swap.used [B]", "mem.free_large [B]")},
}
# What no reading can be, after conversion (a broken logger, a doctored file): read as unknown.
_SANE: dict[str, tuple[float, float]] = {
    "temperature.gpu": (-40.0, 150.0), "power.draw [W]": (0.0, 5_000.0), "clocks.sm [MHz]": (0.0, 10_000.0),
    "utilization.gpu [%]": (0.0, 100.0), "psi.memory.full.avg10": (0.0, 100.0),
    **{c: (0.0, 9.3e18) for c in ("violation.sw_power_cap [us]", "violation.sw_thermal [us]",
                                   "violation.hw_thermal [us]")},
    **{c: (0.0, float(1 << 50)) for c in ("mem.free [B]", "mem.available [B]", "mem.cached [B]", "swap.used [B]",
                                           "mem.free_large [B]")},
}


def _unit_key(unit: str) -> str:
    u = unit.strip().lower()
    return _UNIT_ALIASES.get(u, u)


def header_unit(cell: str) -> str:
    """The unit in a header cell's brackets (``power.draw [mW]`` -> ``mW``), else ""."""
    m = re.search(r"\[([^\]]*)\]\s*$", cell.strip())
    return m.group(1).strip() if m else ""


@functools.lru_cache(maxsize=4096)
def _factor(column: str, unit: str) -> tuple[float, float] | None | bool:
    """The (scale, offset) that takes ``unit`` to the column's unit; True: the column converts nothing;
    None: an unknown unit. Cached: a log has a handful of (column, unit) pairs and a million rows."""
    table = _CONVERT.get(column)
    if table is None:
        return True
    return table.get(_unit_key(unit))


def convert(column: str, value: float, unit: str) -> tuple[float | None, str]:
    """``value`` in ``unit`` -> (value in the column's unit, "") or (None, why)."""
    factor = _factor(column, unit)
    if factor is True:
        return value, ""
    if factor is None or factor is False:
        return None, f"unknown unit {unit!r}"
    out = value * factor[0] + factor[1]
    lo, hi = _SANE[column]
    if not (math.isfinite(out) and lo <= out <= hi):
        return None, "impossible value"
    return out, ""


def seconds(ts: object) -> float | None:
    """``2025/11/24 20:25:50.123`` -> seconds on the log's own clock (for differences only).

    The stamp is local time without a zone, so it is read as if it were UTC: differences between
    two stamps are exact (except across a DST change), the absolute value is not an epoch.
    """
    if not isinstance(ts, str):
        return None
    text = ts.strip()
    # the shape nvidia-smi and this tool write (``YYYY/MM/DD HH:MM:SS[.fff]``): sliced, its minute cached;
    # any other shape (or a value out of range) takes the general path below, which decides the same
    if len(text) >= 19 and text[4] == "/" and text[7] == "/" and text[10] == " " and text[13] == ":" \
            and text[16] == ":":
        sec, frac = text[17:19], text[20:]
        if sec.isdigit() and sec.isascii() and (len(text) == 19 or (
                text[19] == "." and 0 < len(frac) <= 9 and frac.isdigit() and frac.isascii())):
            whole = _fixed_minute(text[:16])
            s = int(sec)
            if whole is not None and s <= 60:
                return float(whole + s) + (int(frac) / 10 ** len(frac) if frac else 0.0)
    return _seconds_general(text)


def _seconds_general(text: str) -> float | None:
    """:func:`seconds` by the regex: every shape it accepts (``-`` separators, one-digit fields, ``T``)."""
    m = _STAMP.match(text)
    if not m or not m.group(0).isascii():
        return None
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 23 and mi <= 59 and s <= 60):
        return None
    whole = _minute_epoch(y, mo, d, h, mi)
    if whole is None:
        return None
    whole += s
    frac = m.group(7)
    return float(whole) + (int(frac) / 10 ** len(frac) if frac else 0.0)


_FIXED_MINUTE = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2})$")


@functools.lru_cache(maxsize=4096)
def _fixed_minute(head: str) -> int | None:
    """``YYYY/MM/DD HH:MM`` -> seconds of that minute, or None when it is no valid minute (cached)."""
    m = _FIXED_MINUTE.match(head)
    if not m or not head.isascii():
        return None
    y, mo, d, h, mi = (int(m.group(i)) for i in range(1, 6))
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 23 and mi <= 59):
        return None
    return _minute_epoch(y, mo, d, h, mi)


@functools.lru_cache(maxsize=4096)
def _minute_epoch(y: int, mo: int, d: int, h: int, mi: int) -> int | None:
    """Seconds of a stamp's minute (cached: consecutive rows share it)."""
    try:
        return calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0))
    except (ValueError, OverflowError):
        return None


def stamp(epoch: float | None = None) -> str:
    """Local time as nvidia-smi writes it: ``2025/11/24 20:25:50.123`` (for samplers)."""
    t = time.time() if epoch is None else epoch
    ms = int(round((t - math.floor(t)) * 1000))
    if ms == 1000:
        t, ms = math.floor(t) + 1, 0
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(math.floor(t))) + f".{ms:03d}"


def column_for(field: str) -> str | None:
    """An nvidia-smi header cell (``power.draw [W]``, ``clocks.current.sm [MHz]``) -> our column."""
    key = re.sub(r"\s*\[[^\]]*\]$", "", field.strip()).strip().lower()
    return _FIELD_TO_COLUMN.get(key)


def _is_missing(text: str) -> bool:
    return text.strip().lower() in _MISSING


def _value(column: str, text: str, header_unit_: str = "") -> tuple[float | str | None, str]:
    """One cell -> (value, problem). ``problem`` "" when read (or honestly missing), "unreadable",
    "unknown unit 'x'" or "impossible value" (the row keeps None for that column)."""
    cell = text.strip()
    if _is_missing(cell):
        return None, ""
    if column in TEXT_COLUMNS:
        return cell, ""
    if cell and cell.isascii() and (cell[0].isdigit() or cell[0] in "-+.") and cell[-1].isdigit():
        try:  # the common case, a bare number: no regex
            plain = float(cell)
        except ValueError:
            pass
        else:
            if not math.isfinite(plain):
                return None, "impossible value"
            return convert(column, plain, header_unit_)
    m = _NUMBER.match(cell)
    if not m or not m.group(1).isascii():
        return None, "unreadable"
    value = float(m.group(1))
    if not math.isfinite(value):
        return None, "impossible value"
    out, why = convert(column, value, m.group(2) or header_unit_)
    return out, why


# `watch` writes this comment before the first row in which a GPU process of the watched command appears, so
# that `thermal analyze` of the same log later does not take the job itself for a new neighbour (G6)
_JOB_PID_PREFIX = "# spark-ops watch: pid "
_JOB_PID = re.compile(r"^# spark-ops watch: pid (\d{1,10}) is the watched command's own GPU process")


def job_pid_line(pid: int) -> str:
    """The comment line that marks ``pid`` as the watched command's own GPU process (no newline)."""
    return f"{_JOB_PID_PREFIX}{int(pid)} is the watched command's own GPU process, not a neighbour"


class _Header:
    """A header line read: position -> our column (None = a column we ignore), and its unit."""

    def __init__(self, cells: list[str]) -> None:
        self.cells = [c.strip() for c in cells]
        self.columns: list[str | None] = [column_for(c) for c in self.cells]
        if "clocks.sm [MHz]" not in self.columns:
            for i, c in enumerate(self.cells):
                if re.sub(r"\s*\[[^\]]*\]$", "", c).lower() in _GRAPHICS_CLOCK:
                    self.columns[i] = "clocks.sm [MHz]"
                    break
        self.units = [header_unit(c) for c in self.cells]
        lowered = [re.sub(r"\s*\[[^\]]*\]$", "", c).strip().lower() for c in self.cells]
        self.index_at = lowered.index("index") if "index" in lowered else None
        self.stamp_at = self.columns.index("timestamp") if "timestamp" in self.columns else None
        self.ignored = [c for c, col in zip(self.cells, self.columns, strict=True) if col is None]
        # built once per header, used for every row under it: (position, column, header unit, the numeric
        # conversion for a bare number in that unit: (scale, offset, low, high); None: text or no bare-number
        # shortcut). Ignored columns are not in it.
        self.plan: list[tuple[int, str, str, tuple[float, float, float, float] | None]] = []
        for i, (col, unit) in enumerate(zip(self.columns, self.units, strict=True)):
            if col is None:
                continue
            fac = None if col in TEXT_COLUMNS else _factor(col, unit)
            conv = (fac[0], fac[1], *_SANE[col]) if isinstance(fac, tuple) else None
            self.plan.append((i, col, unit, conv))

    def fits(self, fields: int) -> bool:
        """Whether a line of ``fields`` comma-separated fields is read under this header: as many as its columns,
        or more when the last column is ``gpu.processes`` (its list takes the extra commas). The one field-count
        rule: the row reader, the column reader and the time-order pass all ask it."""
        width = len(self.columns)
        return fields == width or (0 < width < fields and self.columns[-1] == "gpu.processes")

    def fit(self, cells: list[str]) -> list[str] | None:
        """A line's cells as this header reads them (a trailing ``gpu.processes`` list joined back), or None when
        the line does not fit (:meth:`fits`)."""
        if not self.fits(len(cells)):
            return None
        keep = len(self.columns) - 1
        return cells if len(cells) == keep + 1 else [*cells[:keep], ",".join(cells[keep:])]


def _looks_like_header(cells: list[str]) -> bool:
    """All cells field-name shaped and at least one a field we know (judged or ignored)."""
    if not cells or not all(_HEADER_CELL.match(c.strip()) for c in cells):
        return False
    keys = [re.sub(r"\s*\[[^\]]*\]$", "", c.strip()).lower() for c in cells]
    return any(k in _FIELD_TO_COLUMN or k in _KNOWN_IGNORED or k in _GRAPHICS_CLOCK for k in keys)


class _Problems:
    """Counts of skipped lines per reason, with the first few line numbers, for the notes."""

    def __init__(self) -> None:
        self.lines: dict[str, list[int]] = {}
        self.counts: dict[str, int] = {}

    def add(self, reason: str, lineno: int) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        seen = self.lines.setdefault(reason, [])
        if len(seen) < _MAX_NOTED_LINES:
            seen.append(lineno)

    def notes(self, what: str = "line(s) skipped") -> list[str]:
        out = []
        for reason, n in self.counts.items():
            where = ", ".join(str(x) for x in self.lines[reason])
            more = ", ..." if n > len(self.lines[reason]) else ""
            out.append(f"{n} {what}: {reason} (line {where}{more})")
        return out


class LineParser:
    """One log, line by line: headers set the columns, data lines become Samples. Stateful (the
    header in force, the GPU judged) so a file can be streamed; ``notes()`` at the end."""

    def __init__(self) -> None:
        self.header: _Header | None = None
        self.headers: list[_Header] = []
        self.notes_: list[str] = []
        self.problems = _Problems()
        self.values = _Problems()  # cells read as unknown (unit, impossible value), per column
        self.gpu_index: str | None = None
        self.other_gpus = 0
        self.unreadable: dict[str, int] = {}
        self.refused_without_header = 0
        self.rows = 0
        self.job_pids: set[int] = set()  # GPU processes `watch` marked as the watched command's own

    def classify(self, lineno: int, raw: str) -> tuple[str, list[str]]:
        """("skip" | "header" | "data", cells); a header line is taken in at once."""
        line = raw.strip().strip("\x00")
        if not line or line.startswith("#"):
            if line.startswith(_JOB_PID_PREFIX) and (m := _JOB_PID.match(line)):
                self.job_pids.add(int(m.group(1)))
            return "skip", []
        if lineno == 1:
            line = line.lstrip("\ufeff")
            if not line:  # a byte-order mark alone
                return "skip", []
        cells = [c.strip() for c in line.split(",")]
        if line[0].isalpha() and _looks_like_header(cells):
            new = _Header(cells)
            if self.header is not None and new.cells != self.header.cells:
                self.notes_.append(f"line {lineno}: header changed to {', '.join(new.cells)}")
            if new.ignored and (self.header is None or new.cells != self.header.cells):
                self.notes_.append("columns not judged here (ignored): " + ", ".join(new.ignored))
            self.header = new
            self.headers.append(new)
            return "header", cells
        if self.header is None:
            if len(cells) == 3 and seconds(cells[0]) is not None:
                self.header = _Header(list(SEEDS_COLUMNS))
                self.headers.append(self.header)
                self.notes_.append("no header line: read as the seeds' thermal-sample.sh columns "
                                   f"({SEEDS_HEADER})")
            else:
                self.refused_without_header += 1
                self.problems.add("no header before it, and not the seeds' 3-column format", lineno)
                return "skip", []
        return "data", cells

    def data(self, lineno: int, cells: list[str], header: _Header | None = None) -> Sample | None:
        """A data line's cells (under ``header``, default the one in force) -> a Sample, or None."""
        header = header or self.header
        assert header is not None
        fitted = header.fit(cells)
        if fitted is None:
            self.problems.add(f"{len(cells)} fields where the header has {len(header.columns)}", lineno)
            return None
        cells = fitted
        if header.index_at is not None:
            idx = cells[header.index_at]
            if self.gpu_index is None:
                self.gpu_index = idx
            elif idx != self.gpu_index:
                self.other_gpus += 1
                return None
        sample: Sample = dict.fromkeys(COLUMNS)
        isfinite = math.isfinite
        for i, column, unit, conv in header.plan:
            cell = cells[i]
            if cell in _MISSING_AS_WRITTEN:
                continue  # unknown, as _value reads it (and never over a value a twin column gave)
            if column in TEXT_COLUMNS:  # text as is, as _value keeps it (a missing marker leaves it unknown)
                text = cell.strip()
                if text.lower() not in _MISSING:
                    sample[column] = text
                continue
            if conv is not None and cell and cell[-1].isdigit() and cell[0].isdigit() and cell.isascii():
                # a bare number in the header's unit (nearly every cell of a long log): what _value decides,
                # without its general steps (a cell that starts with a digit is never a "missing" marker)
                try:
                    plain = float(cell)
                except ValueError:
                    pass
                else:
                    out = plain * conv[0] + conv[1] if isfinite(plain) else math.nan
                    if isfinite(out) and conv[2] <= out <= conv[3]:
                        sample[column] = out
                    else:
                        self.values.add(f"impossible value in column {column}", lineno)
                    continue
            value, why = _value(column, cell, unit)
            if why == "unreadable":
                self.unreadable[column] = self.unreadable.get(column, 0) + 1
            elif why:
                self.values.add(f"{why} in column {column}", lineno)
            if value is not None or sample.get(column) is None:
                sample[column] = value
        if all(sample[c] is None for c in COLUMNS):
            self.problems.add("no readable value", lineno)
            return None
        self.rows += 1
        return sample

    def line(self, lineno: int, raw: str) -> Sample | None:
        kind, cells = self.classify(lineno, raw)
        return self.data(lineno, cells) if kind == "data" else None

    def notes(self, row_problems: _Problems | None = None) -> list[str]:
        """What could not be read, as notes; ``row_problems``: the rows' own problems, noted after the lines'
        (a stream classifies every line before it parses any row)."""
        notes = list(self.notes_)
        if self.refused_without_header and not self.rows:
            notes.append(
                "cannot tell which column is which: the log has no header line. Add the header "
                "nvidia-smi writes without 'noheader' as the first line, e.g. "
                f"'{SEEDS_HEADER}' or '{', '.join(COLUMNS)}'"
            )
        notes.extend(self.problems.notes())
        if row_problems is not None:
            notes.extend(row_problems.notes())
        notes.extend(self.values.notes("value(s) read as unknown"))
        for column, n in self.unreadable.items():
            notes.append(f"{n} unreadable value(s) in column {column} (read as unknown)")
        if self.other_gpus:
            notes.append(f"log holds several GPUs: judged GPU index {self.gpu_index} only "
                         f"({self.other_gpus} rows of others skipped)")
        return notes


def _in_time_order(rows: list[Sample]) -> tuple[list[Sample], str | None]:
    """Rows sorted by timestamp (stable; a row without one keeps its place after the previous
    stamped row) when they were not in order, with a note; else as they were."""
    keys: list[float] = []
    last = -math.inf
    disorder = 0
    for row in rows:
        t = seconds(row.get("timestamp"))
        if t is None:
            t = last
        elif t < last:
            disorder += 1
        keys.append(t)
        last = max(last, t) if t is not None else last
    if not disorder:
        return rows, None
    order = sorted(range(len(rows)), key=keys.__getitem__)
    return [rows[i] for i in order], _order_note(disorder)


def _order_note(disorder: int) -> str:
    return (f"rows were not in time order ({disorder} earlier than a row before them; a "
            "newest-first log?): judged sorted by timestamp")


def read_log(text: str) -> tuple[list[Sample], list[str]]:
    """Rows of a monitor log or ``nvidia-smi --query-gpu ... --format=csv`` output, plus notes.

    Header lines (also repeated ones, as in concatenated logs) set the columns; without any,
    a 3-field row starting with a timestamp is read as the seeds' ``timestamp, temperature.gpu,
    power.draw``; anything else is refused with a note naming the header to add. Every Sample
    carries all of ``COLUMNS`` (None where the log has no such column or printed ``[N/A]``).
    Units (``mW``, ``kW``, ``GHz``, ``°F``, ``MiB``...), from the cell or the header's brackets, are
    converted to the column's; an unknown unit or an impossible value is read as unknown, noted.
    Rows come back in timestamp order.
    """
    parser = LineParser()
    try:
        lines = (text or "").splitlines()
    except Exception:  # noqa: BLE001 - a non-str "text": nothing to read
        return [], ["the log is not text"]
    rows = [s for lineno, raw in enumerate(lines, start=1) if (s := parser.line(lineno, raw)) is not None]
    rows, order_note = _in_time_order(rows)
    notes = parser.notes()
    if order_note:
        notes.append(order_note)
    return rows, notes


# --------------------------------------------------------------------------- blocks of columns
class Block:
    """Rows of a log as columns, for the column-wise judge (``monitor.analyze``).

    ``t``: each row's timestamp in seconds (:func:`seconds`; NaN when it has none that reads); ``ts``: the
    stamp as logged, stripped (None: missing); ``num``: the numeric columns, converted to their unit, as
    float sequences (NaN: unknown; a column absent from the dict is unknown in every row); ``raw``: columns the judge reads
    itself (the reason bits, the GPU processes), as the Sample held them (None: unknown)."""

    __slots__ = ("n", "num", "raw", "t", "ts")

    def __init__(self, n: int, t: array[float], ts: list[str | None], num: dict[str, Sequence[float]],
                 raw: dict[str, list[object]]) -> None:
        self.n, self.t, self.ts, self.num, self.raw = n, t, ts, num, raw


# --------------------------------------------------------------------------- streaming a file
_MAX_LINE_BYTES = 1 << 16  # a CSV row is a few hundred bytes; a longer "line" is not one
_READ_BYTES = 1 << 20  # read this much at a time: a Block of about 7,000 rows of a 16-column log
BLOCK_ROWS = 1 << 13  # rows per Block when a log is read by seeking (not in time order)
_SORT_RUN = 1 << 16  # stamps sorted at once (as Python objects) before the sorted runs are merged
_JUDGED_NUMERIC = ("temperature.gpu", "power.draw [W]", "clocks.sm [MHz]", "utilization.gpu [%]", "mem.available [B]",
                   "mem.free [B]", "psi.memory.full.avg10", "violation.sw_thermal [us]", "violation.hw_thermal [us]",
                   "swap.used [B]")
_JUDGED_RAW = ("clocks_event_reasons.active", "gpu.processes")


def _cell(column: str, unit: str, conv: tuple[float, float, float, float] | None, raw: str) -> tuple[object, str]:
    """One raw cell as :meth:`LineParser.data` reads it: (value or None, "" | "unreadable" | the problem)."""
    cell = raw.strip()
    if cell in _MISSING_AS_WRITTEN:
        return None, ""
    if column in TEXT_COLUMNS:
        return (None if cell.lower() in _MISSING else cell), ""
    if conv is not None and cell and cell[-1].isdigit() and cell[0].isdigit() and cell.isascii():
        try:
            plain = float(cell)
        except ValueError:
            pass
        else:
            out = plain * conv[0] + conv[1] if math.isfinite(plain) else math.nan
            if math.isfinite(out) and conv[2] <= out <= conv[3]:
                return out, ""
            return None, "impossible value"
    return _value(column, cell, unit)


def _numbers(cells: Sequence[str], factor: tuple[float, float], sane: tuple[float, float],
             cut: int = 0) -> list[float] | None:
    """Every cell a plain ASCII number (after cutting ``cut`` characters of unit), converted and within
    the sane range: the converted values; else None (the caller reads cell by cell)."""
    if cut:
        cells = [c[:-cut] for c in cells]
    joined = "".join(cells)
    if not joined.isascii() or "_" in joined:
        return None
    try:
        vals = list(map(float, cells))
    except ValueError:
        return None
    scale, offset = factor
    if scale == 1 and offset == 0 and "-" not in joined:
        out = vals  # x * 1 + 0 is x (but for -0.0, and no cell has a minus)
    else:
        out = list(map(add, map(mul, vals, repeat(scale)), repeat(offset)))
    total = sum(out)
    if not math.isfinite(total) or min(out) < sane[0] or max(out) > sane[1]:
        return None
    return out


def _column(column: str, unit: str, conv: tuple[float, float, float, float] | None, cells: Sequence[str],
            problems: list[tuple[int, int, str]], at: int) -> list[object]:
    """A column's raw cells -> values (None: unknown), as :func:`_cell` reads each; problems as
    (row, plan position, why)."""
    n = len(cells)
    first = cells[0]
    if cells[-1] == first and cells[n // 2] == first and _all_equal(cells, first):  # one value all along ("[N/A]", "P0", a counter that never moved)
        value, why = _cell(column, unit, conv, first)
        if why:
            problems.extend((i, at, why) for i in range(n))
        return [value] * n
    numeric = column not in TEXT_COLUMNS
    if not numeric:
        stripped = list(map(str.strip, cells))
        if min(stripped)[:1] >= "0" and max(stripped)[:1] <= "9":  # every cell starts with a digit: none is missing
            return stripped  # type: ignore[return-value]
    if numeric and conv is not None:
        out = _numbers(cells, (conv[0], conv[1]), (conv[2], conv[3]))
        if out is not None:
            return out  # type: ignore[return-value]
    distinct = set(cells)
    if len(distinct) <= 64 or len(distinct) * 8 <= n:
        read = {c: _cell(column, unit, conv, c) for c in distinct}
        if any(why for _v, why in read.values()):
            problems.extend((i, at, why) for i, c in enumerate(cells) if (why := read[c][1]))
        return list(map({c: v for c, (v, _why) in read.items()}.__getitem__, cells))
    if numeric:  # a unit in every cell ("105.21 W"): the same unit cut off
        m = _NUMBER.match(cells[0].strip())
        suffix = m.group(2) if m else ""
        if suffix:
            fac = _factor(column, suffix)
            tail = cells[0].rstrip()[-len(suffix):]
            if isinstance(fac, tuple) and all(c.endswith(tail) for c in cells):
                out = _numbers(cells, fac, _SANE[column], len(tail))
                if out is not None:
                    return out  # type: ignore[return-value]
    values: list[object] = []
    for i, c in enumerate(cells):
        v, why = _cell(column, unit, conv, c)
        if why:
            problems.append((i, at, why))
        values.append(v)
    return values


def _all_equal(cells: Sequence[str], first: str) -> bool:
    """Every cell is ``first``. Joined with commas, as one string compare: a comma-free ``first`` repeated gives
    exactly n - 1 commas, so an equal join leaves no cell room for a comma or another text (``list.count``
    compares cell by cell, several times slower on a block's thousands)."""
    if "," in first:
        return cells.count(first) == len(cells)
    return ",".join(cells) == ",".join([first] * len(cells))


def _stamps(ts: list[str | None]) -> array[float]:
    """:func:`seconds` of each stamp (NaN: none), the shape nvidia-smi and this tool write read column-wise:
    ``YYYY/MM/DD HH:MM`` and ``SS.fff`` each read once per distinct value (a log has a few per minute), then
    ``float(minute + SS) + fff / 10**len(fff)`` per row, the sum :func:`seconds` makes."""
    n = len(ts)
    if n and None not in ts:
        heads = [s[:17] for s in ts]  # type: ignore[index]
        tails = [s[17:] for s in ts]  # type: ignore[index]
        parts = {t: _tail(t) for t in set(tails)}
        if None not in parts.values():
            minutes = {h: _fixed_minute(h[:16]) if h[16:] == ":" else None for h in set(heads)}
            if None not in minutes.values():
                whole = {t: p[0] for t, p in parts.items()}  # type: ignore[index]
                frac = {t: p[1] for t, p in parts.items()}  # type: ignore[index]
                ints = map(add, map(minutes.__getitem__, heads), map(whole.__getitem__, tails))
                return array("d", map(add, map(float, ints), map(frac.__getitem__, tails)))
    nan = math.nan
    return array("d", [nan if s is None or (v := seconds(s)) is None else v for s in ts])


def _tail(text: str) -> tuple[int, float] | None:
    """A stamp's ``SS.fff`` (after ``HH:MM:``) as (seconds, fraction) the way :func:`seconds` reads it; None for
    any other shape (the caller reads those stamps one by one)."""
    sec, frac = text[:2], text[3:]
    if len(text) == 2 and sec.isdigit() and sec.isascii() and int(sec) <= 60:
        return int(sec), 0.0
    if (len(text) >= 4 and text[2] == "." and len(frac) <= 9 and sec.isdigit() and frac.isdigit() and text.isascii()
            and int(sec) <= 60):
        return int(sec), int(frac) / 10 ** len(frac)
    return None


class _Rows:
    """Data lines gathered for one Block: the lines (not split yet), their line numbers, the header each is read
    under (its index in ``LineParser.headers``) and byte offsets."""

    __slots__ = ("cells", "headers", "linenos", "offsets")

    def __init__(self) -> None:
        self.cells: list[str] = []
        self.linenos: list[int] = []
        self.headers: list[int] = []
        self.offsets: list[int] = []


def _split(lines: list[str], width: int, stamp_at: int | None) -> tuple[list[Sequence[str]], list[str | None]]:
    """Lines of ``width`` cells each -> the columns (raw cells) and each line's stamp cell (stripped). Lines of
    another width are the caller's; here every line has ``width - 1`` commas."""
    flat = ",".join(lines).split(",")
    table: list[Sequence[str]] = [flat[j::width] for j in range(width)]
    stamps: list[str | None] = list(map(str.strip, table[stamp_at])) if stamp_at is not None else [None] * len(lines)
    return table, stamps


def _line_stamps(lines: list[str], stamp_at: int | None) -> list[str | None]:
    """Each line's stamp cell, stripped (None: the header has none, or the line is shorter)."""
    if stamp_at is None:
        return [None] * len(lines)
    out: list[str | None] = []
    for line in lines:
        parts = line.split(",", stamp_at + 1)
        out.append(parts[stamp_at].strip() if len(parts) > stamp_at else None)
    return out


def _build(parser: LineParser, rows: _Rows, row_problems: _Problems) -> tuple[Block, array[float]]:
    """Data lines (the line, line number, the header it was written under) -> a Block, read as
    :meth:`LineParser.data` reads each line, in the order given (its notes too); and the timestamp of every
    line given, the ones it dropped too (the time order is judged on all of them)."""
    n_all = len(rows.cells)
    headers = parser.headers
    dropped: list[tuple[int, str]] = []  # (row, why) for the row notes, in row order
    values_problems: list[tuple[int, int, str, str]] = []  # (row, plan position, column, why)
    num: dict[str, list[float]] = {}
    raw: dict[str, list[object]] = {}
    ts: list[str | None] = []
    all_stamps: list[str | None] = []
    kept: list[int] = []
    nan = math.nan
    start = 0
    while start < n_all:  # runs of rows under one header
        h = rows.headers[start]
        end = start + 1
        while end < n_all and rows.headers[end] == h:
            end += 1
        header = headers[h]
        width = len(header.columns)
        lines = rows.cells[start:end]
        idx = list(range(start, end))
        commas = set(map(str.count, lines, repeat(",")))
        if commas == {width - 1}:
            table, stamps = _split(lines, width, header.stamp_at)
            all_stamps.extend(stamps)
            marks = list(map(str.strip, table[header.index_at])) if header.index_at is not None else None
        else:
            all_stamps.extend(_line_stamps(lines, header.stamp_at))
            cells = []
            ok_idx = []
            for i, line in zip(idx, lines, strict=True):
                split = [x.strip() for x in line.split(",")]
                c = header.fit(split)
                if c is None:
                    dropped.append((i, f"{len(split)} fields where the header has {width}"))
                    continue
                cells.append(c)
                ok_idx.append(i)
            idx = ok_idx
            table = list(zip(*cells, strict=True)) if cells else []
            marks = [c[header.index_at] for c in cells] if header.index_at is not None else None
        if marks:
            if parser.gpu_index is None:
                parser.gpu_index = marks[0]
            mine = parser.gpu_index
            if marks.count(mine) != len(marks):
                parser.other_gpus += len(marks) - marks.count(mine)
                keep = [x == mine for x in marks]
                table = [list(compress(col, keep)) for col in table]
                idx = list(compress(idx, keep))
        m = len(idx)
        if not m:
            start = end
            continue
        seg: dict[str, list[object]] = {}
        problems: list[tuple[int, int, str]] = []
        for p, (pos, column, unit, conv) in enumerate(header.plan):
            got = _column(column, unit, conv, table[pos], problems, p)
            old = seg.get(column)
            if old is None:
                seg[column] = got
            else:  # a twin column: a known value replaces, an unknown one does not
                seg[column] = [o if g is None else g for o, g in zip(old, got, strict=True)]
        for r, p, why in problems:
            values_problems.append((idx[r], p, header.plan[p][1], why))
        stamps_col = seg.get("timestamp")
        if stamps_col is None or None in stamps_col:  # a row with no readable value at all is dropped
            present = list(seg.values())
            alive = [any(col[r] is not None for col in present) for r in range(m)]
            if not all(alive):
                dropped.extend((i, "no readable value") for i, a in zip(idx, alive, strict=True) if not a)
                idx = list(compress(idx, alive))
                seg = {k: list(compress(col, alive)) for k, col in seg.items()}
                m = len(idx)
        before = len(kept)
        for column in COLUMNS:
            col = seg.get(column)
            if column == "timestamp":
                ts.extend(col if col is not None else [None] * m)  # type: ignore[arg-type]
                continue
            if col is None:
                continue
            if column in TEXT_COLUMNS:
                dest = raw.setdefault(column, [])
                dest.extend([None] * (before - len(dest)))
                dest.extend(col)
            else:
                dest_n = num.setdefault(column, [])
                dest_n.extend([nan] * (before - len(dest_n)))
                if None not in col:
                    dest_n.extend(col)  # type: ignore[arg-type]
                elif col.count(None) == len(col):
                    dest_n.extend([nan] * len(col))
                else:
                    dest_n.extend([nan if v is None else v for v in col])  # type: ignore[misc]
        kept.extend(idx)
        start = end
    total = len(kept)
    for dest_n in num.values():
        dest_n.extend([nan] * (total - len(dest_n)))
    for dest in raw.values():
        dest.extend([None] * (total - len(dest)))
    lineno_of = rows.linenos
    dropped.sort()
    for i, why in dropped:
        row_problems.add(why, lineno_of[i])
    values_problems.sort()
    for i, _p, column, why in values_problems:
        if why == "unreadable":
            parser.unreadable[column] = parser.unreadable.get(column, 0) + 1
        else:
            parser.values.add(f"{why} in column {column}", lineno_of[i])
    parser.rows += total
    t_all = _stamps(all_stamps)
    t = t_all if total == n_all else array("d", map(t_all.__getitem__, kept))
    return Block(total, t, ts, num, raw), t_all


def _all_known(values: Sequence[float]) -> bool:
    """No NaN among the values (a NaN makes the sum NaN)."""
    total = sum(values)
    return total == total or all(v == v for v in values)


def _argsort(keys: array[float]) -> Iterable[int]:
    """The indices of ``keys`` in ascending order, stable (what ``sorted(range(n), key=keys.__getitem__)`` gives),
    holding one run's worth of Python objects at a time, not one per key: runs of 65,536 sorted and packed, then
    merged. A log newest first (strictly falling) is just read backwards."""
    n = len(keys)
    if all(map(gt, keys, islice(keys, 1, None))):
        return range(n - 1, -1, -1)
    size = _SORT_RUN
    runs = [array("q", sorted(range(a, min(a + size, n)), key=keys.__getitem__)) for a in range(0, n, size)]
    if len(runs) <= 1:
        return runs[0] if runs else []
    merged = heapq.merge(*[zip(map(keys.__getitem__, run), run, strict=True) for run in runs])  # ties: by index
    return (i for _key, i in merged)


def _text_lines(fh: BinaryIO, offsets: bool = True) -> Iterator[tuple[str, list[str], frozenset[int], list[int]]]:
    """The file's lines a read at a time: the read's text (decoded once, lines joined by newlines: searched as a
    whole), its lines, the indices of its over-long lines and each line's byte offset (``offsets``). A line of
    :data:`_MAX_LINE_BYTES` bytes or more is read as "" (never held whole)."""
    pending = b""
    skipping = 0  # bytes of an over-long line read so far
    pos = 0  # offset of the line in progress
    while chunk := fh.read(_READ_BYTES):
        lines: list[bytes | None] = []
        offs: list[int] = []
        if skipping:
            cut = chunk.find(b"\n")
            if cut < 0:
                skipping += len(chunk)
                continue
            lines.append(None)
            offs.append(pos)
            pos += skipping + cut + 1
            skipping = 0
            chunk = chunk[cut + 1:]
        buf = pending + chunk
        if not offsets and not lines and (cut := buf.rfind(b"\n")) >= 0:
            # the usual read: its whole lines decoded at once, unless one may be over-long (a character is at
            # most 4 bytes, a replaced bad byte 1: fewer than a quarter of the limit in characters is under it)
            body = buf[:cut].decode("utf-8", errors="replace")
            texts = body.split("\n")
            if max(map(len, texts)) * 4 < _MAX_LINE_BYTES:
                pending = buf[cut + 1:]
                pos += cut + 1
                if len(pending) >= _MAX_LINE_BYTES:
                    skipping, pending = len(pending), b""
                yield body, texts, _NONE_LONG, offs
                continue
        pieces = buf.split(b"\n")
        pending = pieces.pop()
        lens = list(map(len, pieces))
        if pieces:
            if offsets:
                offs.extend(accumulate((n + 1 for n in lens[:-1]), initial=pos))
            pos += sum(lens) + len(lens)
        if lens and max(lens) >= _MAX_LINE_BYTES:
            pieces = [p if len(p) < _MAX_LINE_BYTES else None for p in pieces]  # type: ignore[misc]
        lines.extend(pieces)
        if len(pending) >= _MAX_LINE_BYTES:
            skipping, pending = len(pending), b""
        if lines:
            longs = frozenset(i for i, x in enumerate(lines) if x is None) if None in lines else _NONE_LONG
            body = b"\n".join([b"" if x is None else x for x in lines]).decode("utf-8", errors="replace")
            yield body, body.split("\n"), longs, offs
    if skipping or pending:
        if skipping or len(pending) >= _MAX_LINE_BYTES:
            yield "", [""], frozenset({0}), [pos]
        else:
            body = pending.decode("utf-8", errors="replace")
            yield body, body.split("\n"), _NONE_LONG, [pos]


_NONE_LONG: frozenset[int] = frozenset()
_NOT_DATA_NEXT = re.compile(r"\n(?![0-9])")  # a newline before a line that does not start with an ASCII digit


def _odd_lines(body: str) -> list[int]:
    """Indices of the lines of ``body`` that do not start with an ASCII digit (headers, comments, blank or
    over-long lines, rows without a stamp first): the ones a data run stops at. (Searched from each newline: a
    pattern anchored at line starts would be tried at every character.)"""
    out: list[int] = [] if body[:1].isdigit() and body[:1].isascii() else [0]
    line = last = 0
    for m in _NOT_DATA_NEXT.finditer(body):
        at = m.start()
        line += body.count("\n", last, at) + 1
        last = at + 1
        out.append(line)
    return out


def _fits_header(parser: LineParser, rows: _Rows) -> list[bool]:
    """Whether each data line has its header's field count (as :meth:`LineParser.data` requires, a trailing
    ``gpu.processes`` column taking any extra commas): the lines it will refuse must not order the others, as
    :func:`read_log`, which sorts the rows it kept, does not let them."""
    headers = parser.headers
    return [headers[h].fits(line.count(",") + 1) for line, h in zip(rows.cells, rows.headers, strict=True)]


def _stamp_cells(parser: LineParser, rows: _Rows) -> list[str | None]:
    """The timestamp cell (stripped) of each data line, under its header (None: none)."""
    out: list[str | None] = []
    k, n = 0, len(rows.cells)
    while k < n:
        h = rows.headers[k]
        end = k + 1
        while end < n and rows.headers[end] == h:
            end += 1
        out.extend(_line_stamps(rows.cells[k:end], parser.headers[h].stamp_at))
        k = end
    return out


class LogStream:
    """A log file read as column blocks in timestamp order, in bounded memory, for logs of any length
    (``thermal analyze``).

    :meth:`blocks` yields :class:`Block` s of one read's rows (about 7,000 of a 16-column log). A log already in
    time order (the usual case) is parsed once when the caller can start over (``on_reorder``), else after a
    first pass that only checks the order; a newest-first or shuffled log is read in time order by seeking,
    after a first pass that keeps only what ordering needs (timestamp, offset, header, line number: about 30
    bytes a row). A FIFO, pipe or device is first copied to a temporary file within ``timeout_s``.
    Iterating the stream itself gives the notes: use it after the blocks are exhausted.
    """

    def __init__(self, path: Path | str, timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.parser = LineParser()
        self.row_problems = _Problems()  # the rows' own (field count, nothing readable): noted after the lines'
        self.extra: list[str] = []
        self.error: str | None = None
        self.timed_out = False

    def __iter__(self) -> Iterator[str]:
        yield from self.parser.notes(self.row_problems)
        yield from self.extra

    def samples(self) -> Iterator[Sample]:
        """The rows as Samples (every column of ``COLUMNS``), in timestamp order."""
        for blk in self.blocks():
            nums = [(c, blk.num[c]) for c in COLUMNS if c in blk.num]
            texts = [(c, blk.raw[c]) for c in COLUMNS if c in blk.raw]
            for i in range(blk.n):
                sample: Sample = dict.fromkeys(COLUMNS)
                sample["timestamp"] = blk.ts[i]
                for c, v in nums:
                    x = v[i]
                    if x == x:
                        sample[c] = x
                for c, t in texts:
                    sample[c] = t[i]  # type: ignore[assignment]
                yield sample

    def blocks(self, on_reorder: Callable[[], None] | None = None) -> Iterator[Block]:
        """The rows in timestamp order, as Blocks.

        With ``on_reorder``, the log is parsed in file order at once; should it turn out not to be in time
        order, ``on_reorder()`` is called (the caller drops what it judged) and the blocks start again from the
        first row, in time order. Without it, a first pass checks the order before the first block.
        """
        fh = self._open()
        if fh is None:
            return
        with fh:
            if on_reorder is not None:
                if (yield from self._in_file_order(fh, stop_on_disorder=True)):
                    return
                on_reorder()
                self._reset(fh)
            yield from self._in_time_order(fh)

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

    def _reset(self, fh: BinaryIO) -> None:
        marked = self.parser.job_pids  # a re-read by seeking reads data lines only, not the comments that mark them
        self.parser = LineParser()
        self.parser.job_pids |= marked
        self.row_problems = _Problems()
        self.extra = [n for n in self.extra if "time order" not in n]
        fh.seek(0)

    def _data_lines(self, fh: BinaryIO, offsets: bool = False) -> Iterator[_Rows]:
        """Every line classified in file order (headers taken in, lines that are no data noted); the data lines
        a read at a time, split, with their line numbers, headers, offsets and timestamps."""
        parser = self.parser
        lineno = 0
        for body, texts, longs, offs in _text_lines(fh, offsets):
            rows = _Rows()
            nul = "\x00" in body
            odd = _odd_lines(body)
            j = 0
            header = parser.header
            k, n = 0, len(texts)
            while k < n:
                # a run of plain data lines (a digit first) under the header in force: split as they are
                if header is not None and not nul and lineno + k + 1 > 1:
                    while j < len(odd) and odd[j] < k:
                        j += 1
                    end = odd[j] if j < len(odd) else n
                    if end > k:
                        rows.cells.extend(texts[k:end])
                        rows.linenos.extend(range(lineno + k + 1, lineno + end + 1))
                        rows.headers.extend([len(parser.headers) - 1] * (end - k))
                        if offsets:
                            rows.offsets.extend(offs[k:end])
                        k = end
                        continue
                num = lineno + k + 1
                if k in longs:
                    parser.problems.add(f"longer than {_MAX_LINE_BYTES} bytes", num)
                else:
                    kind, cells = parser.classify(num, texts[k])
                    header = parser.header
                    if kind == "data":
                        rows.cells.append(",".join(cells))
                        rows.linenos.append(num)
                        rows.headers.append(len(parser.headers) - 1)
                        if offsets:
                            rows.offsets.append(offs[k])
                k += 1
            lineno += n
            if rows.cells:
                yield rows

    def _in_file_order(self, fh: BinaryIO, stop_on_disorder: bool) -> Generator[Block, None, bool]:
        """Blocks in file order; with ``stop_on_disorder``, False (and no further block) at the first row
        earlier than one before it."""
        last = -math.inf
        for rows in self._data_lines(fh):
            blk, t_all = _build(self.parser, rows, self.row_problems)
            if stop_on_disorder:
                known = t_all if _all_known(t_all) else [v for v in t_all if v == v]
                if known and (known[0] < last or not all(map(le, known, islice(known, 1, None)))):
                    return False
                if known:
                    last = max(last, known[-1])
            yield blk
        return True

    def _in_time_order(self, fh: BinaryIO) -> Iterator[Block]:
        """Pass 1 keeps each data line's stamp, offset, line number and header; in time order already: the
        lines parsed in file order again; else read by seeking, in time order."""
        stamps = array("d")
        offsets = array("q")
        linenos = array("l")
        hdrs = array("l")
        last = -math.inf
        disorder = 0
        for rows in self._data_lines(fh, offsets=True):
            fits = _fits_header(self.parser, rows)
            for v, ok in zip(_stamps(_stamp_cells(self.parser, rows)), fits, strict=True):
                if v != v:
                    v = last  # no stamp: keeps its place after the previous stamped row
                elif not ok:  # a line the parser will refuse (field count) moves no other row and is no disorder
                    stamps.append(v)
                    continue
                elif v < last:
                    disorder += 1
                last = max(last, v)
                stamps.append(v)
            offsets.extend(rows.offsets)
            linenos.extend(rows.linenos)
            hdrs.extend(rows.headers)
        if not disorder:
            del stamps, offsets, linenos, hdrs
            self._reset(fh)
            yield from self._in_file_order(fh, stop_on_disorder=False)
            return
        order = _argsort(stamps)
        self.extra.append(_order_note(disorder))
        parser = self.parser
        rows = _Rows()
        del stamps
        for i in order:
            fh.seek(offsets[i])
            line = fh.readline().decode("utf-8", errors="replace")
            if linenos[i] == 1 or "\x00" in line:
                line = line.strip().strip("\x00")
                if linenos[i] == 1:
                    line = line.lstrip("\ufeff")
            rows.cells.append(line.rstrip("\n"))
            rows.linenos.append(linenos[i])
            rows.headers.append(hdrs[i])
            if len(rows.cells) >= BLOCK_ROWS:
                yield _build(parser, rows, self.row_problems)[0]
                rows = _Rows()
        if rows.cells:
            yield _build(parser, rows, self.row_problems)[0]


# --------------------------------------------------------------------------- writing
def write_header() -> str:
    """The header line (no newline): ``timestamp, temperature.gpu, power.draw [W], ...``."""
    return ", ".join(COLUMNS)


def _plain(value: float) -> str:
    if value == int(value) and abs(value) < 1e18:
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _clean_text(value: str) -> str:
    """Text cells must not break the CSV: no commas, no line breaks."""
    return re.sub(r"[,\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]", " ", value).strip()


def format_row(sample: Mapping[str, object]) -> str:
    """One data line (no newline), cells in ``COLUMNS`` order, joined by ``", "``.

    First three exactly as nvidia-smi/the seeds wrote them: ``2025/11/24 20:25:50.123, 74,
    105.21 W``. Then numbers plain (units live in the header), ``clocks_event_reasons.active`` as
    ``0x%016x`` when given as a number, text as is (commas replaced by spaces), and ``[N/A]`` for a
    missing or non-finite value, as nvidia-smi prints it; an empty ``gpu.processes`` (no GPU process)
    is written ``none`` so it reads back as an empty list, not as unknown. A float timestamp is
    formatted by :func:`stamp`.
    """
    cells: list[str] = []
    for column in COLUMNS:
        value = sample.get(column)
        if isinstance(value, bool) or value is None:
            cells.append("[N/A]")
        elif column == "timestamp" and isinstance(value, (int, float)):
            try:
                cells.append(stamp(float(value)))
            except (ValueError, OverflowError, OSError):  # nan, or beyond what the C library dates
                cells.append("[N/A]")
        elif isinstance(value, (int, float)):
            v = float(value)
            if not math.isfinite(v):
                cells.append("[N/A]")
            elif column == "power.draw [W]":
                cells.append(f"{v:.2f} W")
            elif column == "clocks_event_reasons.active":
                cells.append(f"0x{int(v) & 0xFFFFFFFFFFFFFFFF:016x}")
            else:
                cells.append(_plain(v))
        elif column == "gpu.processes":
            cells.append(_clean_text(str(value)) or "none")  # "" = no GPU process (known), not unknown
        else:
            cells.append(_clean_text(str(value)) or "[N/A]")
    return ", ".join(cells)
