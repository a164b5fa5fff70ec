"""The matcher on the 75 labelled real reports (tests/diagnose/cases): a floor under its top-1 accuracy
and its cost, so a knowledge edit that loses cases, or a pattern that scans slowly, fails CI.

The floor is the accuracy reached when these tests were written (74/75, symptoms.yaml v2; 52/75 when
first measured blind) minus a small slack. The cases were also used to tune v2, so this is a
regression guard, not the honest score: that comes from a held-out set the rules never saw
(`python benchmarks/diagnose_accuracy.py tests/diagnose/holdout`).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from sparkops.diagnose import diagnose_text, load_symptoms
from sparkops.knowledge import safe_load

CASES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))
REACHED = 74  # top-1 right when this floor was set
SLACK = 2  # a case or two may flip with a deliberate trade-off; more is a regression
PER_CASE_LIMIT_S = 0.5  # "well under a second" even on a slow CI runner (measured: ~2 ms median, ~35 ms max)


@pytest.fixture(scope="module")
def answers() -> list[tuple[str, str, str, float]]:
    """(case id, label, answer, seconds) per case, knowledge loaded and compiled once beforehand."""
    kb = load_symptoms()
    diagnose_text("warm-up", kb=kb)
    out = []
    for p in CASES:
        case = safe_load(p.read_text(encoding="utf-8"))
        t0 = time.perf_counter()
        got = diagnose_text(str(case["text"]), source=p.name, kb=kb).top
        out.append((case["id"], str(case["label"]), got, time.perf_counter() - t0))
    return out


def test_top1_accuracy_on_the_labelled_cases_does_not_regress(answers):
    assert len(answers) >= 75
    right = sum(label == got for _id, label, got, _s in answers)
    misses = [f"{cid}: label {label}, answered {got}" for cid, label, got, _s in answers if label != got]
    assert right >= REACHED - SLACK, f"{right}/{len(answers)}; misses:\n" + "\n".join(misses)


def test_every_label_is_still_answered_right_somewhere(answers):
    """A rule that silences a whole gotcha (or every "none") would hide behind the overall floor."""
    right = Counter(label for _id, label, got, _s in answers if label == got)
    labels = {label for _id, label, _got, _s in answers}
    assert all(right[label] >= 1 for label in labels), right


def test_each_case_is_diagnosed_well_under_a_second(answers):
    slow = [(cid, round(s, 3)) for cid, _l, _g, s in answers if s > PER_CASE_LIMIT_S]
    assert not slow, slow
    assert sum(s for *_x, s in answers) / len(answers) < PER_CASE_LIMIT_S / 5
