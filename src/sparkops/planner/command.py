"""``spark-ops plan``: registered on the main app; heavy imports happen inside the command."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Placeholder until the planner CLI lands."""
