"""Renderers for the fleet report: readable text and JSON. They return strings; they never print.

Fleet findings print as G-lines (``G1 FAIL: fleet.torch: ...``, the preflight line contract with
the fleet check's id after the colon), so scripts that grep preflight output work on this too.
"""

from __future__ import annotations

from sparkops.core.findings import Status
from sparkops.fleet.collective import human_bytes
from sparkops.fleet.judge import driver_version, torch_build
from sparkops.fleet.model import FleetFinding, FleetReport


def g_line(f: FleetFinding) -> str:
    word = "PASS" if f.status is Status.passed else f.status.value.upper()
    return f"{f.gotcha} {word}: {f.check}: {f.summary}"


def render_json(report: FleetReport) -> str:
    return report.model_dump_json(indent=2) + "\n"


def render_text(report: FleetReport, report_path: str = "") -> str:
    out: list[str] = []
    nodes = f"{report.nodes_count} node{'s' if report.nodes_count != 1 else ''}"
    out.append(f"Fleet verdict: {report.verdict.upper()}   {report.world_size} rank(s) on {nodes}"
               f" · backend {report.backend or '-'} · launcher {report.launcher or '-'}")
    if report.fleet_verdict != report.verdict:
        out.append(f"  (fleet checks alone: {report.fleet_verdict}; a node's own preflight is worse)")
    if report.blocking:  # when blocked, the fixes come first (shared/spec/gotchas.md, Verdict)
        out.append("Blocking — fix these first:")
        for b in report.blocking:
            out.append(f"  {b.gotcha} {b.check}: {b.summary}")
            if b.fix:
                out.append(f"     fix: {b.fix}")
    out.append("")
    out.append("Nodes:")
    out.append(f"  {'rank':<5} {'host':<20} {'local':<6} {'verdict':<20} {'torch':<30} {'driver':<12} headroom")
    joined = {n.rank for n in report.nodes}
    for n in report.nodes:
        verdict = n.report.verdict if n.report is not None else f"no report ({n.error or 'no facts'})"[:40]
        torch = (torch_build(n).value or "?").split(" (")[0]
        driver = (driver_version(n).value or "-").split(" (")[0]
        head = f"{n.report.headroom_gib:g} GiB" if n.report is not None and n.report.headroom_gib is not None else "-"
        src = "" if n.facts_source == "live" else f"  [{n.facts_source}]"
        out.append(f"  {n.rank:<5} {n.hostname[:20]:<20} {n.local_rank:<6} {verdict:<20} {torch[:30]:<30} "
                   f"{driver[:12]:<12} {head}{src}")
    for m in report.members:
        if m.rank not in joined:
            state = "never joined" if not m.joined else f"joined, stopped at '{m.stalled_at or m.last_stage}'"
            out.append(f"  {m.rank:<5} {(m.hostname or '-')[:20]:<20} {'-':<6} {state}")
    out.append("")
    out.append("Fleet checks:")
    for f in report.findings:
        out.append(f"  {g_line(f)}")
        if f.detail and f.status is not Status.passed:
            out.append(f"      {f.detail}")
    bw = report.bandwidth
    if bw is not None and bw.rows:
        out.append("")
        out.append(f"Collective bandwidth ({bw.backend}, {bw.world_size} ranks, {bw.timer}; GB/s = 1e9 bytes/s, "
                   "busbw as nccl-tests):")
        out.append(f"  {'op':<11} {'size':>9} {'iters':>6} {'time (us)':>11} {'algbw':>8} {'busbw':>8}")
        for r in bw.rows:
            out.append(f"  {r.op.replace('_', '-'):<11} {human_bytes(r.size_bytes):>9} {r.iterations:>6} "
                       f"{r.time_us:>11.1f} {r.algbw_gbs:>8.2f} {r.busbw_gbs:>8.2f}")
        for s in bw.skipped_sizes:
            out.append(f"  skipped {s}")
    for t in report.transport:
        if t.network or t.channels or t.gdr is not None:
            gdr = {True: "GDR yes", False: "GDR no", None: "GDR ?"}[t.gdr]
            out.append(f"  transport rank {t.rank}: NCCL {t.nccl_version or '?'} {t.network or '?'} "
                       f"{t.devices[:60]} {gdr}".rstrip())
    for note in report.notes:
        out.append(f"note: {note}")
    if report_path:
        out.append(f"report: {report_path} (each node's own report inside)")
    return "\n".join(out) + "\n"
