"""The sampler against fake nvidia-smi executables, a stand-in pynvml, and the real /proc here;
run_sampling against a scripted sampler, read back while it runs."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.monitor import csvlog, sampler
from sparkops.monitor.events import COLUMNS
from sparkops.monitor.sampler import Sampler, process_cell, read_memory, run_sampling
from sparkops.probes.memory import parse_meminfo

BIN = Path(__file__).parent.parent / "fixtures" / "bin"
MIB = 1024 * 1024
GPU_COLUMNS = ("temperature.gpu", "power.draw [W]", "clocks.sm [MHz]", "utilization.gpu [%]", "pstate",
               "clocks_event_reasons.active", "violation.sw_power_cap [us]", "violation.sw_thermal [us]",
               "violation.hw_thermal [us]", "gpu.processes")
MEM_COLUMNS = ("mem.free [B]", "mem.available [B]", "mem.cached [B]", "swap.used [B]")


def smi_env(tmp_path: Path, fake: str | None) -> dict[str, str]:
    """An env whose PATH starts with a dir holding ``nvidia-smi`` -> the named fake (or none)."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    if fake is not None:
        (d / "nvidia-smi").symlink_to(BIN / fake)
    path = str(d) if fake is None else f"{d}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "SPARKOPS_NO_NVML": "1"}


# --------------------------------------------------------------------------- nvidia-smi path
def test_gb10_fake_values_and_real_memory(tmp_path):
    s = Sampler(smi_env(tmp_path, "nvidia-smi-gb10"))
    assert s.source == "nvidia-smi" and "SPARKOPS_NO_NVML" in s.notes[0]
    row = s.sample()
    s.close()
    assert tuple(row) == COLUMNS
    assert re.fullmatch(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}", row["timestamp"])
    assert row["temperature.gpu"] == 42.0 and row["power.draw [W]"] == pytest.approx(11.17)
    assert row["clocks.sm [MHz]"] == 2522.0 and row["utilization.gpu [%]"] == 0.0
    assert row["pstate"] == "P0" and row["clocks_event_reasons.active"] == "0x0000000000000000"
    assert row["violation.sw_power_cap [us]"] == 50_284_264_713  # from -q PERFORMANCE
    assert row["violation.sw_thermal [us]"] == 0 and row["violation.hw_thermal [us]"] == 0
    assert row["gpu.processes"] == f"400721:VLLM::EngineCore:{96581 * MIB}"
    # memory: this machine's /proc, not the fake (GB10's nvidia-smi has no memory reading)
    total = parse_meminfo(Path("/proc/meminfo").read_text())["MemTotal"]
    for col in MEM_COLUMNS:
        assert isinstance(row[col], float) and 0 <= row[col] <= max(total, parse_meminfo(
            Path("/proc/meminfo").read_text()).get("SwapTotal", 0))
    assert row["mem.available [B]"] > 0
    if Path("/proc/pressure/memory").exists():
        assert isinstance(row["psi.memory.full.avg10"], float)


def test_older_nvidia_smi_refusing_a_field_is_remembered(tmp_path):
    s = Sampler(smi_env(tmp_path, "nvidia-smi-oldfields"))
    row = s.sample()
    assert row["temperature.gpu"] == 33.0 and row["clocks.sm [MHz]"] == 1980.0
    assert row["clocks_event_reasons.active"] is None  # refused field: unavailable, not invented
    assert "clocks_event_reasons.active" not in s._smi_fields
    assert s.sample()["power.draw [W]"] == pytest.approx(70.12)  # next row asks without it at once


@pytest.mark.parametrize("fake", ["nvidia-smi-hang", "nvidia-smi-crash", "nvidia-smi-garbage", None])
def test_broken_or_missing_nvidia_smi_gives_nones_in_time(tmp_path, fake):
    s = Sampler(smi_env(tmp_path, fake), smi_timeout_s=0.5)
    t0 = time.monotonic()
    row = s.sample()
    first = time.monotonic() - t0
    assert first < 2.0  # one bounded call, then the fatal error stops the others
    assert all(row[c] is None for c in GPU_COLUMNS)
    assert row["mem.available [B]"] and row["mem.available [B]"] > 0  # memory still read
    t0 = time.monotonic()
    s.sample()
    if fake != "nvidia-smi-garbage":  # hung/crashed/absent: left alone for a while, rows stay fast
        assert time.monotonic() - t0 < 0.3
        assert any("not asked again" in n for n in s.notes)


