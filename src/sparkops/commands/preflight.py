"""``spark-ops preflight``: judge G1-G10 and write env-report.json.

Exit codes (every judging command): 0 ready · 1 ready with warnings · 2 blocked · 3 the tool
itself could not run (bad usage, unreadable snapshot, internal error) · 4 judged and printed, but
the report file could not be written (stderr says where and why).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sparkops.commands._common import (
    BudgetOpt,
    ConfigOpt,
    ContainerOpt,
    EngineOpt,
    OfflineOpt,
    PythonOpt,
    QuickOpt,
    prestart,
)
from sparkops.commands._preflight_run import ReportResult, run
from sparkops.commands.contract import chosen
from sparkops.report.formats import Format

__all__ = ["ReportResult", "register"]


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
        from sparkops.facts.workload import merge, refusals

        wl = merge(workload, method=method, model=model, params_b=params_b, seq_len=seq_len, batch_size=batch_size,
                   precision=precision, tensor_parallel=tp, nodes=nodes, components=component or [],
                   estimated_peak_gb=peak_gb)
        if problems := refusals(wl):
            raise typer.BadParameter("; ".join(problems), param_hint="--workload")
        return run(python=python, quick=quick, facts=facts, workload=wl, config=config, offline=offline, budget=budget,
                   container=container, engine=engine, matrix=matrix, measure=measure, report=report,
                   out=chosen(fmt, as_json), warn=lambda line: typer.echo(line, err=True))
