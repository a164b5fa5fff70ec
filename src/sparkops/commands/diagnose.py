"""``spark-ops diagnose``: the log-to-gotcha matcher's front end; heavy imports happen inside the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.diagnose.model import Diagnosis

EXIT_NONE, EXIT_FINDINGS, EXIT_UNREADABLE = 0, 1, 3


class DiagnosesResult(Result["list[Diagnosis]"]):
    """One diagnosis per input, in input order (the JSON: a list of ``diagnosis`` objects).
    Exit 0 nothing matched, 1 findings, 3 an input could not be read."""

    model: list[Diagnosis]

    schema = "diagnosis"  # of each element

    def exit_code(self) -> int:
        if any(d.error is not None for d in self.model):
            return EXIT_UNREADABLE
        return EXIT_FINDINGS if any(d.findings for d in self.model) else EXIT_NONE

    def data(self) -> Any:
        return [d.model_dump(mode="json") for d in self.model]

    def json(self) -> str:
        return json.dumps(self.data(), indent=2) + "\n"

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.diagnose.render import render_all

        return render_all(self.model)


FormatOpt = format_option(*DiagnosesResult.formats)


def register(app: typer.Typer) -> None:
    @app.command("diagnose")
    def diagnose_cmd(
        files: Annotated[list[str] | None, typer.Argument(help="Logs, tracebacks, dmesg, issue text, collect_env "
                                                           "output; `-` or none: standard input.",
                                                      show_default=False)] = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json: one object per input, in "
                                              "input order.")] = False,
        facts: Annotated[Path | None, typer.Option("--facts", help="A recorded snapshot (spark-ops collect) to "
                                                   "confirm or rule out findings.", show_default=False)] = None,
        live: Annotated[bool, typer.Option("--live", help="Collect this machine's facts (quick) to confirm or "
                                           "rule out findings.")] = False,
        top: Annotated[int | None, typer.Option("--top", min=1, help="Show at most N findings per input.",
                                                show_default=False)] = None,
        timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait on each pipe, FIFO or "
                                               "terminal input (a regular file is read by seeking, at once).")] = 60.0,
    ) -> int:
        """Which gotcha (G1-G10) does this log point at? Findings ranked by confidence, with the evidence
        lines, why they point there, and the fix. Exit 0 nothing matched, 1 findings, 3 an input could not
        be read."""
        from sparkops.diagnose import diagnose_files

        if facts is not None and live:
            raise typer.BadParameter("give --facts FILE or --live, not both", param_hint="--facts/--live")
        snapshot = None
        if facts is not None:
            from sparkops.api import load_facts

            snapshot = load_facts(facts)
        elif live:
            from sparkops.api import collect, collect_options

            snapshot = collect(collect_options(quick=True, offline=True))
        res = DiagnosesResult(diagnose_files(list(files or ["-"]), facts=snapshot, top=top, read_timeout_s=timeout))
        code = emit(res, fmt, as_json)
        for d in res.model:
            if d.error is not None:
                typer.echo(f"spark-ops diagnose: {d.error}", err=True)
        return code
