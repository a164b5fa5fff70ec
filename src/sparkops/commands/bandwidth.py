"""``spark-ops bandwidth``: the G5 measurement's front end; heavy imports happen inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.bandwidth.report import BandwidthReport


class BandwidthResult(Result["BandwidthReport"]):
    """The G5 measurement: table or JSON; exit 0 in range, 1 below range or refused, 2 far below, 3 could not run."""

    model: BandwidthReport

    schema = "bandwidth"

    def exit_code(self) -> int:
        return self.model.exit_code

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.bandwidth.report import render

        return render(self.model)


FormatOpt = format_option(*BandwidthResult.formats)


def register(app: typer.Typer) -> None:
    @app.command("bandwidth")
    def bandwidth_cmd(
        python: Annotated[Path | None, typer.Option("--python", help="The interpreter you train with, with torch "
                          "(default: python3 on PATH, else this tool's own).", show_default=False)] = None,
        size: Annotated[str, typer.Option("--size", help="Bytes per buffer: AUTO (16 x the GPU's L2, at least 256 "
                        "MiB, at most 1 GB per buffer and 2 GB in all, and a quarter of free memory) or a number "
                        "of GB (10^9 bytes).")] = "auto",
        force: Annotated[bool, typer.Option("--force", help="Measure even while other GPU jobs run or free memory "
                         "is short (the figure may then read low, and their runs may slow).")] = False,
        container: Annotated[str | None, typer.Option("--container", help="Measure inside this image (ngc | "
                             "unsloth | IMAGE[:TAG]) with `docker run --gpus all`; --python then names the "
                             "interpreter inside it.", show_default=False)] = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    ) -> int:
        """Measure device memory bandwidth in the target environment (G5): a preallocated copy (bytes read +
        written) and a read-dominated reduction, after warm-up, timed with CUDA events; at most 2 GB allocated
        and freed before it reports. Refused while other GPU jobs run or memory is short, unless --force.
        Exit 0 measured and in range, 1 below range or refused, 2 far below range, 3 could not run."""
        from sparkops.bandwidth import probe, report

        try:
            size_bytes = probe.parse_size(size)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--size") from exc
        from sparkops.knowledge import load

        rep = report.bandwidth(python=str(python) if python else None, size_bytes=size_bytes, force=force,
                               container=container, kb=load())
        return emit(BandwidthResult(rep), fmt, as_json)
