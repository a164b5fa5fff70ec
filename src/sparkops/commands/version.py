"""``spark-ops version`` (the fast path in :mod:`sparkops.front` answers it without typer)."""

from __future__ import annotations

import typer

from sparkops import __version__


def register(app: typer.Typer) -> None:
    @app.command()
    def version() -> int:
        """Print the tool version."""
        typer.echo(f"dgx-spark-ops {__version__}")
        return 0
