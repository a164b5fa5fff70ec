"""``spark-ops diagnose``: registered on the main app; heavy imports happen inside the command."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the command to ``app`` (filled in by the issue's work)."""
