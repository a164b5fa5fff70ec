"""One row of readings at a time, cheaply enough to run every 0.1 s beside a training job.

:class:`Sampler` opens NVML once and keeps the session (an init per sample would cost more than
the readings). NVML calls run on one worker thread with a deadline, because a wedged driver
blocks inside C where no Python timeout reaches; past it the sampler switches to ``nvidia-smi``
for good. ``nvidia-smi`` (when NVML cannot load, or ``SPARKOPS_NO_NVML=1``) goes through
:func:`sparkops.probes._run.run` with a short timeout; after a hang or crash it is left alone
for ``monitor.sampler_smi_retry_s`` so one bad driver moment does not stall every row.

Memory comes from ``/proc/meminfo`` and ``/proc/pressure/memory`` (on GB10 NVML has no memory
reading: the pool is the host's). NVML is read only through :mod:`sparkops.probes.nvml`
(``read_sample``, which says why a reading is missing); in the row a reading that is unavailable
at that instant is an empty cell (``None``).

:func:`run_sampling` appends rows to a CSV on a fixed schedule, flushing each row, and never
raises on a failing sample (it writes the timestamp and empty cells instead).
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from sparkops import knowledge
from sparkops.checks.g03_fragmentation import free_large_from_text
from sparkops.facts.reading import Unavailable
from sparkops.monitor.events import COLUMNS, Sample
from sparkops.probes import _run, early, nvidia_smi, nvml
from sparkops.probes.host import _READ_LIMIT, root_of, under_root
from sparkops.probes.memory import parse_meminfo, psi_rows

# --query-gpu fields per sample, in our column order (nvidia-smi spelling)
SMI_FIELDS: tuple[str, ...] = (
    "temperature.gpu", "power.draw", "clocks.sm", "utilization.gpu", "pstate", "clocks_event_reasons.active",
)
_SMI_COLUMN = {
    "temperature.gpu": "temperature.gpu",
    "power.draw": "power.draw [W]",
    "clocks.sm": "clocks.sm [MHz]",
    "utilization.gpu": "utilization.gpu [%]",
}
# -q / NVML counter keys -> our columns
_COUNTER_COLUMN = {
    "sw_power_cap": "violation.sw_power_cap [us]",
    "sw_thermal": "violation.sw_thermal [us]",
    "hw_thermal": "violation.hw_thermal [us]",
}
_APP_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory")
_PSTATE_UNKNOWN = 32


def timestamp(now: datetime | None = None) -> str:
    """Local time as nvidia-smi prints its ``timestamp`` field: ``2025/11/24 20:25:50.123``."""
    now = now or datetime.now()
    return now.strftime("%Y/%m/%d %H:%M:%S.") + f"{now.microsecond // 1000:03d}"


def empty_sample(ts: str | None = None) -> Sample:
    """A row with every column and nothing read but the time."""
    row: Sample = dict.fromkeys(COLUMNS)
    row["timestamp"] = ts or timestamp()
    return row


def reasons_hex(mask: int) -> str:
    """The clock-event bitmask as nvidia-smi prints it (``0x0000000000000020``)."""
    return f"0x{mask:016x}"


def process_cell(procs: list[tuple[int, str, int | None]]) -> str:
    """``pid:name:bytes;...`` (bytes empty when unknown). ``;`` ``,`` and control characters in a
    name become ``_`` so the cell splits back unambiguously (pid before the first ``:``, bytes
    after the last)."""
    parts = []
    for pid, name, used in procs:
        clean = "".join("_" if (c in ";," or not c.isprintable()) else c for c in name)
        parts.append(f"{pid}:{clean}:{'' if used is None else used}")
    return ";".join(parts)


def _num(value: Any, scale: float = 1.0) -> float | None:
    """An NVML/parser value as a float, or None (Unavailable, sentinel, wrong type)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and value in (nvml.NOT_AVAILABLE_U32, nvml.NOT_AVAILABLE_U64):
        return None
    return float(value) * scale


