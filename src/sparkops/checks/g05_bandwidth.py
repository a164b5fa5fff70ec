"""G5 — bandwidth ceiling.

Memory-bound work plans against the spec figure and plateaus far below it. On GB10 the spec is
273 GB/s, a clone-based copy measures 180–192 GB/s and a read kernel 231–234 GB/s: plan on the
measured range. Without a measurement (it is opt-in and intrusive) this is an ``info`` with the
budget to plan against, taken from the GPU's profile. With one (``preflight --measure``,
``spark-ops bandwidth``) each method's median is judged against the range expected for that method
on this GPU: in range passes, well below it is a degraded state (warn). A measurement that was
refused or could not run is a ``skip`` with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkops.checks import identity
from sparkops.checks.base import CheckContext, ev
from sparkops.core.findings import Evidence, Finding, Status
from sparkops.core.units import GIB
from sparkops.facts.model import BandwidthFacts, BandwidthMethod
from sparkops.facts.reading import Unavailable, Why
from sparkops.knowledge import Knowledge, Profile
from sparkops.knowledge.bandwidth import BandwidthSettings

GID = "G5"
LEVELS = ("no-reference", "above", "in-range", "near", "below", "far-below")  # from best to worst

@dataclass(frozen=True)
class MethodJudgment:
    """One method's median against the range expected for it on this GPU."""

    method: BandwidthMethod
    low: float | None  # the reference range, GB/s
    high: float | None
    reference: str  # where the range comes from
    level: str  # one of LEVELS
    spec_gbs: float | None

    def fraction_of_spec(self) -> float | None:
        return self.method.gbs_median / self.spec_gbs if self.spec_gbs else None

    def figure(self) -> str:
        m = self.method
        spec = f"; {self.fraction_of_spec():.0%} of the {self.spec_gbs:.0f} GB/s spec" if self.spec_gbs else ""
        return (f"{m.method} {m.gbs_median:.0f} GB/s (median of {m.reps}, IQR {m.gbs_q1:.0f}–{m.gbs_q3:.0f}, "
                f"{m.counts or 'bytes moved'}{spec})")

    def expected(self) -> str:
        if self.low is None or self.high is None:
            return "no expected range on file"
        rng = f"{self.low:.0f}–{self.high:.0f} GB/s" if self.high != self.low else f"{self.low:.0f} GB/s"
        return f"expected {self.method.method} {rng} ({self.reference})"


@dataclass(frozen=True)
class MeasuredJudgment:
    """The judgment of a measurement: each method, the worst level, the status it makes."""

    methods: tuple[MethodJudgment, ...]
    level: str
    status: Status

    @property
    def far_below(self) -> bool:
        return self.level == "far-below"


def reference_range(method: str, profile: Profile | None, settings: BandwidthSettings) -> tuple[
        float | None, float | None, str]:
    """(low, high, source) the method's median is judged against on this GPU."""
    if profile is None:
        return None, None, "unknown GPU model"
    recorded = settings.expected_gbs.get(profile.key, {}).get(method)
    if recorded:
        return recorded[0], recorded[1], f"recorded for {profile.key}"
    if profile.measured_bandwidth_gbs:
        lo, hi = profile.measured_bandwidth_gbs
        return lo, hi, f"{profile.key} profile's measured range"
    if profile.spec_bandwidth_gbs:
        spec = profile.spec_bandwidth_gbs
        return (spec * settings.spec_floor_fraction, spec,
                f"no measured range on file: {settings.spec_floor_fraction:.0%}–100% of the spec")
    return None, None, f"no spec or measured figure for {profile.key}"


def _level(gbs: float, low: float | None, high: float | None, settings: BandwidthSettings) -> str:
    if low is None or high is None:
        return "no-reference"
    if gbs < low * settings.far_below_fraction:
        return "far-below"
    if gbs < low * settings.below_fraction:
        return "below"
    if gbs < low:
        return "near"
    return "above" if gbs > high else "in-range"


def judge_measurement(bw: BandwidthFacts, profile: Profile | None, kb: Knowledge) -> MeasuredJudgment:
    """Each method's median against its expected range; warn on the worst method below range."""
    settings = kb.thresholds.bandwidth
    spec = profile.spec_bandwidth_gbs if profile else None
    rows = []
    for m in bw.methods:
        lo, hi, source = reference_range(m.method, profile, settings)
        rows.append(MethodJudgment(m, lo, hi, source, _level(m.gbs_median, lo, hi, settings), spec))
    worst = max((r.level for r in rows), key=LEVELS.index, default="no-reference")
    if worst in ("below", "far-below"):
        status = Status.warn
    elif worst == "no-reference":
        status = Status.info
    else:
        status = Status.passed
    return MeasuredJudgment(tuple(rows), worst, status)


