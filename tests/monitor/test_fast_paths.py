"""The per-row fast paths of the thermal reader and judge (issue 17: a million rows) decide what the general
paths decide. Each fast path is compared with the general one it shortcuts, on generated input:

- ``seconds``: the sliced ``YYYY/MM/DD HH:MM:SS[.fff]`` shape against the regex reader (``_seconds_general``);
- ``LineParser.data``: the per-header conversion plan against the cell-by-cell ``_value`` rule it replaced;
- ``LogStream`` (two passes over a file, the stamp-only first pass) against ``read_log`` (every line classified,
  rows sorted in memory), rows and notes;
- ``analyze._median`` against ``statistics.median``;
- the column-wise stamp reader (``_stamps``) against ``seconds`` on each stamp, the constant-column test
  (``_all_equal``) against comparing every cell, and the data-run finder (``_odd_lines``) against testing each
  line's first character.
"""

from __future__ import annotations

import re
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.monitor import analyze as an
from sparkops.monitor.csvlog import (
    LineParser,
    LogStream,
    _all_equal,
    _odd_lines,
    _seconds_general,
    _stamps,
    _value,
    read_log,
    seconds,
)
from sparkops.monitor.events import COLUMNS

# ---------------------------------------------------------------------------- timestamps
digits = st.text(alphabet="0123456789", min_size=1, max_size=3)
odd = st.sampled_from(["", " ", ".", "/", "-", "T", ":", "٣", "x", "\x00"])


@st.composite
def stamps(draw):
    """Mostly the canonical shape with fields in and out of range, sometimes one character changed."""
    y, mo, d, h, mi, s = (draw(st.integers(0, hi)) for hi in (9999, 14, 33, 25, 61, 62))
    text = f"{y:04d}/{mo:02d}/{d:02d} {h:02d}:{mi:02d}:{s:02d}"
    if draw(st.booleans()):
        text += "." + draw(st.text(alphabet="0123456789", min_size=0, max_size=11))
    if draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(odd) + text[at + 1:]
    return draw(st.sampled_from(["", " ", "\t"])) + text + draw(st.sampled_from(["", " ", "\n"]))


@settings(max_examples=300, deadline=None)
@given(st.one_of(stamps(), st.text(max_size=30)))
def test_seconds_fast_shape_equals_the_regex_reader(text):
    assert seconds(text) == _seconds_general(text.strip())


@st.composite
def stamp_columns(draw):
    """A block's stamps: mostly one well-formed minute-by-minute run (the column-wise path), sometimes a
    stamp of another shape, a None, or a one-character change (the whole block then read stamp by stamp)."""
    n = draw(st.integers(1, 40))
    start = draw(st.integers(0, 3000))
    frac = draw(st.sampled_from(["", ".0", ".000", ".123", ".5", ".999999999"]))
    out = [f"2025/11/24 {(start + i) // 3600 % 24:02d}:{(start + i) // 60 % 60:02d}:{(start + i) % 60:02d}{frac}"
           for i in range(n)]
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, n - 1))
        out[at] = draw(st.one_of(st.none(), stamps().map(str.strip), st.just((out[at] or "")[:19] + ".")))
    return out


@settings(max_examples=300, deadline=None)
@given(stamp_columns())
def test_the_stamp_column_reads_as_each_stamp_does(column):
    got = list(_stamps(column))
    want = [seconds(s) for s in column]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g != g and w is None) or g == w  # NaN where seconds() has none, else the same float


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["[N/A]", "0", "0,", ",0", "", "0,0", "P0"]), min_size=1, max_size=12))
def test_the_constant_column_test_is_comparing_every_cell(cells):
    assert _all_equal(cells, cells[0]) == all(c == cells[0] for c in cells)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["", "1, 2", "#x", "timestamp", " 1", "٣", "0", "\x00", "9z"]), min_size=1,
                max_size=12))
def test_the_data_run_finder_stops_where_a_line_starts_with_no_digit(lines):
    body = "\n".join(lines)
    assert _odd_lines(body) == [i for i, line in enumerate(lines) if line[:1] not in set("0123456789") or not line]


# ---------------------------------------------------------------------------- one row under a header
def reference_data(header_cells: list[str], cells: list[str]) -> tuple[dict | None, list[str]]:
    """The row loop as it was before the conversion plan: ``_value`` on every judged cell."""
    p = LineParser()
    p.classify(1, ", ".join(header_cells))
    h = p.header
    assert h is not None
    sample = dict.fromkeys(COLUMNS)
    for column, cell, unit in zip(h.columns, cells, h.units, strict=True):
        if column is None:
            continue
        value, why = _value(column, cell, unit)
        if why == "unreadable":
            p.unreadable[column] = p.unreadable.get(column, 0) + 1
        elif why:
            p.values.add(f"{why} in column {column}", 2)
        if value is not None or sample.get(column) is None:
            sample[column] = value
    if all(sample[c] is None for c in COLUMNS):
        p.problems.add("no readable value", 2)
        return None, p.notes()
    return sample, p.notes()


