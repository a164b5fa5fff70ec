"""The learned text layer of diagnose (issue 18, fifth session): the words of a report's failure and plain lines
against each label's centroid of labelled reports (sparkops/diagnose/learned.py, ``text`` in
knowledge/diagnose_model.yaml, fitted by benchmarks/diagnose_learn.py inside each training fold).

The readers are pure, so they get property tests; the shipped layer is checked through ``diagnose_text`` and the
benchmark's fit on a toy corpus (a word of one source group is never kept)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.diagnose import diagnose_text, load_symptoms
from sparkops.diagnose.learned import (
    CEILING,
    HIGH,
    NONE,
    Candidate,
    ceiling,
    failure_tokens,
    probabilities,
    text_candidates,
    text_evidence,
    text_features,
    text_scores,
    text_similarity,
    utilities,
    words_hold,
)
from sparkops.diagnose.reading import line_roles
from sparkops.diagnose.rules import GOTCHAS, LearnedModel
from sparkops.knowledge import safe_load

KB = load_symptoms()
LM = KB.learned
TL = LM.text
HERE = Path(__file__).parent
ROOT = HERE.parents[1]

lines_st = st.lists(st.text(max_size=120).filter(lambda s: "\n" not in s and "\r" not in s), max_size=40)


def test_the_shipped_layer_has_a_text_layer_over_words_of_two_groups_or_more():
    assert TL is not None and LM.version == 2
    assert set(TL.read) == {"failure", "plain"} and TL.min_groups >= 2
    assert set(TL.centroids) == {*GOTCHAS, NONE}
    assert all(v > 0 for v in TL.idf.values()) and len(TL.idf) > 100
    assert all(0 < w <= 1.0 for c in TL.centroids.values() for w in c.values())
    assert TL.weight > 0  # closer words to a gotcha's reports speak for it


def test_a_word_in_a_centroid_but_not_in_the_idf_is_refused():
    data = safe_load((ROOT / "src/sparkops/knowledge/diagnose_model.yaml").read_text(encoding="utf-8"))
    data["text"]["centroids"]["G3"]["made_up_word"] = 0.5
    with pytest.raises(ValueError, match="made_up_word"):
        LearnedModel.model_validate(data)


def test_failure_tokens_read_words_and_pairs_of_the_chosen_roles_only():
    lines = ["torch.OutOfMemoryError: CUDA out of memory", "$ docker run --gpus all image", "> quoted advice here"]
    roles = line_roles(lines)
    assert roles[0] == "failure" and roles[1] == "context"
    toks = failure_tokens(lines, roles, ("failure", "plain"))
    assert {"cuda", "memory", "out of", "of memory"} <= toks
    assert "docker" not in toks and "quoted" not in toks
    assert "docker" in failure_tokens(lines, roles, ("failure", "plain", "context"))


@settings(max_examples=60, deadline=None)
@given(lines_st)
def test_text_scores_are_finite_and_bounded_for_any_text(lines):
    roles = line_roles(lines)
    toks = failure_tokens(lines, roles, TL.read)
    assert all(t == t.lower() and len(t) >= 2 for t in toks)
    sims = text_similarity(toks, TL.idf, TL.centroids)
    assert all(-1e-9 <= v <= 1.0 + 1e-9 for v in sims.values())
    s = text_scores(lines, roles, TL.read, TL.idf, TL.centroids, TL.scale)
    assert set(s) == set(GOTCHAS) and all(math.isfinite(v) and abs(v) <= TL.scale + 1e-9 for v in s.values())


def test_a_text_only_candidate_has_no_rule_features_and_is_held_under_high_confidence():
    c = Candidate("G7", 0.0, (), False, False, False, False, kept=False, text_only=True)
    cap, why = ceiling(c, {"failure_reported": 1.0, "platform": 1.0})
    assert cap == CEILING < HIGH and "no rule" in why
    u = dict(utilities([c], {}, {"t.text": 2.0, "t.only": -1.0, "c.log_score": 50.0}, {"G7": 9.0}, {}, {"G7": 0.5}))
    assert u["G7"] == pytest.approx(-1.0 + 2.0 * 0.5)  # its text alone: no prior, no rule feature


def test_text_candidates_are_the_gotchas_no_rule_found_whose_words_reach_the_bar():
    ruled = [Candidate("G3", 2.0, ("failure",), True, False, False, False)]
    words = {g: -1.0 for g in GOTCHAS} | {"G3": 3.0, "G6": 0.5, "G7": 0.2}
    extra = text_candidates(ruled, words, 0.0)
    assert [c.gotcha for c in extra] == ["G6", "G7"] and all(c.text_only for c in extra)
    assert text_candidates(ruled, words, 1.0) == []


def test_words_alone_never_make_a_finding_confident():
    c = Candidate("G3", 0.5, ("plain",), False, True, False, False)
    text = text_features(["it is slow"], ("failure",))
    weights = {**LM.weights}
    p_words = dict(probabilities(utilities([c], text, weights, LM.priors, LM.families, {"G3": 50.0})))["G3"]
    assert p_words >= HIGH  # the words push it over the mark ...
    assert words_hold([c], text, weights, LM.priors, LM.families)["G3"][0] == CEILING  # ... the hold keeps it under


def test_a_report_the_rules_miss_but_whose_words_point_somewhere_is_a_lead_not_an_answer():
    """diagnose_text end to end: any text-only finding carries evidence lines of the input and stays under HIGH."""
    text = ("On my DGX Spark the decode speed of the NVFP4 checkpoint is about the same as the FP8 one\n"
            "I expected the FP4 kernels to be faster on Blackwell\n")
    d = diagnose_text(text)
    lead = [f for f in d.findings + d.candidates if f.why.startswith("no rule matched")]
    assert lead  # the words point at a gotcha no rule found
    for f in lead:
        assert f.confidence < HIGH and f.evidence  # a text-only candidate is closer to its reports: some line says so
        assert all(1 <= e.line <= 2 and e.text in text and "words like" in e.why for e in f.evidence)


def test_text_evidence_names_the_lines_whose_words_weigh_most():
    idf = {"nvfp4": 2.0, "slow": 1.0, "fine": 1.0}
    cent = {"nvfp4": 0.9, "slow": 0.3}
    lines = ["all fine here", "nvfp4 decode is slow", "slow again"]
    ev = text_evidence(lines, ["plain", "failure", "failure"], ("failure", "plain"), idf, cent)
    assert ev[0] == (1, ["nvfp4", "slow"]) and ev[1] == (2, ["slow"])


def test_the_benchmark_keeps_only_words_of_two_source_groups_or_more():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import diagnose_learn as dl

    cases = [{"label": "G3", "group": "a/x", "tokens_fp": ["oom", "rarezz"]},
             {"label": "G3", "group": "b/y", "tokens_fp": ["oom", "memory"]},
             {"label": "none", "group": "c/z", "tokens_fp": ["works", "memory"]}]
    old = dl.TOKENS, dl.MIN_GROUPS, dl.PRUNE
    try:
        dl.TOKENS, dl.MIN_GROUPS, dl.PRUNE = "tokens_fp", 2, 0.0
        idf, cent = dl.fit_rocchio(cases)
    finally:
        dl.TOKENS, dl.MIN_GROUPS, dl.PRUNE = old
    assert "rarezz" not in idf and "works" not in idf and set(idf) == {"oom", "memory"}
    assert cent["G3"]["oom"] > cent["G3"]["memory"] > 0 and "oom" not in cent["none"]