# --------------------------------------------------------------------------- memory (/proc)
MEMORY_COLUMNS = ("mem.free [B]", "mem.available [B]", "mem.cached [B]", "swap.used [B]", "psi.memory.full.avg10",
                  "mem.free_large [B]")
# the /proc/meminfo lines a row reads (parse_meminfo parses only these: the rest of the file is skipped)
_MEMINFO_WANTED = frozenset({"MemFree", "MemAvailable", "Cached", "SReclaimable", "Shmem", "SwapTotal", "SwapFree"})
_BUDDY_LIMIT = 1 << 16


def meminfo_wanted(text: str) -> dict[str, int]:
    """:func:`~sparkops.probes.memory.parse_meminfo` of the lines a row reads, the others skipped
    unparsed: the same values for those names (a property test holds it)."""
    lines = [ln for ln in text.splitlines() if ln.partition(":")[0].strip() in _MEMINFO_WANTED]
    return parse_meminfo("\n".join(lines))


def psi_full_avg10(text: str) -> float | None:
    """``full avg10`` of /proc/pressure/memory when :func:`~sparkops.probes.memory.parse_psi` reads the
    file (both lines with avg10 and avg60), else None: its rule without building the model per row."""
    rows = psi_rows(text)
    some, full = rows.get("some", {}), rows.get("full", {})
    if "avg10" in some and "avg60" in some and "avg10" in full and "avg60" in full:
        return full["avg10"]
    return None


class MemoryReader:
    """The memory columns of one row, read from ``root``'s /proc.

    On the live machine (root ``/``) the three files are opened once and re-read with ``pread`` at
    offset 0 (procfs regenerates them on every read from the start), into one buffer: a row then
    costs three system calls, no open, no path building. A recorded root (tests, replays) is
    re-opened every row, since its files may be replaced between rows. Never raises.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.live = root == Path("/")
        self._paths = {name: str(under_root(root, name)) for name in
                       ("/proc/meminfo", "/proc/pressure/memory", "/proc/buddyinfo")}
        self._fds: dict[str, int] = {}
        self._buf = bytearray(_READ_LIMIT) if self.live else None
        self._page: int | None = None
        self._page_read = False

    def _read(self, name: str, limit: int, encoding: str) -> str | None:
        path = self._paths[name]
        if self._buf is not None:
            fd = self._fds.get(name)
            try:
                if fd is None:
                    fd = self._fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                n = os.preadv(fd, [memoryview(self._buf)[:limit]], 0)
                return self._buf[:n].decode(encoding, errors="replace")
            except OSError:
                self._drop(name)
        try:
            with open(path, "rb") as fh:
                return fh.read(limit).decode(encoding, errors="replace")
        except OSError:
            return None

    def _drop(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for name in list(self._fds):
            self._drop(name)

    def page_size(self) -> int | None:
        """The base page size, read once (it does not change while a watch runs)."""
        if not self._page_read:
            from sparkops.probes.fragmentation import page_size

            read = page_size(self.root)
            self._page, self._page_read = (None if isinstance(read, Unavailable) else read), True
        return self._page

    def read(self) -> dict[str, float | None]:
        """MemFree, MemAvailable, reclaimable cache, swap used (bytes), PSI full avg10 and the free
        memory in large blocks (buddyinfo); None where a file or a line is missing."""
        out: dict[str, float | None] = dict.fromkeys(MEMORY_COLUMNS)
        text = self._read("/proc/meminfo", _READ_LIMIT, "utf-8")
        if text is not None:
            mi = meminfo_wanted(text)
            out["mem.free [B]"] = _num(mi.get("MemFree"))
            out["mem.available [B]"] = _num(mi.get("MemAvailable"))
            if "Cached" in mi:
                out["mem.cached [B]"] = float(max(0, mi["Cached"] + mi.get("SReclaimable", 0) - mi.get("Shmem", 0)))
            if "SwapTotal" in mi and "SwapFree" in mi:
                out["swap.used [B]"] = float(max(0, mi["SwapTotal"] - mi["SwapFree"]))
        psi_text = self._read("/proc/pressure/memory", _READ_LIMIT, "utf-8")
        if psi_text is not None:
            out["psi.memory.full.avg10"] = psi_full_avg10(psi_text)
        page = self.page_size()
        if page is not None:
            buddy = self._read("/proc/buddyinfo", _BUDDY_LIMIT, "ascii")
            if buddy is not None:
                large = free_large_from_text(buddy, page)
                out["mem.free_large [B]"] = float(large) if large is not None else None
        return out


def read_memory(root: Path) -> dict[str, float | None]:
    """One row's memory columns from ``root`` (see :class:`MemoryReader`; a reader kept open is cheaper)."""
    reader = MemoryReader(root)
    try:
        return reader.read()
    finally:
        reader.close()