def _measured(ctx: CheckContext, bw: BandwidthFacts, name: str, prof: Profile | None,
              evidence: list[Evidence]) -> Finding:
    evidence += [ev("bandwidth.buffer_bytes", bw.buffer_bytes), ev("bandwidth.peak_allocated_bytes", bw.peak_allocated_bytes)]
    evidence += [ev(f"bandwidth.methods[{i}].gbs_median", m.gbs_median) for i, m in enumerate(bw.methods)]
    if not bw.methods:
        return ctx.decide(GID, "G5.no-result", name=name, evidence=evidence)
    j = judge_measurement(bw, prof, ctx.kb)
    notes = list(bw.notes)
    if bw.device_name and prof and ctx.kb.profile_for(bw.device_name) != prof:
        notes.append(f"measured on {bw.device_name} (CUDA device {bw.device_index}), not the {name} the facts name")
    detail = (f"buffers {bw.buffers} x {bw.buffer_bytes / GIB:.2f} GiB ({bw.sizing}); peak allocated "
              f"{bw.peak_allocated_bytes / GIB:.2f} GiB, {bw.allocated_after_bytes} B left after freeing; "
              f"{bw.gpu_time_s:.2f} s of GPU time; "
              + "; ".join(f"{r.method.method}: {r.method.operation}" for r in j.methods))
    figures = ", ".join(r.figure() for r in j.methods)
    if j.status is Status.warn:
        bad = [r for r in j.methods if r.level in ("below", "far-below")]
        worst = max(bad, key=lambda r: LEVELS.index(r.level))
        how = "far below" if worst.level == "far-below" else "well below"
        if bw.forced:
            notes.append("measured with --force: another job or short memory may have pulled the figure down")
        return ctx.decide(GID, "G5.degraded", name=name, method=worst.method.method, gbs=worst.method.gbs_median,
                          operation=worst.method.operation, how=how, expected=worst.expected(), figures=figures,
                          detail=detail, evidence=evidence, notes=notes)
    if j.status is Status.info:
        return ctx.decide(GID, "G5.measured-no-reference", name=name, figures=figures, detail=detail,
                          evidence=evidence, notes=notes)
    ranges = "; ".join(r.expected() for r in j.methods)
    near = [r.method.method for r in j.methods if r.level == "near"]
    tail = f" (slightly below the range: {', '.join(near)})" if near else ""
    return ctx.decide(GID, "G5.measured-in-range", name=name, figures=figures, ranges=ranges, tail=tail,
                      detail=detail, evidence=evidence, notes=notes)


def _plan_on(prof: Profile | None) -> str:
    if prof and prof.measured_bandwidth_gbs:
        lo, hi = prof.measured_bandwidth_gbs
        return f"; plan on {lo:.0f}–{hi:.0f} GB/s measured"
    return ""


def check(ctx: CheckContext) -> Finding:
    bw = ctx.facts.bandwidth
    if isinstance(bw, BandwidthFacts):  # a measurement stands even where NVML saw no GPU (torch did)
        ident = identity.identify(ctx.facts, ctx.kb)
        name = ident.gpu_name or bw.device_name or "this GPU"
        prof = ctx.profile or (ctx.kb.profile_for(bw.device_name) if bw.device_name else None)
        return _measured(ctx, bw, name, prof, [ev("gpu.devices[0].name", ident.gpu_name),
                                               ev("profile", prof.key if prof else None)])
    if ctx.platform == "none":
        return ctx.decide(GID, "G5.no-gpu")
    ident = identity.identify(ctx.facts, ctx.kb)
    name = ident.gpu_name or "this GPU"
    prof = ctx.profile
    evidence = [ev("gpu.devices[0].name", ident.gpu_name), ev("profile", prof.key if prof else None)]
    if isinstance(bw, Unavailable) and (bw.unavailable is not Why.not_collected or bw.detail):
        evidence.append(ev("bandwidth", bw))
        refused = bw.detail.startswith("refused")
        detail = ("The measurement allocates memory and saturates the memory bus, so it is refused while other GPU "
                  "jobs run or memory is short (`spark-ops bandwidth --force` measures anyway)." if refused else
                  "The measurement was asked for but could not run in the target interpreter; "
                  "`spark-ops bandwidth --python PATH` shows the same reason.")
        return ctx.decide(GID, "G5.not-measured", name=name, why=bw.detail or bw.unavailable.value,
                          plan_on=_plan_on(prof), evidence=evidence, detail=detail)
    if prof is None or prof.spec_bandwidth_gbs is None:
        return ctx.decide(GID, "G5.no-spec", name=name, evidence=evidence,
                          detail="Add the model's datasheet figure to gpu_profiles.yaml to get a budget.")
    spec = prof.spec_bandwidth_gbs
    evidence.append(ev("profile.spec_bandwidth_gbs", spec))
    if prof.measured_bandwidth_gbs:
        lo, hi = prof.measured_bandwidth_gbs
        evidence.append(ev("profile.measured_bandwidth_gbs", [lo, hi]))
        return ctx.decide(GID, "G5.spec-and-measured-range", name=name, spec=spec, lo=lo, hi=hi,
                          lo_share=lo / spec, hi_share=hi / spec, detail=prof.notes or "", evidence=evidence,
                          notes=["not measured in this run (opt-in: `spark-ops preflight --measure` or "
                                 "`spark-ops bandwidth`; it allocates memory and loads the GPU)"])
    return ctx.decide(GID, "G5.spec-only", name=name, spec=spec, evidence=evidence,
                      notes=["not measured in this run (opt-in: `spark-ops preflight --measure` or "
                             "`spark-ops bandwidth`)"])
