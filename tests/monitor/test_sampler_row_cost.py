"""The sampler's cheaper row (issue 23) reads exactly what the straightforward reading gave.

The row no longer parses all of /proc/meminfo, builds no PsiFacts per row, and on the live machine
re-reads its three /proc files through descriptors kept open. Each shortcut is held here against
the parser it replaces (hypothesis), and the live reader against the open-read-parse of the same
files; the NVML worker's cheaper hand-off keeps its deadline.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.checks.g03_fragmentation import free_large_from_text
from sparkops.facts.reading import Unavailable
from sparkops.monitor import sampler
from sparkops.monitor.sampler import MemoryReader, meminfo_wanted, psi_full_avg10
from sparkops.probes.memory import parse_meminfo, parse_psi

WANTED = sorted(sampler._MEMINFO_WANTED)
NAMES = st.sampled_from([*WANTED, "MemTotal", "Buffers", "HugePages_Total", "Mem Free", "(x)", ""])
LINE = st.one_of(
    st.tuples(st.sampled_from(["", " ", "\t"]), NAMES, st.sampled_from([":", " :", ":  "]),
              st.integers(0, 10**12).map(str), st.sampled_from(["", " kB", " mB", " GB", " B", " pages", "x"]))
    .map("".join),
    st.text(max_size=30),
)


@settings(max_examples=300)
@given(st.lists(LINE, max_size=40), st.sampled_from(["\n", "\r\n", "\r"]))
def test_the_wanted_lines_parse_as_the_whole_file(lines, sep):
    text = sep.join(lines)
    full = parse_meminfo(text)
    got = meminfo_wanted(text)
    assert {k: got.get(k) for k in WANTED} == {k: full.get(k) for k in WANTED}  # what a row reads


PSI_FIELD = st.one_of(st.sampled_from(["avg10", "avg60", "avg300", "total"]), st.text("avg10=", max_size=6))
PSI_LINE = st.tuples(st.sampled_from(["some", "full", "other", ""]),
                     st.lists(st.tuples(PSI_FIELD, st.one_of(st.floats(0, 100).map(lambda f: f"{f:.2f}"),
                                                             st.sampled_from(["x", "", "nan", "1e3"]))),
                              max_size=5)).map(lambda t: " ".join([t[0], *(f"{k}={v}" for k, v in t[1])]))


@settings(max_examples=300)
@given(st.lists(PSI_LINE, max_size=4))
def test_psi_without_the_model_is_parse_psi(lines):
    text = "\n".join(lines)
    want = parse_psi(text)
    got = psi_full_avg10(text)
    if isinstance(want, Unavailable):
        assert got is None
    else:
        assert got == want.full_avg10 or (got != got and want.full_avg10 != want.full_avg10)  # nan


def _reference(root: Path) -> dict[str, float | None]:
    """The row as the sampler read it before: open, read, parse every file, the models per row."""
    from sparkops.probes.fragmentation import page_size
    from sparkops.probes.host import read_small

    out: dict[str, float | None] = dict.fromkeys(sampler.MEMORY_COLUMNS)
    text = read_small(root / "proc" / "meminfo")
    if isinstance(text, str):
        mi = parse_meminfo(text)
        out["mem.free [B]"] = float(mi["MemFree"]) if "MemFree" in mi else None
        out["mem.available [B]"] = float(mi["MemAvailable"]) if "MemAvailable" in mi else None
        if "Cached" in mi:
            out["mem.cached [B]"] = float(max(0, mi["Cached"] + mi.get("SReclaimable", 0) - mi.get("Shmem", 0)))
        if "SwapTotal" in mi and "SwapFree" in mi:
            out["swap.used [B]"] = float(max(0, mi["SwapTotal"] - mi["SwapFree"]))
    psi = read_small(root / "proc" / "pressure" / "memory")
    if isinstance(psi, str) and not isinstance(p := parse_psi(psi), Unavailable):
        out["psi.memory.full.avg10"] = p.full_avg10
    page = page_size(root)
    if not isinstance(page, Unavailable):
        try:
            buddy = (root / "proc" / "buddyinfo").read_bytes()[: 1 << 16].decode("ascii", errors="replace")
            large = free_large_from_text(buddy, page)
            out["mem.free_large [B]"] = float(large) if large is not None else None
        except OSError:
            pass
    return out


RAW = Path(__file__).parents[1] / "fixtures" / "raw" / "buddyinfo"


@pytest.mark.parametrize("buddy", sorted(p.name for p in RAW.glob("*.buddyinfo")))
def test_a_recorded_tree_reads_as_before_row_after_row(tmp_path, buddy):
    (tmp_path / "proc" / "pressure").mkdir(parents=True)
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "self" / "smaps").write_text("KernelPageSize:        4 kB\n")
    (tmp_path / "proc" / "buddyinfo").write_text((RAW / buddy).read_text())
    reader = MemoryReader(tmp_path)
    for free in (1000, 900, 5):  # files rewritten between rows: each row sees the new ones
        (tmp_path / "proc" / "meminfo").write_text(
            f"MemTotal: 128000000 kB\nMemFree: {free} kB\nMemAvailable: 2000 kB\nCached: 500 kB\n"
            "SReclaimable: 100 kB\nShmem: 50 kB\nSwapTotal: 4000 kB\nSwapFree: 1000 kB\n")
        (tmp_path / "proc" / "pressure" / "memory").write_text(
            f"some avg10=1.50 avg60=0.20 avg300=0.00 total=1\nfull avg10=0.{free} avg60=0.10 avg300=0.00 total=1\n")
        got = reader.read()
        assert got == _reference(tmp_path)
        assert got["mem.free [B]"] == free * 1024 and got["mem.free_large [B]"] is not None
    reader.close()


def test_the_live_reader_keeps_its_files_open_and_reads_them_fresh():
    root = Path("/")
    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc here")
    reader = MemoryReader(root)
    first = reader.read()
    fds = dict(reader._fds)
    assert "/proc/meminfo" in fds
    ref = _reference(root)
    second = reader.read()
    assert reader._fds == fds  # the same descriptors, re-read
    # live values move between reads; the ones that are there, and the columns that are empty, agree
    assert {k for k, v in second.items() if v is None} == {k for k, v in ref.items() if v is None}
    assert second["mem.free [B]"] is not None and first["mem.free [B]"] is not None
    assert abs(second["mem.available [B]"] - ref["mem.available [B]"]) < 0.5 * ref["mem.available [B]"]
    reader.close()
    assert reader._fds == {}
    assert reader.read()["mem.free [B]"] is not None  # reopens after close


def test_the_worker_hands_back_values_errors_and_keeps_its_deadline():
    w = sampler._Worker()
    assert w.call(lambda: 41 + 1, 5.0) == 42
    with pytest.raises(ZeroDivisionError):
        w.call(lambda: 1 / 0, 5.0)
    gate = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        w.call(gate.wait, 0.2)
    assert time.monotonic() - t0 < 5  # bounded, not a timing claim
    assert w.wedged
    with pytest.raises(TimeoutError):
        w.call(lambda: 1, 5.0)
    gate.set()
    w.stop()


def test_the_csv_rows_are_the_reference_rows(tmp_path):
    """run_sampling over a recorded root: every CSV row is what the reference reading writes (the
    GPU cells from the one NVML reader, the memory cells from open-read-parse), header unchanged."""
    import csv
    from types import SimpleNamespace

    from sparkops.knowledge import load
    from sparkops.monitor import sampler as smp

    class StandIn:  # a GB10 under load, answering at once
        NVML_CLOCK_SM, NVML_TEMPERATURE_GPU, NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL = 1, 0, 0, 1

        def nvmlInit(self): ...  # noqa: N802 - pynvml's names
        def nvmlShutdown(self): ...  # noqa: N802
        def nvmlDeviceGetHandleByIndex(self, i): return "h"  # noqa: N802
        def nvmlDeviceGetName(self, h): return "NVIDIA GB10"  # noqa: N802
        def nvmlDeviceGetTemperature(self, h, s): return 71  # noqa: N802
        def nvmlDeviceGetPowerUsage(self, h): return 100_250  # noqa: N802
        def nvmlDeviceGetClockInfo(self, h, c): return 2418  # noqa: N802
        def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=98)  # noqa: N802
        def nvmlDeviceGetPerformanceState(self, h): return 0  # noqa: N802
        def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 0x20  # noqa: N802
        def nvmlDeviceGetViolationStatus(self, h, p): return SimpleNamespace(violationTime=5_000_000)  # noqa: N802
        def nvmlDeviceGetComputeRunningProcesses(self, h): return [SimpleNamespace(pid=7, usedGpuMemory=1 << 30)]  # noqa: N802
        def nvmlSystemGetProcessName(self, pid): return "python"  # noqa: N802

    (tmp_path / "proc" / "pressure").mkdir(parents=True)
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "self" / "smaps").write_text("KernelPageSize:        4 kB\n")
    (tmp_path / "proc" / "buddyinfo").write_text(next(iter(sorted(RAW.glob("*.buddyinfo")))).read_text())
    (tmp_path / "proc" / "meminfo").write_text("MemFree: 1000 kB\nMemAvailable: 2000 kB\nCached: 500 kB\n")
    (tmp_path / "proc" / "pressure" / "memory").write_text(
        "some avg10=1.50 avg60=0.20 avg300=0.00 total=1\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=1\n")
    s = smp.Sampler({"SPARKOPS_ROOT": str(tmp_path)}, nvml_module=StandIn())
    stop = threading.Event()
    rows: list[dict] = []

    def seen(row: dict) -> None:
        rows.append(row)
        if len(rows) >= 3:
            stop.set()

    log = tmp_path / "watch.csv"
    assert smp.run_sampling(log, load().thresholds.monitor.sampler_min_interval_s, stop, s, on_row=seen) == 3
    want_mem = _reference(tmp_path)
    assert s.source == "nvml"
    want_gpu = smp.read_nvml(s._nv, s._handle)
    s.close()
    assert want_gpu["power.draw [W]"] == 100.25 and want_mem["mem.free [B]"] == 1000 * 1024
    with open(log, newline="", encoding="utf-8") as fh:
        got = list(csv.reader(fh))
    header, fmt = smp._formatters()
    assert got[0] == next(csv.reader([header()]))
    for row, line in zip(rows, got[1:], strict=True):
        expected = {**row, **want_gpu, **want_mem}
        assert line == next(csv.reader([fmt(expected)]))
