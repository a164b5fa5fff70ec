"""The calibration of diagnose's displayed confidence (issue 18, round 18ah).

The learned layer's probability of its answer (capped by ``learned.ceiling`` / ``words_hold``) is mapped through a
monotone map fitted on held-out predictions only (``benchmarks/diagnose_learn.py``: isotonic regression of "the answer
was the label" on the displayed probability, over the out-of-fold answers of a grouped cross-validation by source),
shipped as data in ``knowledge/diagnose_calibration.yaml``. The map is applied after the decision: it never changes
which gotcha is answered or whether one is, only the number shown, and never lifts a finding over its ceiling.

Pure Python, deterministic; :func:`fit` is the one fitting routine (the trainer and the tests call it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

LOW, HIGH_ = 0.01, 0.99  # no certainty is ever shown, either way


@dataclass(frozen=True)
class Calibration:
    """A monotone map: ``knots`` are (displayed probability, share right), x strictly increasing, y non-decreasing."""

    knots: tuple[tuple[float, float], ...]
    fitted_on: str = ""  # what it was fitted on, for the report's notes / --json

    def __call__(self, x: float) -> float:
        return apply(self.knots, x)


def fit(pairs: Sequence[tuple[float, bool]]) -> tuple[tuple[float, float], ...]:
    """Isotonic regression (pool-adjacent-violators) of right (0/1) on x; equal x are pooled first, every pair weighs
    1. Returns the pooled blocks' (mean x, share right), x increasing, share right non-decreasing."""
    by_x: dict[float, list[float]] = {}
    for x, right in pairs:
        by_x.setdefault(float(x), []).append(1.0 if right else 0.0)
    blocks: list[list[float]] = []  # [sum x, sum right, n]
    for x in sorted(by_x):
        ys = by_x[x]
        blocks.append([x * len(ys), sum(ys), float(len(ys))])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            sx, sy, n = blocks.pop()
            blocks[-1] = [blocks[-1][0] + sx, blocks[-1][1] + sy, blocks[-1][2] + n]
    return tuple((sx / n, sy / n) for sx, sy, n in blocks)


def apply(knots: Sequence[tuple[float, float]], x: float) -> float:
    """The map at x: linear between consecutive knots, constant beyond the ends, clipped to [0.01, 0.99]; x itself
    (clipped) when there are no knots."""
    if not knots:
        y = x
    elif x <= knots[0][0]:
        y = knots[0][1]
    elif x >= knots[-1][0]:
        y = knots[-1][1]
    else:
        y = knots[-1][1]
        for (x0, y0), (x1, y1) in zip(knots, knots[1:], strict=False):
            if x0 <= x <= x1:
                y = y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
                break
    return min(max(y, LOW), HIGH_)


def displayed(cal: Calibration | None, p: float, cap: float = 1.0) -> float:
    """The confidence shown for an answer whose (capped) probability is ``p``: the map's value, never over ``cap``
    (the ceiling the report allows). Without a map: ``p``."""
    return p if cal is None else min(cal(p), cap)


@lru_cache(maxsize=1)
def load() -> Calibration | None:
    """The packaged map (``knowledge/diagnose_calibration.yaml``), or None when the file is absent."""
    from importlib.resources import files

    from sparkops.knowledge import safe_load

    res = files("sparkops.knowledge").joinpath("diagnose_calibration.yaml")
    if not res.is_file():
        return None
    doc = safe_load(res.read_text(encoding="utf-8"))
    knots = tuple((float(x), float(y)) for x, y in doc["knots"])
    if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(knots, knots[1:], strict=False)):
        raise ValueError("diagnose_calibration.yaml: knots must have increasing x and non-decreasing y")
    return Calibration(knots=knots, fitted_on=f"{doc['method']} on {doc['cases']} reports' held-out answers "
                                              f"({doc['last_verified']})")
