"""The one contract every command's result keeps: ``render(format)`` and ``exit_code()``.

A :class:`Result` wraps the pydantic model the library returned (``Report``, ``PlanResult``,
``Diagnosis``...): that model, unchanged, is the JSON contract (its schema registered in
:mod:`sparkops.report.schemas` under :attr:`Result.schema`), and ``render(OutputFormat.json)`` prints
exactly it. The text formats and the exit code are the command's; they live on the result so the
CLI and the MCP server cannot disagree. A command offers the formats in :attr:`Result.formats`
behind one ``--format`` option (:func:`format_option`); its older ``--json`` flag stays as an alias.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Any, ClassVar, Generic, TypeVar

M = TypeVar("M")


class OutputFormat(str, Enum):
    """Every output format a command may offer; each command offers the ones that make sense."""

    table = "table"  # for a person at a terminal (the default)
    lines = "lines"  # one line per check, for grep and logs
    json = "json"  # the model's JSON: the contract
    markdown = "markdown"  # for an issue or a forum post


class Result(Generic[M]):
    """A command's result: the library's model, how to print it, what the process exits with."""

    formats: ClassVar[tuple[OutputFormat, ...]] = (OutputFormat.table, OutputFormat.json)
    schema: ClassVar[str | None] = None  # the name `spark-ops schema NAME` prints its JSON Schema under

    def __init__(self, model: M) -> None:
        self.model = model

    def exit_code(self) -> int:
        """The process exit status this result means (each command documents its table)."""
        raise NotImplementedError

    def render(self, fmt: OutputFormat | str = OutputFormat.table) -> str:
        """The whole output in ``fmt`` (one of :attr:`formats`), ending with a newline."""
        fmt = OutputFormat(fmt)
        if fmt not in self.formats:
            raise ValueError(f"--format {fmt.value}: this command prints {' | '.join(f.value for f in self.formats)}")
        return self.json() if fmt is OutputFormat.json else self.text(fmt)

    def text(self, fmt: OutputFormat) -> str:
        """A text format other than JSON."""
        raise NotImplementedError

    def json(self) -> str:
        """The JSON contract as the CLI prints it."""
        return self.model.model_dump_json(indent=2) + "\n"  # type: ignore[attr-defined]

    def data(self) -> Any:
        """The JSON contract as plain data (what an MCP tool returns)."""
        return self.model.model_dump(mode="json")  # type: ignore[attr-defined]


def format_option(*formats: OutputFormat, help: str | None = None) -> Any:  # noqa: A002 - typer's word
    """The ``--format`` option offering ``formats`` (an Enum of exactly those, so typer lists them)."""
    import typer

    choice = Enum("Format", {f.value: f.value for f in formats}, type=str)  # type: ignore[misc]
    return Annotated[choice, typer.Option("--format", help=help or " | ".join(f.value for f in formats))]


def chosen(fmt: Any, as_json: bool = False) -> OutputFormat:
    """The format asked for: ``--json`` is ``--format json``."""
    return OutputFormat.json if as_json else OutputFormat(getattr(fmt, "value", fmt))


def emit(result: Result, fmt: Any = OutputFormat.table, as_json: bool = False) -> int:
    """Print ``result`` in the format asked for; its exit code."""
    sys.stdout.write(result.render(chosen(fmt, as_json)))
    return result.exit_code()
