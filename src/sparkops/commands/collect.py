"""``spark-ops collect``: this machine's facts as a replayable snapshot (secrets removed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands._common import (
    BudgetOpt,
    ConfigOpt,
    OfflineOpt,
    PythonOpt,
    QuickOpt,
    collect_options,
    prestart,
)
from sparkops.commands.contract import OutputFormat, Result

if TYPE_CHECKING:
    from sparkops.facts.model import Facts


class FactsResult(Result["Facts"]):
    """The snapshot: JSON only; exit 0 (a probe that could not run says so inside)."""

    model: Facts

    formats = (OutputFormat.json,)
    schema = "facts"

    def exit_code(self) -> int:
        return 0


def register(app: typer.Typer) -> None:
    @app.command()
    def collect(
        output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the snapshot here (default: stdout).")] = None,
        python: PythonOpt = None,
        quick: QuickOpt = False,
        config: ConfigOpt = None,
        offline: OfflineOpt = False,
        budget: BudgetOpt = None,
    ) -> int:
        """Collect this machine's facts into a replayable snapshot (secrets removed)."""
        prestart(python, quick)
        from sparkops import api

        res = FactsResult(api.collect(collect_options(python, quick, config, offline, budget)))
        if output is None:
            sys.stdout.write(res.render(OutputFormat.json))
        else:
            api.save_facts(res.model, output)
            failed = [r.name for r in res.model.probes.values() if not r.ok]
            typer.echo(f"wrote {output}" + (f" (probes unavailable: {', '.join(failed)})" if failed else ""), err=True)
        return res.exit_code()
