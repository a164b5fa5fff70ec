"""The NVML funnel and readers against a stand-in binding (GB10 behaviour from gb10-readings.md §3).

The stand-in raises the real nvidia-ml-py error classes (no driver is needed to build them), so
the mapping is tested against what the binding really throws.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from sparkops.facts.model import GpuFacts
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.probes import CollectOptions, gpu, nvml

MIB = 1024 * 1024
SENTINEL = (1 << 64) - 1


def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def raiser(code: int):
    def call(*args, **kwargs):
        raise err(code)

    return call


class FakeNvml:
    """A pynvml stand-in. Defaults: one GB10 as NVML reports it (memory NOT_SUPPORTED, no power cap)."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_PERF_POLICY_POWER = pynvml.NVML_PERF_POLICY_POWER
    NVML_PERF_POLICY_THERMAL = pynvml.NVML_PERF_POLICY_THERMAL
    NVML_PERF_POLICY_SYNC_BOOST = pynvml.NVML_PERF_POLICY_SYNC_BOOST
    NVML_PERF_POLICY_BOARD_LIMIT = pynvml.NVML_PERF_POLICY_BOARD_LIMIT
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_DEVICE_ADDRESSING_MODE_ATS = pynvml.NVML_DEVICE_ADDRESSING_MODE_ATS
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self, **over):
        self.calls: list[str] = []
        self.violation_rounds = 0
        self.memory = over.pop("memory", err(pynvml.NVML_ERROR_NOT_SUPPORTED))
        self.memory_v2 = over.pop("memory_v2", self.memory)
        self.init_error = over.pop("init_error", None)
        self.violation_ns = over.pop("violation_ns", {pynvml.NVML_PERF_POLICY_POWER: 50_284_264_713_999,
                                                      pynvml.NVML_PERF_POLICY_THERMAL: 173_453_251_000,
                                                      pynvml.NVML_PERF_POLICY_SYNC_BOOST: 0})
        self.violation_step_ns = over.pop("violation_step_ns", 2_000_000)
        for name, value in over.items():
            setattr(self, name, value)

    def _give(self, value):
        if isinstance(value, BaseException):
            raise value
        return value

    def nvmlInit(self):
        self.calls.append("init")
        self._give(self.init_error)

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlSystemGetDriverVersion(self):
        return b"580.95.05"  # older bindings hand back bytes

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"handle{i}"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA GB10"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=b"0000000F:01:00.0")

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (12, 1)

    def nvmlDeviceGetAttributes(self, h):
        raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        self.calls.append(f"memory v{2 if version else 1}")
        return self._give(self.memory_v2 if version else self.memory)

    def nvmlDeviceGetAddressingMode(self, h):
        return pynvml.NVML_DEVICE_ADDRESSING_MODE_ATS

    def nvmlDeviceGetPowerUsage(self, h):
        return 11170  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 42

    def nvmlDeviceGetClockInfo(self, h, clock):
        return 2522

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 3003

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=96, memory=0)

    def nvmlDeviceGetPerformanceState(self, h):
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x20

    def nvmlDeviceGetViolationStatus(self, h, policy):
        if policy not in self.violation_ns:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if policy == pynvml.NVML_PERF_POLICY_POWER:  # read first in every round
            self.violation_rounds += 1
        step = self.violation_step_ns * max(0, self.violation_rounds - 1)
        return SimpleNamespace(referenceTime=1, violationTime=self.violation_ns[policy] + step)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=400721, usedGpuMemory=96581 * MIB)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        # pynvml turns NVML's sentinel into None; an older/other binding may pass it through raw
        return [SimpleNamespace(pid=329657, usedGpuMemory=None), SimpleNamespace(pid=329691, usedGpuMemory=SENTINEL),
                SimpleNamespace(pid=400721, usedGpuMemory=1)]

    def nvmlSystemGetProcessName(self, pid):
        if pid == 329691:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)
        return {400721: b"VLLM::EngineCore", 329657: "/usr/lib/xorg/Xorg"}[pid]