def test_memory_from_a_recorded_tree(tmp_path):
    (tmp_path / "proc" / "pressure").mkdir(parents=True)
    (tmp_path / "proc" / "meminfo").write_text(
        "MemTotal: 128000000 kB\nMemFree: 1000 kB\nMemAvailable: 2000 kB\nCached: 500 kB\n"
        "SReclaimable: 100 kB\nShmem: 50 kB\nSwapTotal: 4000 kB\nSwapFree: 1000 kB\n")
    (tmp_path / "proc" / "pressure" / "memory").write_text(
        "some avg10=1.50 avg60=0.20 avg300=0.00 total=1\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=1\n")
    got = read_memory(tmp_path)
    assert got == {"mem.free [B]": 1000 * 1024, "mem.available [B]": 2000 * 1024,
                   "mem.cached [B]": 550 * 1024, "swap.used [B]": 3000 * 1024, "psi.memory.full.avg10": 0.75,
                   "mem.free_large [B]": None}  # no buddyinfo in this tree
    (tmp_path / "proc" / "pressure" / "memory").unlink()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: 1 kB\n")
    assert set(read_memory(tmp_path).values()) == {None}
    # with the recorded GB10-like buddyinfo and a page size: free memory in blocks of >= 2 MiB (issue 22)
    raw = Path(__file__).parents[1] / "fixtures" / "raw" / "buddyinfo"
    (tmp_path / "proc" / "buddyinfo").write_text((raw / "gb10-built-fresh.buddyinfo").read_text())
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "self" / "smaps").write_text("KernelPageSize:        4 kB\n")
    large = read_memory(tmp_path)["mem.free_large [B]"]
    assert large is not None and large > 100 * 1024**3