def free_large_bytes(root: Path) -> float | None:
    """Free memory in blocks of 2 MiB or more (/proc/buddyinfo), the G3 owner's fragmentation reading."""
    return read_memory(root)["mem.free_large [B]"]


# --------------------------------------------------------------------------- NVML
def read_nvml(nv: ModuleType, handle: Any) -> dict[str, float | str | None]:
    """The GPU columns from an open NVML session: :func:`sparkops.probes.nvml.read_sample` (the one
    NVML reader) as cells, an unavailable reading as an empty cell (None). Never raises.

    NVML has no HW-thermal counter this binding can read portably (see ``nvml.VIOLATION_POLICIES``),
    so ``violation.hw_thermal`` stays None on this path.
    """
    return sample_cells(nvml.read_sample(nv, handle))


def _cell(value: Any) -> float | None:
    """A reading of :mod:`sparkops.probes.nvml` (a number, or an Unavailable) as a cell."""
    return float(value) if type(value) in _PLAIN_NUMBERS or (isinstance(value, (int, float))
                                                            and not isinstance(value, bool)) else None


_PLAIN_NUMBERS = frozenset({int, float})


def sample_cells(s: nvml.DeviceSample) -> dict[str, float | str | None]:
    """One :class:`~sparkops.probes.nvml.DeviceSample` as CSV cells (None where a reading is unavailable)."""
    reasons, counters, procs = s.clock_event_reasons, s.violation_us, s.compute_processes
    out: dict[str, float | str | None] = {
        "temperature.gpu": _cell(s.temperature_c),
        "power.draw [W]": _cell(s.power_draw_w),
        "clocks.sm [MHz]": _cell(s.sm_clock_mhz),
        "utilization.gpu [%]": _cell(s.utilization_pct),
        "pstate": s.pstate if isinstance(s.pstate, str) else None,
        "clocks_event_reasons.active": reasons_hex(reasons) if isinstance(reasons, int) else None,
    }
    for key, column in _COUNTER_COLUMN.items():
        out[column] = _cell(counters.get(key))
    out["gpu.processes"] = None if isinstance(procs, Unavailable) else process_cell(
        [(pid, name if isinstance(name, str) else "", used if isinstance(used, int) else None)
         for pid, name, used in procs])
    return out


_PLAIN_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_PSTATE = re.compile(r"P\d{1,2}")
_HEX = re.compile(r"0x[0-9A-Fa-f]{1,16}")


def smi_values(row: Mapping[str, str]) -> dict[str, float | str | None] | None:
    """One ``--query-gpu ... --format=csv,noheader,nounits`` row as columns; None when a cell has
    neither a missing-value marker nor the shape its field prints (output that only looks like
    a row: trust none of it)."""
    out: dict[str, float | str | None] = {}
    for field, raw in row.items():
        value = nvidia_smi.classify(raw)
        text = value if isinstance(value, str) else None
        if field in _SMI_COLUMN:
            ok = text is None or _PLAIN_NUMBER.fullmatch(text)
            out[_SMI_COLUMN[field]] = float(text) if ok and text is not None else None
        elif field == "pstate":
            ok = text is None or _PSTATE.fullmatch(text)
            out["pstate"] = text if ok else None
        elif field == "clocks_event_reasons.active":
            ok = text is None or bool(_HEX.fullmatch(text) or (text.isdecimal() and text.isascii()))
            mask = int(text, 0) if ok and text is not None and text.startswith("0x") else (
                int(text) if ok and text is not None else None)
            ok = ok and (mask is None or mask < 1 << 64)
            out["clocks_event_reasons.active"] = reasons_hex(mask) if ok and mask is not None else None
        else:
            continue
        if not ok:
            return None
    return out