# --------------------------------------------------------------------------- the funnel
@pytest.mark.parametrize(("code", "why"), [
    (pynvml.NVML_ERROR_NOT_SUPPORTED, Why.not_supported),
    (pynvml.NVML_ERROR_NO_PERMISSION, Why.no_permission),
    (pynvml.NVML_ERROR_NOT_FOUND, Why.not_found),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, Why.not_found),
    (pynvml.NVML_ERROR_GPU_IS_LOST, Why.error),
    (pynvml.NVML_ERROR_UNKNOWN, Why.error),
])
def test_query_maps_nvml_errors(code, why):
    fake = FakeNvml(nvmlDeviceGetFanSpeed=raiser(code))
    got = nvml.query(fake, "nvmlDeviceGetFanSpeed", "h")
    assert isinstance(got, Unavailable) and got.unavailable == why
    assert got.detail.startswith("nvmlDeviceGetFanSpeed: ")


def test_query_maps_by_code_when_the_binding_lacks_the_subclass():
    class Bare:  # a binding without the per-code subclasses
        class NVMLError(Exception):
            def __init__(self, value):
                super().__init__(value)
                self.value = value

        NVML_ERROR_NOT_SUPPORTED = 3

        def nvmlDeviceGetMemoryInfo(self, h):
            raise self.NVMLError(3)

    got = nvml.query(Bare(), "nvmlDeviceGetMemoryInfo", "h")
    assert got.unavailable == Why.not_supported


def test_query_missing_function_other_exception_and_bytes():
    fake = FakeNvml(nvmlBoom=lambda: 1 / 0)
    assert nvml.query(fake, "nvmlNoSuchCall").unavailable == Why.not_found
    boom = nvml.query(fake, "nvmlBoom")
    assert boom.unavailable == Why.error and "ZeroDivisionError" in boom.detail
    assert nvml.query(fake, "nvmlSystemGetDriverVersion") == "580.95.05"


def test_error_text_survives_a_failing_str():
    class Weird(pynvml.NVMLError):
        def __new__(cls):
            obj = Exception.__new__(cls)
            obj.value = 999
            return obj

        def __str__(self):
            raise RuntimeError("no library")

    got = nvml.why_of(FakeNvml(), Weird(), "nvmlX")
    assert got.unavailable == Why.error and "nvmlX" in got.detail


# --------------------------------------------------------------------------- readers
def test_gb10_device_keeps_not_supported_memory():
    fake = FakeNvml()
    d = nvml.read_device(fake, "handle0", 0)
    for mem in (d.memory_total_bytes, d.memory_used_bytes, d.memory_free_bytes):
        assert isinstance(mem, Unavailable) and mem.unavailable == Why.not_supported
        assert "Not Supported" in mem.detail
    assert fake.calls.count("memory v2") == 1 and fake.calls.count("memory v1") == 1  # v2 first, then v1
    assert (d.name, d.pci_bus_id, d.capability) == ("NVIDIA GB10", "0000000F:01:00.0", (12, 1))
    assert d.power_draw_w == pytest.approx(11.17)
    assert d.power_limit_w.unavailable == Why.not_supported
    assert d.multiprocessor_count.unavailable == Why.not_supported
    assert (d.addressing_mode, d.pstate, d.clock_event_reasons) == ("ATS", "P0", 0x20)
    assert (d.temperature_c, d.sm_clock_mhz, d.sm_clock_max_mhz, d.utilization_pct) == (42, 2522, 3003, 96)


def test_memory_v1_when_binding_has_no_v2():
    class NoV2(FakeNvml):
        @property
        def nvmlMemory_v2(self):
            raise AttributeError("nvmlMemory_v2")

    fake = NoV2(memory=SimpleNamespace(total=141 * 1024 * MIB, used=MIB, free=141 * 1024 * MIB - MIB))
    total, used, free = nvml.read_memory(fake, "h")
    assert (total, used) == (141 * 1024 * MIB, MIB)
    assert fake.calls == ["memory v1"]