# --------------------------------------------------------------------------- NVML path
class FakeNvml:
    """pynvml stand-in (as tests/probes/test_nvml.py builds one): GB10 under load, one process."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVML_PERF_POLICY_POWER = pynvml.NVML_PERF_POLICY_POWER
    NVML_PERF_POLICY_THERMAL = pynvml.NVML_PERF_POLICY_THERMAL
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, init_error=None, block: threading.Event | None = None):
        self.calls: list[str] = []
        self.init_error, self.block = init_error, block
        self.threads: set[str] = set()

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetTemperature(self, h, sensor):
        self.threads.add(threading.current_thread().name)
        if self.block is not None:
            self.block.wait(10)
        return 71

    def nvmlDeviceGetPowerUsage(self, h):
        return 100_250  # mW

    def nvmlDeviceGetClockInfo(self, h, clock):
        return 2418

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=98, memory=0)

    def nvmlDeviceGetPerformanceState(self, h):
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x20

    def nvmlDeviceGetViolationStatus(self, h, policy):
        if policy == pynvml.NVML_PERF_POLICY_POWER:
            return SimpleNamespace(violationTime=50_284_264_713_999)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=400721, usedGpuMemory=96581 * MIB),
                SimpleNamespace(pid=12, usedGpuMemory=None)]

    def nvmlSystemGetProcessName(self, pid):
        if pid == 12:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return b"python;train,x"


def test_nvml_path_one_session_many_samples():
    fake = FakeNvml()
    s = Sampler({}, nvml_module=fake)
    assert s.source == "nvml"
    rows = [s.sample() for _ in range(3)]
    assert fake.calls == ["init"]  # opened once, kept open
    s.close()
    s.close()
    assert fake.calls == ["init", "shutdown"]
    row = rows[-1]
    assert (row["temperature.gpu"], row["power.draw [W]"], row["clocks.sm [MHz]"]) == (71.0, 100.25, 2418.0)
    assert (row["utilization.gpu [%]"], row["pstate"]) == (98.0, "P0")
    assert row["clocks_event_reasons.active"] == "0x0000000000000020"
    assert row["violation.sw_power_cap [us]"] == 50_284_264_713  # ns -> µs
    assert row["violation.sw_thermal [us]"] is None and row["violation.hw_thermal [us]"] is None
    assert row["gpu.processes"] == f"400721:python_train_x:{96581 * MIB};12::"
    assert fake.threads == {"sampler-nvml"}  # NVML is called on the worker, not the caller
    assert row["mem.available [B]"] > 0


def test_nvml_init_failure_falls_back_to_nvidia_smi(tmp_path):
    env = {**smi_env(tmp_path, "nvidia-smi-gb10"), "SPARKOPS_NO_NVML": ""}
    s = Sampler(env, nvml_module=FakeNvml(init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)))
    assert s.source == "nvidia-smi" and "nvmlInit failed" in s.notes[0]
    assert s.sample()["temperature.gpu"] == 42.0


def test_use_nvml_false_never_touches_nvml(tmp_path):
    fake = FakeNvml()
    s = Sampler({**smi_env(tmp_path, "nvidia-smi-gb10"), "SPARKOPS_NO_NVML": ""}, use_nvml=False, nvml_module=fake)
    assert fake.calls == [] and s.source == "nvidia-smi"


def test_wedged_nvml_switches_to_nvidia_smi(tmp_path):
    release = threading.Event()
    fake = FakeNvml(block=release)
    s = Sampler({**smi_env(tmp_path, "nvidia-smi-gb10"), "SPARKOPS_NO_NVML": ""}, nvml_module=fake,
                nvml_timeout_s=0.3)
    t0 = time.monotonic()
    row = s.sample()
    assert time.monotonic() - t0 < 2.0
    assert s.source == "nvidia-smi" and row["temperature.gpu"] == 42.0  # this row already from the fallback
    assert any("NVML stopped answering" in n for n in s.notes)
    release.set()
    s.close()


# --------------------------------------------------------------------------- parsers (hypothesis)
@given(st.lists(st.tuples(st.integers(1, 2**22), st.text(max_size=30), st.none() | st.integers(0, 2**50)),
                max_size=6))
def test_process_cell_splits_back(procs):
    cell = process_cell(procs)
    parts = cell.split(";") if cell else []
    assert len(parts) == len(procs)
    assert "," not in cell and "\n" not in cell
    for part, (pid, _name, used) in zip(parts, procs, strict=True):
        head, _, rest = part.partition(":")
        _, _, tail = rest.rpartition(":")
        assert int(head) == pid and tail == ("" if used is None else str(used))


@given(st.text(max_size=400))
@settings(max_examples=150)
def test_read_memory_never_raises_on_any_meminfo(tmp_path_factory, text):
    root = tmp_path_factory.mktemp("root")
    (root / "proc").mkdir()
    (root / "proc" / "meminfo").write_text(text, encoding="utf-8")
    got = read_memory(root)
    assert set(got) == {*MEM_COLUMNS, "psi.memory.full.avg10", "mem.free_large [B]"}
    assert all(v is None or (isinstance(v, float) and v >= 0) for v in got.values())


def test_smi_values_hits_and_junk():
    row = {"temperature.gpu": "74", "power.draw": "105.21", "clocks.sm": "[N/A]", "utilization.gpu": "98",
           "pstate": "P0", "clocks_event_reasons.active": "0x0000000000000020"}
    assert sampler.smi_values(row) == {"temperature.gpu": 74.0, "power.draw [W]": 105.21, "clocks.sm [MHz]": None,
                                       "utilization.gpu [%]": 98.0, "pstate": "P0",
                                       "clocks_event_reasons.active": "0x0000000000000020"}
    assert sampler.smi_values({**row, "clocks_event_reasons.active": "32"})["clocks_event_reasons.active"] == \
        "0x0000000000000020"
    assert sampler.smi_values({**row, "pstate": "|"}) is None  # one junk cell: the row is not trusted
    assert sampler.smi_values({**row, "temperature.gpu": "0x"}) is None
    assert sampler.smi_values({**row, "power.draw": "105.21 W"}) is None  # units where nounits was asked


@given(st.dictionaries(st.sampled_from([*sampler.SMI_FIELDS, "index"]), st.text(max_size=20)))
def test_smi_values_any_row(row):
    got = sampler.smi_values(row)
    if got is not None:
        for col, v in got.items():
            if v is None:
                continue
            if col == "pstate":
                assert re.fullmatch(r"P\d{1,2}", v)
            elif col == "clocks_event_reasons.active":
                assert re.fullmatch(r"0x[0-9a-f]{16}", v)
            else:
                assert isinstance(v, float)


@given(st.integers(0, 2**64 - 2))
def test_reasons_hex_reads_back(mask):
    text = sampler.reasons_hex(mask)
    assert text.startswith("0x") and int(text, 16) == mask


# --------------------------------------------------------------------------- run_sampling
class Scripted:
    """A sampler that records when it was called, optionally slow or failing."""

    def __init__(self, cost_s: float = 0.0, fail_every: int = 0):
        self.times: list[float] = []
        self.cost_s, self.fail_every = cost_s, fail_every

    def sample(self):
        self.times.append(time.monotonic())
        if self.cost_s:
            time.sleep(self.cost_s)
        if self.fail_every and len(self.times) % self.fail_every == 0:
            raise RuntimeError("boom")
        row = sampler.empty_sample()
        row.update({"temperature.gpu": 74.0, "power.draw [W]": 105.21, "clocks.sm [MHz]": 2418.0})
        return row


def _run(log: Path, s, interval: float, fsync: bool = False) -> tuple[threading.Thread, threading.Event, list[int]]:
    stop = threading.Event()
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(run_sampling(log, interval, stop, s, fsync=fsync)))
    t.start()
    return t, stop, out


def test_rows_are_flushed_while_running_at_the_interval(tmp_path):
    log = tmp_path / "t.csv"
    s = Scripted(cost_s=0.03)  # a drift-prone loop (sleep interval after each row) would fall behind
    t, stop, out = _run(log, s, 0.1)
    time.sleep(0.55)
    seen = log.read_text().splitlines()  # readable mid-run: every row already flushed
    assert seen[0] == csvlog.write_header() and len(seen) - 1 >= 4
    time.sleep(0.5)
    stop.set()
    t.join(2)
    assert not t.is_alive()
    lines = log.read_text().splitlines()
    assert out == [len(lines) - 1] and 9 <= out[0] <= 12
    assert re.match(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}, 74, 105\.21 W, 2418, ", lines[1])
    start = s.times[0]
    for k, at in enumerate(s.times):  # on the grid: k-th row at start + k * interval
        assert abs(at - start - 0.1 * k) < 0.08, (k, at - start)
    rows, _notes = csvlog.read_log(log.read_text())
    assert len(rows) == out[0] and rows[0]["power.draw [W]"] == pytest.approx(105.21)


def test_slow_sample_skips_ticks_instead_of_bunching(tmp_path):
    s = Scripted(cost_s=0.25)
    t, stop, _out = _run(tmp_path / "t.csv", s, 0.1)
    time.sleep(1.0)
    stop.set()
    t.join(2)
    gaps = [b - a for a, b in zip(s.times, s.times[1:], strict=False)]
    assert gaps and all(g >= 0.25 for g in gaps)  # never a burst of catch-up rows


def test_failing_sample_writes_a_row_of_nones_and_keeps_going(tmp_path):
    log = tmp_path / "t.csv"
    s = Scripted(fail_every=2)
    t, stop, out = _run(log, s, 0.1, fsync=True)
    time.sleep(0.45)
    stop.set()
    t.join(2)
    rows, _ = csvlog.read_log(log.read_text())
    assert len(rows) == out[0] >= 4
    assert rows[0]["temperature.gpu"] == 74.0 and rows[1]["temperature.gpu"] is None
    assert rows[1]["timestamp"] and all(rows[1][c] is None for c in COLUMNS[1:])


def test_header_only_once_when_appending(tmp_path):
    log = tmp_path / "t.csv"
    for _ in range(2):
        stop, s = threading.Event(), Scripted()
        t = threading.Thread(target=run_sampling, args=(log, 0.1, stop, s))
        t.start()
        time.sleep(0.15)
        stop.set()
        t.join(2)
    lines = log.read_text().splitlines()
    assert sum(1 for ln in lines if ln.startswith("timestamp")) == 1 and len(lines) >= 3


def test_interval_below_minimum_is_refused(tmp_path):
    with pytest.raises(ValueError, match="minimum"):
        run_sampling(tmp_path / "t.csv", 0.01, threading.Event(), Scripted())
    with pytest.raises(ValueError):
        sampler.check_interval(float("nan"))
    assert not (tmp_path / "t.csv").exists()


def test_sampler_reads_the_gpu_name_once_so_the_watch_judges_by_its_profile():
    class Named(FakeNvml):
        def nvmlDeviceGetName(self, h):
            return b"NVIDIA GB10"

    s = Sampler({}, nvml_module=Named())
    assert s.source == "nvml" and s.gpu_name == "NVIDIA GB10"
    s.close()
    s = Sampler({}, nvml_module=FakeNvml())  # a binding without the call: no name, still sampling
    assert s.source == "nvml" and s.gpu_name is None
    s.close()
