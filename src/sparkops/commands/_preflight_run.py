"""The body of ``spark-ops preflight``, without typer: the typer command (:mod:`.preflight`) and the
front door's fast route for ``preflight --quick`` (:func:`sparkops.front.fast_preflight`) both run
:func:`run`, so the two cannot print different things. Only what typer itself does (parsing, usage
errors, the workload's refusals) stays in :mod:`.preflight`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sparkops.commands.contract import OutputFormat, Result
from sparkops.report.formats import EXIT_REPORT_NOT_WRITTEN, Format

if TYPE_CHECKING:
    from sparkops.facts.workload import Workload
    from sparkops.report.model import Report


class ReportResult(Result["Report"]):
    """env-report.json: table, lines or JSON; exit 0 ready, 1 warnings, 2 blocked."""

    formats = (OutputFormat.table, OutputFormat.lines, OutputFormat.json)
    schema = "report"

    def __init__(self, model: Report, color: bool = False) -> None:
        super().__init__(model)
        self.color = color

    def exit_code(self) -> int:
        from sparkops.core.verdict import exit_code

        return exit_code(self.model.verdict)

    def text(self, fmt: OutputFormat) -> str:
        return Format(fmt.value).render(self.model, color=self.color and fmt is OutputFormat.table)

    def json(self) -> str:
        return Format.json.render(self.model)


def python_problem(python: Path | None) -> str | None:
    """Why ``--python`` cannot be the interpreter (a usage error, exit 3), or None: a mistyped
    --python is said by name, not judged as "G1 skip: torch not installed"."""
    if python is None:
        return None
    given = os.path.expanduser(str(python))
    if os.sep not in given:  # a bare name is looked up on PATH, as the probe does
        return None if shutil.which(given) is not None else f"{given}: not found on PATH"
    path = Path(given)
    if not path.exists():
        return f"{path}: no such file"
    if path.is_dir():
        return f"{path} is a directory, not an interpreter"
    if not os.access(path, os.X_OK):
        return f"{path} is not executable"
    return None


def run(*, python: Path | None, quick: bool, facts: Path | None, workload: Workload, config: list[Path] | None,
        offline: bool, budget: float | None, container: str | None, engine: str | None, matrix: Path | None,
        measure: bool, report: Path, out: OutputFormat, warn: Callable[[str], None]) -> int:
    """Collect (or load ``facts``), judge, print in ``out``, write ``report``; the exit code.
    ``warn`` prints a line on stderr (typer.echo on the typer path)."""
    from dataclasses import replace

    from sparkops import api

    kb = api.knowledge(matrix)
    opts = replace(api.collect_options(quick=quick, python=python, config_paths=tuple(config or ()), offline=offline,
                                       budget_s=budget, container=container, engine=engine),
                   measure_bandwidth=measure)
    rep = api.preflight(facts=facts, opts=opts, workload=workload, kb=kb,
                        also_import=("sparkops.report.render",) if out is OutputFormat.table else (),
                        container=container)
    res = ReportResult(rep, color=sys.stdout.isatty() and out is OutputFormat.table)
    text = res.render(out)
    from sparkops.core.modeling import lite_verdict

    lite_verdict(rep)  # under the lite runtime: anything it declined goes back to pydantic before a byte is out
    sys.stdout.write(text)  # the verdict first: a report that cannot be written must not hide it
    sys.stdout.flush()
    from sparkops.core.errors import OutputError

    try:
        api.write_report(rep, report)
    except OutputError as exc:
        warn(f"spark-ops: warning: the verdict above stands, but the report was not written: {exc} "
             f"(exit {EXIT_REPORT_NOT_WRITTEN}; --report PATH writes it elsewhere)")
        return EXIT_REPORT_NOT_WRITTEN
    return res.exit_code()
