"""The only module that imports ``pynvml`` (package ``nvidia-ml-py``).

Every NVML call goes through :func:`query`, which never raises: an ``NVMLError`` becomes an
:class:`~sparkops.facts.reading.Unavailable` whose reason says what NVML said (``NOT_SUPPORTED``
is a fact on GB10, not a failure) and bytes are decoded to ``str``. Readings keep NVML's meaning:
a GB10's memory query stays ``Unavailable(not_supported)`` and is never filled with host numbers.

The functions take the binding module as an argument (``nv``) so tests can hand in a fake.
:func:`read_sample` is the monitor's per-row read; :func:`warm_init` is the early start's
``nvmlInit``. At load time this module imports only the standard library (``probes.early`` loads
it before pydantic); the facts types are imported inside the functions that build them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from sparkops.facts.model import GpuDevice, GpuProcess
    from sparkops.facts.reading import Unavailable

_LOCK = threading.Lock()  # nvmlInit/nvmlShutdown are refcounted in the binding; keep them serialised

# NVML returns this for "no value" in 64-bit fields (NVML_VALUE_NOT_AVAILABLE_ulonglong = (unsigned)-1).
NOT_AVAILABLE_U64 = (1 << 64) - 1
NOT_AVAILABLE_U32 = (1 << 32) - 1

# nvmlDeviceGetViolationStatus policies -> our counter keys. NVML's THERMAL policy is the counter
# nvidia-smi prints as "SW Thermal Slowdown" (the same accrual as the newer field id). The HW thermal
# and HW power-brake counters exist only as field values whose ids were renumbered between NVML
# header releases, so they are not read here (the nvidia-smi path reports them).
VIOLATION_POLICIES: tuple[tuple[str, str], ...] = (
    ("NVML_PERF_POLICY_POWER", "sw_power_cap"),
    ("NVML_PERF_POLICY_THERMAL", "sw_thermal"),
    ("NVML_PERF_POLICY_SYNC_BOOST", "sync_boost"),
    ("NVML_PERF_POLICY_BOARD_LIMIT", "board_limit"),
)

# (binding constant, its value in nvml.h, our name)
_ADDRESSING = (("NVML_DEVICE_ADDRESSING_MODE_NONE", 0, "none"), ("NVML_DEVICE_ADDRESSING_MODE_HMM", 1, "HMM"),
               ("NVML_DEVICE_ADDRESSING_MODE_ATS", 2, "ATS"))
_PSTATE_UNKNOWN = 32


class NvmlUnusable(Exception):
    """NVML cannot be used at all (binding missing, library absent, driver not loaded)."""


def warm_init() -> None:
    """``nvmlInit`` once, left initialised: NVML counts inits, so a later :func:`session`'s pair
    nests inside (the early start: the first init wakes the GPU). Raises :class:`NvmlUnusable`."""
    nv = import_binding()
    try:
        nv.nvmlInit()
    except Exception as exc:
        raise NvmlUnusable(f"nvmlInit failed: {_text(exc)}") from exc


def import_binding() -> ModuleType:
    """Import pynvml lazily, so a host without it still runs every other probe."""
    try:
        import pynvml
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        raise NvmlUnusable(f"nvidia-ml-py (pynvml) cannot be imported: {type(exc).__name__}: {exc}") from exc
    return pynvml


@contextmanager
def session(nv: ModuleType | None = None) -> Iterator[ModuleType]:
    """Init NVML under the lock, yield the binding, shut it down on the way out.

    Raises :class:`NvmlUnusable` when NVML cannot be initialised; that is the caller's cue to fall
    back to ``nvidia-smi``. Errors inside the block are the caller's (queries never raise).
    """
    nv = nv if nv is not None else import_binding()
    with _LOCK:
        try:
            nv.nvmlInit()
        except Exception as exc:
            raise NvmlUnusable(f"nvmlInit failed: {_text(exc)}") from exc
    try:
        yield nv
    finally:
        # shutting down a half-broken NVML must not mask the readings
        with _LOCK, contextlib.suppress(Exception):
            nv.nvmlShutdown()


def _text(exc: BaseException) -> str:
    """An exception as one line; NVMLError.__str__ can itself fail, so guard it."""
    try:
        msg = str(exc)
    except Exception:
        msg = repr(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def decode(value: Any) -> Any:
    """Bytes from older bindings become str; everything else passes through."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return value


