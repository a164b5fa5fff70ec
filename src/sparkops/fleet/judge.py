"""Judging a fleet: pure functions from the ranks' facts, reports and measurements to fleet findings.

Nothing here touches torch, the network or the clock (except the report's timestamp in
:func:`assemble`). The rule of thumb: what hangs a multi-node job is a *difference* between
nodes, so most checks compare one reading across ranks and name the odd ones out. Readings come
from each rank's facts snapshot first (what preflight judges and a snapshot replays), then from the
runtime the rank's own process saw (the torch that really runs the collectives).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from sparkops import __version__
from sparkops.checks import container
from sparkops.checks.base import ev, installed
from sparkops.core.findings import Evidence, Finding, Status
from sparkops.core.verdict import verdict as _verdict
from sparkops.facts.model import TorchLive, TorchStatic
from sparkops.facts.reading import known
from sparkops.facts.workload import Workload
from sparkops.fleet.collective import allreduce_seconds, human_bytes
from sparkops.fleet.model import (
    BandwidthResult,
    FleetBlocking,
    FleetFinding,
    FleetNode,
    FleetReport,
    MemberStatus,
    TransportInfo,
    Verdict,
)
from sparkops.fleet.settings import FleetKnowledge
from sparkops.knowledge import Knowledge

VERDICT_ORDER = ("ready", "ready-with-warnings", "blocked")


@dataclass(frozen=True)
class Reading:
    """One rank's value for one aspect; ``value`` None means unknown, ``source`` says where or why."""

    value: str | None
    source: str


# --------------------------------------------------------------------------- readings per rank
def _facts_note(node: FleetNode) -> str:
    return node.error or "no facts from this rank"


def torch_build(node: FleetNode) -> Reading:
    f = node.facts
    if f is not None:
        t = f.target.torch
        if isinstance(t, TorchStatic):
            return Reading(f"{t.version} (CUDA {t.cuda or 'none: CPU build'})", "facts: target.torch")
        live = f.target.live
        if isinstance(live, TorchLive) and live.import_ok and live.version:
            return Reading(f"{live.version} (CUDA {live.cuda or 'none: CPU build'})", "facts: target.live")
    rt = node.runtime
    if rt is not None and rt.torch_version:
        return Reading(f"{rt.torch_version} (CUDA {rt.torch_cuda or 'none: CPU build'})", "runtime: this rank's torch")
    return Reading(None, "torch not found" if f is not None else _facts_note(node))


_NCCL_NUM = re.compile(r"\d+\.\d+\.\d+")


def _nccl_norm(v: str) -> str:
    m = _NCCL_NUM.search(v)
    return m.group(0) if m else v.strip()


def nccl_version(node: FleetNode, transport: TransportInfo | None = None) -> Reading:
    f = node.facts
    if f is not None:
        env = f.host.env.get("NCCL_VERSION", "").strip()
        if env:
            return Reading(_nccl_norm(env), "facts: NCCL_VERSION (container)")
        dists = installed(f)
        for wheel in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl"):
            if wheel in dists:
                return Reading(_nccl_norm(dists[wheel]), f"facts: wheel {wheel}")
    rt = node.runtime
    if rt is not None and rt.nccl_version:
        return Reading(_nccl_norm(rt.nccl_version), "runtime: torch.cuda.nccl.version()")
    if transport is not None and transport.nccl_version:
        return Reading(_nccl_norm(transport.nccl_version), "NCCL debug output")
    if rt is not None and not rt.torch_cuda:
        return Reading(None, "a CPU build of torch has no NCCL")
    return Reading(None, "no NCCL version in the facts or the runtime")


def driver_version(node: FleetNode) -> Reading:
    f = node.facts
    if f is None:
        return Reading(None, _facts_note(node))
    d = f.gpu.driver_version
    if known(d):
        cuda = f.gpu.cuda_driver_version
        return Reading(f"{d}" + (f" (CUDA {cuda})" if known(cuda) else ""), "facts: gpu.driver_version")
    return Reading(None, f"no driver reading ({d})" if f.gpu.devices else "no NVIDIA GPU seen")


def gpu_model(node: FleetNode) -> Reading:
    f = node.facts
    if f is not None and f.gpu.devices:
        dev = f.gpu.devices[node.local_rank] if 0 <= node.local_rank < len(f.gpu.devices) else f.gpu.devices[0]
        return Reading(dev.name, "facts: gpu.devices")
    if node.runtime is not None and node.runtime.device_name:
        return Reading(node.runtime.device_name, "runtime")
    return Reading(None, "no NVIDIA GPU seen")


