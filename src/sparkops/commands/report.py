"""``spark-ops report``: heavy imports happen inside the command."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer


class ShareFormat(str, Enum):
    markdown = "markdown"
    github = "github"


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        source: Annotated[Path, typer.Option("--from", help="An env-report.json or a facts snapshot "
                                             "(spark-ops collect -o facts.json).", show_default=False)],
        fmt: Annotated[ShareFormat, typer.Option("--format", help="markdown | github (a collapsible "
                                                 "attachment)")] = ShareFormat.github,
        redact_host: Annotated[bool, typer.Option("--redact-host", help="Also mask hostname, user names, home "
                                                  "paths, private IPs and MAC addresses (stable tokens).")] = False,
        output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here (default: stdout).",
                                                    show_default=False)] = None,
    ) -> int:
        """A bug report you can paste into a forum or an issue: verdict, failing checks with evidence,
        versions, the snapshot attached; secrets masked. Exit 0 written, 3 the file could not be used."""
        from sparkops.report.share import build

        text = build(source, fmt.value, redact_host)  # type: ignore[arg-type]
        if output is None:
            sys.stdout.write(text)
        else:
            from sparkops.facts.snapshot import write_atomic

            write_atomic(output, text)
            typer.echo(f"wrote {output}", err=True)
        return 0
