"""The fleet's numbers and fixes, read from ``fleet.yaml`` (knowledge as data, safe-loaded, validated)."""

from __future__ import annotations

from datetime import date
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkops.knowledge import load_file


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Timeouts(_Model):
    join_timeout_s: float = Field(gt=0)
    collective_timeout_s: float = Field(gt=0)
    ack_timeout_s: float = Field(gt=0)
    stage_poll_s: float = Field(gt=0)


class Outliers(_Model):
    temperature_outlier_c: float
    clock_max_mismatch_mhz: float
    headroom_spread_warn_gb: float


class SizePlan(_Model):
    """Which sizes one backend measures, and how many iterations each (same on every rank: the
    collectives must match one for one)."""

    sizes: list[int]
    warmup: int = Field(ge=0)
    iterations: list[int]

    @model_validator(mode="after")
    def _same_length(self) -> SizePlan:
        if len(self.sizes) != len(self.iterations) or not self.sizes:
            raise ValueError("sizes and iterations must be non-empty lists of the same length")
        if any(s <= 0 for s in self.sizes) or any(i <= 0 for i in self.iterations):
            raise ValueError("sizes and iterations must be positive")
        return self


class BandwidthSettings(_Model):
    reference_busbw_gbs: float
    reference_source: str
    warn_fraction: float
    dtype_bytes: int
    reserve_gb: float
    nccl: SizePlan
    gloo: SizePlan
    grad_bytes_per_param: float
    fsdp_traffic_factor: float
    example_params_b: float

    def plan(self, backend: str) -> SizePlan:
        return self.nccl if backend == "nccl" else self.gloo


class FleetKnowledge(_Model):
    version: int
    last_verified: date
    timeouts: Timeouts
    outliers: Outliers
    bandwidth: BandwidthSettings
    fixes: dict[str, str]

    def fix(self, key: str) -> str:
        return self.fixes.get(key, "")


@lru_cache(maxsize=1)
def load_fleet() -> FleetKnowledge:
    """The packaged fleet knowledge (cached: immutable data)."""
    return load_file("fleet.yaml", FleetKnowledge)
