"""The ``bandwidth:`` block of thresholds.yaml, validated when the knowledge loads (a bad edit fails
loudly there). The model is the knowledge's own typed section, :class:`sparkops.knowledge.thresholds.Bandwidth`."""

from __future__ import annotations

from sparkops.knowledge import Knowledge
from sparkops.knowledge.thresholds import GIB, MIB
from sparkops.knowledge.thresholds import Bandwidth as BandwidthSettings

__all__ = ["GIB", "MIB", "BandwidthSettings", "from_kb"]


def from_kb(kb: Knowledge) -> BandwidthSettings:
    return kb.thresholds.bandwidth
