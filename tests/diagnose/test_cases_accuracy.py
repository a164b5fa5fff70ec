"""The matcher on the labelled real reports: tests/diagnose/cases (75), holdout (36), holdout2 (32),
holdout3 (24) and dev (110). A floor under its top-1 accuracy on each set and under its cost, so a knowledge
edit that loses cases, or a pattern that scans slowly, fails CI.

Each floor is the accuracy reached when it was set minus a small slack: cases 74/75 (52/75 blind,
before symptoms.yaml v2), holdout 36/36 with v3 (20/36 with v2, before round two read it), holdout2
32/32 with v4 (19/32 with v3, before round three read it), holdout3 24/24 with v5 (13/24 with v4, before
round four read it), dev 110/110 (written beside the rules). All these sets have now been used for tuning, so
these are regression guards, not honest scores: the honest score comes from a set the rules never saw
(tests/diagnose/holdout4 and holdout5, `python benchmarks/diagnose_accuracy.py`; grouped cross-validation:
`python benchmarks/diagnose_cv.py`).

symptoms.yaml v6 (issue 18) weighs evidence by the role of its line and ignores negated matches; that gives up
a few in-sample answers: cases 74 -> 72, dev 110 -> 108, holdout 36 -> 35, holdout2 and holdout3 unchanged (the
floors below). An abstention still names its candidates, which the per-label check accepts.

The learned decision layer (issue 18, second session: knowledge/diagnose_model.yaml, sparkops/diagnose/learned.py)
now decides what ``diagnose`` answers. The floors above keep guarding the rules and their calibration map exactly as
before (the same assertions, run on the knowledge without the learned layer: ``RULES``); the learned default gets
floors of its own (``LEARNED_SETS``), set at what it reached when it shipped minus the same slack. It gives up
in-sample answers the tuned rules had (cases 73 -> 65: it says "none" on several G5/G7/G10 reports it cannot tell
from the hard negatives of the newer sets) for +5 points of group-mean top-1 under grouped cross-validation
(benchmarks/results/diagnose-learn-cv.md); these are regression guards, not scores.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from sparkops.diagnose import diagnose_text, load_symptoms
from sparkops.knowledge import safe_load

HERE = Path(__file__).parent
# set -> (minimum size, top-1 right when the floor was set, slack)
# a case or two may flip with a deliberate trade-off. holdout2: 32 -> 31 in round 18p, when its pr263 case was relabelled
# G9 -> G1 (diagnose-relabel-18p.md): the rules, written with that case in view, still answer G9 on it.
SETS = {"cases": (75, 72, 2), "holdout": (36, 35, 2), "holdout2": (32, 31, 2), "holdout3": (24, 24, 2),
        "dev": (110, 108, 3)}
# the learned default: what it answered in-sample when it shipped (benchmarks/diagnose_learn.py --write)
LEARNED_SETS = {"cases": (75, 65, 2), "holdout": (36, 34, 2), "holdout2": (32, 31, 2), "holdout3": (24, 22, 2),
                "dev": (110, 103, 3)}
_CANDIDATE: dict[tuple[str, str], str] = {}  # (set, case id) -> top candidate when diagnose abstained
_LEARNED: dict[str, list[tuple[str, str, str]]] = {}  # set -> [(case id, label, learned answer)]


@pytest.fixture(scope="module", params=sorted(SETS))
def labelled(request) -> tuple[str, list[tuple[str, str, str, float]]]:
    """(set name, [(case id, label, answer, seconds) per case]), knowledge loaded and compiled beforehand."""
    learned = load_symptoms()
    kb = learned.model_copy(update={"learned": None})  # RULES: the rules and their calibration map
    diagnose_text("warm-up", kb=kb)
    out, lout = [], []
    for p in sorted((HERE / request.param).glob("*.yaml")):
        case = safe_load(p.read_text(encoding="utf-8"))
        t0 = time.perf_counter()
        d = diagnose_text(str(case["text"]), source=p.name, kb=kb)
        seconds = time.perf_counter() - t0
        out.append((case["id"], str(case["label"]), d.top, seconds))
        _CANDIDATE[(request.param, case["id"])] = d.candidates[0].gotcha if d.abstained and d.candidates else ""
        lout.append((case["id"], str(case["label"]), diagnose_text(str(case["text"]), source=p.name, kb=learned).top))
    _LEARNED[request.param] = lout
    return request.param, out


def test_top1_accuracy_on_the_labelled_cases_does_not_regress(labelled):
    name, answers = labelled
    size, reached, slack = SETS[name]
    assert len(answers) >= size
    right = sum(label == got for _id, label, got, _s in answers)
    misses = [f"{cid}: label {label}, answered {got}" for cid, label, got, _s in answers if label != got]
    assert right >= reached - slack, f"{name}: {right}/{len(answers)}; misses:\n" + "\n".join(misses)


def test_the_learned_default_does_not_regress_either(labelled):
    name, _answers = labelled
    size, reached, slack = LEARNED_SETS[name]
    answers = _LEARNED[name]
    assert len(answers) >= size
    right = sum(label == got for _id, label, got in answers)
    misses = [f"{cid}: label {label}, answered {got}" for cid, label, got in answers if label != got]
    assert right >= reached - slack, f"{name}: {right}/{len(answers)}; misses:\n" + "\n".join(misses)


def test_every_label_is_still_answered_right_somewhere(labelled):
    """A rule that silences a whole gotcha (or every "none") would hide behind the overall floor."""
    name, answers = labelled
    right = Counter(label for cid, label, got, _s in answers if label in (got, _CANDIDATE.get((name, cid))))
    labels = {label for _id, label, _got, _s in answers}
    assert all(right[label] >= 1 for label in labels), right


