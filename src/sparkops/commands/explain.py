"""``spark-ops explain GID``: a gotcha's catalog entry (the fast path in :mod:`sparkops.front`
answers the plain form without typer; this is the same text, and ``--format json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from sparkops.commands.contract import OutputFormat, Result, emit, format_option

if TYPE_CHECKING:
    from sparkops.knowledge import Gotcha


class GotchaResult(Result["Gotcha"]):
    """A catalog entry: the text `explain` prints, or its JSON; exit 0."""

    model: Gotcha

    def exit_code(self) -> int:
        return 0

    def text(self, fmt: OutputFormat) -> str:
        from sparkops import api
        from sparkops.report.render import render_gotcha

        return render_gotcha(self.model, api.knowledge().matrix)


def explain_result(gotcha: str) -> GotchaResult:
    """The entry of ``gotcha`` ("G3", "g3", "3", "identity"); a KeyError names the known ones."""
    from sparkops import api

    return GotchaResult(api.explain(gotcha))


FormatOpt = format_option(*GotchaResult.formats)


def register(app: typer.Typer) -> None:
    @app.command()
    def explain(gotcha: Annotated[str, typer.Argument(help="G1..G10 or identity")],
                fmt: FormatOpt = "table") -> int:  # type: ignore[valid-type,assignment]
        """Print a gotcha's symptom, cause, what is checked, and the fix."""
        try:
            res = explain_result(gotcha)
        except KeyError as exc:
            raise typer.BadParameter(str(exc.args[0]), param_hint="GOTCHA") from exc
        return emit(res, fmt)
