"""fleet-report.json: one report for a group of Sparks launched together through torch.distributed.

Each node's own preflight report sits inside it unchanged (``nodes[].report``, the env-report.json
shape), beside the fleet findings that only a group can show: versions that differ between nodes,
a node that never joined, an outlier node, tensor parallelism across nodes, the measured collective
bandwidth. Findings carry G-numbers like preflight's; the verdict words and exit codes are the same.
Bump ``FLEET_SCHEMA_VERSION`` on any incompatible change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops.core.findings import Evidence, Status
from sparkops.facts.model import Facts
from sparkops.facts.workload import Workload
from sparkops.report.model import Report

FLEET_SCHEMA_VERSION = 1
Verdict = Literal["ready", "ready-with-warnings", "blocked"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class LaunchEnv(_Model):
    """What the launcher (torchrun, or any that sets the torch.distributed variables) told this rank."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None = None
    node_rank: int | None = None  # GROUP_RANK (torchrun) or NODE_RANK
    master_addr: str
    master_port: int
    launcher: Literal["torchrun", "env"] = "env"  # torchrun sets TORCHELASTIC_RUN_ID
    run_id: str = ""
    restart_count: int = 0
    agent_store: bool = False  # torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE)


class RuntimeFacts(_Model):
    """What the process taking part in the fleet saw itself: the torch that really runs the collectives."""

    python: str = ""
    python_version: str = ""
    pid: int = 0
    hostname: str = ""
    torch_version: str = ""
    torch_cuda: str | None = None  # torch.version.cuda; None for a CPU build
    nccl_version: str | None = None  # torch.cuda.nccl.version(), when torch has NCCL
    cuda_available: bool = False
    device_count: int = 0
    device_name: str = ""
    capability: tuple[int, int] | None = None
    backend: str = ""  # the process group's backend
    note: str = ""  # what could not be read, and why


class MemberStatus(_Model):
    """One rank's part in the rendezvous: did it join, from where, and how far it got."""

    rank: int
    joined: bool
    hostname: str = ""
    local_rank: int | None = None
    pid: int | None = None
    last_stage: str = ""  # the last stage it reported: joined, collecting, collected, bandwidth ..., done
    stalled_at: str = ""  # the stage it did not finish in time (empty: it kept up)
    note: str = ""


class FleetNode(_Model):
    """One rank: its placement, the runtime it measured, its facts and its own preflight report."""

    rank: int
    hostname: str
    local_rank: int
    local_world_size: int | None = None
    node_rank: int | None = None
    facts_source: str = "live"  # "live", or "test snapshot <file>" (--test-fake-facts)
    runtime: RuntimeFacts | None = None
    report: Report | None = None
    facts: Facts | None = None  # the snapshot judged: the fleet report replays like a preflight one
    error: str = ""  # why this rank has no facts/report


class BandwidthRow(_Model):
    """One collective at one size. Sizes and bandwidths follow nccl-tests: for all-gather the size is
    the gathered (output) buffer; algbw = size / time; busbw = algbw x 2(n-1)/n (all-reduce) or
    x (n-1)/n (all-gather). The time is the slowest rank's mean per iteration."""

    op: Literal["all_reduce", "all_gather"]
    size_bytes: int
    dtype: str = "float32"
    iterations: int
    warmup: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    rank_time_us: list[float] = Field(default_factory=list)  # each rank's own mean, by rank


class BandwidthResult(_Model):
    """The collective-bandwidth probe (GB/s = 1e9 bytes/s)."""

    status: Literal["measured", "skipped", "timed-out", "failed"]
    reason: str = ""
    backend: str = ""
    timer: str = ""  # "cuda-events" (NCCL) or "perf_counter" (gloo)
    world_size: int = 0
    nodes: int = 0
    rows: list[BandwidthRow] = Field(default_factory=list)
    skipped_sizes: list[str] = Field(default_factory=list)  # sizes left out, each with why
    stalled_ranks: list[int] = Field(default_factory=list)  # ranks that did not finish a collective in time
    reference_busbw_gbs: float | None = None  # the measured two-Spark range to compare with
    reference_source: str = ""


class TransportInfo(_Model):
    """What NCCL's own debug output said about how one rank's data moves."""

    rank: int
    nccl_version: str = ""
    network: str = ""  # "IB" (RoCE/InfiniBand verbs), "Socket" (TCP), a plugin name, "" if not said
    devices: str = ""  # "[0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE"
    gdr: bool | None = None  # GPU Direct RDMA: True/False when NCCL said so, None when it did not
    gdr_evidence: str = ""
    channels: list[str] = Field(default_factory=list)  # distinct "via ..." transports: NET/IB/0/GDRDMA, P2P/CUMEM, SHM
    source: str = ""  # where it was read (the NCCL_DEBUG_FILE), or why not
    lines_read: int = 0


class FleetFinding(_Model):
    """A judgment about the group. ``check`` is the stable id (``fleet.torch``), ``gotcha`` the G-number."""

    check: str
    gotcha: str
    status: Status
    summary: str
    detail: str = ""
    fix: str = ""
    ranks: list[int] = Field(default_factory=list)  # the ranks the finding is about (the odd ones out)
    evidence: list[Evidence] = Field(default_factory=list)


class FleetBlocking(_Model):
    check: str
    gotcha: str
    summary: str
    fix: str
    ranks: list[int] = Field(default_factory=list)


class FleetReport(_Model):
    """The whole group's verdict, each node's report inside."""

    schema_version: int = FLEET_SCHEMA_VERSION
    tool_version: str
    generated_at: datetime
    launcher: str = ""
    backend: str = ""
    world_size: int
    nodes_count: int = Field(description="Distinct hosts among the ranks that joined.")
    hosts: dict[str, list[int]] = Field(default_factory=dict, description="hostname -> its ranks")
    workload: Workload
    members: list[MemberStatus]
    nodes: list[FleetNode]
    findings: list[FleetFinding]
    bandwidth: BandwidthResult | None = None
    transport: list[TransportInfo] = Field(default_factory=list)
    fleet_verdict: Verdict = Field(description="From the fleet findings alone.")
    verdict: Verdict = Field(description="The worst of fleet_verdict and every node's own verdict.")
    blocking: list[FleetBlocking] = Field(default_factory=list)
    join_timeout_s: float = 0.0
    collective_timeout_s: float = 0.0
    notes: list[str] = Field(default_factory=list)
