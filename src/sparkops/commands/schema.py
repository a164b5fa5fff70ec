"""``spark-ops schema NAME``: the JSON Schema of an output, from the registry in
:mod:`sparkops.report.schemas` (the fast path in :mod:`sparkops.front` prints the checked-in copy)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated

import typer

from sparkops.report.schemas import SCHEMAS

SchemaName = Enum("SchemaName", {name: name for name in SCHEMAS}, type=str)  # type: ignore[misc]


def register(app: typer.Typer) -> None:
    @app.command()
    def schema(name: Annotated[SchemaName, typer.Argument(help=" | ".join(SCHEMAS))]) -> int:  # type: ignore[valid-type]
        """Print the JSON Schema of an output: the facts snapshot, env-report.json, fleet-report.json, or the
        --json of plan, plan --serve, diagnose, bandwidth, stack, triage gpu, thermal analyze / soak / start,
        postmortem, fix."""
        from sparkops.report.schemas import json_schema

        sys.stdout.write(json.dumps(json_schema(name.value), indent=2) + "\n")
        return 0
