"""The JSON contracts of ``spark-ops stack`` and ``spark-ops triage gpu``: what :func:`sparkops.api.stack`
and :func:`sparkops.api.triage_gpu` return. Field order is the output's key order; the JSON is
``json.dumps(model.model_dump(mode="json"), indent=2)``, exactly what those commands printed as dicts
before they had models. Their schemas are registered in :mod:`sparkops.report.schemas`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from sparkops.core.findings import Finding


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ContainerUsed(_View):
    """The container the target probe ran in (``--container``)."""

    image: str  # as asked, alias resolved
    ref: str  # what ran: the lock file's repo@sha256:... when pinned, else the tag
    engine: str  # docker | podman
    digest: str | dict[str, Any] | None  # repo@sha256:... of the image, else its Id; an Unavailable when unread


class MatrixAge(_View):
    """The known-good matrix's version and age against the snapshot's date."""

    version: int
    last_verified: str  # ISO date
    age_days: int | None  # None: the snapshot has no collection time
    refresh_horizon_days: int
    stale: bool  # older than its refresh horizon


class StackView(_View):
    """``spark-ops stack --json``: the target environment against the dated known-good matrix (G9)."""

    target_python: str
    container: ContainerUsed | None
    matrix: MatrixAge
    packages: list[dict[str, str]]  # package, installed, verified, status, note (checks.g09_container_first.matrix_rows)
    packages_read: bool
    packages_unavailable: str | None  # why the installed packages could not be read
    components: dict[str, str]
    G9: Finding


class Hypothesis(_View):
    number: int
    hypothesis: str
    status: str  # fired | ruled out | not checked | not reached


class TriageView(_View):
    """``spark-ops triage gpu --json``: the five GPU-visibility hypotheses, in order."""

    torch_sees_gpu: bool | None  # None: no live probe of the target
    target_python: str
    container: ContainerUsed | None
    live_unavailable: str  # why there is no live probe ("" when there is one)
    hypotheses: list[Hypothesis]
    fired: int | None  # the first hypothesis that fired
    reason: str
    fix: str
