"""The ``bandwidth:`` block of thresholds.yaml (G5's refusal, sizing, timing and judgment numbers),
validated when the knowledge loads: a bad edit fails loudly there. The model is the typed section
:class:`sparkops.knowledge.thresholds.Bandwidth`; ``kb.thresholds.bandwidth`` is the loaded one."""

from __future__ import annotations

from sparkops.core.units import GIB, MIB
from sparkops.knowledge.thresholds import Bandwidth as BandwidthSettings

__all__ = ["GIB", "MIB", "BandwidthSettings"]
