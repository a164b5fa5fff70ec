"""``spark-ops preflight``: judge G1-G10 and write env-report.json.

Exit codes (every judging command): 0 ready · 1 ready with warnings · 2 blocked · 3 the tool
itself could not run (bad usage, unreadable snapshot, internal error) · 4 judged and printed, but
the report file could not be written (stderr says where and why).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands._common import (
    BudgetOpt,
    ConfigOpt,
    ContainerOpt,
    EngineOpt,
    OfflineOpt,
    PythonOpt,
    QuickOpt,
    collect_options,
    prestart,
)
from sparkops.commands.contract import OutputFormat, Result, chosen
from sparkops.report.formats import EXIT_REPORT_NOT_WRITTEN, Format

if TYPE_CHECKING:
    from sparkops.report.model import Report


class ReportResult(Result["Report"]):
    """env-report.json: table, lines or JSON; exit 0 ready, 1 warnings, 2 blocked."""

    formats = (OutputFormat.table, OutputFormat.lines, OutputFormat.json)
    schema = "report"

    def __init__(self, model: Report, color: bool = False) -> None:
        super().__init__(model)
        self.color = color

    def exit_code(self) -> int:
        from sparkops import api

        return api.exit_code(self.model)

    def text(self, fmt: OutputFormat) -> str:
        return Format(fmt.value).render(self.model, color=self.color and fmt is OutputFormat.table)

    def json(self) -> str:
        return Format.json.render(self.model)


def register(app: typer.Typer) -> None:
    @app.command()
    def preflight(
        python: PythonOpt = None,
        quick: QuickOpt = False,
        facts: Annotated[Path | None, typer.Option("--facts", help="Judge a recorded snapshot instead of this machine.")] = None,
        workload: Annotated[str | None, typer.Option("--workload", help='Free text, e.g. "qlora 70b seq 8192 nvfp4".')] = None,
        method: Annotated[str | None, typer.Option(help="full | lora | qlora | inference")] = None,
        model: Annotated[str | None, typer.Option(help="Model name, e.g. llama-3.1-70b.")] = None,
        params_b: Annotated[float | None, typer.Option("--params-b", help="Model size in billions.")] = None,
        seq_len: Annotated[int | None, typer.Option("--seq-len")] = None,
        batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
        precision: Annotated[str | None, typer.Option(help="nvfp4 | fp8 | bf16 | ...")] = None,
        tp: Annotated[int | None, typer.Option("--tp", help="Planned tensor-parallel size.")] = None,
        nodes: Annotated[int | None, typer.Option(help="Planned number of nodes (Sparks).")] = None,
        component: Annotated[list[str] | None, typer.Option("--component", help="Stack component the run uses (vllm, unsloth, ...); repeatable.")] = None,
        peak_gb: Annotated[float | None, typer.Option("--peak-gb", help="Estimated peak memory of the workload (G3 fit test).")] = None,
        config: ConfigOpt = None,
        offline: OfflineOpt = False,
        budget: BudgetOpt = None,
        container: ContainerOpt = None,
        engine: EngineOpt = None,
        matrix: Annotated[Path | None, typer.Option("--matrix", help="A newer stack-matrix YAML.")] = None,
        measure: Annotated[bool, typer.Option("--measure", help="Also measure device memory bandwidth for G5 "
                           "(intrusive: at most 2 GB for about a second; refused while other GPU jobs run or memory "
                           "is short, see `spark-ops bandwidth`).")] = False,
        report: Annotated[Path, typer.Option("--report", help="Where env-report.json goes.")] = Path("env-report.json"),
        fmt: Annotated[Format, typer.Option("--format", help="table | lines | json")] = Format.table,
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    ) -> int:
        """Judge G1-G10 and write env-report.json. Exit 0 ready, 1 warnings, 2 blocked, 3 tool error,
        4 judged and printed but the report could not be written."""
        from sparkops.core.errors import InputError

        if measure and facts is not None:
            raise InputError("--measure measures this machine now; it cannot be combined with --facts")
        if facts is None:
            prestart(python, quick, container)
        from dataclasses import replace

        from sparkops import api
        from sparkops.facts.workload import merge, refusals

        wl = merge(workload, method=method, model=model, params_b=params_b, seq_len=seq_len, batch_size=batch_size,
                   precision=precision, tensor_parallel=tp, nodes=nodes, components=component or [],
                   estimated_peak_gb=peak_gb)
        if problems := refusals(wl):
            raise typer.BadParameter("; ".join(problems), param_hint="--workload")
        kb = api.knowledge(matrix)
        out = chosen(fmt, as_json)
        opts = replace(collect_options(python, quick, config, offline, budget, container, engine),
                       measure_bandwidth=measure)
        rep = api.preflight(facts=facts, opts=opts, workload=wl, kb=kb,
                            also_import=("sparkops.report.render",) if out is OutputFormat.table else (),
                            container=container)
        res = ReportResult(rep, color=sys.stdout.isatty() and out is OutputFormat.table)
        sys.stdout.write(res.render(out))  # the verdict first: a report that cannot be written must not hide it
        sys.stdout.flush()
        from sparkops.core.errors import OutputError

        try:
            api.write_report(rep, report)
        except OutputError as exc:
            typer.echo(f"spark-ops: warning: the verdict above stands, but the report was not written: {exc} "
                       f"(exit {EXIT_REPORT_NOT_WRITTEN}; --report PATH writes it elsewhere)", err=True)
            return EXIT_REPORT_NOT_WRITTEN
        return res.exit_code()
