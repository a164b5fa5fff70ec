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
import math
import os
import re
import select
import stat
import tempfile
import time
from array import array
from collections.abc import Iterable, Iterator, Mapping
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

    def classify(self, lineno: int, raw: str) -> tuple[str, list[str]]:
        """("skip" | "header" | "data", cells); a header line is taken in at once."""
        line = raw.strip().strip("\x00")
        if not line or line.startswith("#"):
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
        if len(cells) > len(header.columns) and header.columns and header.columns[-1] == "gpu.processes":
            keep = len(header.columns) - 1
            cells = cells[:keep] + [",".join(cells[keep:])]
        if len(cells) != len(header.columns):
            self.problems.add(f"{len(cells)} fields where the header has {len(header.columns)}", lineno)
            return None
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

    def notes(self) -> list[str]:
        notes = list(self.notes_)
        if self.refused_without_header and not self.rows:
            notes.append(
                "cannot tell which column is which: the log has no header line. Add the header "
                "nvidia-smi writes without 'noheader' as the first line, e.g. "
                f"'{SEEDS_HEADER}' or '{', '.join(COLUMNS)}'"
            )
        notes.extend(self.problems.notes())
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


# --------------------------------------------------------------------------- streaming a file
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
