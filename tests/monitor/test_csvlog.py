"""csvlog: the seeds' nvidia-smi CSV in every variant, this project's own logs, and the writer."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.monitor.csvlog import SEEDS_HEADER, column_for, format_row, read_log, seconds, write_header
from sparkops.monitor.events import COLUMNS

THERMAL = Path(__file__).parents[1] / "fixtures" / "raw" / "thermal"
NVSMI = Path(__file__).parents[1] / "fixtures" / "raw" / "nvidia_smi"


def text(name: str) -> str:
    return (THERMAL / name).read_text()


def test_seconds_reads_nvidia_smi_stamps():
    assert seconds("2025/11/24 20:25:51.123") - seconds("2025/11/24 20:25:50.000") == pytest.approx(1.123)
    assert seconds("2025/11/24 20:25:50") is not None
    for bad in ("", "74", "2025/13/24 20:25:50.1", "yesterday", None, 5.0, "２０２５/11/24 20:25:50"):
        assert seconds(bad) is None


@pytest.mark.parametrize("field,column", [
    ("power.draw [W]", "power.draw [W]"), ("power.draw", "power.draw [W]"),
    ("clocks.sm [MHz]", "clocks.sm [MHz]"), ("clocks.current.sm [MHz]", "clocks.sm [MHz]"),
    ("utilization.gpu [%]", "utilization.gpu [%]"), ("temperature.gpu", "temperature.gpu"),
    ("pstate", "pstate"), ("clocks_event_reasons.active", "clocks_event_reasons.active"),
    ("clocks_throttle_reasons.active", "clocks_event_reasons.active"),
    ("mem.available [B]", "mem.available [B]"), ("memory.used [MiB]", None), ("name", None),
])
def test_field_spellings(field, column):
    assert column_for(field) == column


def test_seeds_header_with_units():
    rows, notes = read_log(text("seeds_header_units_plateau.csv"))
    assert len(rows) == 120 and notes == []
    first = rows[0]
    assert first["timestamp"].startswith("2025/11/24 20:00:00.")
    assert isinstance(first["temperature.gpu"], float) and 100 <= first["power.draw [W]"] <= 105.2
    assert first["clocks.sm [MHz]"] is None and set(first) == set(COLUMNS)


def test_seeds_without_header_are_read_as_the_seeds_columns():
    rows, notes = read_log(text("seeds_noheader_hot.csv"))
    assert len(rows) == 120
    assert any("no header line" in n and SEEDS_HEADER in n for n in notes)
    assert 85 <= rows[0]["temperature.gpu"] <= 89


def test_nounits_equals_units():
    rows, _ = read_log(text("seeds_nounits_rising.csv"))
    assert len(rows) == 120 and all(isinstance(r["power.draw [W]"], float) for r in rows)
    a, _ = read_log("timestamp, temperature.gpu, power.draw [W]\n2025/11/24 20:25:50.123, 74, 105.21 W\n")
    b, _ = read_log("timestamp, temperature.gpu, power.draw [W]\n2025/11/24 20:25:50.123, 74, 105.21\n")
    assert a == b and a[0]["power.draw [W]"] == 105.21


def test_na_power_reads_as_none():
    rows, notes = read_log(text("seeds_na_power.csv"))
    assert len(rows) == 120
    assert sum(r["power.draw [W]"] is None for r in rows) == sum(1 for i in range(120) if i % 7 == 3)
    assert notes == []
    rows, _ = read_log("timestamp, power.draw [W], pstate\n2025/11/24 20:25:50.123, [Not Supported], N/A\n")
    assert rows[0]["power.draw [W]"] is None and rows[0]["pstate"] is None


def test_shuffled_fields_with_units():
    rows, notes = read_log(text("shuffled_low_clock.csv"))
    assert len(rows) == 90
    r = rows[0]
    assert r["timestamp"] == "2025/11/24 20:00:00.000"
    assert 680 <= r["clocks.sm [MHz]"] <= 700 and r["utilization.gpu [%]"] in (94, 95, 96)
    assert 15.5 <= r["power.draw [W]"] <= 18 and r["pstate"] == "P0"
    assert r["clocks_event_reasons.active"] == "0x0000000000000000"
    assert any("memory.used" in n for n in notes)  # recognised, not judged


def test_concatenated_logs_repeated_header_and_garbage():
    rows, notes = read_log(text("seeds_concatenated.csv"))
    assert len(rows) == 80
    assert any("1 line(s) skipped" in n and "line 44" in n for n in notes)


def test_no_header_and_not_seeds_is_refused_with_the_header_to_add():
    rows, notes = read_log("NVIDIA GB10, [N/A], [N/A], 6\nNVIDIA GB10, [N/A], [N/A], 7\n")
    assert rows == []
    assert any("no header line" in n and SEEDS_HEADER in n for n in notes)


def test_real_gb10_nvidia_smi_capture():
    """nvitop#208, driver 580.173.02: memory [N/A], '0 %', '11.17 W' (no timestamp column)."""
    rows, _ = read_log((NVSMI / "csv_2.1_header_memory_util_power_temp_580.173.02.txt").read_text())
    assert rows and rows[0]["power.draw [W]"] == 11.17 and rows[0]["utilization.gpu [%]"] == 0
    assert rows[0]["temperature.gpu"] == 35 and rows[0]["timestamp"] is None