def container_identity(node: FleetNode) -> Reading:
    """The image a rank runs in: its digest when known (``--container``), else what the markers say
    (image name and NGC build id). No marker on a host is a value ("no container marker"), since
    two bare hosts do match; it is not proof of a bare host (cgroup v2 hides runtimes)."""
    f = node.facts
    if f is None:
        return Reading(None, _facts_note(node))
    t = f.target
    if isinstance(t.container_digest, str) and t.container_digest:
        return Reading(t.container_digest, "facts: target.container_digest")
    c = container.classify(f.host.container)
    build = f.host.container.nvidia_env.get("NVIDIA_BUILD_ID", "")
    if known(c.image_kind) and c.image_kind != "none":
        name = c.image_hint or f"unnamed {c.image_kind} container (markers: {', '.join(c.markers[:3])})"
        return Reading(name + (f" (NVIDIA_BUILD_ID {build})" if build else ""), "facts: container markers")
    if not c.markers:
        if f.probes.get("host") is not None and not f.probes["host"].ok:
            return Reading(None, f"host probe failed: {f.probes['host'].reason}")
        return Reading("no container marker", "facts: container markers (none matched)")
    return Reading(None, f"container markers {c.markers} but no image named")


def _by_rank(values: dict[int, object]) -> dict[str, object]:
    """Evidence keyed by rank as JSON keys are (strings), so a report reads back equal."""
    return {str(r): v for r, v in sorted(values.items())}


