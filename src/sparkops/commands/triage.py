"""``spark-ops triage gpu``: the GPU-visibility triage, five hypotheses in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands._common import ContainerOpt, EngineOpt, PythonOpt, collect_options, prestart
from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.report.views import TriageView


class TriageResult(Result["TriageView"]):
    """The triage: text or JSON; exit 0 torch sees the GPU, 2 a hypothesis fired, 1 undecided."""

    schema = "triage"

    model: TriageView

    def json(self) -> str:
        return json.dumps(self.data(), indent=2) + "\n"  # as the dict it was printed from before (ASCII-escaped)

    def exit_code(self) -> int:
        res = self.data()
        if res["fired"] is not None:
            return 2
        return 0 if res["torch_sees_gpu"] else 1

    def text(self, fmt: OutputFormat) -> str:
        res = self.data()
        sees = {True: "torch sees the GPU", False: "torch sees NO GPU", None: "torch's view unknown (no live probe)"}
        lines = [f"{sees[res['torch_sees_gpu']]} ({res['target_python'] or 'no target python'})"]
        if res["live_unavailable"]:
            lines.append(f"  why unknown: {res['live_unavailable']}")
        lines += [f"  {h['number']}. {h['status']:<11} {h['hypothesis']}" for h in res["hypotheses"]]
        if res["fired"] is not None:
            lines += [f"first that fired: #{res['fired']}: {res['reason']}", f"fix: {res['fix']}"]
        return "\n".join(lines) + "\n"


FormatOpt = format_option(*TriageResult.formats)


def register(app: typer.Typer) -> None:
    triage_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                             help="Work a failure's known hypotheses in order, stopping at the first that fires.")
    app.add_typer(triage_app, name="triage")

    @triage_app.command("gpu")
    def triage_gpu(
        python: PythonOpt = None,
        facts: Annotated[Path | None, typer.Option("--facts", help="Triage a recorded snapshot.")] = None,
        container: ContainerOpt = None,
        engine: EngineOpt = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    ) -> int:
        """Torch sees no GPU? Runtime flags, CUDA_VISIBLE_DEVICES, /dev/nvidia*, a wedged context, then
        the torch build — in that order; reinstall advice only for the last. Exit 0 torch sees the GPU,
        2 a hypothesis fired, 1 undecided."""
        if facts is None:
            prestart(python, False, container)
        from sparkops import api

        res = api.triage_gpu(facts, collect_options(python, False, [Path.cwd()], True, None, container, engine),
                             container=container)
        return emit(TriageResult(res), fmt, as_json)
