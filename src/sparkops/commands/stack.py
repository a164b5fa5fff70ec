"""``spark-ops stack``: installed versions against the dated known-good matrix (G9)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands._common import ContainerOpt, EngineOpt, PythonOpt, collect_options, prestart
from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.report.views import StackView


class StackResult(Result["StackView"]):
    """The G9 table: text or JSON; exit 0 pass/info, 1 warn/unknown/skip, 2 a hard blocker."""

    schema = "stack"

    model: StackView

    def json(self) -> str:
        return json.dumps(self.data(), indent=2) + "\n"  # as the dict it was printed from before (ASCII-escaped)

    def exit_code(self) -> int:
        return {"pass": 0, "info": 0, "fail": 2}.get(self.data()["G9"]["status"], 1)

    def text(self, fmt: OutputFormat) -> str:
        res = self.data()
        mx = res["matrix"]
        lines = [f"target python: {res['target_python']}",
                 f"matrix v{mx['version']}, last verified {mx['last_verified']}"
                 + (f", {mx['age_days']} days old" if mx["age_days"] is not None else "")
                 + (f" (past its {mx['refresh_horizon_days']}-day horizon)" if mx["stale"] else "")]
        if not res["packages_read"]:
            lines.append(f"installed packages could not be read ({res['packages_unavailable']})")
        lines += [f"  {r['package']:<14} {r['installed'] or '-':<22} verified {r['verified']:<10} {r['status']}"
                  for r in res["packages"]]
        g9 = res["G9"]
        lines.append(f"G9 {g9['status'].upper()}: {g9['summary']}")
        if g9["fix"]:
            lines.append(f"fix: {g9['fix']}")
        return "\n".join(lines) + "\n"


FormatOpt = format_option(*StackResult.formats)


def register(app: typer.Typer) -> None:
    @app.command("stack")
    def stack_cmd(
        python: PythonOpt = None,
        facts: Annotated[Path | None, typer.Option("--facts", help="Judge a recorded snapshot.")] = None,
        matrix: Annotated[Path | None, typer.Option("--matrix", help="A newer stack-matrix YAML.")] = None,
        container: ContainerOpt = None,
        engine: EngineOpt = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    ) -> int:
        """Installed versions against the dated known-good matrix (G9): per package, the matrix's age,
        hard blockers. Exit 0 pass/info, 1 warn/unknown/skip, 2 a hard blocker."""
        if facts is None:
            prestart(python, True, container)
        from sparkops import api

        res = api.stack(facts, collect_options(python, True, [Path.cwd()], True, None, container, engine),
                        api.knowledge(matrix), container=container)
        return emit(StackResult(res), fmt, as_json)
