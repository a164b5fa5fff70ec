"""``spark-ops bandwidth`` as a library call: collect the facts the refusal rules need, measure,
judge (G5), and return one JSON-ready result with its exit code.

Exit codes: 0 measured and within (or above) the expected range, or nothing on file to judge it
against; 1 below the range (warn) or the measurement was refused (skip); 2 far below the expected
range; 3 it could not run (no interpreter, no torch, no GPU, a hang, a crash, garbage, docker trouble).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops.bandwidth.probe import Outcome, measure
from sparkops.core.findings import Finding, Status
from sparkops.core.units import GIB
from sparkops.facts.model import BandwidthFacts, Facts
from sparkops.facts.reading import known
from sparkops.knowledge import Knowledge

COLLECT_PROBES = ("gpu", "memory", "processes", "host")  # what the refusal rules and G5's identity read


class MethodRow(BaseModel):
    """One method's figures beside its reference (the ``--json`` contract)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    method: str
    operation: str
    counts: str
    gbs_median: float
    gbs_q1: float
    gbs_q3: float
    gbs_min: float
    gbs_max: float
    reps: int
    fraction_of_spec: float | None
    expected_gbs: tuple[float, float] | None
    reference: str
    level: str  # in-range | near | above | below | far-below | no-reference


class BandwidthReport(BaseModel):
    """What ``spark-ops bandwidth --json`` prints."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    status: Literal["measured", "refused", "failed"]
    reason: str = ""
    kind: str = ""  # failed: no_torch | no_gpu | not_found | timeout | crash | garbage | oom | docker | error
    target_python: str
    container: str | None = None
    gpu_name: str | None = None
    spec_gbs: float | None = None
    free_memory_bytes: int | None = None
    free_memory_source: str = ""
    neighbours: list[dict[str, Any]] = Field(default_factory=list)
    forced: bool = False
    methods: list[MethodRow] = Field(default_factory=list)
    measurement: BandwidthFacts | None = None
    G5: Finding
    exit_code: int


def exit_code(status: str, finding: Finding, far_below: bool) -> int:
    if status == "failed":
        return 3
    if status == "refused":
        return 1
    if finding.status is Status.warn:
        return 2 if far_below else 1
    return 0


def build(facts: Facts, out: Outcome, kb: Knowledge, forced: bool = False) -> BandwidthReport:
    """Judge the outcome (G5 on the facts with the measurement in them) into the report."""
    from sparkops.checks import context, g05_bandwidth, identity

    facts = facts.model_copy(update={"bandwidth": out.section})
    ctx = context(facts, kb)
    finding = g05_bandwidth.check(ctx)
    ident = identity.identify(facts, kb)
    bw = out.section if isinstance(out.section, BandwidthFacts) else None
    profile = ctx.profile or (kb.profile_for(bw.device_name) if bw and bw.device_name else None)
    rows: list[MethodRow] = []
    far = False
    if bw is not None:
        j = g05_bandwidth.judge_measurement(bw, profile, kb)
        far = j.far_below
        rows = [MethodRow(method=r.method.method, operation=r.method.operation, counts=r.method.counts,
                          gbs_median=r.method.gbs_median, gbs_q1=r.method.gbs_q1, gbs_q3=r.method.gbs_q3,
                          gbs_min=r.method.gbs_min, gbs_max=r.method.gbs_max, reps=r.method.reps,
                          fraction_of_spec=round(f, 4) if (f := r.fraction_of_spec()) is not None else None,
                          expected_gbs=(r.low, r.high) if r.low is not None and r.high is not None else None,
                          reference=r.reference, level=r.level) for r in j.methods]
    a = out.assessment
    return BandwidthReport(
        status=out.status, reason=out.reason, kind=out.kind, target_python=out.python,
        container=out.container_ref or None, gpu_name=ident.gpu_name or (bw.device_name if bw else None),
        spec_gbs=profile.spec_bandwidth_gbs if profile else None,
        free_memory_bytes=a.free_bytes if a else None, free_memory_source=a.free_source if a else "",
        neighbours=[{"pid": n.pid, "name": n.name, "seen_as": n.seen_as, "memory_bytes": n.memory_bytes}
                    for n in (a.neighbours if a else ())],
        forced=forced, methods=rows, measurement=bw, G5=finding,
        exit_code=exit_code(out.status, finding, far),
    )


def bandwidth(python: str | None = None, size_bytes: int | None = None, force: bool = False,
              container: str | None = None, env: Mapping[str, str] | None = None,
              *, kb: Knowledge) -> BandwidthReport:
    """Measure this machine's device memory bandwidth now (``spark-ops bandwidth``) against ``kb``.

    The gpu, memory, processes and host probes run first (quick, offline) so the refusal rules can
    see other GPU jobs and the free memory; then the measurement runs in ``python`` (or inside the
    image ``container``) and G5 judges it. Bad input raises ``InputError``.
    """
    import os

    from sparkops import setup
    from sparkops.probes import collect_snapshot, live_options

    env = dict(os.environ) if env is None else dict(env)
    # the probes' budget even with a container: only the host probes run before the measurement
    opts = live_options(quick=True, python=python, offline=True, env=env, only=COLLECT_PROBES, kb=kb)
    if container:
        opts = setup.container_options(opts, container, kb.matrix)
    facts = collect_snapshot(opts)
    out = measure(facts, kb, python=python, env=env, size_bytes=size_bytes, force=force,
                  container_ref=opts.container_ref)
    return build(facts, out, kb, forced=force)


# --------------------------------------------------------------------------- text
def _gib(n: int | None) -> str:
    return f"{n / GIB:.1f} GiB" if n is not None else "unknown"


def render(rep: BandwidthReport) -> str:
    """The human view: what was measured where, one row per method, the G5 line."""
    where = rep.target_python + (f" (container {rep.container})" if rep.container and rep.container not in
                                 rep.target_python else "")
    lines: list[str] = []
    bw = rep.measurement
    if rep.status == "measured" and bw is not None:
        lines.append(f"device memory bandwidth of {bw.device_name or rep.gpu_name} (CUDA device {bw.device_index}), "
                     f"measured in {where}" + (f" (torch {bw.torch_version})" if bw.torch_version else ""))
        l2 = f"L2 {bw.l2_cache_bytes / 2**20:.0f} MiB" if known(bw.l2_cache_bytes) else "L2 unknown"
        lines.append(f"  buffers: {bw.buffers} x {bw.buffer_bytes / 2**20:.0f} MiB ({bw.sizing}; {l2}); peak allocated "
                     f"{bw.peak_allocated_bytes / 1e9:.3f} GB, {bw.allocated_after_bytes} B left after freeing; "
                     f"{bw.gpu_time_s:.2f} s of GPU time")
        lines.append(f"  {'method':<7} {'median GB/s':>11} {'IQR':>13} {'min-max':>13} {'of spec':>8}  expected (source)")
        for r in rep.methods:
            spec = f"{r.fraction_of_spec:.0%}" if r.fraction_of_spec is not None else "-"
            exp = f"{r.expected_gbs[0]:.0f}-{r.expected_gbs[1]:.0f} ({r.reference})" if r.expected_gbs else r.reference
            lines.append(f"  {r.method:<7} {r.gbs_median:>11.1f} {f'{r.gbs_q1:.0f}-{r.gbs_q3:.0f}':>13} "
                         f"{f'{r.gbs_min:.0f}-{r.gbs_max:.0f}':>13} {spec:>8}  {exp}")
        for r in rep.methods:
            lines.append(f"  {r.method}: {r.operation}; GB/s counts {r.counts}")
        lines += [f"  note: {n}" for n in bw.notes]
    elif rep.status == "refused":
        lines.append(f"bandwidth not measured (refused): {rep.reason}")
        lines.append(f"  free memory: {_gib(rep.free_memory_bytes)} ({rep.free_memory_source})")
    else:
        lines.append(f"bandwidth could not be measured in {where}: {rep.reason}")
    f = rep.G5
    lines.append(f"G5 {f.status.value.upper()}: {f.summary}")
    if f.fix:
        lines.append(f"fix: {f.fix}")
    return "\n".join(lines) + "\n"