def _rank_list(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(str(r) for r in sorted(ranks))


def _device(node: FleetNode):  # noqa: ANN202 - GpuDevice | None
    f = node.facts
    if f is None or not f.gpu.devices:
        return None
    return f.gpu.devices[node.local_rank] if 0 <= node.local_rank < len(f.gpu.devices) else f.gpu.devices[0]


# --------------------------------------------------------------------------- comparison
def compare(check: str, gotcha: str, what: str, readings: dict[int, Reading], fix: str,
            differ_status: Status = Status.fail) -> FleetFinding:
    """One aspect across ranks: pass when every rank reads the same, ``differ_status`` naming the odd
    ranks out when they differ, unknown when some rank could not be read."""
    evidence = [Evidence(fact=f"rank {r}: {rd.source}", value=rd.value) for r, rd in sorted(readings.items())]
    groups: dict[str, list[int]] = {}
    for r, rd in sorted(readings.items()):
        if rd.value is not None:
            groups.setdefault(rd.value, []).append(r)
    unknown = sorted(r for r, rd in readings.items() if rd.value is None)
    if len(readings) == 1 and not unknown:
        (value,) = groups
        return FleetFinding(check=check, gotcha=gotcha, status=Status.info, evidence=evidence,
                            summary=f"one rank only, nothing to compare: {what} {value}")
    if len(groups) > 1:
        # the odd ones out: every group but the largest (a tie keeps rank 0's group as the reference)
        ref = max(groups.items(), key=lambda kv: (len(kv[1]), 0 in kv[1]))[0]
        odd = sorted(r for v, rs in groups.items() if v != ref for r in rs)
        parts = "; ".join(f"{v} on {_rank_list(rs)}" for v, rs in groups.items())
        detail = f"unknown on {_rank_list(unknown)}" if unknown else ""
        return FleetFinding(check=check, gotcha=gotcha, status=differ_status, ranks=odd, evidence=evidence,
                            summary=f"{what} differs between ranks: {parts}", detail=detail, fix=fix)
    if not groups:
        why = readings[unknown[0]].source if unknown else "no ranks"
        return FleetFinding(check=check, gotcha=gotcha, status=Status.unknown, ranks=unknown, evidence=evidence,
                            summary=f"{what} could not be read on any rank ({why})")
    (value,) = groups
    if unknown:
        whys = "; ".join(f"rank {r}: {readings[r].source}" for r in unknown[:4])
        return FleetFinding(check=check, gotcha=gotcha, status=Status.unknown, ranks=unknown, evidence=evidence,
                            summary=f"{what} {value} on {_rank_list(groups[value])}, unknown on {_rank_list(unknown)}",
                            detail=whys)
    return FleetFinding(check=check, gotcha=gotcha, status=Status.passed, evidence=evidence,
                        summary=f"{what} {value} on all {len(readings)} ranks")


def _per_rank(nodes: list[FleetNode], read: Callable[[FleetNode], Reading]) -> dict[int, Reading]:
    return {n.rank: read(n) for n in nodes}


# --------------------------------------------------------------------------- the checks
def check_membership(members: list[MemberStatus], world_size: int, join_timeout_s: float,
                     fk: FleetKnowledge) -> FleetFinding:
    missing = sorted(m.rank for m in members if not m.joined)
    stalled = sorted((m for m in members if m.joined and m.stalled_at), key=lambda m: m.rank)
    hosts: dict[str, list[int]] = {}
    for m in members:
        if m.joined:
            hosts.setdefault(m.hostname or "?", []).append(m.rank)
    where = ", ".join(f"{h} ({_rank_list(rs)})" for h, rs in hosts.items())
    evidence = [ev("members", [m.model_dump(mode="json") for m in members])]
    if missing:
        return FleetFinding(
            check="fleet.membership", gotcha="G10", status=Status.fail, ranks=missing, evidence=evidence,
            summary=f"{_rank_list(missing)} of world size {world_size} never joined within {join_timeout_s:g} s"
                    + (f"; joined: {where}" if where else ""),
            detail="A rank that never joins hangs every collective of the real job; nothing after the "
                   "rendezvous was attempted with the ranks that did come.", fix=fk.fix("membership"))
    if stalled:
        parts = "; ".join(f"rank {m.rank} ({m.hostname or '?'}) stalled in {m.stalled_at}"
                          + (f": {m.note}" if m.note else "") for m in stalled)
        return FleetFinding(check="fleet.membership", gotcha="G10", status=Status.fail,
                            ranks=[m.rank for m in stalled], evidence=evidence, summary=parts, fix=fk.fix("stalled"))
    return FleetFinding(check="fleet.membership", gotcha="G10", status=Status.passed, evidence=evidence,
                        summary=f"all {world_size} ranks joined from {len(hosts)} host(s): {where}")


def check_torch(nodes: list[FleetNode], fk: FleetKnowledge) -> FleetFinding:
    f = compare("fleet.torch", "G1", "torch build", _per_rank(nodes, torch_build), fk.fix("torch"))
    rts = {n.rank: n.runtime.torch_version for n in nodes if n.runtime is not None and n.runtime.torch_version}
    off = [n.rank for n in nodes if n.facts is not None and n.rank in rts and n.facts_source == "live"
           and (r := torch_build(n)).source.startswith("facts") and r.value and not r.value.startswith(rts[n.rank] + " ")]
    if off:
        f.detail = "; ".join(filter(None, [f.detail, f"on {_rank_list(off)} the judged interpreter's torch is not the "
                                           "torch running this check (--python names another environment)"]))
    return f


def check_driver(nodes: list[FleetNode], fk: FleetKnowledge) -> FleetFinding:
    f = compare("fleet.driver", "G1", "NVIDIA driver", _per_rank(nodes, driver_version), fk.fix("driver"))
    g = compare("fleet.gpu", "G1", "GPU", _per_rank(nodes, gpu_model), fk.fix("gpu"), differ_status=Status.warn)
    if g.status is Status.warn:
        if f.status in (Status.passed, Status.info):
            return g.model_copy(update={"check": "fleet.driver", "detail": f"{f.summary}; {g.detail}".strip("; ")})
        f.detail = "; ".join(filter(None, [f.detail, g.summary]))
    return f


def check_nccl(nodes: list[FleetNode], transport: list[TransportInfo], fk: FleetKnowledge) -> FleetFinding:
    by_rank = {t.rank: t for t in transport}
    readings = {n.rank: nccl_version(n, by_rank.get(n.rank)) for n in nodes}
    return compare("fleet.nccl", "G10", "NCCL", readings, fk.fix("nccl"))


def check_container(nodes: list[FleetNode], fk: FleetKnowledge) -> FleetFinding:
    return compare("fleet.container", "G9", "container image", _per_rank(nodes, container_identity), fk.fix("container"))


def check_stack(nodes: list[FleetNode], kb: Knowledge, fk: FleetKnowledge) -> FleetFinding:
    """The training stack of the dated matrix, package by package, and each node's G9 state."""
    names = [p.name for p in kb.matrix.known_good]
    per: dict[int, dict[str, str]] = {}
    unread: list[int] = []
    for n in nodes:
        if n.facts is None or not known(n.facts.target.distributions):
            unread.append(n.rank)
            continue
        have = installed(n.facts)
        per[n.rank] = {name: have.get(name, "absent") for name in names}
        py = n.facts.target.python_version
        per[n.rank]["python"] = py if known(py) else "unknown"  # type: ignore[assignment]
    diffs: list[str] = []
    odd: set[int] = set()
    for name in [*names, "python"]:
        vals: dict[str, list[int]] = {}
        for r, pk in per.items():
            vals.setdefault(pk[name], []).append(r)
        if len(vals) > 1:
            ref = max(vals.items(), key=lambda kv: (len(kv[1]), 0 in kv[1]))[0]
            odd.update(r for v, rs in vals.items() if v != ref for r in rs)
            diffs.append(f"{name} " + ", ".join(f"{v} on {_rank_list(rs)}" for v, rs in vals.items()))
    g9 = {n.rank: _node_status(n, "G9") for n in nodes if n.report is not None}
    g9_text = ", ".join(f"rank {r}: {s}" for r, s in sorted(g9.items()))
    evidence = [ev("matrix.version", kb.matrix.version), ev("packages by rank", _by_rank(per)),  # type: ignore[arg-type]
                ev("G9 by rank", _by_rank(g9))]  # type: ignore[arg-type]
    if diffs:
        return FleetFinding(check="fleet.stack", gotcha="G9", status=Status.warn, ranks=sorted(odd), evidence=evidence,
                            summary=f"training stack differs between ranks: {'; '.join(diffs[:3])}"
                                    + (f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""),
                            detail="; ".join(diffs[3:]) + (f"; G9 {g9_text}" if g9_text else ""), fix=fk.fix("stack"))
    if unread and len(unread) == len(nodes):
        return FleetFinding(check="fleet.stack", gotcha="G9", status=Status.unknown, ranks=unread, evidence=evidence,
                            summary="installed packages could not be read on any rank")
    if unread:
        return FleetFinding(check="fleet.stack", gotcha="G9", status=Status.unknown, ranks=unread, evidence=evidence,
                            summary=f"installed packages could not be read on {_rank_list(unread)}; the others match")
    if len(per) == 1:
        return FleetFinding(check="fleet.stack", gotcha="G9", status=Status.info, evidence=evidence,
                            summary="one rank only, nothing to compare" + (f"; G9 {g9_text}" if g9_text else ""))
    states = sorted(set(g9.values()))
    g9_part = f"G9 {states[0]} on every rank" if len(states) == 1 else f"G9 {g9_text}" if g9_text else ""
    return FleetFinding(check="fleet.stack", gotcha="G9", status=Status.passed, evidence=evidence,
                        summary=f"same training stack on all {len(per)} ranks ({len(names)} matrix packages and "
                                f"python compared)" + (f"; {g9_part}" if g9_part else ""))


def _node_status(node: FleetNode, gid: str) -> str:
    if node.report is None:
        return "no report"
    f = next((x for x in node.report.findings if x.gotcha == gid), None)
    return f.status.value if f is not None else "absent"


def _node_finding(node: FleetNode, gid: str) -> Finding | None:
    if node.report is None:
        return None
    return next((x for x in node.report.findings if x.gotcha == gid), None)


def check_thermal(nodes: list[FleetNode], kb: Knowledge, fk: FleetKnowledge) -> FleetFinding:
    """Temperatures and clock limits: a node far hotter than the rest, or capped lower, sets every
    collective's pace; a node's own G4 warning is the fleet's too."""
    temps: dict[int, float] = {}
    clocks: dict[int, float] = {}
    for n in nodes:
        d = _device(n)
        if d is None:
            continue
        if known(d.temperature_c):
            temps[n.rank] = float(d.temperature_c)  # type: ignore[arg-type]
        if known(d.sm_clock_max_mhz):
            clocks[n.rank] = float(d.sm_clock_max_mhz)  # type: ignore[arg-type]
    evidence = [ev("temperature_c by rank", _by_rank(temps)), ev("sm_clock_max_mhz by rank", _by_rank(clocks)),  # type: ignore[arg-type]
                ev("G4 by rank", _by_rank({n.rank: _node_status(n, "G4") for n in nodes}))]
    if not temps and not clocks:
        return FleetFinding(check="fleet.thermal", gotcha="G4", status=Status.skip, evidence=evidence,
                            summary="no GPU temperature or clock reading on any rank")
    warns: list[str] = []
    odd: set[int] = set()
    hot_c = kb.thresholds.g4.hot_c
    if temps:
        med = statistics.median(temps.values())
        for r, t in sorted(temps.items()):
            if t >= hot_c or (len(temps) > 1 and t >= med + fk.outliers.temperature_outlier_c):
                odd.add(r)
                warns.append(f"rank {r} at {t:g} °C (fleet median {med:g} °C)")
    if len(clocks) > 1 and max(clocks.values()) - min(clocks.values()) > fk.outliers.clock_max_mismatch_mhz:
        top = max(clocks.values())
        low = sorted(r for r, c in clocks.items() if top - c > fk.outliers.clock_max_mismatch_mhz)
        odd.update(low)
        warns.append(f"max SM clock {', '.join(f'{clocks[r]:g}' for r in low)} MHz on {_rank_list(low)} vs {top:g} MHz")
    for n in nodes:
        g4 = _node_finding(n, "G4")
        if g4 is not None and g4.status is Status.warn:
            odd.add(n.rank)
            warns.append(f"rank {n.rank} G4: {g4.summary}")
    t_range = f"{min(temps.values()):g}-{max(temps.values()):g} °C" if temps else "temperature unknown"
    c_range = (f"max SM clock {min(clocks.values()):g}-{max(clocks.values()):g} MHz" if clocks else "clocks unknown")
    if warns:
        return FleetFinding(check="fleet.thermal", gotcha="G4", status=Status.warn, ranks=sorted(odd), evidence=evidence,
                            summary=f"outlier node(s): {'; '.join(warns[:2])}" + (f" (+{len(warns) - 2} more)" if len(warns) > 2 else ""),
                            detail="; ".join(warns[2:] + [f"fleet: {t_range}, {c_range}"]), fix=fk.fix("thermal"))
    missing = [n.rank for n in nodes if n.rank not in temps]
    if missing:
        return FleetFinding(check="fleet.thermal", gotcha="G4", status=Status.unknown, ranks=missing, evidence=evidence,
                            summary=f"{t_range}, {c_range} where read; no reading on {_rank_list(missing)}")
    return FleetFinding(check="fleet.thermal", gotcha="G4", status=Status.passed, evidence=evidence,
                        summary=f"no outlier: {t_range}, {c_range} across {len(nodes)} ranks "
                                "(a preflight snapshot; a load test shows throttling)")


def check_memory(nodes: list[FleetNode], fk: FleetKnowledge) -> FleetFinding:
    """Headroom per node: DDP/FSDP ranks hold equal shares, so the node with the least binds the job."""
    head = {n.rank: n.report.headroom_gib for n in nodes if n.report is not None and n.report.headroom_gib is not None}
    g3 = {n.rank: _node_finding(n, "G3") for n in nodes}
    evidence = [ev("headroom_gib by rank", _by_rank(head)),  # type: ignore[arg-type]
                ev("G3 by rank", _by_rank({r: f.status.value if f else "no report" for r, f in g3.items()}))]
    hosts: dict[str, list[int]] = {}
    for n in nodes:
        hosts.setdefault(n.hostname, []).append(n.rank)
    shared = {h: rs for h, rs in hosts.items() if len(rs) > 1}
    share_note = ("; " + ", ".join(f"{_rank_list(rs)} share {h}'s memory: their needs add up" for h, rs in shared.items())
                  if shared else "")
    failed = [r for r, f in g3.items() if f is not None and f.status is Status.fail]
    if failed:
        r = failed[0]
        return FleetFinding(check="fleet.memory", gotcha="G3", status=Status.fail, ranks=failed, evidence=evidence,
                            summary=f"the workload does not fit on {_rank_list(failed)}: {g3[r].summary}",  # type: ignore[union-attr]
                            detail=share_note.lstrip("; "), fix=fk.fix("memory"))
    if not head:
        return FleetFinding(check="fleet.memory", gotcha="G3", status=Status.skip, evidence=evidence,
                            summary="no memory budget on any rank (G3 could not compute a headroom)")
    lo_r = min(head, key=lambda r: head[r])
    hi = max(head.values())
    rng = f"headroom {min(head.values()):g}-{hi:g} GiB"
    warns = []
    if hi - head[lo_r] >= fk.outliers.headroom_spread_warn_gb:
        low = sorted(r for r, h in head.items() if hi - h >= fk.outliers.headroom_spread_warn_gb)
        warns.append(f"{_rank_list(low)} {', '.join(f'{head[r]:g}' for r in low)} GiB headroom vs {hi:g} GiB on the best: "
                     f"the smallest binds every rank")
    warned = [r for r, f in g3.items() if f is not None and f.status is Status.warn]
    if warned:
        warns.append(f"G3 warns on {_rank_list(warned)}: {g3[warned[0]].summary}")  # type: ignore[union-attr]
    if warns:
        odd = sorted(set(warned) | {r for r, h in head.items() if hi - h >= fk.outliers.headroom_spread_warn_gb})
        return FleetFinding(check="fleet.memory", gotcha="G3", status=Status.warn, ranks=odd, evidence=evidence,
                            summary="; ".join(warns), detail=f"{rng}{share_note}", fix=fk.fix("memory"))
    missing = [n.rank for n in nodes if n.rank not in head]
    if missing:
        return FleetFinding(check="fleet.memory", gotcha="G3", status=Status.unknown, ranks=missing, evidence=evidence,
                            summary=f"{rng} where known; no budget on {_rank_list(missing)}", detail=share_note.lstrip("; "))
    return FleetFinding(check="fleet.memory", gotcha="G3", status=Status.info, evidence=evidence,
                        summary=f"{rng} across {len(head)} ranks; the smallest ({head[lo_r]:g} GiB, rank {lo_r}) is "
                                "the budget per rank", detail=share_note.lstrip("; "))


def check_topology(nodes: list[FleetNode], world_size: int, hosts: dict[str, list[int]], backend: str,
                   fk: FleetKnowledge) -> FleetFinding:
    """G10 with the real topology: node count from the process group, TP from each rank's configs
    (each node's own G10 was judged with that node count)."""
    layout = ", ".join(f"{h}: {_rank_list(rs)}" for h, rs in hosts.items())
    head = f"{len(hosts)} node(s), world size {world_size} ({layout})"
    evidence = [ev("hosts", hosts), ev("G10 by rank", _by_rank({n.rank: _node_status(n, "G10") for n in nodes}))]
    order = {Status.fail: 0, Status.warn: 1, Status.unknown: 2, Status.skip: 3, Status.info: 4, Status.passed: 5}
    g10 = [(n.rank, f) for n in nodes if (f := _node_finding(n, "G10")) is not None]
    crowded = [f"{h} runs {len(rs)} ranks on one GB10" for h, rs in hosts.items() if len(rs) > 1 and backend == "nccl"
               and any(n.rank in rs and n.report is not None and n.report.platform == "dgx-spark" for n in nodes)]
    if not g10:
        return FleetFinding(check="fleet.topology", gotcha="G10", status=Status.unknown, evidence=evidence,
                            summary=f"{head}; no rank's G10 judgment is available")
    worst_status = min((f.status for _, f in g10), key=lambda s: order[s])
    worst = [(r, f) for r, f in g10 if f.status is worst_status]
    r0, f0 = worst[0]
    ranks = sorted(r for r, _ in worst) if worst_status in (Status.fail, Status.warn, Status.unknown) else []
    status = worst_status
    summary = f"{head}: {f0.summary}" + (f" (rank {r0}; same on {_rank_list(ranks)})" if len(ranks) > 1 else
                                         f" (rank {r0})" if ranks else "")
    if crowded and status not in (Status.fail,):
        status = Status.fail
        summary = f"{head}: {'; '.join(crowded)} (NCCL needs one GPU per rank)"
    return FleetFinding(check="fleet.topology", gotcha="G10", status=status, ranks=ranks, evidence=evidence,
                        summary=summary, detail=f0.detail,
                        fix=fk.fix("topology") if status in (Status.fail, Status.warn) else "")


def check_bandwidth(bw: BandwidthResult | None, hosts: dict[str, list[int]], workload: Workload,
                    fk: FleetKnowledge) -> FleetFinding:
    s = fk.bandwidth
    if bw is None or bw.status == "skipped":
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.skip,
                            summary=f"collective bandwidth not measured: {bw.reason if bw else 'not run'}")
    evidence = [ev("bandwidth.rows", [r.model_dump(mode="json") for r in bw.rows]),
                ev("bandwidth.reference_busbw_gbs", s.reference_busbw_gbs)]
    if bw.status == "timed-out":
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.fail, ranks=bw.stalled_ranks,
                            evidence=evidence, summary=f"collective hung: {bw.reason}", fix=fk.fix("stalled"))
    if bw.status == "failed":
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.fail, evidence=evidence,
                            summary=f"collective failed: {bw.reason}", fix=fk.fix("bandwidth"))
    if not bw.rows:
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.skip, evidence=evidence,
                            summary=f"no size could be measured: {'; '.join(bw.skipped_sizes) or bw.reason}")
    ag = max((r for r in bw.rows if r.op == "all_gather"), key=lambda r: r.size_bytes, default=None)
    ar = max((r for r in bw.rows if r.op == "all_reduce"), key=lambda r: r.size_bytes, default=None)
    shown = "; ".join(f"{r.op.replace('_', '-')} {r.busbw_gbs:.2f} GB/s busbw at {human_bytes(r.size_bytes)}"
                      for r in (ar, ag) if r is not None)
    # what DDP/FSDP would move per step at the measured all-reduce bus bandwidth
    params_b = workload.params_b or s.example_params_b
    grad_bytes = params_b * 1e9 * s.grad_bytes_per_param
    t_ddp = allreduce_seconds(grad_bytes, ar.busbw_gbs, bw.world_size) if ar is not None else None
    sync = ""
    if t_ddp is not None:
        sync = (f"at this rate DDP's gradient all-reduce for a model of {params_b:g}B parameters in bf16 "
                f"({grad_bytes / 1e9:.0f} GB) takes about {t_ddp:.2f} s a step, FSDP about "
                f"{t_ddp * s.fsdp_traffic_factor:.2f} s; tensor parallelism would cross the link every layer")
    ref = f"two-Spark reference ~{s.reference_busbw_gbs:g} GB/s all-gather busbw ({s.reference_source})"
    if bw.world_size < 2:
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.info, evidence=evidence,
                            summary=f"one rank: nothing crosses a link (busbw 0 by definition); {bw.backend}'s "
                                    f"one-rank algbw ({max(r.algbw_gbs for r in bw.rows):.2f} GB/s) is the rate of "
                                    "a collective with no one to talk to, not of any link",
                            detail=ref)
    if len(hosts) < 2:
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.info, evidence=evidence,
                            summary=f"all ranks on one host, so this says nothing about ConnectX-7: {shown} ({bw.backend})",
                            detail=ref)
    if bw.backend != "nccl":
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.info, evidence=evidence,
                            summary=f"{shown} over {bw.backend} (TCP): a lower bound, not what NCCL reaches",
                            detail="; ".join(filter(None, [sync, ref])))
    best = ag.busbw_gbs if ag is not None else (ar.busbw_gbs if ar is not None else 0.0)
    if best < s.warn_fraction * s.reference_busbw_gbs:
        return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.warn, evidence=evidence,
                            summary=f"{shown}: below {s.warn_fraction:.0%} of the {s.reference_busbw_gbs:g} GB/s "
                                    "two-Spark reference",
                            detail="; ".join(filter(None, [sync, ref, "small sizes are latency-bound; judge the largest"])),
                            fix=fk.fix("bandwidth"))
    return FleetFinding(check="fleet.bandwidth", gotcha="G10", status=Status.passed, evidence=evidence,
                        summary=f"{shown} (reference ~{s.reference_busbw_gbs:g} GB/s): enough for DDP/FSDP",
                        detail="; ".join(filter(None, [sync, ref])))


