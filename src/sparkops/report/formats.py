"""Output formats and exit codes: the light part of reporting, importable without rich or the checks."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkops.report.model import Report

# the exit codes live with the verdict rule (sparkops.core.verdict); re-exported for renderers
from sparkops.core.verdict import EXIT_CODES, EXIT_REPORT_NOT_WRITTEN, EXIT_TOOL_ERROR  # noqa: E402,F401


class Format(str, Enum):
    """Every output format maps to exactly one renderer."""

    table = "table"
    lines = "lines"
    json = "json"

    def render(self, report: Report, color: bool = False, width: int = 110) -> str:
        from sparkops.report import render

        if self is Format.table:
            return render.render_table(report, color=color, width=width)
        if self is Format.lines:
            return render.render_lines(report)
        if self is Format.json:
            return render.render_json(report)
        raise AssertionError(self)  # pragma: no cover - exhaustive