def test_memory_v2_success_is_used():
    mem = SimpleNamespace(total=143771 * MIB, used=523 * MIB, free=143248 * MIB, reserved=0)
    fake = FakeNvml(memory_v2=mem, memory=err(pynvml.NVML_ERROR_UNKNOWN))
    assert nvml.read_memory(fake, "h") == (143771 * MIB, 523 * MIB, 143248 * MIB)


def test_memory_success_with_zero_total_is_not_a_reading():
    fake = FakeNvml(memory=SimpleNamespace(total=0, used=0, free=0))
    total, _, _ = nvml.read_memory(fake, "h")
    assert isinstance(total, Unavailable) and total.unavailable == Why.not_supported


def test_violation_counters_ns_to_us():
    fake = FakeNvml(violation_ns={pynvml.NVML_PERF_POLICY_POWER: 50_284_264_713_999,
                                  pynvml.NVML_PERF_POLICY_THERMAL: 1_195_386_000,
                                  pynvml.NVML_PERF_POLICY_SYNC_BOOST: 999,
                                  pynvml.NVML_PERF_POLICY_BOARD_LIMIT: SENTINEL})
    got = nvml.read_violations(fake, "h")
    # ns -> µs (floor); the all-ones sentinel is "no value" and is left out
    assert got == {"sw_power_cap": 50_284_264_713, "sw_thermal": 1_195_386, "sync_boost": 0}


def test_violation_counters_absent_policy_is_left_out():
    fake = FakeNvml(violation_ns={pynvml.NVML_PERF_POLICY_POWER: 5_000})
    assert nvml.read_violations(fake, "h") == {"sw_power_cap": 5}


def test_processes_sentinel_memory_is_unavailable():
    procs = nvml.read_processes(FakeNvml(), "h")
    assert [(p.pid, p.kind, p.name) for p in procs] == [
        (400721, "compute", "VLLM::EngineCore"), (329657, "graphics", "/usr/lib/xorg/Xorg"),
        (329691, "graphics", "")]  # pid 400721 listed once; a name NVML refuses stays empty
    assert procs[0].used_memory_bytes == 96581 * MIB
    for p in procs[1:]:
        assert isinstance(p.used_memory_bytes, Unavailable)
        assert p.used_memory_bytes.unavailable == Why.not_supported


def test_processes_unavailable_only_when_both_lists_fail():
    refuse = raiser(pynvml.NVML_ERROR_NO_PERMISSION)
    both = FakeNvml(nvmlDeviceGetComputeRunningProcesses=refuse, nvmlDeviceGetGraphicsRunningProcesses=refuse)
    got = nvml.read_processes(both, "h")
    assert isinstance(got, Unavailable) and got.unavailable == Why.no_permission
    one = FakeNvml(nvmlDeviceGetGraphicsRunningProcesses=refuse)
    assert [p.pid for p in nvml.read_processes(one, "h")] == [400721]


@pytest.mark.parametrize(("raw", "text"), [(13000, "13.0"), (12080, "12.8"), (13020, "13.2")])
def test_cuda_driver_version_text(raw, text):
    assert nvml.cuda_version_text(raw) == text


def test_read_system_falls_back_to_the_older_cuda_call():
    class Old(FakeNvml):
        def nvmlSystemGetCudaDriverVersion_v2(self):
            raise err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        def nvmlSystemGetCudaDriverVersion(self):
            return 12020

    assert nvml.read_system(Old()) == ("580.95.05", "12.2")
    assert nvml.read_system(FakeNvml()) == ("580.95.05", "13.0")


def test_pstate_unknown_and_event_reasons_fallback():
    class Older(FakeNvml):
        def nvmlDeviceGetPerformanceState(self, h):
            return 32  # NVML_PSTATE_UNKNOWN

        def nvmlDeviceGetCurrentClocksEventReasons(self, h):
            raise err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
            return 0x68

    d = nvml.read_device(Older(), "h", 0)
    assert isinstance(d.pstate, Unavailable) and d.clock_event_reasons == 0x68


