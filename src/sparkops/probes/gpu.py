"""GPU facts: NVML first, ``nvidia-smi`` when NVML cannot load, "none" when neither answers.

NVML is preferred because it reads per-reading reasons (``NOT_SUPPORTED`` for GB10 memory) and
needs no subprocess. The clock-event (throttle) counters are read twice, ``opts.counter_window_s``
apart, so a check can see whether throttling grows while we look (on GB10 the live reason bits
often read 0 while the counters climb).

Forcing the fallback (tests, or a host where NVML misbehaves): set ``SPARKOPS_NO_NVML=1`` in
``opts.env``, or call ``collect(opts, use_nvml=False)``. ``smi_timeout_s=`` overrides the
per-call nvidia-smi timeout (``probes.subprocess_timeout_s``); ``nvml_module=`` hands in a
pynvml stand-in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType

from sparkops.facts.model import GpuDevice, GpuFacts
from sparkops.facts.reading import Unavailable, Why, missing
from sparkops.probes import CollectOptions, early, nvml

SECTION = "gpu"
NO_NVML_ENV = early.NO_NVML_ENV


def unavailable(why: Why, detail: str) -> GpuFacts:
    """The section when the probe itself could not finish (crash, overrun)."""
    gone = missing(why, detail)
    return GpuFacts(source="none", driver_version=gone, cuda_driver_version=gone,
                    nvml_error=f"gpu probe did not finish: {detail}"[:500])


def _nvml_wanted(opts: CollectOptions, use_nvml: bool | None) -> bool:
    if use_nvml is not None:
        return use_nvml
    return early.nvml_wanted(opts.env)


def from_nvml(nv: ModuleType | None, window_s: float, sleep: Callable[[float], None] = time.sleep) -> GpuFacts | str:
    """GPU facts from NVML, or the reason (str) NVML could not be used."""
    try:
        with nvml.session(nv) as lib:
            count = nvml.device_count(lib)
            if isinstance(count, Unavailable):
                return f"NVML answered init but not the device count: {count.detail}"
            driver, cuda = nvml.read_system(lib)
            notes: list[str] = []
            handles = []
            for i in range(count):
                h = nvml.handle(lib, i)
                if isinstance(h, Unavailable):
                    notes.append(f"GPU {i}: no handle ({h.detail})")
                else:
                    handles.append((i, h))
            t0 = time.monotonic()
            start = {i: nvml.read_violations(lib, h) for i, h in handles}
            devices = [nvml.read_device(lib, h, i).model_copy(update={"violation_us": start[i]})
                       for i, h in handles]
            if window_s > 0 and any(start.values()):
                sleep(max(0.0, window_s - (time.monotonic() - t0)))
                elapsed = round(time.monotonic() - t0, 3)
                devices = [_with_end(d, nvml.read_violations(lib, h), elapsed) for d, (_, h) in zip(devices, handles, strict=True)]
            return GpuFacts(source="nvml", driver_version=driver, cuda_driver_version=cuda, devices=devices,
                            nvml_error="; ".join(notes))
    except nvml.NvmlUnusable as exc:
        return str(exc)
    except Exception as exc:  # a binding bug mid-read: say so and let nvidia-smi try
        return f"NVML read failed: {type(exc).__name__}: {exc}"


def _bounded(read: Callable[[], GpuFacts | str], timeout_s: float) -> GpuFacts | str:
    """Run an NVML read in a daemon thread: a wedged driver can block nvmlInit forever in C, where
    no Python timeout reaches. Past ``timeout_s`` the thread is abandoned and nvidia-smi (a killable
    child process) gets its turn."""
    box: list[GpuFacts | str] = []
    worker = threading.Thread(target=lambda: box.append(read()), name="nvml-read", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not box:
        return f"NVML did not answer within {timeout_s:g} s (driver busy or wedged); thread abandoned"
    return box[0]


def _with_end(dev: GpuDevice, end: dict[str, int], elapsed: float) -> GpuDevice:
    if not end:
        return dev
    return dev.model_copy(update={"violation_us_end": end, "violation_window_s": elapsed})


def collect(
    opts: CollectOptions,
    *,
    use_nvml: bool | None = None,
    nvml_module: ModuleType | None = None,
    smi_timeout_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GpuFacts:
    """The ``gpu`` section. Never raises; each fallback says why it was needed."""
    window = max(0.0, float(opts.counter_window_s))
    kb = opts.knowledge()
    started = time.monotonic()
    if _nvml_wanted(opts, use_nvml):
        got = _bounded(lambda: from_nvml(nvml_module, window, sleep), kb.thresholds.probes.nvml_timeout_s)
        if isinstance(got, GpuFacts):
            return got
        nvml_error = got
    else:
        nvml_error = f"NVML not tried: {NO_NVML_ENV} is set" if use_nvml is None else "NVML not tried (use_nvml=False)"
    timeout = float(smi_timeout_s if smi_timeout_s is not None else kb.thresholds.probes.subprocess_timeout_s)
    left = min(kb.thresholds.probes.budget_s, float(opts.budget_s)) - (time.monotonic() - started) - 1.0
    budget = max(timeout, left)
    # the fallback's parser, imported only when it runs: its regexes cost an NVML run ~8 ms to compile
    from sparkops.probes import nvidia_smi

    facts = nvidia_smi.collect(opts.env, timeout_s=timeout, budget_s=budget, counter_window_s=window, sleep=sleep)
    return facts.model_copy(update={"nvml_error": nvml_error[:500]})