def why_of(nv: ModuleType, exc: BaseException, what: str) -> Unavailable:
    """Map an NVML error to a reason: not_supported / no_permission / not_found / error."""
    from sparkops.facts.reading import Why, missing

    detail = f"{what}: {_text(exc)}"

    def is_(*names: str) -> bool:
        classes = tuple(c for c in (getattr(nv, n, None) for n in names) if isinstance(c, type))
        return bool(classes) and isinstance(exc, classes)

    if is_("NVMLError_NotSupported"):
        return missing(Why.not_supported, detail)
    if is_("NVMLError_NoPermission"):
        return missing(Why.no_permission, detail)
    if is_("NVMLError_NotFound", "NVMLError_FunctionNotFound"):
        return missing(Why.not_found, detail)
    if is_("NVMLError_Timeout"):
        return missing(Why.timeout, detail)
    code = getattr(exc, "value", None)  # an NVMLError whose subclass the fake/binding lacks
    by_code = {getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3): Why.not_supported,
               getattr(nv, "NVML_ERROR_NO_PERMISSION", 4): Why.no_permission,
               getattr(nv, "NVML_ERROR_NOT_FOUND", 6): Why.not_found,
               getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", 13): Why.not_found}
    if isinstance(code, int) and code in by_code:
        return missing(by_code[code], detail)
    return missing(Why.error, detail)