def check_transport(transport: list[TransportInfo], backend: str, hosts: dict[str, list[int]],
                    fk: FleetKnowledge) -> FleetFinding | None:
    """How NCCL moves data between nodes, as its own debug output says (NCCL only)."""
    if backend != "nccl":
        return None
    evidence = [ev("transport", [t.model_dump(mode="json") for t in transport])]
    said = [t for t in transport if t.network or t.channels or t.gdr is not None]
    if not said:
        if not transport:
            why = "no rank sent its NCCL debug output"
        elif transport[0].lines_read == 0 and transport[0].source.startswith("NCCL_DEBUG_FILE"):
            why = "NCCL wrote no debug output (no NCCL collective ran)"
        else:
            why = transport[0].source
        return FleetFinding(check="fleet.transport", gotcha="G10", status=Status.skip, evidence=evidence,
                            summary=f"NCCL's transport not read: {why}")
    multi = len(hosts) > 1
    socket = sorted(t.rank for t in said if t.network.lower().startswith("socket"))
    if multi and socket:
        return FleetFinding(check="fleet.transport", gotcha="G10", status=Status.warn, ranks=socket, evidence=evidence,
                            summary=f"NCCL uses TCP sockets between nodes on {_rank_list(socket)}, not RoCE",
                            fix=fk.fix("transport"))
    t = said[0]
    nets = sorted({x.network for x in said if x.network})
    gdr = {x.gdr for x in said}
    gdr_text = ("GPU Direct RDMA in use" if gdr == {True} else "no GPU Direct RDMA (host-staged, as recorded between two Sparks)" if gdr == {False}
                else "GPU Direct RDMA not reported" if gdr == {None} else "GPU Direct RDMA on some ranks only")
    via = sorted({c for x in said for c in x.channels})
    summary = (f"NCCL {t.nccl_version or '?'} network {'/'.join(nets) or '?'}"
               + (f" over {t.devices}" if t.devices else "") + f"; {gdr_text}"
               + (f"; channels via {', '.join(via[:4])}" if via else "")
               + ("" if multi else " (one host: no inter-node transport in use)"))
    return FleetFinding(check="fleet.transport", gotcha="G10", status=Status.info, evidence=evidence,
                        summary=summary, detail=t.gdr_evidence)