# --------------------------------------------------------------------------- session and the probe
def test_session_shuts_down_and_refuses_a_failed_init():
    fake = FakeNvml()
    with nvml.session(fake) as lib:
        assert lib is fake
    assert fake.calls == ["init", "shutdown"]
    broken = FakeNvml(init_error=err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(nvml.NvmlUnusable, match="NVML Shared Library Not Found"), nvml.session(broken):
        pass


def test_missing_binding_is_unusable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(nvml.NvmlUnusable, match="cannot be imported"):
        nvml.import_binding()


def test_probe_reads_counters_twice_over_the_window():
    slept: list[float] = []
    fake = FakeNvml()
    facts = gpu.collect(CollectOptions(env={}, counter_window_s=0.5), nvml_module=fake, sleep=slept.append)
    assert isinstance(facts, GpuFacts) and facts.source == "nvml"
    assert (facts.driver_version, facts.cuda_driver_version) == ("580.95.05", "13.0")
    (d,) = facts.devices
    assert d.violation_us == {"sw_power_cap": 50_284_264_713, "sw_thermal": 173_453_251, "sync_boost": 0}
    assert d.violation_us_end["sw_power_cap"] == d.violation_us["sw_power_cap"] + 2_000
    assert len(slept) == 1 and 0 <= slept[0] <= 0.5
    assert d.violation_window_s >= 0
    assert fake.calls[0] == "init" and fake.calls[-1] == "shutdown"
    assert not known(d.memory_total_bytes)


def test_probe_without_window_reads_counters_once():
    facts = gpu.collect(CollectOptions(env={}, counter_window_s=0.0), nvml_module=FakeNvml(),
                        sleep=lambda s: pytest.fail("no wait expected"))
    (d,) = facts.devices
    assert d.violation_us and d.violation_us_end == {} and d.violation_window_s == 0.0


def test_probe_records_a_refused_handle_and_goes_on():
    class TwoGpus(FakeNvml):
        def nvmlDeviceGetCount(self):
            return 2

        def nvmlDeviceGetHandleByIndex(self, i):
            if i == 1:
                raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
            return "handle0"

    facts = gpu.collect(CollectOptions(env={}, counter_window_s=0.0), nvml_module=TwoGpus())
    assert facts.source == "nvml" and [d.index for d in facts.devices] == [0]
    assert "GPU 1" in facts.nvml_error and "GPU is lost" in facts.nvml_error


# --------------------------------------------------------------------------- the monitor's per-row read
def test_read_sample_gives_values_as_the_device_reader_does():
    fake = FakeNvml()
    s = nvml.read_sample(fake, "h")
    d = nvml.read_device(FakeNvml(), "h", 0)
    assert (s.temperature_c, s.power_draw_w, s.sm_clock_mhz, s.utilization_pct, s.pstate, s.clock_event_reasons) == (
        d.temperature_c, d.power_draw_w, d.sm_clock_mhz, d.utilization_pct, d.pstate, d.clock_event_reasons)
    assert (s.temperature_c, s.power_draw_w, s.pstate, s.clock_event_reasons) == (42, pytest.approx(11.17), "P0", 0x20)
    assert s.violation_us == nvml.read_violations(FakeNvml(), "h")
    assert s.compute_processes == [(400721, "VLLM::EngineCore", 96581 * MIB)]  # compute only: graphics are not load


def test_read_sample_says_why_for_every_reading_it_cannot_take():
    class Failing(FakeNvml):
        nvmlDeviceGetTemperature = staticmethod(raiser(pynvml.NVML_ERROR_NOT_SUPPORTED))
        nvmlDeviceGetPowerUsage = staticmethod(raiser(pynvml.NVML_ERROR_NO_PERMISSION))
        nvmlDeviceGetClockInfo = staticmethod(raiser(pynvml.NVML_ERROR_TIMEOUT))
        nvmlDeviceGetUtilizationRates = staticmethod(raiser(pynvml.NVML_ERROR_GPU_IS_LOST))
        nvmlDeviceGetCurrentClocksEventReasons = staticmethod(raiser(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
        nvmlDeviceGetCurrentClocksThrottleReasons = staticmethod(lambda h: SENTINEL)
        nvmlDeviceGetComputeRunningProcesses = staticmethod(raiser(pynvml.NVML_ERROR_NOT_SUPPORTED))

        def nvmlDeviceGetPerformanceState(self, h):
            return 32  # NVML_PSTATE_UNKNOWN

    s = nvml.read_sample(Failing(), "h")
    readings = {"temperature_c": Why.not_supported, "power_draw_w": Why.no_permission, "sm_clock_mhz": Why.timeout,
                "utilization_pct": Why.error, "pstate": Why.not_supported, "clock_event_reasons": Why.not_supported,
                "compute_processes": Why.not_supported}
    for name, why in readings.items():
        value = getattr(s, name)
        assert isinstance(value, Unavailable) and value.unavailable is why and value.detail, (name, value)


def test_read_sample_marks_a_sentinel_process_memory_and_an_unreadable_name():
    class Procs(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, h):
            return [SimpleNamespace(pid=329691, usedGpuMemory=SENTINEL), SimpleNamespace(pid="x", usedGpuMemory=1)]

    ((pid, name, used),) = nvml.read_sample(Procs(), "h").compute_processes
    assert pid == 329691 and name.unavailable is Why.no_permission and used.unavailable is Why.not_supported


@pytest.mark.parametrize("kind", ["temperature_c", "power_draw_w", "pstate", "compute_processes"])
def test_read_sample_never_raises_on_odd_binding_values(kind):
    class Odd(FakeNvml):
        nvmlDeviceGetTemperature = staticmethod(lambda h, s: "hot")
        nvmlDeviceGetPowerUsage = staticmethod(lambda h: None)
        nvmlDeviceGetPerformanceState = staticmethod(lambda h: "P0")
        nvmlDeviceGetComputeRunningProcesses = staticmethod(lambda h: None)

    value = getattr(nvml.read_sample(Odd(), "h"), kind)
    assert value == [] if kind == "compute_processes" else isinstance(value, Unavailable)


def test_warm_init_initialises_once_and_refuses_like_a_session(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setattr(nvml, "import_binding", lambda: fake)
    nvml.warm_init()
    assert fake.calls == ["init"]  # left initialised: the probe's own pair nests inside
    monkeypatch.setattr(nvml, "import_binding", lambda: FakeNvml(init_error=err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)))
    with pytest.raises(nvml.NvmlUnusable, match="nvmlInit failed"):
        nvml.warm_init()


# --------------------------------------------------------------------------- one owner
SRC = Path(__file__).resolve().parents[2] / "src" / "sparkops"


def pynvml_importers(text: str) -> list[int]:
    """Lines of ``text`` (Python source) that import pynvml: import statements, importlib/__import__ by name."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n.split(".")[0] == "pynvml" for n in names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "pynvml" for a in node.args):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("import_module", "__import__"):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_importer_finder_finds_every_form():
    src = "import os\nimport pynvml\nfrom pynvml import nvmlInit\nimport importlib\nimportlib.import_module('pynvml')\n" \
          "__import__('pynvml')\nx = 'pynvml'\n"
    assert pynvml_importers(src) == [2, 3, 5, 6]


def test_only_probes_nvml_imports_pynvml():
    owners = {str(p.relative_to(SRC)): pynvml_importers(p.read_text(encoding="utf-8")) for p in SRC.rglob("*.py")}
    assert {path for path, lines in owners.items() if lines} == {"probes/nvml.py"}, owners


def test_the_nvml_owner_loads_without_pydantic():
    """probes.early imports it on a thread before pydantic loads: its load must stay standard library only."""
    code = ("import sys; import sparkops.probes.nvml; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pynvml') or m.startswith('sparkops.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "['sparkops.probes', 'sparkops.probes.nvml']"