class _Worker:
    """One thread that owns the NVML session; each call waits at most ``timeout`` seconds.

    A call that overruns leaves the thread stuck in C: it is abandoned (daemon thread) and the
    worker reports itself wedged so the sampler stops using it.
    """

    def __init__(self) -> None:
        # a job: (fn, its reply box, a lock held until the reply is in the box); SimpleQueue and a
        # bare lock rather than a Queue per call: this runs every row
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], list, threading.Lock] | None] = queue.SimpleQueue()
        self.wedged = False
        self._thread = threading.Thread(target=self._loop, name="sampler-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the caller
                box.append((False, exc))
            done.release()

    def call(self, fn: Callable[[], Any], timeout: float) -> Any:
        """``fn()`` on the worker; raises TimeoutError past ``timeout`` or re-raises its error."""
        if self.wedged:
            raise TimeoutError("NVML worker is wedged")
        box: list[tuple[bool, Any]] = []
        done = threading.Lock()
        done.acquire()
        self._jobs.put((fn, box, done))
        if not done.acquire(timeout=max(0.0, timeout)):
            self.wedged = True
            raise TimeoutError(f"NVML did not answer within {timeout:g} s") from None
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self._jobs.put(None)


# --------------------------------------------------------------------------- the sampler
class Sampler:
    """Readings for one GPU (index ``gpu_index``) plus host memory, one :data:`Sample` per call.

    ``use_nvml``: None follows ``SPARKOPS_NO_NVML`` in ``env``; False forces nvidia-smi.
    ``nvml_module`` hands in a pynvml stand-in (tests); ``*_timeout_s`` override the thresholds
    ``monitor.sampler_smi_timeout_s`` / ``monitor.sampler_nvml_timeout_s``. ``source`` says which path is in use
    ("nvml", "nvidia-smi"), ``notes`` why a fallback happened. Never raises after construction.
    """

    def __init__(
        self,
        env: Mapping[str, str] = os.environ,
        use_nvml: bool | None = None,
        *,
        nvml_module: ModuleType | None = None,
        gpu_index: int = 0,
        smi_timeout_s: float | None = None,
        nvml_timeout_s: float | None = None,
    ) -> None:
        kb = knowledge.load()
        self.env = dict(env)
        self.gpu_index = gpu_index
        self.root = root_of(self.env)
        self._memory = MemoryReader(self.root)
        self.notes: list[str] = []
        self.source = "nvidia-smi"
        self.gpu_name: str | None = None  # read once when NVML opens: the watch judges by the GPU's profile
        self._nvml_timeout = float(nvml_timeout_s if nvml_timeout_s is not None
                                   else kb.thresholds.monitor.sampler_nvml_timeout_s)
        self._smi_timeout = float(smi_timeout_s if smi_timeout_s is not None else kb.thresholds.monitor.sampler_smi_timeout_s)
        self._smi_retry_s = kb.thresholds.monitor.sampler_smi_retry_s
        self._smi_fields = list(SMI_FIELDS)
        self._smi_paused_until = 0.0
        self._worker: _Worker | None = None
        self._stack = contextlib.ExitStack()
        self._nv: ModuleType | None = None
        self._handle: Any = None
        wanted = early.nvml_wanted(self.env) if use_nvml is None else use_nvml
        if wanted:
            self._open_nvml(nvml_module, kb.thresholds.probes.nvml_timeout_s)
        else:
            self.notes.append(f"NVML not tried: {early.NO_NVML_ENV} is set" if use_nvml is None
                              else "NVML not tried (use_nvml=False)")

    # ------------------------------------------------------------------ NVML session
    def _open_nvml(self, module: ModuleType | None, timeout: float) -> None:
        worker = _Worker()

        def open_() -> tuple[ModuleType, Any]:
            nv = self._stack.enter_context(nvml.session(module))
            h = nvml.handle(nv, self.gpu_index)
            if isinstance(h, Unavailable):
                raise nvml.NvmlUnusable(f"no handle for GPU {self.gpu_index}: {h.detail}")
            return nv, h

        try:
            self._nv, self._handle = worker.call(open_, timeout)
        except Exception as exc:
            self.notes.append(f"NVML unusable, using nvidia-smi: {exc}"[:500])
            self._close_worker(worker)
            return
        with contextlib.suppress(Exception):
            name = worker.call(lambda: nvml.device_name(self._nv, self._handle), timeout)
            self.gpu_name = name if isinstance(name, str) else None
        self._worker = worker
        self.source = "nvml"

    def _close_worker(self, worker: _Worker) -> None:
        if not worker.wedged:
            with contextlib.suppress(Exception):
                worker.call(self._stack.close, self._nvml_timeout)
        worker.stop()

    def close(self) -> None:
        """Shut the NVML session down (bounded); safe to call twice."""
        worker, self._worker = self._worker, None
        if worker is not None:
            self._close_worker(worker)
        self._memory.close()

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ one row
    def sample(self) -> Sample:
        """Every column of :data:`COLUMNS`; None where a reading was unavailable now."""
        row = empty_sample()
        try:
            row.update(self._gpu())
        except Exception as exc:  # a reader bug must cost one row's GPU cells, not the run
            self._note(f"GPU read failed: {type(exc).__name__}: {exc}")
        try:
            row.update(self._memory.read())
        except Exception as exc:
            self._note(f"memory read failed: {type(exc).__name__}: {exc}")
        return row

    def _note(self, text: str) -> None:
        if len(self.notes) < 50 and text[:500] not in self.notes:
            self.notes.append(text[:500])

    def _gpu(self) -> dict[str, float | str | None]:
        worker, nv, h = self._worker, self._nv, self._handle
        if worker is not None and nv is not None:
            try:
                return worker.call(lambda: read_nvml(nv, h), self._nvml_timeout)
            except TimeoutError as exc:
                self._note(f"NVML stopped answering ({exc}); switching to nvidia-smi")
                self._worker, self.source = None, "nvidia-smi"
                worker.stop()
        return self._smi()

    # ------------------------------------------------------------------ nvidia-smi
    def _call_smi(self, *args: str) -> _run.RunResult | None:
        """One bounded nvidia-smi call; None while paused after a hang/crash/absence."""
        if time.monotonic() < self._smi_paused_until:
            return None
        r = _run.run(["nvidia-smi", *args], timeout=self._smi_timeout, env=self.env)
        if r.error in ("timeout", "signal", "not_found") or r.error.startswith("exception"):
            self._smi_paused_until = time.monotonic() + self._smi_retry_s
            self._note(f"{r.describe()}; nvidia-smi not asked again for {self._smi_retry_s:g} s")
            return None
        return r

    def _smi(self) -> dict[str, float | str | None]:
        out: dict[str, float | str | None] = {}
        idx = ("-i", str(self.gpu_index))
        row: dict[str, str] = {}
        while self._smi_fields:
            r = self._call_smi(f"--query-gpu={','.join(self._smi_fields)}", "--format=csv,noheader,nounits", *idx)
            if r is None:
                return out
            if r.ok:
                rows = nvidia_smi.parse_query_csv(r.stdout, self._smi_fields)
                row = rows[0] if rows else {}
                break
            bad = nvidia_smi.rejected_field(r.stdout + "\n" + r.stderr)
            if not bad or nvidia_smi.canonical_field(bad) not in self._smi_fields:
                self._note(r.describe())
                break
            self._smi_fields.remove(nvidia_smi.canonical_field(bad))  # remembered for later rows
        values = smi_values(row)
        if values is None:
            self._note("nvidia-smi --query-gpu printed a row that is not readings; row left empty")
        else:
            out.update(values)
        r = self._call_smi(f"--query-compute-apps={','.join(_APP_FIELDS)}", "--format=csv,noheader,nounits", *idx)
        if r is not None and r.ok:
            procs = nvidia_smi.parse_compute_apps(r.stdout, _APP_FIELDS)
            if procs or not r.stdout.strip():  # output but no process line in it: junk, not "none"
                out["gpu.processes"] = process_cell([
                    (p.process.pid, p.process.name,
                     p.process.used_memory_bytes if isinstance(p.process.used_memory_bytes, int) else None)
                    for p in procs])
        r = self._call_smi("-q", "-d", "PERFORMANCE", *idx)
        if r is not None and r.ok:
            q = nvidia_smi.parse_q(r.stdout)
            if q.gpus:
                g = q.gpus[0]
                for key, column in _COUNTER_COLUMN.items():
                    out[column] = _num(g.counters_us.get(key))
                if out.get("clocks_event_reasons.active") is None and g.reasons_mask is not None:
                    out["clocks_event_reasons.active"] = reasons_hex(g.reasons_mask)
                if out.get("pstate") is None and g.pstate:
                    out["pstate"] = g.pstate
        return out


# --------------------------------------------------------------------------- the CSV loop
def _formatters() -> tuple[Callable[[], str], Callable[[Sample], str]]:
    """csvlog's header/row writers (the CSV contract lives there)."""
    from sparkops.monitor import csvlog

    return csvlog.write_header, csvlog.format_row


def check_interval(interval_s: float) -> float:
    """The interval as a float; ValueError below ``monitor.sampler_min_interval_s`` (or not finite)."""
    low = knowledge.load().thresholds.monitor.sampler_min_interval_s
    value = float(interval_s)
    if not math.isfinite(value) or value < low:
        raise ValueError(f"interval {interval_s!r} s is below the minimum of {low:g} s")
    return value


def run_sampling(
    log_path: Path | str,
    interval_s: float,
    stop_event: threading.Event,
    sampler: Sampler,
    *,
    fsync: bool = False,
    clock: Callable[[], float] = time.monotonic,
    on_row: Callable[[Sample], None] | None = None,
) -> int:
    """Append one row per tick to ``log_path`` until ``stop_event`` is set; returns rows written.

    The header goes in only when the file is new or empty. Each row is flushed (and fsync'ed when
    ``fsync``: a power-off or thermal reboot then loses nothing either). Ticks are on a fixed
    grid from the start, so rows do not drift; ticks missed by a slow sample are skipped, not
    bunched. A failing sample or a failing write costs that row, never the loop. Raises OSError
    only when the log cannot be opened at all, ValueError for an interval below the minimum.
    """
    interval = check_interval(interval_s)
    header, fmt = _formatters()
    path = Path(log_path)
    written = 0
    with open(path, "a", encoding="utf-8", newline="") as fh:
        if fh.tell() == 0:
            fh.write(header().rstrip("\r\n") + "\n")
            fh.flush()
        start = clock()
        tick = 0
        while not stop_event.is_set():
            try:
                row = sampler.sample()
            except Exception:  # a sampler is meant never to raise; if one does, keep the row
                row = empty_sample()
            try:
                fh.write(fmt(row).rstrip("\r\n") + "\n")
                fh.flush()
                if fsync:
                    os.fsync(fh.fileno())
                written += 1
            except (OSError, ValueError, TypeError):  # disk full, a formatter surprise: next tick
                pass
            if on_row is not None:
                with contextlib.suppress(Exception):
                    on_row(row)
            now = clock()
            tick = max(tick + 1, math.floor((now - start) / interval) + 1)
            stop_event.wait(max(0.0, start + tick * interval - now))
    return written
