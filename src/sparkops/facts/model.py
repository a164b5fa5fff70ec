"""The facts snapshot: everything the checks judge, gathered once, replayable anywhere.

Units ride in field names (``_bytes``, ``_w``, ``_c``, ``_mhz``, ``_us``); human strings are made
only by reporters. A reading that could not be taken is an :class:`Unavailable` with its reason.
Bump ``FACTS_SCHEMA_VERSION`` on any incompatible change; readers refuse newer majors.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from sparkops.core.modeling import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from sparkops.facts.reading import NOT_COLLECTED, Unavailable, Why, missing

FACTS_SCHEMA_VERSION = 2  # 2: processes and the container recorded raw; checks classify

_V = TypeVar("_V")
# A mapping reading: Unavailable is tried first, so on replay ``{"unavailable": "error", ...}``
# comes back as the missing reading it was, not as a two-key mapping (pydantic's smart union
# would prefer the plain dict).
MappingReading = Annotated[Unavailable | dict[str, _V], Field(union_mode="left_to_right")]


# ---- physical bounds. A reading outside them is not a reading: NaN, infinity, a negative power or
# a 1e308 °C temperature come from a broken source or a doctored snapshot, and judging them would
# print "READY, nan °C". Such a value becomes an unavailable reading (why: error) that names the value
# and the bounds, so the check says "unknown" and why. The bounds are what no GPU or host can reach,
# not thresholds: judging stays in the checks and their YAML.
BYTES_MAX = 1 << 50  # 1 PiB: no memory figure of one machine comes near
COUNTER_MAX = (1 << 63) - 1
BOUNDS: dict[str, tuple[float, float, str]] = {  # reading -> (lowest, highest, unit)
    "temperature_c": (0.0, 150.0, "°C"),  # NVML and nvidia-smi report unsigned degrees
    "power_w": (0.0, 5_000.0, "W"),
    "clock_mhz": (0.0, 10_000.0, "MHz"),
    "percent": (0.0, 100.0, "%"),
    "bytes": (0, BYTES_MAX, "bytes"),
    "count": (0, 1 << 20, ""),
    "counter": (0, COUNTER_MAX, ""),
    "cgroup_bytes": (0, COUNTER_MAX, "bytes"),
}


def _number(value: object) -> float | int | None:
    """The number in a raw reading (a JSON number or a numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def out_of_bounds(value: object, kind: str) -> str:
    """Why ``value`` cannot be a ``kind`` reading ("" when it can, or when it is not a number)."""
    num = _number(value)
    if num is None:
        return ""
    lo, hi, unit = BOUNDS[kind]
    if isinstance(num, float) and not math.isfinite(num):
        return f"{num} is not a finite number"
    if lo <= num <= hi:
        return ""
    if isinstance(num, float):
        shown = f"{num:.4g}"
    else:
        digits = len(str(abs(num))) if abs(num) < 10**4000 else 4000
        shown = str(num) if digits <= 15 else f"{'-' if num < 0 else ''}a {digits}-digit number"
    return f"{shown}{' ' + unit if unit else ''} is outside physical bounds [{lo:g}, {hi:g}]"


def _bounded(kind: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        why = out_of_bounds(value, kind)
        return missing(Why.error, f"implausible reading: {why}") if why else value
    return BeforeValidator(check)


def _bounded_mapping(kind: str, whole: bool) -> BeforeValidator:
    """For a mapping of readings: ``whole`` makes the entire mapping unavailable when one value is out
    of bounds (a corrupt /proc/meminfo is suspect as a whole); otherwise the bad keys are dropped (an
    absent counter already means "could not be read")."""
    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        bad = {k: why for k, v in value.items() if (why := out_of_bounds(v, kind))}
        if not bad:
            return value
        if whole:
            k, why = next(iter(bad.items()))
            return missing(Why.error, f"implausible reading: {k} {why}")
        return {k: v for k, v in value.items() if k not in bad}
    return BeforeValidator(check)


def _bounded_model(kind: str, fields: tuple[str, ...]) -> BeforeValidator:
    """A small model of readings (PSI): unavailable as a whole when one field is out of bounds."""
    def check(value: Any) -> Any:
        if isinstance(value, dict) and "unavailable" not in value:
            for f in fields:
                if f in value and (why := out_of_bounds(value[f], kind)):
                    return missing(Why.error, f"implausible reading: {f} {why}")
        return value
    return BeforeValidator(check)


Temperature = Annotated[float | Unavailable, _bounded("temperature_c")]
Power = Annotated[float | Unavailable, _bounded("power_w")]
Clock = Annotated[float | Unavailable, _bounded("clock_mhz")]
Percent = Annotated[float | Unavailable, _bounded("percent")]
Bytes = Annotated[int | Unavailable, _bounded("bytes")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ProbeRecord(_Model):
    """How one probe went: whether it produced facts, how long it took, and what it tried."""

    name: str
    ok: bool
    duration_s: float = 0.0
    reason: str = ""  # why it failed or what it fell back to
    source: str = ""  # e.g. "nvml", "nvidia-smi", "cache", "gh", "rest"


# --------------------------------------------------------------------------- host
class V1ContainerClass(_Model):
    """What a schema-1 tool decided about the container at collect time (only a migrated snapshot has it)."""

    image_kind: Literal["ngc-pytorch", "ngc-other", "unsloth", "other", "none"] | Unavailable = NOT_COLLECTED
    image_hint: str = ""


class ContainerFacts(_Model):
    """Container markers and variables as read, unjudged: what kind of container this is (NGC, Unsloth,
    other, unknown) is decided by ``sparkops.checks.container``. An empty marker list is NOT proof of
    a bare host (cgroup v2 hides them)."""

    markers: list[str] = Field(default_factory=list)  # "/.dockerenv", "cgroup:docker", "env:container=podman", ...
    markers_read: Literal[True] | Unavailable = NOT_COLLECTED  # True once the probe looked; else why it could not
    image: str = ""  # the image= line of /run/.containerenv (podman), redacted
    nvidia_env: dict[str, str] = Field(default_factory=dict)  # NVIDIA_*/NGC version variables seen
    unsloth_paths: list[str] = Field(default_factory=list)  # Unsloth image paths that exist ("/workspace/unsloth")
    unsloth_env: list[str] = Field(default_factory=list)  # names of UNSLOTH_* variables set
    v1_class: V1ContainerClass | None = None  # set only when a schema-1 snapshot was migrated


class PythonEnvFacts(_Model):
    """What kind of environment the *target* interpreter lives in."""

    kind: Literal["venv", "uv", "conda", "system", "unknown"] = "unknown"
    prefix: str = ""
    base_prefix: str = ""  # differs from prefix inside a venv
    site_packages: list[str] = Field(default_factory=list)  # where the distributions were read


class HostFacts(_Model):
    arch: str | Unavailable = NOT_COLLECTED  # "aarch64", "x86_64"
    kernel: str | Unavailable = NOT_COLLECTED
    os_release: dict[str, str] = Field(default_factory=dict)  # NAME, VERSION_ID, PRETTY_NAME, DGX_NAME...
    dmi_product: str | Unavailable = NOT_COLLECTED
    cpu_model: str | Unavailable = NOT_COLLECTED
    cpu_count: Annotated[int | Unavailable, _bounded("count")] = NOT_COLLECTED
    hostname: str = ""
    container: ContainerFacts = Field(default_factory=ContainerFacts)
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables the checks read (CUDA_VISIBLE_DEVICES, WORLD_SIZE, "
        "TRITON_PTXAS_PATH, TORCH_CUDA_ARCH_LIST, HF_*...), secrets removed.",
    )
    dev_nvidia: MappingReading[str] = NOT_COLLECTED  # "/dev/nvidia0" -> "rw" | "r" | "none"


# --------------------------------------------------------------------------- memory
class PsiFacts(_Model):
    some_avg10: float
    some_avg60: float
    full_avg10: float
    full_avg60: float


class CgroupMemFacts(_Model):
    version: Literal[1, 2] | Unavailable = NOT_COLLECTED
    limit_bytes: Annotated[int | None | Unavailable, _bounded("cgroup_bytes")] = NOT_COLLECTED  # None: "max" (no limit)
    usage_bytes: Annotated[int | Unavailable, _bounded("cgroup_bytes")] = NOT_COLLECTED
    path: str = ""  # this process's cgroup, as /proc/self/cgroup names it


class BuddyZone(_Model):
    """One /proc/buddyinfo line: free blocks of 2**order pages, order 0 first."""

    node: int
    zone: str  # "DMA", "DMA32", "Normal", "Movable"
    free_blocks: list[int]


class PagetypeZone(_Model):
    """One zone of /proc/pagetypeinfo: free blocks per order and pageblocks, per migrate type."""

    node: int
    zone: str
    free_blocks: dict[str, list[int]] = Field(default_factory=dict)  # "Movable" -> per-order counts
    pageblocks: dict[str, int] = Field(default_factory=dict)  # "Unmovable" -> pageblock count


class FragmentationFacts(_Model):
    """Raw readings for the free-memory fragmentation judgment (G3.fragmented)."""

    page_size_bytes: int | Unavailable = NOT_COLLECTED
    buddyinfo: list[BuddyZone] | Unavailable = NOT_COLLECTED
    pageblock_order: int | None = None  # /proc/pagetypeinfo "Page block order"
    pagetypeinfo: list[PagetypeZone] | Unavailable = NOT_COLLECTED  # root-only on most kernels


class MemoryFacts(_Model):
    """/proc/meminfo in bytes (keys as the kernel names them), PSI and the cgroup limit."""

    meminfo_bytes: Annotated[MappingReading[int], _bounded_mapping("bytes", whole=True)] = Field(
        default=NOT_COLLECTED,
        description="/proc/meminfo, kB lines converted to bytes under the kernel's names. Unitless "
        "lines (HugePages_Total/Free/Rsvd/Surp) are page counts, stored as '<name>_count'.",
    )
    psi: Annotated[PsiFacts | Unavailable,
                   _bounded_model("percent", ("some_avg10", "some_avg60", "full_avg10", "full_avg60"))] = NOT_COLLECTED
    cgroup: CgroupMemFacts = Field(default_factory=CgroupMemFacts)
    fragmentation: FragmentationFacts | None = None  # None: a snapshot from before this reading existed


# --------------------------------------------------------------------------- GPU
class GpuProcess(_Model):
    pid: int
    name: str = ""
    kind: Literal["compute", "graphics", "unknown"] = "unknown"
    used_memory_bytes: Bytes = NOT_COLLECTED


class GpuDevice(_Model):
    index: int
    name: str
    pci_bus_id: str = ""
    capability: tuple[int, int] | Unavailable = NOT_COLLECTED
    multiprocessor_count: Annotated[int | Unavailable, _bounded("count")] = NOT_COLLECTED
    memory_total_bytes: Bytes = NOT_COLLECTED  # NOT_SUPPORTED on GB10 (unified memory)
    memory_used_bytes: Bytes = NOT_COLLECTED
    memory_free_bytes: Bytes = NOT_COLLECTED
    addressing_mode: str | Unavailable = NOT_COLLECTED  # "ATS", "HMM", "none"
    power_draw_w: Power = NOT_COLLECTED
    power_limit_w: Power = NOT_COLLECTED  # enforced limit; N/A on GB10
    temperature_c: Temperature = NOT_COLLECTED
    sm_clock_mhz: Clock = NOT_COLLECTED
    sm_clock_max_mhz: Clock = NOT_COLLECTED
    utilization_pct: Percent = NOT_COLLECTED
    pstate: str | Unavailable = NOT_COLLECTED  # "P0"
    clock_event_reasons: Annotated[int | Unavailable, _bounded("counter")] = NOT_COLLECTED  # NVML bitmask
    violation_us: Annotated[dict[str, int], _bounded_mapping("counter", whole=False)] = Field(
        default_factory=dict,
        description="Cumulative clock-event (throttle) counters in microseconds at the start of "
        "collection: sw_power_cap, sync_boost, sw_thermal, hw_thermal, hw_power_brake. A counter the "
        "source cannot read is absent: NVML gives sw_power_cap, sw_thermal (its THERMAL policy), "
        "sync_boost and board_limit; nvidia-smi -q gives the first five.",
    )
    violation_us_end: Annotated[dict[str, int], _bounded_mapping("counter", whole=False)] = Field(
        default_factory=dict, description="Same counters read again at the end of collection."
    )
    violation_window_s: float = 0.0
    processes: list[GpuProcess] | Unavailable = NOT_COLLECTED


class GpuFacts(_Model):
    source: Literal["nvml", "nvidia-smi", "none"] = "none"
    driver_version: str | Unavailable = NOT_COLLECTED
    cuda_driver_version: str | Unavailable = NOT_COLLECTED  # e.g. "13.0": newest CUDA the driver runs
    devices: list[GpuDevice] = Field(default_factory=list)
    nvml_error: str = ""  # why NVML could not be used, when it could not
    smi_error: str = ""  # why the nvidia-smi fallback failed, when it did
    smi_host_error: str = ""  # nvidia-smi's own complaint (e.g. "couldn't communicate with the driver")


# --------------------------------------------------------------------------- CUDA libraries
class CudaLibFacts(_Model):
    ldconfig: MappingReading[list[str]] = NOT_COLLECTED  # soname -> paths, CUDA libs only
    cudart13_load: bool | Unavailable = NOT_COLLECTED  # ctypes.CDLL("libcudart.so.13")
    cudart13_error: str = ""
    cudart_runtime_version: int | Unavailable = NOT_COLLECTED  # cudaRuntimeGetVersion, e.g. 13000
    cuobjdump: str | Unavailable = NOT_COLLECTED  # path, when present


# --------------------------------------------------------------------------- processes
class V1ProcessClass(_Model):
    """What a schema-1 tool decided about a process at collect time (only a migrated snapshot has it:
    that tool kept a 300-character command line, not the argv it judged)."""

    kind: str = "other"
    memory_fraction: float | None = None
    memory_cap_source: str = ""


class HostProcess(_Model):
    """A process as the scan read it: raw, unjudged. What it is (server, trainer) and its memory cap
    are the checks' (``sparkops.checks.processes``), read from ``argv`` with the knowledge of the day."""

    pid: int
    name: str
    exe: str = ""  # /proc/<pid>/exe as psutil read it ("" when it could not)
    cmdline: str = ""  # redacted, truncated: for display
    argv: list[str] | Unavailable = Field(
        default=NOT_COLLECTED,
        description="The command line, argument by argument, redacted before it was cut (at most "
        "ARGV_MAX_ARGS arguments of ARGV_MAX_CHARS characters). Cap flags such as vLLM's "
        "--gpu-memory-utilization are read from here by the checks.",
    )
    rss_bytes: int = 0
    state: str = ""  # psutil status: "running", "sleeping", "disk-sleep" (D) ...
    ppid: int | None = None  # lets a check count a server and its engine children once
    v1_class: V1ProcessClass | None = None  # set only when a schema-1 snapshot was migrated


class ProcessFacts(_Model):
    processes: list[HostProcess] | Unavailable = NOT_COLLECTED
    scanned: int = 0
    denied: int = 0  # processes whose details could not be read (other users, hidepid)
    truncated: bool = False  # the scan stopped at its time budget


# --------------------------------------------------------------------------- target Python env
class ExtensionNeeds(_Model):
    """CUDA libraries an installed extension module links (ELF DT_NEEDED)."""

    package: str
    file: str
    needed: list[str]  # CUDA-family DT_NEEDED entries only
    runpath: list[str] = Field(default_factory=list)  # DT_RUNPATH/DT_RPATH folders, $ORIGIN expanded
    resolved: dict[str, str] = Field(
        default_factory=dict,
        description="needed soname -> the file found for it in `runpath` (pip wheels point there at "
        "nvidia/*/lib). A need missing here may still come from the ldconfig cache, LD_LIBRARY_PATH "
        "or a library torch loaded first.",
    )
    kernels: list[str] = Field(default_factory=list, description="GPU code targets in its .nv_fatbin section "
                               "(sm_121a, sm_120, compute_120), read for the kernel packages of g7.kernel_packages")


class TorchLive(_Model):
    """What the target interpreter said when it really imported torch (full depth)."""

    import_ok: bool
    error: str = ""  # exception text, or how it died
    died_by_signal: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    version: str = ""
    cuda: str | None = None  # torch.version.cuda
    cuda_available: bool | None = None
    device_count: int | None = None
    device_name: str = ""
    capability: tuple[int, int] | None = None
    arch_list: list[str] = Field(default_factory=list)
    mem_get_info_bytes: tuple[int, int] | None = None  # (free, total)
    total_memory_bytes: int | None = None
    flash_sdp_enabled: bool | None = None
    mem_efficient_sdp_enabled: bool | None = None
    math_sdp_enabled: bool | None = None
    flash_attn_import: bool | None = None  # None: not installed
    flash_attn_error: str = ""
    warnings: list[str] = Field(default_factory=list)  # e.g. the (8.0)-(12.0) capability warning
    cuda_error: str = ""
    import_duration_s: float | None = None  # `import torch` alone, as timed inside the child
    stage: str = ""  # the last step the child reached ("import torch", "cuda queries", "done")


class TorchStatic(_Model):
    """torch as read from its files, without importing it."""

    version: str  # "2.11.0+cu130", "2.9.0a0+50eac811a6.nv25.09"
    cuda: str | None  # torch/version.py `cuda`, None for CPU builds
    local_tag: str = ""  # "cu130", "cpu", "50eac811a6.nv25.09"
    location: str = ""
    git_version: str = ""  # torch/version.py `git_version`


class TargetEnvFacts(_Model):
    python: str = ""  # the interpreter judged
    chosen_because: str = ""  # "--python", "python3 on PATH", "the tool's own interpreter"
    python_version: str | Unavailable = NOT_COLLECTED
    env: PythonEnvFacts = Field(default_factory=PythonEnvFacts)
    distributions: MappingReading[str] = NOT_COLLECTED  # canonical name -> version
    torch: TorchStatic | Unavailable = NOT_COLLECTED
    extensions: list[ExtensionNeeds] | Unavailable = NOT_COLLECTED
    extensions_truncated: bool = False
    live: TorchLive | Unavailable = NOT_COLLECTED  # not_collected in --quick
    # --container IMAGE: the probe ran inside this image (docker run, removed by name), not on the host
    container_image: str | None = None  # as asked, alias resolved (unsloth/unsloth:dgxspark-latest)
    container_ref: str | None = None  # what ran: the lock file's repo@sha256:... when pinned, else the tag
    container_digest: str | Unavailable | None = None  # repo@sha256:... of the image used, else its Id
    container_engine: str | None = None  # the CLI that ran it: docker (Docker Engine or podman's API) | podman


# --------------------------------------------------------------------------- G10 configs
class ConfigHit(_Model):
    file: str
    line: int
    key: str  # tensor_parallel_size, tp_size, num_machines, nnodes, ...
    value: str
    kind: Literal["tensor_parallel", "nodes", "world"] = "tensor_parallel"
    job: str = ""  # the job it belongs to (a file, or "file:line" of one launch command); "" = the file


class ConfigJob(_Model):
    """One job the scan found: a structured config file, or one launch command in a script. Raw:
    the launcher as written and the key names seen; what they mean (serve or train) is the check's."""

    id: str  # "serve.yaml" path, or "run.sh:12" for a command
    file: str
    line: int = 0
    launcher: str = ""  # "vllm", "torchrun", "python -m sglang.launch_server", ... ("" for a config file)
    keys: list[str] = Field(default_factory=list)  # normalised key/flag names seen (bounded), for its role


class ConfigSkip(_Model):
    """A config file that was found but not read: it is not evidence of "no TP"."""

    path: str
    reason: str  # "over 1048576 bytes", "did not parse as yaml", "written by spark-ops", ...
    named: bool = False  # given with --config (rather than found in a directory)
    unread: bool = True  # False: deliberately not a config (a file this tool wrote), so no gap in the evidence


class ConfigScanFacts(_Model):
    roots: list[str] = Field(default_factory=list)
    files_read: int = 0
    files_skipped: int = 0  # over size, binary, unparseable
    unreadable: list[str] = Field(default_factory=list)  # paths that could not be read
    truncated: bool = False  # hit the file-count / time limit
    hits: list[ConfigHit] = Field(default_factory=list)
    scanned: bool = False
    notes: list[str] = Field(default_factory=list)  # which limit stopped the scan, and where
    jobs: list[ConfigJob] = Field(default_factory=list)
    skipped: list[ConfigSkip] = Field(default_factory=list)
    scope: str = ""  # "default" (the working directory's own config files) or "given" (--config paths)


# --------------------------------------------------------------------------- G8 playbooks
class PlaybookIssue(_Model):
    number: int
    title: str
    labels: list[str] = Field(default_factory=list)
    updated_at: str = ""


class PlaybookIssuesFacts(_Model):
    repo: str = "NVIDIA/dgx-spark-playbooks"
    issues: list[PlaybookIssue] | Unavailable = NOT_COLLECTED
    fetched_at: datetime | None = None
    source: str = ""  # "gh", "rest", "cache"
    note: str = ""  # why the cache was used or what failed, e.g. "offline: --offline given"


# --------------------------------------------------------------------------- G5 bandwidth
class BandwidthMethod(_Model):
    """One way of moving device memory, timed with CUDA events after warm-up (GB/s = 1e9 bytes/s)."""

    method: Literal["copy", "read"]  # copy: dst.copy_(src); read: a reduction over src (read-dominated)
    operation: str = ""  # what ran, e.g. "dst.copy_(src), fp32, preallocated"
    counts: str = ""  # which bytes a GB/s figure counts: "bytes read + bytes written" | "bytes read"
    bytes_per_iteration: int
    iterations_per_rep: int
    reps: int
    gbs_median: float
    gbs_q1: float
    gbs_q3: float
    gbs_min: float
    gbs_max: float


class BandwidthFacts(_Model):
    """A device memory bandwidth measurement (opt-in and intrusive: ``preflight --measure``,
    ``spark-ops bandwidth``), taken in the target interpreter with torch, freed before it reported."""

    python: str = ""  # the interpreter that measured (inside the container when container_ref is set)
    container_ref: str | None = None
    torch_version: str = ""
    device_index: int = 0
    device_name: str = ""
    capability: tuple[int, int] | None = None
    l2_cache_bytes: int | Unavailable = NOT_COLLECTED
    mem_free_bytes: int | Unavailable = NOT_COLLECTED  # cudaMemGetInfo free in the child, before allocating
    buffer_bytes: int
    buffers: int  # 2 with the copy method (src and dst), else 1
    sizing: str = ""  # how buffer_bytes was chosen ("16 x L2 (60 MiB) = 960 MiB, cut to the 952 MiB cap")
    methods: list[BandwidthMethod] = Field(default_factory=list)
    peak_allocated_bytes: int  # torch.cuda.max_memory_allocated over the measurement
    peak_reserved_bytes: int | Unavailable = NOT_COLLECTED
    allocated_after_bytes: int  # after freeing: 0 when everything was given back
    reserved_after_bytes: int | Unavailable = NOT_COLLECTED
    gpu_time_s: float  # GPU timeline from the first allocation to the last timed kernel (CUDA events)
    wall_s: float  # the child's wall time for the same span, freeing included
    import_s: float | None = None  # the child's `import torch`
    forced: bool = False  # measured although a refusal rule applied (--force)
    notes: list[str] = Field(default_factory=list)  # e.g. what --force overrode


# --------------------------------------------------------------------------- the snapshot
class Facts(_Model):
    """One collection of one machine. ``spark-ops collect`` writes it; ``--facts`` replays it."""

    schema_version: int = FACTS_SCHEMA_VERSION
    tool_version: str = ""
    collected_at: datetime | None = None
    depth: Literal["quick", "full"] = "full"
    probes: dict[str, ProbeRecord] = Field(default_factory=dict)
    host: HostFacts = Field(default_factory=HostFacts)
    memory: MemoryFacts = Field(default_factory=MemoryFacts)
    gpu: GpuFacts = Field(default_factory=GpuFacts)
    cuda_libs: CudaLibFacts = Field(default_factory=CudaLibFacts)
    processes: ProcessFacts = Field(default_factory=ProcessFacts)
    target: TargetEnvFacts = Field(default_factory=TargetEnvFacts)
    configs: ConfigScanFacts = Field(default_factory=ConfigScanFacts)
    playbooks: PlaybookIssuesFacts = Field(default_factory=PlaybookIssuesFacts)
    bandwidth: BandwidthFacts | Unavailable = Field(
        default=NOT_COLLECTED,
        description="G5: a measured device memory bandwidth. Opt-in (preflight --measure, spark-ops bandwidth); "
        "not_collected without a detail when nobody asked, with the reason when the measurement was refused "
        "(other GPU jobs, memory short) or could not run.",
    )

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        return migrate(data)


# --------------------------------------------------------------------------- older snapshots
V1_ARGV_LOST = ("schema-1 snapshot: its tool kept only the redacted, 300-character command line and its own "
                "classification (used as recorded)")


def migrate(data: Any) -> Any:
    """A schema-1 snapshot as schema 2 (anything else passes through untouched).

    Schema 1 recorded each process's kind and memory cap as judged at collect time, and the command line
    only as 300 redacted characters. Schema 2 records the argv and lets the checks judge: a migrated
    process keeps the old verdict in ``v1_class`` and its ``argv`` says why it is missing. Schema 1's
    container kind and image (``image_kind``, ``image_hint``) move to the container's ``v1_class``
    the same way. The input is not modified."""
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        return data
    out = dict(data)
    out["schema_version"] = FACTS_SCHEMA_VERSION
    section = out.get("processes")
    if isinstance(section, dict) and isinstance(section.get("processes"), list):
        procs = []
        for p in section["processes"]:
            if isinstance(p, dict):
                p = dict(p)
                old = {k: p.pop(k) for k in ("kind", "memory_fraction", "memory_cap_source") if k in p}
                p["v1_class"] = old
                p.setdefault("argv", {"unavailable": "not_collected", "detail": V1_ARGV_LOST})
            procs.append(p)
        out["processes"] = {**section, "processes": procs}
    host = out.get("host")
    if isinstance(host, dict) and isinstance(host.get("container"), dict):
        cont = dict(host["container"])
        cont["v1_class"] = {k: cont.pop(k) for k in ("image_kind", "image_hint") if k in cont}
        out["host"] = {**host, "container": cont}
    return out


def implausible_readings(facts: BaseModel) -> list[str]:
    """``where: why`` for every reading the bounds turned unavailable, for the report's notes (a check
    may leave an unknown reading out of its summary; the user still learns the source was wrong)."""
    found: list[str] = []
    stack: list[tuple[str, object]] = [("", facts)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, Unavailable):
            if node.detail.startswith("implausible reading: "):
                found.append(f"{where}: {node.detail.removeprefix('implausible reading: ')}")
        elif isinstance(node, BaseModel):
            stack.extend((f"{where}.{k}" if where else k, getattr(node, k)) for k in type(node).model_fields)
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))
    return sorted(found)
