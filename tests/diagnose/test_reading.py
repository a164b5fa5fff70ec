"""Reading a report like an expert (issue 18): line roles, negation, quotation, calibrated abstention and what
would decide it. The line-role reader is pure, so it gets property tests; the calibrated layer is checked
through the public entry point and the JSON contract."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.diagnose import Diagnosis, diagnose_text, load_symptoms
from sparkops.diagnose.matcher import CALIBRATION_FEATURES, calibrated, calibration_features, match
from sparkops.diagnose.reading import (
    CONTEXT,
    FAILURE,
    PLAIN,
    QUOTED,
    ROLES,
    line_role,
    line_roles,
    looks_like_diff,
    negated,
    reports_failure,
)
from sparkops.diagnose.rules import GOTCHAS
from sparkops.diagnose.text import from_text

KB = load_symptoms()
RULES_ONLY = KB.model_copy(update={"scoring": KB.scoring.model_copy(update={"calibration": None}), "learned": None})
CALIBRATED = KB.model_copy(update={"learned": None})  # the rules and their calibration map, without the learned layer


# ---------------------------------------------------------------- line roles
def test_roles_of_typical_lines():
    assert line_role("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB") == FAILURE
    assert line_role("ImportError: libcudart.so.12: cannot open shared object file") == FAILURE
    assert line_role("vLLM: No available memory for the cache blocks") == FAILURE
    assert line_role("the server hangs after the first request") == FAILURE
    assert line_role("> the playbook says to set --gpu-memory-utilization 0.9") == QUOTED
    assert line_role("--tensor-parallel-size 2 \\") == CONTEXT
    assert line_role("- Parallelism: TP=2 over ConnectX-7") == CONTEXT
    assert line_role("NCCL_IB_HCA=mlx5_0") == CONTEXT
    assert line_role("| Driver | 580.95 |") == CONTEXT
    assert line_role("We bought two Sparks last month for our lab.") == PLAIN
    # a sentence that only starts with a command word is prose, not setup
    assert line_role("sudo systemctl restart polkit brings the memory back on my Spark") == PLAIN


def test_a_failure_word_in_the_hypothetical_mood_is_not_a_failure_line():
    """issue 18, fourth session: "can fail", "may also crash" warn about a possibility (a PR text, advice)."""
    assert line_role("the full CSV load can fail even when import checks pass") == PLAIN
    assert line_role("a mixed stack may also crash at load") == PLAIN
    assert line_role("it might hang if NCCL_P2P_DISABLE is unset") == PLAIN
    # what happened, next to a possibility, still reports the failure; "can't" is a failure of its own
    assert line_role("it failed twice and may fail again") == FAILURE
    assert line_role("I can't load the model on the Spark") == FAILURE
    assert line_role("the server could not allocate the KV cache") == FAILURE


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(("can", "may", "might", "could")), st.sampled_from(("fail", "crash", "hang", "OOM")),
       st.text(alphabet="abcdefghij ", max_size=30))
def test_a_modal_before_the_only_failure_word_makes_it_plain(modal, word, tail):
    assert line_role(f"this {modal} {word}") == PLAIN
    happened = {"fail": "failed", "crash": "crashed", "hang": "hung", "OOM": "hit an OOM"}[word]
    assert line_role(f"this {happened} {tail}") == FAILURE


def test_a_pasted_diff_is_quoted_text():
    doc = ["+DGX Spark: details and limitations", "+", "+The architecture *requires* CUDA >= 13.", "+more"]
    assert looks_like_diff(doc)
    assert all(r == QUOTED for r in line_roles(doc))
    assert not looks_like_diff(["+1 same here", "it fails for me too"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=30))
def test_line_roles_never_raise_and_cover_every_line(lines):
    lines = [ln.replace("\n", " ") for ln in lines]
    roles = line_roles(lines)
    assert len(roles) == len(lines) and set(roles) <= set(ROLES)
    assert reports_failure(roles) == (FAILURE in roles)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120), st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=1, max_size=40))
def test_negation_is_local_and_total(prefix, word):
    line = prefix.replace("\n", " ") + word
    start = len(line) - len(word)
    assert negated(line, start) in (True, False)
    assert negated(line, 0) is False  # nothing before the match: nothing negates it


def test_negation_reads_the_clause_before_the_match():
    for text, word, expected in [
        ("there was no OOM at all", "OOM", True),
        ("it did not hang this time", "hang", True),
        ("ran 12 hours without any throttling", "throttling", True),
        ("CUDA out of memory while loading", "out of memory", False),
        ("no idea why the server hangs", "hangs", False),       # the negation belongs to another phrase
        ("No available memory for the cache blocks", "available memory", False),  # a missing resource
        ("no kernel image is available for execution", "kernel image", False),
        ("it crashed. No, really, OOM again", "OOM", False),      # a new clause after the sentence end
    ]:
        assert negated(text, text.index(word)) is expected, text


# ---------------------------------------------------------------- reading changes the rules' evidence
def test_no_oom_is_not_g3_but_oom_is():
    assert diagnose_text("torch.OutOfMemoryError: CUDA out of memory.", kb=RULES_ONLY).top == "G3"
    assert diagnose_text("The fine-tune ran for 9 hours, no OOM and no errors.", kb=RULES_ONLY).top == "none"


def test_a_negated_match_is_reported_for_tuning():
    inp = from_text("the job finished: no OOM, no hang", "-", KB.text_limits)
    assert match(inp, KB).negated  # the negated matches are kept aside, not silently lost


def test_setup_words_weigh_less_than_the_same_words_in_a_failure_line():
    """The same two-node words score less as a setup bullet than where the reporter says it failed."""
    as_setup = "- Topology: two Sparks, --tensor-parallel-size 2, NCCL over ConnectX-7\nserver is up"
    as_failure = "the two Sparks with --tensor-parallel-size 2 hang in NCCL allreduce and time out"
    s1 = [s.score for s in match(from_text(as_setup, "-", KB.text_limits), KB).scored if s.gotcha == "G10"]
    s2 = [s.score for s in match(from_text(as_failure, "-", KB.text_limits), KB).scored if s.gotcha == "G10"]
    assert s2 and (not s1 or s1[0] < s2[0])


# ---------------------------------------------------------------- calibration and abstention
def test_calibration_is_a_probability_and_grows_with_the_evidence():
    cal = KB.scoring.calibration
    assert cal is not None and "holdout5" not in " ".join(cal.fitted_on)  # never fitted on the blind set
    assert set(cal.coef) <= set(CALIBRATION_FEATURES)
    weak = match(from_text("the vLLM server is a bit slow on the Spark", "-", KB.text_limits), KB)
    strong = match(from_text("ImportError: libcudart.so.12: cannot open shared object file: No such file or "
                             "directory\nundefined symbol: cudaGetDriverEntryPointByVersion, version libcudart.so.12",
                             "-", KB.text_limits), KB)
    pw = calibrated(calibration_features(weak), cal.bias, cal.coef)
    ps = calibrated(calibration_features(strong), cal.bias, cal.coef)
    assert 0.0 <= pw <= 1.0 and 0.0 <= ps <= 1.0 and ps > pw


def test_a_strong_report_is_answered_with_its_calibrated_confidence():
    d = diagnose_text("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
                      kb=CALIBRATED)
    assert not d.abstained and d.top == "G1"
    raw = match(from_text("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
                          "-", KB.text_limits), KB).scored[0]
    cal = KB.scoring.calibration
    assert d.findings[0].confidence == round(calibrated(calibration_features(match(from_text(
        "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "-",
        KB.text_limits), KB)), cal.bias, cal.coef), 3)
    assert d.findings[0].confidence != raw.confidence  # the calibrated probability, not the rules' raw score


def test_a_weak_report_abstains_and_says_what_would_decide_it():
    d = diagnose_text("We run two Sparks with TP=2 over ConnectX-7. Everything works fine.")
    assert d.top == "none" and not d.findings and d.abstained  # weak two-node words, nothing failed
    assert d.abstain_reason and "not enough to tell" in d.abstain_reason
    assert [c.gotcha for c in d.candidates] == ["G10"]
    assert all(c.confidence < KB.scoring.calibration.answer_at for c in d.candidates)
    assert [x.gotcha for x in d.decide] == ["G10"] and d.decide[0].command and d.decide[0].fact == "configs.hits"
    # the same words where something went wrong are answered
    assert diagnose_text("vllm serve with --tensor-parallel-size 2 on two Sparks is slow").top == "G10"


def test_every_gotcha_has_something_that_decides_it():
    assert set(KB.decide) == set(GOTCHAS)


def test_abstention_is_in_the_json_contract():
    d = diagnose_text("We run two Sparks with TP=2 over ConnectX-7. Everything works fine.")
    data = json.loads(d.model_dump_json())
    assert {"abstained", "abstain_reason", "candidates", "decide"} <= set(data)
    assert Diagnosis.model_validate(data) == d  # round-trips


def test_random_bytes_name_no_gotcha():
    rng = random.Random(18)
    for _ in range(30):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4000))).decode("latin-1")
        assert diagnose_text(junk).findings == []


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=600))
def test_any_text_gives_a_consistent_answer(text):
    d = diagnose_text(text)
    assert not (d.findings and d.abstained)
    assert all(0.0 <= f.confidence <= 1.0 for f in d.findings + d.candidates)
    if d.abstained:
        assert d.candidates and d.abstain_reason
