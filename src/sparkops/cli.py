"""``spark-ops``: the typer app. Every command lives in :mod:`sparkops.commands` (one module per
command, listed once in :data:`sparkops.front.COMMANDS`) and is imported only when it runs; this
module maps every way of failing onto the exit-code contract.

Exit codes (every judging command): 0 ready · 1 ready with warnings · 2 blocked · 3 the tool
itself could not run (bad usage, unreadable snapshot, internal error) · 4 (preflight) judged and
printed, but the report file could not be written (stderr says where and why).
"""

from __future__ import annotations

import os
import sys

import typer
from typer.core import TyperCommand, TyperGroup

from sparkops.core.errors import InputError
from sparkops.front import APP_HELP, COMMANDS, LAZY
from sparkops.report.formats import EXIT_TOOL_ERROR

# Heavy modules (pydantic models, checks, rich) are imported inside the commands, after the
# target interpreter's children were started: full mode then costs about one torch import.

# typer >= 0.2x vendors click; take its exception classes from typer itself so both work.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class LazyGroup(TyperGroup):
    """The top-level group: a command listed in :data:`sparkops.front.COMMANDS` with its module is
    imported, and its ``register(app)`` run, only when it is asked for; ``--help`` lists every
    command from the table's one-line help. Order: the table's."""

    def list_commands(self, ctx):  # noqa: ANN001, ANN201 - click's signature
        listed = [name for name, _module, _help in COMMANDS]
        return listed + [name for name in self.commands if name not in listed]

    def get_command(self, ctx, cmd_name):  # noqa: ANN001, ANN201
        if cmd_name not in self.commands and cmd_name in LAZY:
            self.commands.update(load_feature(LAZY[cmd_name]))
        return self.commands.get(cmd_name)

    def format_commands(self, ctx, formatter):  # noqa: ANN001, ANN201
        shorts = {name: short for name, _module, short in COMMANDS}
        loaded = self.commands

        def listing(ctx, name):  # noqa: ANN001, ANN202 - a stand-in carrying the one-line help
            return loaded.get(name) or TyperCommand(name=name, short_help=shorts[name])

        self.get_command = listing  # type: ignore[method-assign]
        try:
            super().format_commands(ctx, formatter)
        finally:
            del self.get_command


def load_feature(module: str) -> dict:
    """The click commands a command module's ``register(app)`` adds, by name."""
    import importlib

    sub = typer.Typer(add_completion=False, rich_markup_mode=None)
    importlib.import_module(module).register(sub)
    return dict(typer.main.get_group(sub).commands)


app = typer.Typer(cls=LazyGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help=APP_HELP)


@app.callback()
def _root() -> None:  # every command is lazy: the callback makes typer build a group with none registered
    pass


def main(argv: list[str] | None = None) -> None:
    """Console entry point: map every way of failing onto the exit-code contract."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except UsageError as exc:
        exc.show()
        sys.exit(EXIT_TOOL_ERROR)
    except ClickException as exc:
        exc.show()
        sys.exit(EXIT_TOOL_ERROR)
    except typer.Exit as exc:  # --help
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except InputError as exc:  # a snapshot, a matrix file...: the user's input, said plainly
        typer.echo(f"spark-ops: {exc}", err=True)
        sys.exit(EXIT_TOOL_ERROR)
    except BrokenPipeError:
        sys.exit(EXIT_TOOL_ERROR)
    except Exception as exc:  # the tool itself failed: say so, exit 3, no traceback
        if os.environ.get("SPARKOPS_DEBUG"):
            raise
        typer.echo(f"spark-ops: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_TOOL_ERROR)
    sys.exit(rv if isinstance(rv, int) else 0)
