"""The ``nvidia-smi`` fallback, for hosts where NVML cannot be loaded.

Parsers (text -> data) are pure and never raise; they are tested on real GB10 captures. The
runner (:func:`collect`) calls ``nvidia-smi`` only through :func:`sparkops.probes._run.run`, each
call bounded by ``probes.subprocess_timeout_s``, and stops at the first hang or crash.

GB10 quirks the parsers keep as facts: ``memory.*`` reads ``[N/A]`` and the table's memory cell
``Not Supported`` (unified memory) -> ``Unavailable(not_supported)``, never a number; the power cap
reads ``N/A``. The CUDA version comes from ``-q`` (``CUDA UMD Version`` on 610-series drivers,
``CUDA Version`` before); the table header is read for it only when nothing else answered.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sparkops.core.units import MIB
from sparkops.facts.model import GpuDevice, GpuFacts, GpuProcess
from sparkops.facts.reading import NOT_COLLECTED, Unavailable, Why, known, missing
from sparkops.probes import _run

QUERY_FIELDS: tuple[str, ...] = (
    "index", "name", "pci.bus_id", "driver_version", "compute_cap", "memory.total", "memory.used",
    "memory.free", "power.draw", "power.limit", "temperature.gpu", "clocks.sm", "clocks.max.sm",
    "utilization.gpu", "pstate", "clocks_event_reasons.active",
)
# Fields every nvidia-smi since long before CUDA 12 accepts: the retry when a newer one is refused.
SAFE_FIELDS: tuple[str, ...] = (
    "index", "name", "pci.bus_id", "driver_version", "memory.total", "memory.used", "memory.free",
    "power.draw", "temperature.gpu", "utilization.gpu", "pstate",
)
APP_FIELDS: tuple[str, ...] = ("gpu_bus_id", "pid", "process_name", "used_memory")

# header spellings and older names -> the field names used above
_ALIASES = {
    "gpu_name": "name",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.graphics": "clocks.gr",
    "clocks.graphics": "clocks.gr",
    "clocks.max.graphics": "clocks.max.gr",
    "clocks.max.sm": "clocks.max.sm",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "power.management.limit": "power.limit",
    "used_gpu_memory": "used_memory",
    "gpu_uuid": "gpu_uuid",
    "gpu_serial": "gpu_serial",
}
_FREE_TEXT = ("name", "process_name")  # fields whose value may itself hold a comma

_BUS_RE = re.compile(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-9A-Fa-f])")
_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_.]*(\s*\[[^\]]*\])?$")
_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$")

# nvidia-smi's own complaints: a host problem, not a parse problem
_HOST_ERRORS = (
    "nvidia-smi has failed",
    "couldn't communicate with the nvidia driver",
    "failed to initialize nvml",
    "no devices were found",
    "unable to determine the device handle",
    "driver/library version mismatch",
)
_REJECTED = re.compile(r'Field "([^"]+)" is not a valid field to query', re.IGNORECASE)

# nvidia-smi -q "Clocks Event Reasons" names -> NVML bitmask bits
REASON_BITS = {
    "idle": 0x1,
    "applications clocks setting": 0x2,
    "sw power cap": 0x4,
    "hw slowdown": 0x8,
    "sync boost": 0x10,
    "sw thermal slowdown": 0x20,
    "hw thermal slowdown": 0x40,
    "hw power brake slowdown": 0x80,
    "display clock setting": 0x100,
}
# nvidia-smi -q "Clocks Event Reasons Counters" names -> our counter keys
COUNTER_KEYS = {
    "sw power capping": "sw_power_cap",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal",
    "hw thermal slowdown": "hw_thermal",
    "hw power braking": "hw_power_brake",
}
_US_PER = {"ns": 0.001, "us": 1, "µs": 1, "ms": 1000, "s": 1_000_000}


def _ascii_int(text: str) -> bool:
    """Digits int() accepts: str.isdigit() also says yes to "²", which int() refuses."""
    return text.isascii() and text.isdigit()


# --------------------------------------------------------------------------- values
def classify(raw: str) -> str | Unavailable:
    """One printed value: the text, or Unavailable for ``[N/A]``, ``Not Supported`` and kin."""
    text = (raw or "").strip()
    bracketed = len(text) >= 2 and text.startswith("[") and text.endswith("]")
    inner = text[1:-1].strip() if bracketed else text
    low = inner.lower()
    detail = f"nvidia-smi printed {text!r}"
    if low in ("n/a", "not supported", "notsupported", "not available"):
        return missing(Why.not_supported, detail)
    if "permission" in low:
        return missing(Why.no_permission, detail)
    if not low:
        return missing(Why.error, "nvidia-smi printed an empty value")
    if bracketed or low in ("unknown error", "gpu requires reset", "gpu is lost", "error"):
        return missing(Why.error, detail)
    return text


def number(raw: str) -> float | Unavailable:
    """``11.17 W``, ``2522 MHz``, ``0 %``, ``42`` -> float; unit text is dropped."""
    value = classify(raw)
    if isinstance(value, Unavailable):
        return value
    m = _NUMBER.match(value)
    if not m:
        return missing(Why.error, f"nvidia-smi printed {value!r}, not a number")
    return float(m.group(1))


def mib_bytes(raw: str) -> int | Unavailable:
    """A MiB reading (nvidia-smi's memory unit) in bytes."""
    value = number(raw)
    return value if isinstance(value, Unavailable) else int(value * MIB)


def bitmask(raw: str) -> int | Unavailable:
    """``0x0000000000000020`` (or a decimal) -> int."""
    value = classify(raw)
    if isinstance(value, Unavailable):
        return value
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return missing(Why.error, f"nvidia-smi printed {value!r}, not a bitmask")


def capability(raw: str) -> tuple[int, int] | Unavailable:
    """``12.1`` -> (12, 1)."""
    value = classify(raw)
    if isinstance(value, Unavailable):
        return value
    m = re.fullmatch(r"(\d+)\.(\d+)", value)
    return (int(m.group(1)), int(m.group(2))) if m else missing(Why.error, f"capability {value!r}")


def bus_key(bus_id: str) -> tuple[int, str, str, str] | None:
    """A PCI bus id in a comparable form (``0000000F:01:00.0`` == ``000F:01:00.0``)."""
    m = _BUS_RE.search(bus_id or "")
    if not m:
        return None
    return int(m.group(1), 16), m.group(2).upper(), m.group(3).upper(), m.group(4).upper()


# --------------------------------------------------------------------------- --query-gpu csv
def canonical_field(name: str) -> str:
    """A header cell or requested field as one name: units dropped, aliases resolved."""
    base = re.sub(r"\s*\[[^\]]*\]\s*$", "", name.strip()).strip().lower()
    return _ALIASES.get(base, base)


def _looks_like_header(cells: list[str]) -> bool:
    return bool(cells) and all(_HEADER_CELL.match(c) for c in cells) and any(
        "." in c or "_" in c or c in ("index", "name", "pstate", "pid", "uuid", "serial") for c in cells)


def _fit(cells: list[str], names: list[str]) -> list[str] | None:
    """Line cells to field count; surplus commas are folded back into a free-text field."""
    if len(cells) == len(names):
        return cells
    if len(cells) < len(names):
        return None
    free = next((names.index(f) for f in _FREE_TEXT if f in names), None)
    if free is None:
        return None
    extra = len(cells) - len(names)
    return cells[:free] + [", ".join(cells[free:free + extra + 1])] + cells[free + extra + 1:]


def parse_query_csv(text: str, fields: Sequence[str] | None = None) -> list[dict[str, str]]:
    """Rows of ``--format=csv[,noheader][,nounits]`` output as {field: printed value}.

    Field names come from a header line when there is one, else from ``fields`` (the order asked
    for). Lines that do not fit (messages, junk) are skipped, never guessed at.
    """
    names = [canonical_field(f) for f in fields] if fields else None
    rows: list[dict[str, str]] = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if _looks_like_header(cells):
            names = [canonical_field(c) for c in cells]
            continue
        if not names:
            continue
        fitted = _fit(cells, names)
        if fitted is not None:
            rows.append(dict(zip(names, fitted, strict=True)))
    return rows


def _printable(s: str) -> bool:
    return bool(s) and s.isprintable() and "\ufffd" not in s


# the --query-gpu fields a device row is read from, beyond index / name / pci.bus_id: (field, GpuDevice attribute, reader)
_READERS: tuple[tuple[str, str, Callable[[str], object]], ...] = (
    ("compute_cap", "capability", capability),
    ("memory.total", "memory_total_bytes", mib_bytes),
    ("memory.used", "memory_used_bytes", mib_bytes),
    ("memory.free", "memory_free_bytes", mib_bytes),
    ("power.draw", "power_draw_w", number),
    ("power.limit", "power_limit_w", number),
    ("temperature.gpu", "temperature_c", number),
    ("clocks.gr", "sm_clock_mhz", number),  # GB10 captures query graphics; SM wins when both
    ("clocks.sm", "sm_clock_mhz", number),
    ("clocks.max.gr", "sm_clock_max_mhz", number),
    ("clocks.max.sm", "sm_clock_max_mhz", number),
    ("utilization.gpu", "utilization_pct", number),
    ("pstate", "pstate", classify),
    ("clocks_event_reasons.active", "clock_event_reasons", bitmask),
)
_DEVICE_FIELDS = frozenset({"index", "name", "pci.bus_id", *(key for key, _, _ in _READERS)})


def device_from_row(row: Mapping[str, str], position: int) -> GpuDevice | None:
    """One ``--query-gpu`` row as a device; None for a row that is not a GPU (junk). A row must carry at least one
    field this reader knows: a junk line read as a csv header leaves rows of none (which were once GPUs with no name)."""
    if not _DEVICE_FIELDS.intersection(row):
        return None
    index = position
    if "index" in row:
        if not _ascii_int(row["index"].strip()):
            return None
        index = int(row["index"])
    name = classify(row.get("name", ""))
    if "name" in row and not (isinstance(name, str) and _printable(name)):
        return None
    bus = classify(row.get("pci.bus_id", ""))
    if "pci.bus_id" in row and isinstance(bus, str) and not bus_key(bus):
        return None
    values: dict[str, object] = {"index": index, "name": name if isinstance(name, str) else "",
                                 "pci_bus_id": bus if isinstance(bus, str) else ""}
    for key, attr, read in _READERS:
        if key in row:
            values[attr] = read(row[key])
    return GpuDevice(**values)  # type: ignore[arg-type]


def devices_from_rows(rows: Sequence[Mapping[str, str]]) -> list[GpuDevice]:
    """Every row that reads as a GPU."""
    out = []
    for pos, row in enumerate(rows):
        try:
            dev = device_from_row(row, pos)
        except Exception:  # a value pydantic refuses: the row is junk, not a crash
            dev = None
        if dev is not None:
            out.append(dev)
    return out


def driver_from_rows(rows: Sequence[Mapping[str, str]]) -> str | Unavailable:
    """The ``driver_version`` column of the first row that has a version-looking one."""
    for row in rows:
        value = classify(row.get("driver_version", ""))
        if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)+", value):
            return value
    return missing(Why.not_found, "nvidia-smi printed no driver_version")


