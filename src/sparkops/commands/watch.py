"""``spark-ops watch -- COMMAND``: run a command, sample alongside, flag G3/G4/G6 events live."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkops.commands.thermal import IntervalOpt


def register(app: typer.Typer) -> None:
    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def watch(
        ctx: typer.Context,
        interval: IntervalOpt = None,
        log: Annotated[Path | None, typer.Option("--log", help="CSV log (default: watch-<time>.csv).",
                                                    show_default=False)] = None,
        plot: Annotated[Path | None, typer.Option("--plot", help="Also draw FILE.png (needs matplotlib).",
                                                     show_default=False)] = None,
    ) -> int:
        """Run COMMAND (after --), sample alongside, flag G3/G4/G6 events live; exit with COMMAND's code."""
        from sparkops.monitor.watch import watch as run_watch

        try:
            res = run_watch(list(ctx.args), interval_s=interval, log_path=log, plot_path=plot)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="COMMAND") from exc
        return res.exit_code
