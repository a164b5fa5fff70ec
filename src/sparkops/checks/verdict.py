"""The verdict rule: blocked if any check fails (or the workload does not fit); ready with
warnings if warn/skip/unknown remain; ready otherwise."""

from __future__ import annotations

from collections.abc import Iterable

from sparkops.checks.base import Finding, Status
from sparkops.report.formats import EXIT_CODES


def verdict(findings: Iterable[Finding]) -> str:
    statuses = {f.status for f in findings}
    if Status.fail in statuses:
        return "blocked"
    if statuses & {Status.warn, Status.skip, Status.unknown}:
        return "ready-with-warnings"
    return "ready"


def exit_code(v: str) -> int:
    return EXIT_CODES[v]
