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
import math
import re
import time
from collections.abc import Mapping

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
_NUMBER = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%µ/]*)$")
_STAMP = re.compile(
    r"^(\d{4})[/-](\d{1,2})[/-](\d{1,2})[ T](\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$"
)
_MISSING = frozenset({"n/a", "[n/a]", "not supported", "[not supported]", "[unknown error]", "-", ""})
_MAX_NOTED_LINES = 3  # line numbers quoted per kind of problem


def seconds(ts: object) -> float | None:
    """``2025/11/24 20:25:50.123`` -> seconds on the log's own clock (for differences only).

    The stamp is local time without a zone, so it is read as if it were UTC: differences between
    two stamps are exact (except across a DST change), the absolute value is not an epoch.
    """
    if not isinstance(ts, str):
        return None
    m = _STAMP.match(ts.strip())
    if not m or not all(c.isascii() for c in m.group(0)):
        return None
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 23 and mi <= 59 and s <= 60):
        return None
    try:
        whole = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    frac = m.group(7)
    return float(whole) + (int(frac) / 10 ** len(frac) if frac else 0.0)


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


def _value(column: str, text: str) -> tuple[float | str | None, bool]:
    """One cell -> (value, ok). ``ok`` False: present but unreadable (the row keeps None)."""
    cell = text.strip()
    if _is_missing(cell):
        return None, True
    if column in TEXT_COLUMNS:
        return cell, True
    m = _NUMBER.match(cell)
    if not m or not m.group(1).isascii():
        return None, False
    value = float(m.group(1))
    if not math.isfinite(value):
        return None, False
    return value, True


class _Header:
    """A header line read: position -> our column (None = a column we ignore)."""

    def __init__(self, cells: list[str]) -> None:
        self.cells = [c.strip() for c in cells]
        self.columns: list[str | None] = [column_for(c) for c in self.cells]
        if "clocks.sm [MHz]" not in self.columns:
            for i, c in enumerate(self.cells):
                if re.sub(r"\s*\[[^\]]*\]$", "", c).lower() in _GRAPHICS_CLOCK:
                    self.columns[i] = "clocks.sm [MHz]"
                    break
        lowered = [re.sub(r"\s*\[[^\]]*\]$", "", c).strip().lower() for c in self.cells]
        self.index_at = lowered.index("index") if "index" in lowered else None
        self.ignored = [c for c, col in zip(self.cells, self.columns, strict=True) if col is None]


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

    def notes(self) -> list[str]:
        out = []
        for reason, n in self.counts.items():
            where = ", ".join(str(x) for x in self.lines[reason])
            more = ", ..." if n > len(self.lines[reason]) else ""
            out.append(f"{n} line(s) skipped: {reason} (line {where}{more})")
        return out


def read_log(text: str) -> tuple[list[Sample], list[str]]:
    """Rows of a monitor log or ``nvidia-smi --query-gpu ... --format=csv`` output, plus notes.

    Header lines (also repeated ones, as in concatenated logs) set the columns; without any,
    a 3-field row starting with a timestamp is read as the seeds' ``timestamp, temperature.gpu,
    power.draw``; anything else is refused with a note naming the header to add. Every Sample
    carries all of ``COLUMNS`` (None where the log has no such column or printed ``[N/A]``).
    """
    rows: list[Sample] = []
    notes: list[str] = []
    problems = _Problems()
    header: _Header | None = None
    gpu_index: str | None = None
    other_gpus = 0
    unreadable: dict[str, int] = {}
    refused_without_header = 0
    try:
        lines = (text or "").lstrip("\ufeff").splitlines()
    except Exception:  # noqa: BLE001 - a non-str "text": nothing to read
        return [], ["the log is not text"]
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip().strip("\x00")
        if not line:
            continue
        if line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if _looks_like_header(cells):
            new = _Header(cells)
            if header is not None and new.cells != header.cells:
                notes.append(f"line {lineno}: header changed to {', '.join(new.cells)}")
            if new.ignored and (header is None or new.cells != header.cells):
                notes.append("columns not judged here (ignored): " + ", ".join(new.ignored))
            header = new
            continue
        if header is None:
            if len(cells) == 3 and seconds(cells[0]) is not None:
                header = _Header(list(SEEDS_COLUMNS))
                notes.append(
                    "no header line: read as the seeds' thermal-sample.sh columns "
                    f"({SEEDS_HEADER})"
                )
            else:
                refused_without_header += 1
                problems.add("no header before it, and not the seeds' 3-column format", lineno)
                continue
        if len(cells) > len(header.columns) and header.columns and header.columns[-1] == "gpu.processes":
            keep = len(header.columns) - 1
            cells = cells[:keep] + [",".join(cells[keep:])]
        if len(cells) != len(header.columns):
            problems.add(f"{len(cells)} fields where the header has {len(header.columns)}", lineno)
            continue
        if header.index_at is not None:
            idx = cells[header.index_at]
            if gpu_index is None:
                gpu_index = idx
            elif idx != gpu_index:
                other_gpus += 1
                continue
        sample: Sample = dict.fromkeys(COLUMNS)
        for column, cell in zip(header.columns, cells, strict=True):
            if column is None:
                continue
            value, ok = _value(column, cell)
            if not ok:
                unreadable[column] = unreadable.get(column, 0) + 1
            if value is not None or sample.get(column) is None:
                sample[column] = value
        if all(sample[c] is None for c in COLUMNS):
            problems.add("no readable value", lineno)
            continue
        rows.append(sample)
    if refused_without_header and not rows:
        notes.append(
            "cannot tell which column is which: the log has no header line. Add the header "
            "nvidia-smi writes without 'noheader' as the first line, e.g. "
            f"'{SEEDS_HEADER}' or '{', '.join(COLUMNS)}'"
        )
    notes.extend(problems.notes())
    for column, n in unreadable.items():
        notes.append(f"{n} unreadable value(s) in column {column} (read as unknown)")
    if other_gpus:
        notes.append(f"log holds several GPUs: judged GPU index {gpu_index} only ({other_gpus} rows of others skipped)")
    return rows, notes


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
