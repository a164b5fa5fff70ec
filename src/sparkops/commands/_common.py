"""Options and steps several commands share: the collection options, the early start of the
target interpreter's children, the check of ``--python``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from sparkops import api

PythonOpt = Annotated[Path | None, typer.Option("--python", help="The interpreter you train with "
                      "(default: python3 on PATH, else this tool's own).", show_default=False)]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Static target probe only: no torch import.")]
ConfigOpt = Annotated[list[Path] | None, typer.Option("--config", help="A config file, launch script or directory of them to scan for "
                      "parallelism settings (G10); repeatable. Default: the working directory's own config files.")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="No network: G8 uses its cache or skips.")]
ContainerOpt = Annotated[str | None, typer.Option("--container", help="Run the target probe inside this "
                         "image (ngc | unsloth | IMAGE[:TAG], the lock file's pin when there is one) with "
                         "`docker run --gpus all`; --python then names the interpreter inside it.",
                         show_default=False)]
EngineOpt = Annotated[str | None, typer.Option("--engine", help="With --container: the container CLI, docker "
                      "(Docker Engine, or podman's Docker API behind it) | podman. Default: the first on PATH.",
                      show_default=False)]
BudgetOpt = Annotated[float | None, typer.Option("--budget", help="Deadline in seconds for the whole "
                      "collection; a probe still running then is reported as timed out.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def check_python(python: Path | None) -> None:
    """A mistyped --python is a usage error (exit 3), named (the rule: _preflight_run.python_problem)."""
    from sparkops.commands._preflight_run import python_problem

    if (problem := python_problem(python)) is not None:
        raise typer.BadParameter(problem, param_hint="--python")


def prestart(python: Path | None, quick: bool, container: str | None = None) -> None:
    """Start the target interpreter's children and NVML's init now, before the heavy imports
    (with --container the target runs in the image, started by its probe)."""
    from sparkops.probes.early import warm_nvml
    from sparkops.probes.target_launch import prestart as start_children

    env = dict(os.environ)
    if container is None:
        check_python(python)
        start_children(str(python) if python else None, env, "quick" if quick else "full")
    warm_nvml(env)


def collect_options(python: Path | None, quick: bool, config: list[Path] | None, offline: bool,
                    budget: float | None = None, container: str | None = None,
                    engine: str | None = None) -> api.CollectOptions:
    """The collection options of a live-collecting command line (preflight, collect, stack, triage):
    the defaults are :func:`sparkops.api.collect_options`'s."""
    from sparkops import api

    return api.collect_options(quick=quick, python=python, config_paths=tuple(config or ()), offline=offline,
                               budget_s=budget, container=container, engine=engine)
