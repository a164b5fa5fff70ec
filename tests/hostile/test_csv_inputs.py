"""Hostile thermal logs: every unit converted (or refused, noted), impossible values unknown, rows
judged in timestamp order, the file streamed (FIFOs within a time bound) (issue 17, items 5, 6)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.monitor.analyze import analyze, analyze_text
from sparkops.monitor.csvlog import LogStream, read_log

THERMAL = Path(__file__).parent.parent / "fixtures" / "raw" / "thermal"
PLATEAU = THERMAL / "gb10_normal_plateau.csv"


@pytest.mark.parametrize("header,cell,column,expected", [
    ("power.draw [W]", "100200 mW", "power.draw [W]", 100.2),
    ("power.draw [mW]", "100200", "power.draw [W]", 100.2),
    ("power.draw [W]", "0.1002 kW", "power.draw [W]", 100.2),
    ("clocks.sm [MHz]", "2.514 GHz", "clocks.sm [MHz]", 2514.0),
    ("clocks.current.sm [GHz]", "2.514", "clocks.sm [MHz]", 2514.0),
    ("temperature.gpu", "165.2 °F", "temperature.gpu", 74.0),
    ("temperature.gpu [F]", "165.2", "temperature.gpu", 74.0),
    ("temperature.gpu [K]", "347.15", "temperature.gpu", 74.0),
    ("mem.available [B]", "1024 MiB", "mem.available [B]", 1024**3),
    ("violation.sw_thermal [us]", "2 ms", "violation.sw_thermal [us]", 2000.0),
])
def test_units_are_converted(header, cell, column, expected):
    rows, notes = read_log(f"timestamp, {header}\n2025/11/24 20:00:00.000, {cell}\n")
    assert rows and rows[0][column] == pytest.approx(expected, rel=1e-6), notes


@pytest.mark.parametrize("header,cell", [("power.draw [W]", "105 furlongs"), ("power.draw [parsecs]", "105"),
                                         ("clocks.sm [MHz]", "2514 rpm")])
def test_an_unknown_unit_is_refused_with_a_note(header, cell):
    rows, notes = read_log(f"timestamp, temperature.gpu, {header}\n2025/11/24 20:00:00.000, 74, {cell}\n")
    col = "power.draw [W]" if "power" in header else "clocks.sm [MHz]"
    assert rows[0][col] is None and rows[0]["temperature.gpu"] == 74.0
    assert any("unknown unit" in n and col in n for n in notes), notes


@pytest.mark.parametrize("cell,column", [("-5 W", "power.draw [W]"), ("1e308", "temperature.gpu"),
                                         ("nan", "temperature.gpu"), ("250", "utilization.gpu [%]")])
def test_impossible_values_are_unknown(cell, column):
    header = {"power.draw [W]": "power.draw [W]", "temperature.gpu": "temperature.gpu",
              "utilization.gpu [%]": "utilization.gpu [%]"}[column]
    rows, notes = read_log(f"timestamp, {header}, pstate\n2025/11/24 20:00:00.000, {cell}, P0\n")
    assert rows[0][column] is None
    assert any(column in n and ("impossible" in n or "unreadable" in n) for n in notes), notes


def test_milliwatts_are_not_read_as_the_sustained_cap():
    body = "".join(f"2025/11/24 20:{i // 60:02d}:{i % 60:02d}.000, 74, {100200 + (i % 5) * 100} mW, 2500, 97, P0\n"
                   for i in range(900))
    res = analyze_text("timestamp, temperature.gpu, power.draw [W], clocks.sm [MHz], utilization.gpu [%], pstate\n"
                       + body)
    assert not any(e.evidence.get("power_w", 0) > 1000 for e in res.events)
    assert not any("100200" in (e.summary or "") for e in res.events)


def _reverse_lines(path: Path, dest: Path) -> None:
    lines = path.read_text().splitlines()
    dest.write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")


@pytest.mark.parametrize("name", sorted(p.name for p in THERMAL.glob("*.csv")))
def test_a_newest_first_log_is_judged_as_the_oldest_first_one(tmp_path, name):
    rev = tmp_path / name
    _reverse_lines(THERMAL / name, rev)
    fwd = analyze_text((THERMAL / name).read_text())
    back_text = analyze_text(rev.read_text())
    stream = LogStream(rev)
    back_stream = analyze(stream.samples(), notes=stream)
    for back in (back_text, back_stream):
        assert [(e.kind, e.start) for e in back.events] == [(e.kind, e.start) for e in fwd.events]
        assert back.verdict == fwd.verdict
        assert any("not in time order" in n for n in back.notes)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), cut=st.integers(0, 180))
def test_streaming_equals_reading_whole(tmp_path_factory, seed, cut):
    lines = PLATEAU.read_text().splitlines()
    body = lines[1:]
    random.Random(seed).shuffle(body)
    body.insert(cut % (len(body) + 1), "garbage, line")
    f = tmp_path_factory.mktemp("csv") / "log.csv"
    f.write_text("\n".join([lines[0], *body]) + "\n")
    rows, notes = read_log(f.read_text())
    stream = LogStream(f)
    assert list(stream.samples()) == rows
    assert sorted(stream) == sorted(notes)


def test_a_fifo_is_analyzed_within_its_time_bound(tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "sparkops", "thermal", "analyze", "--timeout", "1", str(fifo)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3
    assert "nothing arrived within 1 s" in p.stdout + p.stderr


def test_a_directory_is_a_plain_refusal(tmp_path):
    p = subprocess.run([sys.executable, "-m", "sparkops", "thermal", "analyze", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "directory" in p.stderr and "Traceback" not in p.stderr


@settings(max_examples=150, deadline=None)
@given(cells=st.lists(st.text(max_size=15).filter(lambda c: "," not in c and "\n" not in c and "\r" not in c),
                      min_size=3, max_size=3))
def test_any_cells_read_or_are_noted(cells):
    rows, notes = read_log("timestamp, temperature.gpu, power.draw [W]\n" + ", ".join(cells) + "\n")
    for row in rows:
        for col in ("temperature.gpu", "power.draw [W]"):
            v = row[col]
            assert v is None or (isinstance(v, float) and -40 <= v <= 5000)
