"""Every JSON output contract by name -> the pydantic model that defines it (each command's result
names its own, :attr:`sparkops.commands.contract.Result.schema`). ``spark-ops schema NAME`` prints one, the MCP server serves them as resources, and the checked-in copies under ``schema/``
make a contract change show up in review (tests compare them)."""

from __future__ import annotations

import importlib
from typing import Any

SCHEMAS: dict[str, tuple[str, str]] = {
    "facts": ("sparkops.facts.model", "Facts"),  # the replayable snapshot (spark-ops collect)
    "report": ("sparkops.report.model", "Report"),  # env-report.json (spark-ops preflight)
    "plan": ("sparkops.planner.plan", "PlanResult"),  # spark-ops plan --json
    "serve": ("sparkops.planner.serve", "ServePlanResult"),  # spark-ops plan --serve --json
    "diagnosis": ("sparkops.diagnose.model", "Diagnosis"),  # one element of spark-ops diagnose --json
    "bandwidth": ("sparkops.bandwidth.report", "BandwidthReport"),  # spark-ops bandwidth --json
    "fleet": ("sparkops.fleet.model", "FleetReport"),  # fleet-report.json (spark-ops fleet)
    "soak": ("sparkops.soak.run", "SoakReport"),  # spark-ops thermal soak --json
    "analysis": ("sparkops.monitor.analyze", "AnalysisResult"),  # spark-ops thermal analyze --json
    "thermal": ("sparkops.monitor.daemon", "DaemonStatus"),  # spark-ops thermal start/stop/status --json
    "postmortem": ("sparkops.postmortem.run", "PostmortemReport"),  # spark-ops postmortem --json
    "fix": ("sparkops.fix.g3", "FixResult"),  # spark-ops fix G3 --json
    "stack": ("sparkops.report.views", "StackView"),  # spark-ops stack --json
    "triage": ("sparkops.report.views", "TriageView"),  # spark-ops triage gpu --json
}


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of the named output (a KeyError names the known ones)."""
    if name not in SCHEMAS:
        raise KeyError(f"no schema {name!r}; known: {', '.join(SCHEMAS)}")
    module, attr = SCHEMAS[name]
    return getattr(importlib.import_module(module), attr).model_json_schema()