# --------------------------------------------------------------------------- --query-compute-apps
@dataclass(frozen=True)
class SmiProcess:
    """A compute process and the GPU it runs on (bus id or uuid as printed, may be empty)."""

    gpu: str
    process: GpuProcess


def parse_compute_apps(text: str, fields: Sequence[str] = APP_FIELDS) -> list[SmiProcess]:
    """``--query-compute-apps=...`` csv rows; ``used_memory`` in MiB or ``[N/A]``."""
    out = []
    for row in parse_query_csv(text, fields):
        pid = row.get("pid", "").strip()
        if not _ascii_int(pid):
            continue
        name = classify(row.get("process_name", ""))
        mem = mib_bytes(row["used_memory"]) if "used_memory" in row else NOT_COLLECTED
        gpu = classify(row.get("pci.bus_id", row.get("gpu_bus_id", row.get("gpu_uuid", ""))))
        out.append(SmiProcess(gpu=gpu if isinstance(gpu, str) else "", process=GpuProcess(
            pid=int(pid), name=name if isinstance(name, str) else "", kind="compute", used_memory_bytes=mem)))
    return out


# --------------------------------------------------------------------------- default table
@dataclass(frozen=True)
class SmiHeader:
    """The table's first box. ``cuda_version`` is what the header claims; prefer ``-q``/NVML."""

    smi_version: str = ""
    driver_version: str = ""
    cuda_version: str = ""