def test_graphics_clock_stands_in_for_sm_clock():
    rows, _ = read_log((NVSMI / "csv_2.2_header_clocks_graphics_580.173.02.txt").read_text())
    assert rows[0]["clocks.sm [MHz]"] == 2522 and rows[0]["power.draw [W]"] == 15.57


def test_multi_gpu_log_keeps_the_first_gpu():
    log = "index, timestamp, power.draw [W]\n0, 2025/11/24 20:25:50.1, 100 W\n1, 2025/11/24 20:25:50.1, 50 W\n"
    rows, notes = read_log(log)
    assert [r["power.draw [W]"] for r in rows] == [100] and any("several GPUs" in n for n in notes)


def test_writer_matches_the_seeds_format_and_round_trips():
    assert write_header().startswith(SEEDS_HEADER + ", clocks.sm [MHz]")
    sample = dict.fromkeys(COLUMNS)
    sample.update({"timestamp": "2025/11/24 20:25:50.123", "temperature.gpu": 74.0, "power.draw [W]": 105.21,
                   "clocks.sm [MHz]": 2496.0, "utilization.gpu [%]": 96.0, "pstate": "P0",
                   "clocks_event_reasons.active": 0x20, "mem.available [B]": 5 * 1024**3,
                   "psi.memory.full.avg10": 0.12, "gpu.processes": "44757:VLLM::EngineCore:51200278528"})
    line = format_row(sample)
    assert line.startswith("2025/11/24 20:25:50.123, 74, 105.21 W, 2496, 96, P0, 0x0000000000000020, [N/A]")
    rows, notes = read_log(write_header() + "\n" + line + "\n")
    assert notes == []
    back = rows[0]
    assert back["power.draw [W]"] == 105.21 and back["mem.available [B]"] == 5 * 1024**3
    assert back["psi.memory.full.avg10"] == 0.12 and back["gpu.processes"] == sample["gpu.processes"]
    assert back["violation.sw_thermal [us]"] is None
    # the first three columns read the same with a seeds-only reader (split on ', ')
    assert line.split(", ")[:3] == ["2025/11/24 20:25:50.123", "74", "105.21 W"]


def test_empty_process_list_round_trips_as_known_and_empty():
    line = format_row({"timestamp": "2025/11/24 20:25:50.123", "gpu.processes": ""})
    assert line.endswith(", none")
    rows, _ = read_log(write_header() + "\n" + line)
    assert rows[0]["gpu.processes"] == "none"


def test_writer_keeps_commas_out_of_text_and_writes_na():
    sample = {"timestamp": "2025/11/24 20:25:50.123", "gpu.processes": "1:a,b:5", "temperature.gpu": float("nan")}
    line = format_row(sample)
    assert line.count(",") == len(COLUMNS) - 1 and ", [N/A]," in line


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_read_log_never_raises(text):
    rows, notes = read_log(text)
    assert isinstance(rows, list) and isinstance(notes, list)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["2025/11/24 20:25:50.123", "74", "105.21 W", "[N/A]", "P0", "0x20",
                                          "power.draw [W]", "timestamp", "", "x,y", "１２", "1e400", "nan"]),
                         max_size=6), max_size=12))
def test_read_log_never_raises_on_csv_like_text(cells):
    rows, notes = read_log("\n".join(", ".join(r) for r in cells))
    for r in rows:
        assert set(r) == set(COLUMNS)
        for k, v in r.items():
            assert v is None or isinstance(v, (float, str)), (k, v)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(COLUMNS), st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**20, 10**20), st.text())))
def test_format_row_never_raises_and_has_every_column(sample):
    line = format_row(sample)
    assert "\n" not in line and line.count(", ") >= len(COLUMNS) - 1


def test_a_byte_order_mark_alone_is_an_empty_log():
    rows, _notes = read_log("\ufeff")
    assert rows == []