def query(nv: ModuleType, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``nv.<name>(*args)``; the value (bytes decoded) or an Unavailable. Never raises."""
    fn: Callable[..., Any] | None = getattr(nv, name, None)
    if fn is None:
        from sparkops.facts.reading import Why, missing

        return missing(Why.not_found, f"{name} is not in this nvidia-ml-py")
    try:
        return decode(fn(*args, **kwargs))
    except Exception as exc:
        return why_of(nv, exc, name)


def _reading() -> ModuleType:
    """:mod:`sparkops.facts.reading`, loaded on first need (this module loads without pydantic)."""
    global _READING
    if _READING is None:
        from sparkops.facts import reading

        _READING = reading
    return _READING


_READING: ModuleType | None = None


def _attr(obj: Any, name: str) -> Any:
    """A struct field, or Unavailable when the struct lacks it."""
    r = _reading()
    if isinstance(obj, r.Unavailable):
        return obj
    try:
        return decode(getattr(obj, name))
    except Exception as exc:
        return r.missing(r.Why.error, f"{name}: {_text(exc)}")


def _sentinel(value: Any, what: str) -> Any:
    """NVML's all-ones "not available" value becomes Unavailable(not_supported)."""
    if value is None or (isinstance(value, int) and value in (NOT_AVAILABLE_U64, NOT_AVAILABLE_U32)):
        r = _reading()
        return r.missing(r.Why.not_supported, f"{what}: NVML reports no value")
    return value


def _const(nv: ModuleType, name: str, default: int) -> int:
    value = getattr(nv, name, default)
    return value if isinstance(value, int) else default


# --------------------------------------------------------------------------- system
def cuda_version_text(raw: Any) -> Any:
    """NVML's CUDA driver version int (13000) as "13.0"; Unavailable passes through."""
    from sparkops.facts.reading import Unavailable, Why, missing

    if not isinstance(raw, int) or isinstance(raw, bool) or raw <= 0:
        return raw if isinstance(raw, Unavailable) else missing(Why.error, f"unexpected CUDA version {raw!r}")
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def read_system(nv: ModuleType) -> tuple[str | Unavailable, str | Unavailable]:
    """Driver version and the newest CUDA version the driver runs (``"13.0"``)."""
    from sparkops.facts.reading import known

    driver = query(nv, "nvmlSystemGetDriverVersion")
    if known(driver) and not isinstance(driver, str):
        driver = str(driver)
    cuda = query(nv, "nvmlSystemGetCudaDriverVersion_v2")
    if not known(cuda):
        legacy = query(nv, "nvmlSystemGetCudaDriverVersion")
        cuda = legacy if known(legacy) else cuda
    return driver, cuda_version_text(cuda)


# --------------------------------------------------------------------------- device
def read_memory(nv: ModuleType, handle: Any) -> tuple[Any, Any, Any]:
    """(total, used, free) bytes: v2 first, then v1; NOT_SUPPORTED (GB10) stays Unavailable."""
    from sparkops.facts.reading import Unavailable, Why, missing

    tried: list[Unavailable] = []
    if hasattr(nv, "nvmlMemory_v2"):
        info = query(nv, "nvmlDeviceGetMemoryInfo", handle, version=nv.nvmlMemory_v2)
        if isinstance(info, Unavailable):
            tried.append(info)
        else:
            return _memory_fields(info)
    info = query(nv, "nvmlDeviceGetMemoryInfo", handle)
    if not isinstance(info, Unavailable):
        return _memory_fields(info)
    tried.append(info)
    # the most telling reason wins: not_supported (a fact) over not_found (an older binding)
    order = [Why.not_supported, Why.no_permission, Why.error, Why.timeout, Why.not_found]
    best = min(tried, key=lambda u: order.index(u.unavailable) if u.unavailable in order else len(order))
    reason = missing(best.unavailable, "; ".join(u.detail for u in tried))
    return reason, reason, reason


def _memory_fields(info: Any) -> tuple[Any, Any, Any]:
    from sparkops.facts.reading import Why, missing

    total, used, free = (_attr(info, k) for k in ("total", "used", "free"))
    if total == 0:  # some drivers answer "success" with zeros on a unified-memory device
        zero = missing(Why.not_supported, "NVML memory info returned total 0 (unified memory)")
        return zero, zero, zero
    return total, used, free


def read_processes(nv: ModuleType, handle: Any) -> list[GpuProcess] | Unavailable:
    """Compute and graphics processes with their memory (NVML's sentinel -> Unavailable)."""
    from sparkops.facts.model import GpuProcess
    from sparkops.facts.reading import Unavailable, Why, missing

    out: list[GpuProcess] = []
    seen: set[int] = set()
    reasons: list[Unavailable] = []
    for fn, kind in (("nvmlDeviceGetComputeRunningProcesses", "compute"),
                     ("nvmlDeviceGetGraphicsRunningProcesses", "graphics")):
        procs = query(nv, fn, handle)
        if isinstance(procs, Unavailable):
            reasons.append(procs)
            continue
        for p in procs or []:
            pid = _attr(p, "pid")
            if not isinstance(pid, int) or pid in seen:
                continue
            seen.add(pid)
            mem = _sentinel(_attr(p, "usedGpuMemory"), f"pid {pid} used memory")
            name = query(nv, "nvmlSystemGetProcessName", pid)
            out.append(GpuProcess(pid=pid, name=name if isinstance(name, str) else "", kind=kind,
                                  used_memory_bytes=mem if isinstance(mem, (int, Unavailable)) else
                                  missing(Why.error, f"pid {pid}: unexpected memory {mem!r}")))
    if len(reasons) == 2:
        return missing(reasons[0].unavailable, "; ".join(r.detail for r in reasons))
    return out


def read_violations(nv: ModuleType, handle: Any) -> dict[str, int]:
    """Cumulative clock-event counters in µs (NVML's violationTime is in ns). Missing ones are left out."""
    out: dict[str, int] = {}
    for const, key in VIOLATION_POLICIES:
        policy = getattr(nv, const, None)
        if not isinstance(policy, int):
            continue
        status = query(nv, "nvmlDeviceGetViolationStatus", handle, policy)
        ns = _attr(status, "violationTime")
        if isinstance(ns, int) and not isinstance(ns, bool) and 0 <= ns < NOT_AVAILABLE_U64:
            out[key] = ns // 1000
    return out


def _number(value: Any, scale: float = 1.0) -> float | Unavailable:
    if type(value) in _PLAIN_NUMBERS and value not in _SENTINELS:  # the per-row case, checked cheaply first
        return value * scale
    r = _reading()
    if isinstance(value, r.Unavailable):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return r.missing(r.Why.error, f"unexpected value {value!r}")
    if value in _SENTINELS:
        return r.missing(r.Why.not_supported, "NVML reports no value")
    return value * scale


_PLAIN_NUMBERS = frozenset({int, float})
_SENTINELS = frozenset({NOT_AVAILABLE_U32, NOT_AVAILABLE_U64})


def read_device(nv: ModuleType, handle: Any, index: int) -> GpuDevice:
    """Everything NVML says about one GPU; a reading that fails becomes Unavailable."""
    from sparkops.facts.model import GpuDevice
    from sparkops.facts.reading import Unavailable, Why, known, missing

    name = query(nv, "nvmlDeviceGetName", handle)
    pci = _attr(query(nv, "nvmlDeviceGetPciInfo", handle), "busId")
    cap = query(nv, "nvmlDeviceGetCudaComputeCapability", handle)
    if known(cap):
        try:
            cap = (int(cap[0]), int(cap[1]))
        except Exception:
            cap = missing(Why.error, f"unexpected capability {cap!r}")
    sms = _attr(query(nv, "nvmlDeviceGetAttributes", handle), "multiprocessorCount")
    total, used, free = read_memory(nv, handle)
    mode = query(nv, "nvmlDeviceGetAddressingMode", handle)
    if isinstance(mode, int):
        names = {_const(nv, const, value): ours for const, value, ours in _ADDRESSING}
        mode = names.get(mode, f"mode {mode}")
    temp = read_temperature(nv, handle)
    pstate = query(nv, "nvmlDeviceGetPerformanceState", handle)
    if isinstance(pstate, int):
        pstate = missing(Why.not_supported, "P-state unknown") if pstate == _PSTATE_UNKNOWN else f"P{pstate}"
    reasons = query(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if not known(reasons):
        older = query(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        reasons = older if known(older) else reasons
    sm = _const(nv, "NVML_CLOCK_SM", 1)
    return GpuDevice(
        index=index,
        name=name if isinstance(name, str) else "",
        pci_bus_id=pci if isinstance(pci, str) else "",
        capability=cap,
        multiprocessor_count=_int(sms),
        memory_total_bytes=_int(total),
        memory_used_bytes=_int(used),
        memory_free_bytes=_int(free),
        addressing_mode=mode if isinstance(mode, (str, Unavailable)) else missing(Why.error, repr(mode)),
        power_draw_w=_number(query(nv, "nvmlDeviceGetPowerUsage", handle), 0.001),
        power_limit_w=_number(query(nv, "nvmlDeviceGetEnforcedPowerLimit", handle), 0.001),
        temperature_c=temp,
        sm_clock_mhz=_number(query(nv, "nvmlDeviceGetClockInfo", handle, sm)),
        sm_clock_max_mhz=_number(query(nv, "nvmlDeviceGetMaxClockInfo", handle, sm)),
        utilization_pct=_number(_attr(query(nv, "nvmlDeviceGetUtilizationRates", handle), "gpu")),
        pstate=pstate if isinstance(pstate, (str, Unavailable)) else missing(Why.error, repr(pstate)),
        clock_event_reasons=_int(reasons),
        processes=read_processes(nv, handle),
    )


def read_temperature(nv: ModuleType, handle: Any) -> float | Unavailable:
    """The GPU core temperature in °C (``nvmlDeviceGetTemperatureV`` on a driver past the deprecation)."""
    sensor = _const(nv, "NVML_TEMPERATURE_GPU", 0)
    temp = query(nv, "nvmlDeviceGetTemperature", handle, sensor)
    if not isinstance(temp, (int, float)):
        r = _reading()
        if isinstance(temp, r.Unavailable) and temp.unavailable == r.Why.not_found:
            temp = query(nv, "nvmlDeviceGetTemperatureV", handle, sensor)
    return _number(temp)


class DeviceSample(NamedTuple):
    """One GPU's fast-changing readings, read once per monitor row. A reading that could not be taken
    is an Unavailable with NVML's reason; a violation counter NVML does not have is absent."""

    temperature_c: float | Unavailable
    power_draw_w: float | Unavailable
    sm_clock_mhz: float | Unavailable
    utilization_pct: float | Unavailable
    pstate: str | Unavailable  # "P0"
    clock_event_reasons: int | Unavailable  # the bitmask
    violation_us: dict[str, int]  # cumulative, see VIOLATION_POLICIES
    # (pid, name, used bytes) of each compute process
    compute_processes: list[tuple[int, str | Unavailable, int | Unavailable]] | Unavailable


def read_sample(nv: ModuleType, handle: Any) -> DeviceSample:
    """The monitor's per-row read: temperature, power, SM clock, utilisation, P-state, clock-event
    reasons and counters, compute processes. Never raises."""
    r = _reading()
    Unavailable, Why, missing = r.Unavailable, r.Why, r.missing  # noqa: N806 - the reading module's names

    pstate = query(nv, "nvmlDeviceGetPerformanceState", handle)
    if isinstance(pstate, int) and not isinstance(pstate, bool):
        pstate = f"P{pstate}" if 0 <= pstate < _PSTATE_UNKNOWN else missing(Why.not_supported,
                                                                              f"P-state unknown ({pstate})")
    elif not isinstance(pstate, Unavailable):
        pstate = missing(Why.error, f"unexpected P-state {pstate!r}")
    reasons = query(nv, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if not isinstance(reasons, int):
        reasons = query(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if isinstance(reasons, int) and not isinstance(reasons, bool):
        if not 0 <= reasons < NOT_AVAILABLE_U64:
            reasons = missing(Why.not_supported, "clock-event reasons: NVML reports no value")
    elif not isinstance(reasons, Unavailable):
        reasons = missing(Why.error, f"unexpected clock-event reasons {reasons!r}")
    procs = query(nv, "nvmlDeviceGetComputeRunningProcesses", handle)
    rows: list[tuple[int, str | Unavailable, int | Unavailable]] | Unavailable = procs
    if not isinstance(procs, Unavailable):
        rows = []
        for p in procs or []:
            pid = getattr(p, "pid", None)
            if not isinstance(pid, int) or isinstance(pid, bool):
                continue
            used = _int(_sentinel(getattr(p, "usedGpuMemory", None), f"pid {pid} used memory"))
            name = query(nv, "nvmlSystemGetProcessName", pid)
            rows.append((pid, name if isinstance(name, (str, Unavailable)) else missing(Why.error, repr(name)),
                         used))
    return DeviceSample(read_temperature(nv, handle),
                        _number(query(nv, "nvmlDeviceGetPowerUsage", handle), 0.001),
                        _number(query(nv, "nvmlDeviceGetClockInfo", handle, _const(nv, "NVML_CLOCK_SM", 1))),
                        _number(_attr(query(nv, "nvmlDeviceGetUtilizationRates", handle), "gpu")),
                        pstate, reasons, read_violations(nv, handle), rows)


def device_name(nv: ModuleType, handle: Any) -> str | Unavailable:
    """The device's name (``NVIDIA GB10``)."""
    from sparkops.facts.reading import Unavailable, Why, missing

    name = query(nv, "nvmlDeviceGetName", handle)
    if isinstance(name, Unavailable) or (isinstance(name, str) and name):
        return name
    return missing(Why.error, f"unexpected device name {name!r}")


def _int(value: Any) -> int | Unavailable:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    r = _reading()
    if isinstance(value, r.Unavailable):
        return value
    return r.missing(r.Why.error, f"unexpected value {value!r}")


def device_count(nv: ModuleType) -> int | Unavailable:
    """How many GPUs NVML sees."""
    return _int(query(nv, "nvmlDeviceGetCount"))


def handle(nv: ModuleType, index: int) -> Any:
    """The device handle for ``index``, or Unavailable when NVML refuses it."""
    return query(nv, "nvmlDeviceGetHandleByIndex", index)
