"""``spark-ops thermal``: the background sampler (start, stop, status), log analysis, and soak
(:mod:`sparkops.commands.soak`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.monitor.analyze import AnalysisResult
    from sparkops.monitor.daemon import DaemonStatus

IntervalOpt = Annotated[float | None, typer.Option("--interval", help="Seconds between samples "
                        "(default 5, as the seeds' thermal-sample.sh; at least 0.1).", show_default=False)]
LogOpt = Annotated[Path | None, typer.Option("--log", help="CSV log (default: thermal-YYYYMMDD.csv "
                   "in the working directory).", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json.")]


class DaemonResult(Result["DaemonStatus"]):
    """A sampler's state; exit 0, or (start) 1 when it is not running afterwards."""

    schema = "thermal"

    def __init__(self, model: DaemonStatus, code: int = 0) -> None:
        super().__init__(model)
        self.code = code

    def exit_code(self) -> int:
        return self.code

    def text(self, fmt: OutputFormat) -> str:
        from sparkops.monitor import daemon

        return daemon.render(self.model) + "\n"


class AnalysisOutcome(Result["AnalysisResult"]):
    """A judged log. Exit 0 nothing to warn about, 1 warn-level events, 3 no samples could be read."""

    schema = "analysis"

    def __init__(self, model: AnalysisResult, profile: str) -> None:
        super().__init__(model)
        self.profile = profile

    def exit_code(self) -> int:
        if self.model.samples == 0:  # nothing could be read as a sample: that is not "nothing to warn about"
            return 3
        return 1 if any(e.severity == "warn" for e in self.model.events) else 0

    def text(self, fmt: OutputFormat) -> str:
        res = self.model
        span = f"over {res.duration_s:.0f} s" if res.duration_s is not None else "(no usable timestamps)"
        lines = [f"{res.samples} samples {span} ({self.profile} profile)", *res.verdict]
        lines += [f"  {e.gotcha} {e.kind} {e.start} -> {e.end or 'end of log'}: {e.summary}" for e in res.events]
        lines += [f"note: {n}" for n in res.notes]
        return "\n".join(lines) + "\n"


FormatOpt = format_option(*DaemonResult.formats)


def _running_log(log: Path | None) -> Path:
    """The log to stop/inspect: the one given, else the single sampler running from this directory
    (its default name carries the start date, so after midnight today's name would miss it)."""
    from sparkops.monitor import daemon

    if log is not None:
        return log
    live = [p for p in sorted(Path.cwd().glob("thermal-*.csv.pid")) if daemon.status(p.with_suffix("")).running]
    if len(live) > 1:
        raise typer.BadParameter("several samplers run from this directory: "
                                 + ", ".join(str(p.with_suffix("")) for p in live), param_hint="--log")
    return live[0].with_suffix("") if live else daemon.default_log()


def register(app: typer.Typer) -> None:
    thermal_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                              help="Background thermal/power/memory sampler (G4, G3, G6) and log analysis.")
    app.add_typer(thermal_app, name="thermal")

    @thermal_app.command("start")
    def thermal_start(interval: IntervalOpt = None, log: LogOpt = None,
                      fmt: FormatOpt = "table", as_json: JsonOpt = False) -> int:  # type: ignore[valid-type,assignment]
        """Start a background sampler writing CSV (one per log; a second start reports the running one)."""
        from sparkops.monitor import daemon

        try:
            st = daemon.start(log or daemon.default_log(), interval)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--interval") from exc
        return emit(DaemonResult(st, 0 if st.running else 1), fmt, as_json)

    @thermal_app.command("stop")
    def thermal_stop(log: LogOpt = None, fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
                     as_json: JsonOpt = False) -> int:
        """Stop the sampler writing to LOG (default: the one running from here); a no-op when none runs."""
        from sparkops.monitor import daemon

        return emit(DaemonResult(daemon.stop(_running_log(log))), fmt, as_json)

    @thermal_app.command("status")
    def thermal_status(log: LogOpt = None, fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
                       as_json: JsonOpt = False) -> int:
        """Is a sampler running on LOG (default: the one running from here), since when, how many samples."""
        from sparkops.monitor import daemon

        return emit(DaemonResult(daemon.status(_running_log(log))), fmt, as_json)

    @thermal_app.command("analyze")
    def thermal_analyze(
        file: Annotated[Path, typer.Argument(help="This tool's CSV log, or nvidia-smi --query-gpu ... --format=csv output.")],
        profile: Annotated[str, typer.Option(help="gb10 | generic")] = "gb10",
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: JsonOpt = False,
        timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait on a FIFO or pipe "
                                               "(a regular file is read at once).")] = 60.0,
    ) -> int:
        """Judge a recorded log: throttling, power plateau, low-clock state, memory pressure, new neighbours.

        Exit 0: nothing to warn about; 1: warn-level events; 3: the file could not be read or held no samples.
        """
        from sparkops.monitor.analyze import analyze_log
        from sparkops.monitor.csvlog import LogStream

        if profile not in ("gb10", "generic"):
            raise typer.BadParameter("gb10 or generic", param_hint="--profile")
        stream = LogStream(file, timeout_s=timeout)  # streamed in timestamp order: any length, bounded memory
        res = AnalysisOutcome(analyze_log(stream, profile=profile), profile)  # type: ignore[arg-type]
        if stream.error is not None:
            raise typer.BadParameter(stream.error, param_hint="FILE")
        code = emit(res, fmt, as_json)
        if res.model.samples == 0:
            sys.stderr.write(f"spark-ops: no samples could be read from {file}\n")
        return code

    from sparkops.commands import soak

    soak.register(thermal_app)
