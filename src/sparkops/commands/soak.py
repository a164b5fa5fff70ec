"""``spark-ops thermal soak``: registered on the ``thermal`` sub-app; heavy imports inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.soak.run import SoakReport


class SoakResult(Result["SoakReport"]):
    """A G4 soak: table or JSON; exit 0 no G4 warning, 1 warning / refused / interrupted, 2 worse than the baseline, 3 could not run."""

    model: SoakReport

    schema = "soak"

    def exit_code(self) -> int:
        return self.model.exit_code

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.soak.run import render

        return render(self.model)


FormatOpt = format_option(*SoakResult.formats)


def register(thermal_app: typer.Typer) -> None:
    @thermal_app.command("soak")
    def soak_cmd(
        minutes: Annotated[float, typer.Option("--minutes", help="Load duration (the seeds: 10-15 minutes "
                           "before any G4 conclusion).")] = 12.0,
        python: Annotated[Path | None, typer.Option("--python", help="The interpreter you train with, with "
                          "torch (default: python3 on PATH, else this tool's own).", show_default=False)] = None,
        log: Annotated[Path | None, typer.Option("--log", help="CSV log of the samples, fsynced per row "
                       "(default: soak-YYYYMMDD-HHMMSS.csv here).", show_default=False)] = None,
        interval: Annotated[float | None, typer.Option("--interval", help="Seconds between samples "
                            "(default 1).", show_default=False)] = None,
        save_baseline: Annotated[Path | None, typer.Option("--save-baseline", help="Write this run's result "
                                 "here, for a later --compare.", show_default=False)] = None,
        compare: Annotated[Path | None, typer.Option("--compare", help="A saved baseline (this box last month, "
                           "or its twin) to set this run against.", show_default=False)] = None,
        force: Annotated[bool, typer.Option("--force", help="Run even while other GPU jobs run or memory is "
                         "short (their runs slow, and the figures read low).")] = False,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    ) -> int:
        """A G4 verdict under a representative load: bf16 matmuls in the target interpreter for --minutes,
        sampled alongside (ramp-up, clock CV %, thermal slope, power plateau vs the profile's cap, reason bits,
        violation counters). Refused on a busy GPU unless --force; Ctrl-C stops the load and frees the GPU.
        Exit 0 no G4 warning, 1 G4 warning / refused / interrupted, 2 worse than the --compare baseline,
        3 could not run."""
        from sparkops.core.errors import InputError
        from sparkops.soak import run

        try:
            from sparkops.knowledge import load

            rep = run.soak(minutes, str(python) if python else None, force=force, log_path=log, kb=load(),
                           interval_s=interval, compare_path=compare, save_baseline=save_baseline)
        except InputError as exc:
            raise typer.BadParameter(str(exc)) from exc
        return emit(SoakResult(rep), fmt, as_json)
