"""``spark-ops postmortem``: heavy imports inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.postmortem.run import PostmortemReport


class PostmortemResult(Result["PostmortemReport"]):
    """What ended the last run: table or JSON; exit 0 orderly end, 1 a cause found, 3 nothing readable."""

    model: PostmortemReport

    schema = "postmortem"

    def exit_code(self) -> int:
        return self.model.exit_code

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.postmortem.run import render

        return render(self.model)


FormatOpt = format_option(*PostmortemResult.formats)


def register(app: typer.Typer) -> None:
    @app.command("postmortem")
    def postmortem_cmd(
        log: Annotated[list[Path] | None, typer.Option("--log", help="This tool's sampler log(s) or folders "
                       "holding thermal-*.csv / soak-*.csv (default: the working directory); repeatable.",
                       show_default=False)] = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    ) -> int:
        """What ended the last run? Reads the previous boot's kernel journal (bounded), /var/log/kern.log*,
        pstore, `last -x` and this tool's own sampler logs, and names the cause with its G-number: thermal
        shutdown (G4), OOM killer (G3, with the victim), the driver's out-of-memory wedge (G3), hardware vs
        application Xids, kernel panic, an unclean end with no log. Read-only; without root it says what it
        could not read. Exit 0 orderly end, 1 a cause found, 3 nothing readable."""
        from sparkops.knowledge import load
        from sparkops.postmortem import run

        rep = run.postmortem(log_paths=tuple(log or [Path.cwd()]), kb=load())
        return emit(PostmortemResult(rep), fmt, as_json)
