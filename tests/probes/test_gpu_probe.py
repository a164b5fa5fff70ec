"""The gpu probe end to end against hostile and faithful fake nvidia-smi executables
(tests/fixtures/bin/nvidia-smi-*), with NVML forced off or failing, plus one real-GPU test."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pynvml
import pytest

from conftest import FIXTURES
from sparkops.facts.model import GpuFacts
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.probes import CollectOptions, gpu

BIN = FIXTURES / "bin"
TIMEOUT_S = 1.0
SYSTEM_PATH = os.pathsep.join(p for p in ("/usr/bin", "/bin") if os.path.isdir(p))  # sh, sleep, head


def smi_env(tmp_path: Path, fake: str | None, **extra: str) -> dict[str, str]:
    """An environment whose PATH finds ``nvidia-smi`` = tests/fixtures/bin/nvidia-smi-<fake>.

    With ``fake=None`` PATH holds only an empty folder, so a real nvidia-smi is not found either.
    """
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    if not fake:
        return {"PATH": str(d), **extra}
    src = BIN / f"nvidia-smi-{fake}"
    assert os.access(src, os.X_OK), f"{src} must be committed executable"
    (d / "nvidia-smi").symlink_to(src)
    return {"PATH": os.pathsep.join([str(d), SYSTEM_PATH]), **extra}


def run_probe(env: dict[str, str], window: float = 0.0, **kw) -> tuple[GpuFacts, float]:
    t0 = time.monotonic()
    facts = gpu.collect(CollectOptions(env=env, counter_window_s=window), smi_timeout_s=TIMEOUT_S, **kw)
    return facts, time.monotonic() - t0


def test_gb10_fake_through_the_env_switch(tmp_path):
    facts, _ = run_probe(smi_env(tmp_path, "gb10", SPARKOPS_NO_NVML="1"), window=0.05)
    assert facts.source == "nvidia-smi"
    assert "SPARKOPS_NO_NVML" in facts.nvml_error and facts.smi_error == "" and facts.smi_host_error == ""
    assert (facts.driver_version, facts.cuda_driver_version) == ("580.159.03", "13.0")
    (d,) = facts.devices
    assert (d.name, d.pci_bus_id, d.capability, d.pstate) == ("NVIDIA GB10", "0000000F:01:00.0", (12, 1), "P0")
    for mem in (d.memory_total_bytes, d.memory_used_bytes, d.memory_free_bytes):
        assert isinstance(mem, Unavailable) and mem.unavailable == Why.not_supported
    assert isinstance(d.power_limit_w, Unavailable)
    assert (d.power_draw_w, d.sm_clock_mhz, d.sm_clock_max_mhz, d.clock_event_reasons) == (11.17, 2522, 3003, 0)
    assert [(p.pid, p.name, p.used_memory_bytes) for p in d.processes] == [
        (400721, "VLLM::EngineCore", 96581 * 1024 * 1024)]
    assert d.violation_us["sw_power_cap"] == 50284264713
    assert d.violation_us_end == d.violation_us and d.violation_window_s >= 0.05


def test_hang_is_killed_within_the_timeout(tmp_path):
    facts, took = run_probe(smi_env(tmp_path, "hang"), use_nvml=False)
    assert took < TIMEOUT_S + 3.0, f"probe took {took:.1f} s"
    assert facts.source == "none" and facts.devices == []
    assert "did not answer" in facts.smi_error


def test_crash_on_sigsegv(tmp_path):
    facts, _ = run_probe(smi_env(tmp_path, "crash"), use_nvml=False)
    assert facts.source == "none"
    assert "signal 11" in facts.smi_error and "SIGSEGV" in facts.smi_error


def test_garbage_is_not_a_gpu(tmp_path):
    facts, took = run_probe(smi_env(tmp_path, "garbage"), use_nvml=False)
    assert facts.source == "none" and facts.devices == []
    assert facts.smi_error and took < 2 * (TIMEOUT_S + 3.0)


def test_no_driver_records_nvidia_smis_complaint(tmp_path):
    facts, _ = run_probe(smi_env(tmp_path, "nodriver"), use_nvml=False)
    assert facts.source == "none"
    assert "couldn't communicate with the NVIDIA driver" in facts.smi_host_error
    assert "exited 9" in facts.smi_error


def test_refused_fields_are_dropped_and_retried(tmp_path):
    facts, _ = run_probe(smi_env(tmp_path, "oldfields"), use_nvml=False)
    assert facts.source == "nvidia-smi"
    (d,) = facts.devices
    assert d.name == "NVIDIA H100 80GB HBM3" and d.memory_total_bytes == 81559 * 1024 * 1024
    assert not known(d.capability) and not known(d.clock_event_reasons)  # the refused fields
    assert facts.driver_version == "470.256.02"
    assert isinstance(d.processes, Unavailable)  # this fake answers nothing else: said, not hidden
    assert isinstance(facts.cuda_driver_version, Unavailable)


def test_no_nvidia_smi_on_path(tmp_path):
    facts, _ = run_probe(smi_env(tmp_path, None), use_nvml=False)
    assert facts.source == "none" and "not found" in facts.smi_error


class _NoLibrary:
    """A pynvml stand-in whose init fails as on a host without libnvidia-ml.so.1."""

    NVMLError = pynvml.NVMLError

    def nvmlInit(self):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlShutdown(self):  # pragma: no cover - never reached after a failed init
        raise AssertionError("shutdown after a failed init")


def test_nvml_failure_falls_back_to_nvidia_smi(tmp_path):
    facts, _ = run_probe(smi_env(tmp_path, "gb10"), nvml_module=_NoLibrary())
    assert facts.source == "nvidia-smi" and facts.devices[0].name == "NVIDIA GB10"
    assert "nvmlInit failed" in facts.nvml_error and "Shared Library Not Found" in facts.nvml_error


def test_both_failing_says_why_for_each(tmp_path):
    facts, _ = run_probe(smi_env(tmp_path, "nodriver"), nvml_module=_NoLibrary())
    assert facts.source == "none" and facts.devices == []
    assert facts.nvml_error and facts.smi_error and facts.smi_host_error


def test_unavailable_section():
    facts = gpu.unavailable(Why.timeout, "probe still running after the 12 s budget")
    assert facts.source == "none" and facts.devices == []
    assert facts.driver_version.unavailable == Why.timeout and "12 s" in facts.nvml_error


@pytest.mark.gpu
def test_real_gpu_through_nvml():
    facts = gpu.collect(CollectOptions(counter_window_s=0.2))
    assert facts.source == "nvml", facts.nvml_error
    assert facts.devices, "NVML saw no GPU"
    d = facts.devices[0]
    assert d.name
    assert known(d.capability) and d.capability[0] >= 7
    assert known(facts.driver_version) and facts.driver_version[0].isdigit()
    assert known(facts.cuda_driver_version)
    assert known(d.temperature_c) and known(d.power_draw_w)
    assert not isinstance(d.processes, Unavailable)


def test_a_wedged_nvml_falls_back_to_nvidia_smi_in_bounded_time(monkeypatch):
    """nvmlInit stuck in the driver must not stall the collection: past the NVML timeout the
    nvidia-smi fallback runs and says why."""
    import threading
    import time as _time

    from sparkops.probes import gpu

    release = threading.Event()
    monkeypatch.setattr(gpu, "from_nvml", lambda *a, **k: release.wait(30) and "late")
    from sparkops.knowledge import load

    kb = load().with_thresholds("probes", nvml_timeout_s=0.3)  # passed in: the probe never loads its own
    t0 = _time.monotonic()
    facts = gpu.collect(CollectOptions(env={"PATH": "/nonexistent"}, budget_s=5.0, kb=kb), smi_timeout_s=1.0)
    release.set()
    assert _time.monotonic() - t0 < 3.0
    assert "did not answer within 0.3 s" in facts.nvml_error
    assert facts.source == "none"
