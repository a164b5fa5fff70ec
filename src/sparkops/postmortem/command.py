"""``spark-ops postmortem``: registered on the main app; heavy imports inside the command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("postmortem")
    def postmortem_cmd(
        log: Annotated[list[Path] | None, typer.Option("--log", help="This tool's sampler log(s) or folders "
                       "holding thermal-*.csv / soak-*.csv (default: the working directory); repeatable.",
                       show_default=False)] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> int:
        """What ended the last run? Reads the previous boot's kernel journal (bounded), /var/log/kern.log*,
        pstore, `last -x` and this tool's own sampler logs, and names the cause with its G-number: thermal
        shutdown (G4), OOM killer (G3, with the victim), the driver's out-of-memory wedge (G3), hardware vs
        application Xids, kernel panic, an unclean end with no log. Read-only; without root it says what it
        could not read. Exit 0 orderly end, 1 a cause found, 3 nothing readable."""
        from sparkops.knowledge import load
        from sparkops.postmortem import run

        rep = run.postmortem(log_paths=tuple(log or [Path.cwd()]), kb=load())
        sys.stdout.write(rep.model_dump_json(indent=2) + "\n" if as_json else run.render(rep))
        return rep.exit_code