# --------------------------------------------------------------------------- putting it together
def hosts_of(members: list[MemberStatus]) -> dict[str, list[int]]:
    hosts: dict[str, list[int]] = {}
    for m in sorted(members, key=lambda m: m.rank):
        if m.joined:
            hosts.setdefault(m.hostname or "?", []).append(m.rank)
    return hosts


def node_workload(workload: Workload, nodes_count: int) -> Workload:
    """The workload each node is judged with: the node count comes from the process group unless
    the user named one."""
    if workload.nodes is not None:
        return workload
    return workload.model_copy(update={"nodes": nodes_count})


def build_node_reports(nodes: list[FleetNode], workload: Workload, kb: Knowledge, nodes_count: int) -> list[FleetNode]:
    """Each rank's own preflight report, judged from its facts with the fleet's node count."""
    from sparkops.planner.preflight import plan_for_preflight
    from sparkops.report.build import build_report
    from sparkops.report.model import PlanSummary

    wl = node_workload(workload, nodes_count)
    out = []
    for n in nodes:
        if n.facts is not None and n.report is None:
            node_wl, plan = plan_for_preflight(n.facts, wl, kb)
            report = build_report(n.facts, node_wl, kb, n.facts_source, PlanSummary(**plan) if plan else None)
            n = n.model_copy(update={"report": report})
        out.append(n)
    return out