@dataclass(frozen=True)
class SmiTable:
    header: SmiHeader
    devices: list[GpuDevice]


def parse_header(text: str) -> SmiHeader:
    """580: ``Driver Version: X  CUDA Version: 13.0``; 610: ``KMD Version: X  CUDA UMD Version: 13.3``."""
    smi = driver = cuda = umd = ""
    for line in (text or "").splitlines():
        if "NVIDIA-SMI" not in line and "Version:" not in line:
            continue
        if m := re.search(r"NVIDIA-SMI\s+(\d+(?:\.\d+)+)", line):
            smi = smi or m.group(1)
        if m := re.search(r"(?:Driver|KMD)\s+Version:\s*(\d+(?:\.\d+)+)", line):
            driver = driver or m.group(1)
        if m := re.search(r"CUDA\s+UMD\s+Version:\s*(\d+(?:\.\d+)+)", line):
            umd = umd or m.group(1)
        elif m := re.search(r"CUDA\s+Version:\s*(\d+(?:\.\d+)+)", line):
            cuda = cuda or m.group(1)
    return SmiHeader(smi_version=smi, driver_version=driver, cuda_version=umd or cuda)


_ROW1 = re.compile(
    r"^\|\s*(\d+)\s+(.+?)\s+(?:On|Off|N/A)?\s*\|\s*"
    r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*(?:On|Off|N/A)?\s*\|")
_PROC = re.compile(
    r"^\|\s*(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+(C\+G|G\+C|M\+C|C|G|M)\s+(.+?)\s+(\d+\s*MiB|N/A)\s*\|\s*$")
_KINDS = {"C": "compute", "C+G": "compute", "G+C": "compute", "M+C": "compute", "G": "graphics"}


def _row2(line: str) -> dict[str, object]:
    """``| N/A   42C    P0             10W /  N/A  | Not Supported          |      0%      Default |``"""
    cells = line.strip().strip("|").split("|")
    out: dict[str, object] = {}
    if cells:
        first = cells[0]
        if m := re.search(r"(\d+)C\b", first):
            out["temperature_c"] = float(m.group(1))
        if m := re.search(r"\b(P\d+)\b", first):
            out["pstate"] = m.group(1)
        if m := re.search(r"(\S+)\s*/\s*(\S+)\s*$", first.strip()):
            out["power_draw_w"] = number(m.group(1))
            out["power_limit_w"] = number(m.group(2))
    if len(cells) > 1:
        mem = cells[1].strip()
        if m := re.search(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB", mem):
            out["memory_used_bytes"] = int(m.group(1)) * MIB
            out["memory_total_bytes"] = int(m.group(2)) * MIB
        elif mem:
            gone = classify(mem)
            if isinstance(gone, Unavailable):
                out["memory_used_bytes"] = out["memory_total_bytes"] = out["memory_free_bytes"] = gone
    if len(cells) > 2:
        if m := re.search(r"(\d+)\s*%", cells[2]):
            out["utilization_pct"] = float(m.group(1))
        elif "N/A" in cells[2]:
            out["utilization_pct"] = missing(Why.not_supported, "nvidia-smi printed 'N/A'")
    return out


def parse_table(text: str) -> SmiTable:
    """The plain ``nvidia-smi`` table: header, one device per GPU box, the process list.

    Works on trimmed captures too (lines missing, ``[...]`` marks): every row is matched on its
    own shape, not on its position.
    """
    lines = (text or "").splitlines()
    devices: list[dict[str, object]] = []
    procs: list[tuple[int, GpuProcess]] = []
    saw_process_box = False
    for i, line in enumerate(lines):
        if "Processes:" in line or "No running processes found" in line:
            saw_process_box = True
        if m := _ROW1.match(line):
            dev: dict[str, object] = {"index": int(m.group(1)), "name": m.group(2).strip(),
                                      "pci_bus_id": m.group(3)}
            nxt = next((x for x in lines[i + 1:i + 3] if x.startswith("|")), "")
            if nxt and not _ROW1.match(nxt):
                dev.update(_row2(nxt))
            devices.append(dev)
        elif m := _PROC.match(line):
            saw_process_box = True
            raw_mem = m.group(7).replace(" ", "")
            mem = int(raw_mem[:-3]) * MIB if raw_mem.endswith("MiB") else classify(raw_mem)
            procs.append((int(m.group(1)), GpuProcess(pid=int(m.group(4)), name=m.group(6).strip(),
                                                      kind=_KINDS.get(m.group(5), "unknown"),  # type: ignore[arg-type]
                                                      used_memory_bytes=mem)))
    built = []
    for dev in devices:
        if saw_process_box:
            dev["processes"] = [p for idx, p in procs if idx == dev["index"]]
        try:
            built.append(GpuDevice(**dev))  # type: ignore[arg-type]
        except Exception:
            continue
    return SmiTable(header=parse_header(text), devices=built)


# --------------------------------------------------------------------------- -q
@dataclass
class SmiQGpu:
    """What ``-q`` says about one GPU (only the parts the checks use)."""

    bus_id: str = ""
    name: str = ""
    pstate: str = ""
    reasons_active: dict[str, bool] = field(default_factory=dict)
    counters_us: dict[str, int] = field(default_factory=dict)
    memory: dict[str, str] = field(default_factory=dict)  # "FB Memory Usage" Total/Used/Free as printed

    @property
    def reasons_mask(self) -> int | None:
        """The active reasons as NVML's bitmask, when any known reason was printed."""
        known_bits = [(REASON_BITS[k], v) for k, v in self.reasons_active.items() if k in REASON_BITS]
        if not known_bits:
            return None
        mask = 0
        for bit, active in known_bits:
            mask |= bit if active else 0
        return mask


@dataclass
class SmiQ:
    driver_version: str = ""
    cuda_version: str = ""
    gpus: list[SmiQGpu] = field(default_factory=list)


_KV = re.compile(r"^(\s*)([^:]*?[^:\s])\s*:(?:\s+(.*))?$")
_VERSION = re.compile(r"^\s*(\d+(?:\.\d+)+)")


def _counter_us(value: str) -> int | None:
    m = re.match(r"^\s*(\d+)\s*(ns|us|µs|ms|s)?\b", value or "")
    if not m:
        return None
    return int(int(m.group(1)) * _US_PER[m.group(2) or "us"])


def parse_q(text: str) -> SmiQ:
    """``nvidia-smi -q [-d PERFORMANCE]`` (or fragments of it) by indentation.

    Lines ``Key : Value`` are read inside the nearest less-indented heading. A fragment without a
    ``GPU <bus id>`` line is taken as one GPU.
    """
    out = SmiQ()
    cuda = umd = driver = kmd = ""
    stack: list[tuple[int, str]] = []
    gpu: SmiQGpu | None = None

    def current() -> SmiQGpu:
        nonlocal gpu
        if gpu is None:
            gpu = SmiQGpu()
            out.gpus.append(gpu)
        return gpu

    for line in (text or "").splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" \t"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        m = _KV.match(line)
        if not m:
            head = line.strip()
            if bm := re.match(r"^GPU\s+(" + _BUS_RE.pattern + r")\s*$", head):
                gpu = SmiQGpu(bus_id=bm.group(1))
                out.gpus.append(gpu)
            stack.append((indent, head))
            continue
        key, value = m.group(2).strip(), (m.group(3) or "").strip()
        low = key.lower()
        section = stack[-1][1].lower() if stack else ""
        version = _VERSION.match(value)
        if low in ("driver version", "kmd version", "cuda version", "cuda umd version"):
            v = version.group(1) if version else ""
            if low == "driver version":
                driver = driver or v
            elif low == "kmd version":
                kmd = kmd or v
            elif low == "cuda version":
                cuda = cuda or v
            else:
                umd = umd or v
            continue
        if section in ("clocks event reasons", "clocks throttle reasons"):
            current().reasons_active[low] = value.lower() == "active"
        elif section in ("clocks event reasons counters", "clocks throttle reasons counters"):
            us = _counter_us(value)
            if us is not None:
                current().counters_us[COUNTER_KEYS.get(low, re.sub(r"\W+", "_", low).strip("_"))] = us
        elif section == "fb memory usage":
            current().memory[low] = value
        elif low == "product name":
            current().name = value
        elif low == "performance state" and re.fullmatch(r"P\d+", value):
            current().pstate = value
    out.driver_version = kmd or driver
    out.cuda_version = umd or cuda
    return out


# --------------------------------------------------------------------------- messages
def parse_host_error(text: str) -> str:
    """nvidia-smi's own complaint (driver unreachable, no devices...), or ""."""
    for line in (text or "").splitlines():
        low = line.lower()
        if any(p in low for p in _HOST_ERRORS):
            return line.strip()[:300]
    return ""


def rejected_field(text: str) -> str | None:
    """The field nvidia-smi refused (``Field "x" is not a valid field to query.``)."""
    m = _REJECTED.search(text or "")
    return m.group(1) if m else None


# --------------------------------------------------------------------------- runner
class _Smi:
    """Bounded calls to nvidia-smi; the first hang/crash/absence stops all further calls."""

    def __init__(self, env: Mapping[str, str], timeout_s: float, deadline: float) -> None:
        self.env, self.timeout_s, self.deadline = env, timeout_s, deadline
        self.fatal: _run.RunResult | None = None
        self.last: _run.RunResult | None = None
        self.host_error = ""

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def __call__(self, *args: str) -> _run.RunResult | None:
        if self.fatal is not None or self.left() < 0.05:
            return None
        r = _run.run(["nvidia-smi", *args], timeout=min(self.timeout_s, self.left()), env=self.env)
        self.last = r
        self.host_error = self.host_error or parse_host_error(r.stdout + "\n" + r.stderr)
        if r.error in ("timeout", "signal", "not_found") or r.error.startswith("exception"):
            self.fatal = r
        return r


def _query_gpus(smi: _Smi) -> tuple[list[dict[str, str]], str]:
    """Rows of the big --query-gpu, dropping fields this nvidia-smi refuses. (rows, error)."""
    fields = list(QUERY_FIELDS)
    tried_safe = False
    for _ in range(len(QUERY_FIELDS)):
        r = smi(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits")
        if r is None:
            break
        if r.ok:
            return parse_query_csv(r.stdout, fields), ""
        if smi.fatal is not None or smi.host_error:
            break
        bad = rejected_field(r.stdout + "\n" + r.stderr)
        if bad and canonical_field(bad) in fields and len(fields) > 1:
            fields.remove(canonical_field(bad))
        elif not tried_safe:
            fields, tried_safe = list(SAFE_FIELDS), True
        else:
            break
    last = smi.fatal or smi.last
    return [], last.describe() if last else "nvidia-smi was not run (no time left)"


def _same_gpu(printed: str, dev: GpuDevice, only: bool) -> bool:
    key = bus_key(printed)
    return (key is not None and key == bus_key(dev.pci_bus_id)) or (only and not key)


def _match_q(devices: list[GpuDevice], q: SmiQ) -> list[SmiQGpu | None]:
    """-q GPUs in device order (by bus id, else by position)."""
    out: list[SmiQGpu | None] = []
    for pos, dev in enumerate(devices):
        hit = next((g for g in q.gpus if bus_key(g.bus_id) and bus_key(g.bus_id) == bus_key(dev.pci_bus_id)),
                   None)
        if hit is None and pos < len(q.gpus) and not bus_key(q.gpus[pos].bus_id):
            hit = q.gpus[pos]
        if hit is None and len(devices) == len(q.gpus):
            hit = q.gpus[pos]
        out.append(hit)
    return out


def collect(
    env: Mapping[str, str],
    *,
    timeout_s: float,
    budget_s: float,
    counter_window_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> GpuFacts:
    """Ask nvidia-smi for the GPU facts. Never raises; a failure is in ``smi_error``.

    Calls: ``--query-gpu`` (retried without refused fields), ``--query-compute-apps``, and
    ``-q -d PERFORMANCE`` twice, ``counter_window_s`` apart, for the clock-event counters. The
    plain table is read only when the csv query gave nothing, or for the CUDA version as a last
    resort. Each call gets ``timeout_s``; no call starts after ``budget_s``.
    """
    smi = _Smi(env, timeout_s, time.monotonic() + budget_s)
    rows, error = _query_gpus(smi)
    devices = devices_from_rows(rows)
    driver: str | Unavailable = driver_from_rows(rows)
    table: SmiTable | None = None
    if not devices and smi.fatal is None and not smi.host_error:
        r = smi()
        if r is not None and r.ok:
            table = parse_table(r.stdout)
            devices = table.devices
            if table.header.driver_version:
                driver = table.header.driver_version
        if not devices:
            error = (r.describe() if r is not None and not r.ok else
                     "nvidia-smi answered, but no GPU row in its output could be read")
    if not devices:
        if smi.fatal is not None:
            error = smi.fatal.describe()
        return GpuFacts(source="none", smi_error=error or "no GPU found by nvidia-smi",
                        smi_host_error=smi.host_error)

    if table is None:  # csv path: processes come from --query-compute-apps
        r = smi("--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits")
        if r is not None and r.ok:
            procs = parse_compute_apps(r.stdout, APP_FIELDS)
            only = len(devices) == 1
            devices = [d.model_copy(update={"processes": [p.process for p in procs if _same_gpu(p.gpu, d, only)]})
                       for d in devices]
        else:
            why = Why.timeout if r is not None and r.error == "timeout" else Why.error
            gone = missing(why, r.describe() if r is not None else "nvidia-smi not run (stopped earlier)")
            devices = [d.model_copy(update={"processes": gone}) for d in devices]

    cuda: str | Unavailable = missing(Why.not_found, "nvidia-smi printed no CUDA version")
    r = smi("-q", "-d", "PERFORMANCE")
    t0 = time.monotonic()
    if r is not None and r.ok:
        q = parse_q(r.stdout)
        if q.cuda_version:
            cuda = q.cuda_version
        if not known(driver) and q.driver_version:
            driver = q.driver_version
        updated = []
        for dev, g in zip(devices, _match_q(devices, q), strict=True):
            upd: dict[str, object] = {}
            if g is not None:
                upd["violation_us"] = dict(g.counters_us)
                if not known(dev.clock_event_reasons) and g.reasons_mask is not None:
                    upd["clock_event_reasons"] = g.reasons_mask
                if not known(dev.pstate) and g.pstate:
                    upd["pstate"] = g.pstate
            updated.append(dev.model_copy(update=upd))
        devices = updated
        window = max(0.0, counter_window_s)
        if window > 0 and any(d.violation_us for d in devices) and smi.left() > window + 0.1:
            sleep(window)
            r2 = smi("-q", "-d", "PERFORMANCE")
            if r2 is not None and r2.ok:
                elapsed = round(time.monotonic() - t0, 3)
                q2 = parse_q(r2.stdout)
                devices = [d.model_copy(update={"violation_us_end": dict(g.counters_us), "violation_window_s": elapsed})
                           if g is not None and g.counters_us else d
                           for d, g in zip(devices, _match_q(devices, q2), strict=True)]
    if not known(cuda):
        header = table.header if table is not None else None
        if header is None:
            rt = smi()
            header = parse_header(rt.stdout) if rt is not None and rt.ok else None
        if header is not None and header.cuda_version:
            cuda = header.cuda_version  # the table header: the last resort for this reading
    return GpuFacts(source="nvidia-smi", driver_version=driver, cuda_driver_version=cuda, devices=devices,
                    smi_host_error=smi.host_error)
