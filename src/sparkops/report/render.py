"""Renderers turn a Report into text; they never print. One per output format."""

from __future__ import annotations

import io

from sparkops.core.findings import Finding, Status
from sparkops.report.gotcha_text import render_gotcha  # noqa: F401 - re-exported: explain's text
from sparkops.report.model import Report

STYLE = {
    Status.passed: "green", Status.fail: "bold red", Status.warn: "yellow",
    Status.skip: "dim", Status.info: "cyan", Status.unknown: "magenta",
}
VERDICT_STYLE = {"ready": "bold green", "ready-with-warnings": "bold yellow", "blocked": "bold red"}


def g_line(f: Finding) -> str:
    """``G1 PASS: torch built against CUDA 13.0`` (the original preflight script's contract)."""
    word = "PASS" if f.status is Status.passed else f.status.value.upper()
    return f"{f.gotcha} {word}: {f.summary}"


def render_lines(report: Report) -> str:
    """The grep contract: ``identity <WORD>: ...`` first (a run blocked by identity says so), one
    line per gotcha, then ``verdict <VERDICT>: ...`` naming what blocks or warns."""
    lines = [g_line(f) for f in report.findings if f.gotcha == "identity"]
    lines += [g_line(f) for f in report.findings if f.gotcha.startswith("G")]
    lines.append(verdict_line(report))
    return "\n".join(lines) + "\n"


def verdict_line(report: Report) -> str:
    """``verdict BLOCKED: fix first: identity, G1`` / ``verdict READY-WITH-WARNINGS: G3 warn, G8 skip``."""
    if report.blocking:
        detail = "fix first: " + ", ".join(b.gotcha for b in report.blocking)
    else:
        open_ = [f"{f.gotcha} {f.status.value}" for f in report.findings
                 if f.status in (Status.warn, Status.skip, Status.unknown)]
        detail = ", ".join(open_) if open_ else "every check passed or is informational"
    return f"verdict {report.verdict.upper()}: {detail}"


def render_json(report: Report) -> str:
    return report.model_dump_json(indent=2) + "\n"


WHERE = {"host": " (on the host)", "container": " (in the container)", "target-env": " (in the target environment)"}


def _where(fix_where: str) -> str:
    """Where a fix must run, as the text output says it ("" where it runs anywhere)."""
    return WHERE.get(fix_where, "")


def render_table(report: Report, color: bool = False, width: int = 110) -> str:
    from rich.console import Console  # here: the lines and json formats need no rich
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False)
    head = Text()
    head.append("Verdict: ", style="bold")
    head.append(report.verdict.upper(), style=VERDICT_STYLE[report.verdict])
    head.append(f"   platform {report.platform}")
    if report.headroom_gib is not None:
        head.append(f" · headroom {report.headroom_gib:g} GiB")
    con.print(head)
    if report.blocking:  # when blocked, the fixes come first (shared/spec/gotchas.md, Verdict)
        con.print(Text("Blocking — fix these first:", style="bold red"))
        for b in report.blocking:
            con.print(Text(f"  {b.gotcha}: {b.summary}", style="red"))
            if b.fix:
                con.print(Text(f"     fix{_where(b.fix_where)}: {b.fix}"))
        con.print()
    con.print(Text(f"{report.identity.note}", style="dim"))
    if report.target_python:
        # not wrapped: with --container it carries the image's digest, which must copy-paste whole
        con.print(Text(f"target python: {report.target_python} ({report.depth})", style="dim"), soft_wrap=True)
    if not report.workload.empty:
        con.print(Text(f"workload: {_workload_line(report)}", style="dim"))
    con.print()
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for f in report.findings:
        table.add_row(f.gotcha, Text(f.status.value.upper(), style=STYLE[f.status]), f.summary)
    con.print(table)
    warn_fixes = [f for f in report.findings if f.status is Status.warn and f.fix]
    if warn_fixes:
        con.print()
        con.print(Text("Warnings — what to do:", style="bold yellow"))
        for f in warn_fixes:
            con.print(Text(f"  {f.gotcha}{_where(f.fix_where)}: {f.fix}"))
    if report.probe_notes:
        con.print()
        con.print(Text("Probe notes:", style="bold"))
        for n in report.probe_notes:
            con.print(Text(f"  {n.name}: {n.reason or ('ok via ' + n.source)}", style="dim"))
    return buf.getvalue()


def _workload_line(report: Report) -> str:
    w = report.workload
    parts = [f"{k}={v}" for k, v in w.model_dump(exclude={"text", "unparsed"}).items() if v not in (None, [], "")]
    s = ", ".join(parts) or "(nothing understood)"
    if w.unparsed:
        s += f"; ignored: {' '.join(w.unparsed)}"
    return s