HEADER_CELLS = ["timestamp", "temperature.gpu", "power.draw [W]", "power.draw [mW]", "power.draw.average [kW]",
                "clocks.sm [MHz]", "clocks.sm [GHz]", "utilization.gpu [%]", "pstate", "mem.free [B]",
                "mem.available [MiB]", "violation.sw_thermal [us]", "violation.hw_thermal [ms]", "temperature.gpu [F]",
                "name", "psi.memory.full.avg10", "power.draw [furlongs]", "clocks_event_reasons.active"]
CELLS = st.one_of(
    st.integers(-10, 10**7).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["[N/A]", "N/A", "n/a", "[Not Supported]", "-", "", "P0", "0x20", "1e999", "105.21 W",
                     "100200 mW", "1.5 GHz", "74 °C", "+5", ".5", "5.", "٣", "1_000", "0x0000000000000000"]),
    st.text(alphabet="0123456789.eE+- WmkGHz%", max_size=8),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(HEADER_CELLS), min_size=1, max_size=8, unique=True), st.data())
def test_the_conversion_plan_reads_a_row_as_value_did(header_cells, data):
    cells = data.draw(st.lists(CELLS, min_size=len(header_cells), max_size=len(header_cells)))
    cells = [c.strip() for c in cells]  # as classify hands them over
    p = LineParser()
    p.classify(1, ", ".join(header_cells))
    got = p.data(2, list(cells))
    want, want_notes = reference_data(header_cells, cells)
    assert got == want or (got is not None and want is not None and _same(got, want))
    assert p.notes() == want_notes


def _same(a: dict, b: dict) -> bool:  # the same floats bit for bit, the rest equal
    return all((x == y) or (isinstance(x, float) and isinstance(y, float) and repr(x) == repr(y))
               for x, y in zip((a[c] for c in COLUMNS), (b[c] for c in COLUMNS), strict=True))


# ---------------------------------------------------------------------------- whole logs, file vs text
ROW_STAMPS = st.integers(0, 3000).map(lambda s: f"2025/11/24 {20 + s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.000")
OWN_HEADER = ", ".join(COLUMNS)


@st.composite
def logs(draw):
    lines = []
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from([OWN_HEADER, "timestamp, temperature.gpu, power.draw [W]",
                                           "timestamp, power.draw [mW], temperature.gpu, clocks.sm [GHz]"])))
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.sampled_from(["# comment", "", "garbage line", OWN_HEADER, "\ufeff",
                                               "timestamp, temperature.gpu, power.draw [W]"])))
            continue
        n = draw(st.integers(2, len(COLUMNS)))
        cells = [draw(ROW_STAMPS) if draw(st.integers(0, 6)) else draw(st.sampled_from(["", "[N/A]", "x"]))]
        cells += [draw(CELLS) for _ in range(n - 1)]
        lines.append(", ".join(cells))
    return "\n".join(lines) + ("\n" if draw(st.booleans()) else "")


@settings(max_examples=60, deadline=None)
@given(logs())
def test_the_streamed_file_gives_what_the_whole_text_gives(tmp_path_factory, text):
    f = tmp_path_factory.getbasetemp() / "fast-paths.csv"  # one file, rewritten for each example
    f.write_text(text, encoding="utf-8")
    stream = LogStream(f)
    rows = list(stream.samples())
    want_rows, want_notes = read_log(text)
    assert [_key(r) for r in rows] == [_key(r) for r in want_rows]
    # two differences predate the fast paths and are left out: the stream orders every data line before parsing it
    # (one it refuses later still counts for the time-order note; read_log counts only the rows it kept), and it
    # parses in time order, so a note's first few line numbers are the first in time, not in the file
    assert _notes(stream) == _notes(want_notes)


def _notes(notes) -> list[str]:
    return sorted(re.sub(r" \(line [^)]*\)", "", n) for n in notes if "time order" not in n)


def _key(row: dict) -> tuple:
    return tuple(repr(row[c]) for c in COLUMNS)


# ---------------------------------------------------------------------------- the judge's median
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=32)), max_size=12))
def test_median_is_statistics_median(values):
    known = [v for v in values if v is not None]
    want = statistics.median(known) if known else None
    assert an._median(values) == want
