"""Output formats and exit codes: the light part of reporting, importable without rich or the checks."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkops.report.model import Report

EXIT_CODES = {"ready": 0, "ready-with-warnings": 1, "blocked": 2}
EXIT_TOOL_ERROR = 3  # the tool itself could not run: bad usage, unreadable snapshot, internal error
# The machine was judged and the verdict printed, but the report file could not be written (a
# read-only directory, a full disk, --report naming a directory); stderr names the path and why.
EXIT_REPORT_NOT_WRITTEN = 4


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
