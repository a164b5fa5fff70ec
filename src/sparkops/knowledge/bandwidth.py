"""The ``bandwidth:`` block of thresholds.yaml, validated: a bad edit fails loudly where it is used."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkops.core.units import GIB, MIB
from sparkops.knowledge import Knowledge


class BandwidthSettings(BaseModel):
    """Refusal, sizing, timing and judgment numbers of the G5 measurement (units in the names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_free_gb: float = Field(ge=0)
    neighbour_kinds: tuple[str, ...]
    l2_multiple: int = Field(ge=1)
    floor_mib: int = Field(ge=1)
    buffer_cap_bytes: int = Field(gt=0)
    total_cap_bytes: int = Field(gt=0)
    free_fraction: float = Field(gt=0, le=1)
    warmup_iters: int = Field(ge=1)
    reps: int = Field(ge=1)
    rep_target_ms: float = Field(gt=0)
    max_inner: int = Field(ge=1)
    timeout_s: float = Field(gt=0)
    container_timeout_s: float = Field(gt=0)
    expected_gbs: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)
    below_fraction: float = Field(gt=0, le=1)
    far_below_fraction: float = Field(gt=0, le=1)
    spec_floor_fraction: float = Field(gt=0, le=1)

    @model_validator(mode="after")
    def _consistent(self) -> BandwidthSettings:
        if self.far_below_fraction > self.below_fraction:
            raise ValueError("far_below_fraction must not exceed below_fraction")
        if self.floor_bytes > self.buffer_cap_bytes:
            raise ValueError("floor_mib must not exceed buffer_cap_bytes")
        for key, methods in self.expected_gbs.items():
            for method, (lo, hi) in methods.items():
                if method not in ("copy", "read") or not 0 < lo <= hi:
                    raise ValueError(f"expected_gbs.{key}.{method}: want copy|read with 0 < low <= high")
        return self

    @property
    def floor_bytes(self) -> int:
        return self.floor_mib * MIB

    @property
    def min_free_bytes(self) -> int:
        return int(self.min_free_gb * GIB)

    @classmethod
    def from_kb(cls, kb: Knowledge) -> BandwidthSettings:
        return cls.model_validate(kb.t("bandwidth"))
