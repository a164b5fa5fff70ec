"""benchmarks/diagnose_misses.py sorts the learned layer's held-out misses into the issue's three kinds (issue 18,
sixth session): each kind is told apart by the label, the answer, its probability and the rules' candidates."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def misses():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import diagnose_misses

    return diagnose_misses


def _case(label, pred, p=0.5, cands=("G3", "G6")):
    return {"label": label, "pred": pred, "p": p, "labels0": [*cands, "none"]}


@pytest.mark.parametrize(("case", "kind"), [
    (_case("G3", "G3"), None),
    (_case("none", "none"), None),
    (_case("G3", "none"), "A1"),  # the rules found G3, the model abstained
    (_case("G1", "none"), "A2"),  # no rule found G1
    (_case("none", "G3", 0.79), "B"),
    (_case("none", "G3", 0.8), "B+"),
    (_case("G6", "G3"), "C"),
    (_case("G9", "G3"), "C2"),
])
def test_each_miss_has_its_kind(misses, case, kind):
    assert misses.kind(case) == kind
    assert kind is None or kind in misses.KINDS and kind in misses.NAMES
