"""An engine's release as a comparable number, read once for the checks and the planner alike.

Version boundaries in the engine data ("since: 0.19.2") are compared with what a user names
("0.11.1rc2.dev45", "v0.20.0-cu130", "V0" for vLLM's old engine) or what the target Python has
installed. Two copies of this reading had drifted apart before; both layers now call this one.
"""

from __future__ import annotations

import re

Release = tuple[int, int, int]

# vLLM's old engine, named by users as "V0" (not a release number): older than every 0.x boundary
OLD_ENGINE: Release = (0, 0, 0)


def release(version: str | None) -> Release | None:
    """``"0.11.1rc2"`` -> (0, 11, 1), ``"v0.20.0-cu130"`` -> (0, 20, 0), ``"V0"`` -> (0, 0, 0); None when no
    major.minor number is named (the caller decides what an unknown release means)."""
    if not version:
        return None
    if re.match(r"\s*v0(?![.\d])", version, re.IGNORECASE):  # "V0", "V0 engine"; "v0.20.0" is a release
        return OLD_ENGINE
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def at_least(version: Release | None, since: str | float, *, unknown_is_current: bool = True) -> bool:
    """Is ``version`` at or after the boundary ``since`` ("0.21", "0.19.2")? An unknown release (None) is
    the current one, which is past every boundary the data names, unless ``unknown_is_current`` is off."""
    if version is None:
        return unknown_is_current
    boundary = release(str(since))
    if boundary is None:
        raise ValueError(f"not a release boundary: {since!r}")
    return version >= boundary
