"""The verdict rule and the exit codes every front end answers with.

Blocked if any check fails; ready with warnings if a warn, skip or unknown remains; ready
otherwise. The exit codes are part of the public contract (README "Exit codes"): scripts branch on
them, so they live here, beside the rule, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the exit codes are read by the standard-library-only front end: no pydantic here
    from sparkops.core.findings import Finding

Verdict = Literal["ready", "ready-with-warnings", "blocked"]

EXIT_CODES: dict[str, int] = {"ready": 0, "ready-with-warnings": 1, "blocked": 2}
EXIT_TOOL_ERROR = 3  # the tool itself could not run: bad usage, unreadable snapshot, internal error
# The machine was judged and the verdict printed, but the report file could not be written (a
# read-only directory, a full disk, --report naming a directory); stderr names the path and why.
EXIT_REPORT_NOT_WRITTEN = 4


def verdict(findings: Iterable[Finding]) -> Verdict:
    statuses = {f.status.value for f in findings}
    if "fail" in statuses:
        return "blocked"
    if statuses & {"warn", "skip", "unknown"}:
        return "ready-with-warnings"
    return "ready"


def exit_code(v: str) -> int:
    """0 ready, 1 ready with warnings, 2 blocked."""
    return EXIT_CODES[v]
