"""From a judgment to env-report.json's model: the report layer's one assembly step.

The checks conclude (:func:`sparkops.checks.judge`); this module only arranges their judgment with
the snapshot's provenance (which probes failed or fell back, the judged interpreter) into the
:class:`~sparkops.report.model.Report` contract, and passes every string through the redaction.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sparkops import __version__
from sparkops.checks import Judgment, judge
from sparkops.core.units import gib_to_gb
from sparkops.facts.model import Facts, ProbeRecord, implausible_readings
from sparkops.facts.reading import known
from sparkops.facts.redact import redact_model
from sparkops.facts.workload import Workload
from sparkops.knowledge import Knowledge
from sparkops.report.model import GOTCHA_IDS, BlockingItem, Identity, PlanSummary, Report, check_string


def target_label(facts: Facts) -> str:
    """The judged interpreter, and the image and digest when it ran in a container."""
    t = facts.target
    if not t.container_ref:
        return t.python
    digest = t.container_digest if isinstance(t.container_digest, str) else None
    if digest is None and t.container_digest is not None:
        digest = f"digest unavailable: {t.container_digest}"
    label = f"{t.python or 'python'} in container {t.container_ref}" + (f" ({digest})" if digest else "")
    return label + (f" via {t.container_engine}" if t.container_engine else "")


def container_json(facts: Facts) -> dict[str, Any] | None:
    """The container the target probe ran in, as the triage and stack outputs show it."""
    t = facts.target
    if not t.container_ref:
        return None
    digest = t.container_digest
    return {"image": t.container_image, "ref": t.container_ref, "engine": t.container_engine,
            "digest": digest if isinstance(digest, str) or digest is None else digest.model_dump(mode="json")}


def probe_notes(facts: Facts) -> list[ProbeRecord]:
    """What the report must say it could not read: failed probes, implausible readings, fallbacks."""
    notes = [r for r in facts.probes.values() if not r.ok]
    bad = implausible_readings(facts)
    if bad:
        notes.append(ProbeRecord(name="implausible", ok=False, source="bounds",
                                 reason="readings outside physical bounds, judged as unknown: " + "; ".join(bad[:8])
                                 + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")))
    if facts.gpu.source == "nvidia-smi":
        notes.append(ProbeRecord(name="gpu", ok=True, source="nvidia-smi",
                                 reason=f"NVML unavailable ({facts.gpu.nvml_error}); used the nvidia-smi fallback"))
    return notes


def report_from(facts: Facts, judgment: Judgment, workload: Workload, facts_source: str = "live",
                plan: PlanSummary | None = None) -> Report:
    """The report of one judgment of ``facts``."""
    ident, ctx = judgment.identity, judgment.ctx
    by_id = {f.gotcha: f for f in judgment.findings}
    return redact_model(Report(
        platform=ident.platform,  # type: ignore[arg-type]
        checks={gid: check_string(by_id[gid]) for gid in GOTCHA_IDS},
        headroom_gb=round(gib_to_gb(ctx.headroom_gib), 1) if ctx.headroom_gib is not None else None,
        headroom_gib=ctx.headroom_gib,
        verdict=judgment.verdict,
        tool_version=__version__,
        generated_at=datetime.now(timezone.utc),  # noqa: UP017
        facts_collected_at=facts.collected_at,
        facts_source=facts_source,
        depth=facts.depth,
        identity=Identity(
            platform=ident.platform,  # type: ignore[arg-type]
            profile=ident.profile.key if ident.profile else None,
            gpu_name=ident.gpu_name,
            capability=ident.capability,
            arch=facts.host.arch if known(facts.host.arch) else None,  # type: ignore[arg-type]
            driver_version=facts.gpu.driver_version if known(facts.gpu.driver_version) else None,  # type: ignore[arg-type]
            cuda_driver_version=facts.gpu.cuda_driver_version if known(facts.gpu.cuda_driver_version) else None,  # type: ignore[arg-type]
            unified_memory=ident.unified_memory,
            note=by_id["identity"].summary,
        ),
        workload=workload,
        findings=judgment.findings,
        blocking=[BlockingItem(gotcha=f.gotcha, summary=f.summary, fix=f.fix, code=f.code, fix_where=f.fix_where)
                  for f in judgment.blocking],
        probe_notes=probe_notes(facts),
        target_python=target_label(facts),
        plan=plan,
    ))


def build_report(facts: Facts, workload: Workload | None, kb: Knowledge, facts_source: str = "live",
                 plan: PlanSummary | None = None) -> Report:
    """Judge ``facts`` (identity, G1..G10, verdict) and assemble the report. Pure given its inputs
    (the clock aside); ``plan`` is the memory planner's answer when the caller ran it."""
    workload = workload or Workload()
    return report_from(facts, judge(facts, kb, workload), workload, facts_source, plan)