def judge(nodes: list[FleetNode], members: list[MemberStatus], world_size: int, backend: str,
          bandwidth: BandwidthResult | None, transport: list[TransportInfo], workload: Workload,
          kb: Knowledge, fk: FleetKnowledge, join_timeout_s: float) -> list[FleetFinding]:
    """Every fleet finding, membership first."""
    hosts = hosts_of(members)
    findings = [check_membership(members, world_size, join_timeout_s, fk)]
    if nodes:
        findings += [check_torch(nodes, fk), check_driver(nodes, fk), check_nccl(nodes, transport, fk),
                     check_container(nodes, fk), check_stack(nodes, kb, fk), check_thermal(nodes, kb, fk),
                     check_memory(nodes, fk), check_topology(nodes, world_size, hosts, backend, fk)]
    findings.append(check_bandwidth(bandwidth, hosts, workload, fk))
    t = check_transport(transport, backend, hosts, fk)
    if t is not None:
        findings.append(t)
    return findings


def worst(*verdicts: str) -> Verdict:
    return max(verdicts, key=VERDICT_ORDER.index)  # type: ignore[return-value]


def assemble(*, nodes: list[FleetNode], members: list[MemberStatus], world_size: int, backend: str, launcher: str,
             bandwidth: BandwidthResult | None, transport: list[TransportInfo], workload: Workload, kb: Knowledge,
             fk: FleetKnowledge, join_timeout_s: float, collective_timeout_s: float = 0.0,
             notes: list[str] | None = None, now: datetime | None = None) -> FleetReport:
    """Node reports, fleet findings, verdicts and the blocking list: the whole fleet report."""
    hosts = hosts_of(members)
    nodes = build_node_reports(sorted(nodes, key=lambda n: n.rank), workload, kb, max(len(hosts), 1))
    findings = judge(nodes, members, world_size, backend, bandwidth, transport, workload, kb, fk, join_timeout_s)
    fleet_v = _verdict(findings)  # type: ignore[arg-type]
    node_vs = [n.report.verdict for n in nodes if n.report is not None]
    blocking = [FleetBlocking(check=f.check, gotcha=f.gotcha, summary=f.summary, fix=f.fix, ranks=f.ranks)
                for f in findings if f.status is Status.fail]
    for n in nodes:
        if n.report is not None:
            blocking += [FleetBlocking(check=f"rank {n.rank}", gotcha=b.gotcha, summary=b.summary, fix=b.fix, ranks=[n.rank])
                         for b in n.report.blocking]
    return FleetReport(
        tool_version=__version__, generated_at=now or datetime.now(timezone.utc),  # noqa: UP017
        launcher=launcher, backend=backend, world_size=world_size, nodes_count=len(hosts), hosts=hosts,
        workload=node_workload(workload, max(len(hosts), 1)), members=sorted(members, key=lambda m: m.rank),
        nodes=nodes, findings=findings, bandwidth=bandwidth, transport=sorted(transport, key=lambda t: t.rank),
        fleet_verdict=fleet_v, verdict=worst(fleet_v, *node_vs), blocking=blocking,
        join_timeout_s=join_timeout_s, collective_timeout_s=collective_timeout_s, notes=notes or [])


def exit_code(report: FleetReport) -> int:
    from sparkops.report.formats import EXIT_CODES

    return EXIT_CODES[report.verdict]
