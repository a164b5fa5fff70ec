"""The learned decision layer of diagnose (issue 18, second session): sparkops/diagnose/learned.py reading the weights
in knowledge/diagnose_model.yaml (written by benchmarks/diagnose_learn.py).

The feature readers are pure, so they get property tests; the layer is checked through ``diagnose_text`` on short
reports written for these tests, on the labelled hard negatives, and against the JSON contract."""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.diagnose import Diagnosis, diagnose_text, load_symptoms
from sparkops.diagnose.learned import (
    CANDIDATE_FEATURES,
    NONE,
    NONE_FEATURES,
    Candidate,
    candidate_features,
    probabilities,
    text_features,
    utilities,
)
from sparkops.diagnose.reading import line_roles
from sparkops.diagnose.rules import GOTCHAS, LearnedModel, load_learned
from sparkops.knowledge import safe_load

KB = load_symptoms()
LM = KB.learned
HERE = Path(__file__).parent
HIGH = 0.8  # "high confidence" in benchmarks/diagnose_learn.py and diagnose_cv.py
# The labelled hard negatives the shipped layer still answers with high confidence: none (issue 18, fourth session).
# The last three (trtllm-15941, comfyui-16438, playbooks-98) went through a general mechanism, not a rule on their
# text: a failure word in the hypothetical mood ("can fail") no longer makes a failure line (reading.py), and
# learned.ceiling holds a finding under HIGH when no line reports a failure, when the gotcha's failure stands only in
# an issue's title, or when the report names no GB10 / DGX Spark. Any other confident hard negative fails the test.
# holdout9 (the post-freeze blind set of the fourth session, scored once at 4d8103a, never tuned on) found one: a FlashInfer
# PR whose CUDA 12.9 JIT compiled Spark kernels for 120a ("no kernel image", G1 at p ~ 0.86), labelled none as a library gap.
# Fifth session (text layer, learned.words_hold): that one is no longer answered at p >= 0.8; it stays listed (a known
# case may drop out, a new one may not come in).
# topup11 (eighth round, a training top-up scored once, blind, with the shipped v10 layer at 4ad99d7) found two: DGX Spark
# set-up instructions that are not NVIDIA's playbooks (Docker's blog, a third-party MicroK8s guide) answered G8 at 0.91 and
# 0.85. The v13 CV (benchmarks/results/diagnose-learn-cv-v13.md) did not earn a retrain (confident precision fell). What
# G8 is (gotchas.md: "following an OFFICIAL DGX Spark playbook verbatim fails") then gave a general ceiling
# (learned.ceiling: no confident G8 unless NVIDIA's own instructions are named), neutral under the blind CV (the same
# answers on all five dealings); in-sample it holds both under 0.8, so they are no longer listed.
# holdout13 (round 18k, a SEALED blind set scored once at 13be9a3 with the shipped layer, never tuned on) found two, both G8
# on texts that name a playbook but not a failing official one: an Ansible playbook rebooting a Spark (0.85) and a NixOS
# port of an official playbook whose own devShell lacked podman (0.83). They are listed, not tuned away (the set is sealed).
# holdout14 (round 18r, SEALED, scored once at 3233459 with the same shipped layer) found one more G8: NVIDIA's NemoClaw
# memory probe reading available rather than total memory (0.95), an NVIDIA repository's own code, not a playbook followed
# verbatim. Listed, not tuned away.
KNOWN_CONFIDENT_HARD_NEGATIVES = {"holdout9/flashinfer-pr2839-spark-cuda129-compiles-sm120a",
                                  "holdout13/uni-hi-is-ansible-reboot-freezes-dgx-spark-network",
                                  "holdout13/nixos-dgx-spark-pr101-multi-agent-chatbot-devshell-missing-podman",
                                  "holdout14/nemoclaw-3251-spark-memory-probe-checks-available-not-total",
                                  # holdout17's blind score (G1 at 0.93 on a PyPI sgl-kernel built for sm_120a: a
                                  # library's missing SM12x kernel, `none` by the labelling rules); recorded, not tuned
                                  "holdout17/meds-eic-ar-163-sglang-pypi-sgl-kernel-sm120a-no-kernel-image-on-12-1",
                                  # topup13's blind score (round 18ai: G8 at 0.86 on a Jetson Thor thread about NVML
                                  # memory "Not Supported"; a training top-up, not used as training data); recorded
                                  "topup13/cosmos-reason1-61-thor-nvml-not-supported-quantize"}


def test_the_weights_file_is_the_packaged_learned_model():
    assert isinstance(LM, LearnedModel) and load_learned() == LM
    assert set(LM.priors) == set(GOTCHAS)
    assert set(LM.candidate) == set(CANDIDATE_FEATURES) and set(LM.none) == set(NONE_FEATURES)
    assert 0.0 < LM.answer_at <= 1.0 and LM.cases >= 275 and LM.groups >= 100
    assert "dev" not in LM.trained_on  # dev has no blind rules version


def test_an_unknown_feature_in_the_weights_file_is_refused():
    data = safe_load((HERE.parents[1] / "src/sparkops/knowledge/diagnose_model.yaml").read_text(encoding="utf-8"))
    data["candidate"]["made_up"] = 1.0
    with pytest.raises(ValueError, match="made_up"):
        LearnedModel.model_validate(data)


lines_st = st.lists(st.text(max_size=120).filter(lambda s: "\n" not in s and "\r" not in s), max_size=40)


@settings(max_examples=80, deadline=None)
@given(lines_st)
def test_text_features_are_bounded_for_any_text(lines):
    f = text_features(lines, line_roles(lines))
    assert set(NONE_FEATURES) <= set(f)
    assert all(math.isfinite(v) and v >= 0 for v in f.values())
    shares = ("failure_share", "context_share", "quoted_share", "advice", "success", "question", "trace",
              "first_person", "headings")
    assert all(f[k] <= 1.0 for k in shares) and f["bias"] == 1.0


cand_st = st.builds(Candidate, gotcha=st.sampled_from(GOTCHAS), score=st.floats(0, 20),
                    evidence_roles=st.lists(st.sampled_from(("failure", "plain", "quoted", "context")),
                                            max_size=6).map(tuple),
                    failure_evidence=st.booleans(), topic_only=st.booleans(), ruled=st.booleans(),
                    negated=st.booleans(), kept=st.booleans())


@settings(max_examples=80, deadline=None)
@given(st.lists(cand_st, min_size=1, max_size=5, unique_by=lambda c: c.gotcha), lines_st)
def test_probabilities_are_a_distribution_over_the_candidates_and_none(cands, lines):
    text = text_features(lines, line_roles(lines))
    feats = candidate_features(cands, text, LM.families)
    assert len(feats) == len(cands) and all(set(f) == set(CANDIDATE_FEATURES) for f in feats)
    assert sum(f["is_top"] for f in feats) == 1
    probs = probabilities(utilities(cands, text, LM.weights, LM.priors, LM.families))
    assert {label for label, _p in probs} == {c.gotcha for c in cands} | {NONE}
    assert math.isclose(sum(p for _l, p in probs), 1.0, rel_tol=1e-9)
    assert [p for _l, p in probs] == sorted((p for _l, p in probs), reverse=True)


def test_more_evidence_on_a_failure_line_makes_the_answer_more_likely():
    weak = Candidate("G3", 0.6, ("plain",), False, True, False, False, False)
    strong = Candidate("G3", 5.0, ("failure", "failure"), True, False, False, False, True)
    text = text_features(["torch.OutOfMemoryError: CUDA out of memory"], ("failure",))
    p = {c.score: dict(probabilities(utilities([c], text, LM.weights, LM.priors, LM.families)))["G3"]
         for c in (weak, strong)}
    assert p[5.0] > p[0.6]


def test_a_clear_failure_is_answered_by_the_learned_layer():
    d = diagnose_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB while loading the "
                      "70B checkpoint on the GB10")
    assert d.top == "G3" and not d.abstained and LM.answer_at <= d.findings[0].confidence <= 1.0


def test_setup_words_in_a_success_report_abstain_with_the_reason_in_the_json():
    d = diagnose_text("We run two Sparks with TP=2 over ConnectX-7 and NCCL. Everything works fine, thanks!")
    assert d.top == "none" and d.abstained and d.candidates and d.candidates[0].gotcha == "G10"
    data = json.loads(d.model_dump_json())
    assert data["abstained"] is True and "p = " in data["abstain_reason"]
    assert "not enough to tell" in data["abstain_reason"] and data["decide"][0]["gotcha"] == "G10"
    assert Diagnosis.model_validate(data) == d


def test_several_strong_problems_are_all_named():
    text = ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            "ImportError: Found version 0.13.0, but only versions above 0.16.0 are supported\n")
    d = diagnose_text(text)
    assert {f.gotcha for f in d.findings} >= {"G1", "G3"} and not d.abstained
    assert [f.confidence for f in d.findings] == sorted((f.confidence for f in d.findings), reverse=True)


def _hard_negatives() -> list[tuple[str, str]]:
    out = []
    for p in sorted(glob.glob(str(HERE / "*" / "*.yaml"))):
        case = safe_load(Path(p).read_text(encoding="utf-8"))
        if case["kind"] == "hard-negative" and case["label"] == "none":
            out.append((f"{Path(p).parent.name}/{case['id']}", str(case["text"])))
    return out


def test_no_confident_finding_on_a_labelled_hard_negative():
    """Every labelled hard negative of the tests' sets (kind hard-negative, label none): no finding at p >= 0.8
    (issue 18), apart from the one the post-freeze set holdout9 found (listed above, not tuned on)."""
    hard = _hard_negatives()
    assert len(hard) >= 130
    confident = {name: [(f.gotcha, f.confidence) for f in d.findings if f.confidence >= HIGH]
                 for name, text in hard for d in [diagnose_text(text, kb=KB)]}
    confident = {k: v for k, v in confident.items() if v}
    assert set(confident) <= KNOWN_CONFIDENT_HARD_NEGATIVES, confident


def test_the_decision_knob_switches_back_to_the_calibration_map(tmp_path):
    """symptoms.yaml ``scoring.decision``: "learned" (shipped) attaches the learned layer, "calibrated" is v6."""
    from sparkops.diagnose.rules import load_file

    src = (HERE.parents[1] / "src/sparkops/knowledge/symptoms.yaml").read_text(encoding="utf-8")
    assert "decision: learned" in src and KB.scoring.decision == "learned" and KB.learned is not None
    f = tmp_path / "symptoms.yaml"
    f.write_text(src.replace("decision: learned", "decision: calibrated"), encoding="utf-8")
    v6 = load_file(f)
    assert v6.learned is None and v6.scoring.decision == "calibrated"
    text = "We run two Sparks with TP=2 over ConnectX-7 and NCCL. Everything works fine, thanks!"
    assert diagnose_text(text, kb=v6).abstain_reason != diagnose_text(text).abstain_reason


# --- where the evidence stands (issue 18, third session): "anchored" and setup patterns ------------------------------

SETUP_ONLY_TP = ("Two DGX Sparks, vllm serve with --tensor-parallel-size 2 over ConnectX-7\n"
                 "export NCCL_SOCKET_IFNAME=enp1s0f0np0\n"
                 "ssh: connect to host spark-02 port 22: Connection timed out\n"
                 "The launcher failed before any worker started.\n")
TP_FAILS = ("Two DGX Sparks, vllm serve with --tensor-parallel-size 2 over ConnectX-7\n"
            "[rank1]:[E ProcessGroupNCCL.cpp:1414] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLGATHER)\n"
            "The server hangs during the first request.\n")


def _candidate(text: str, gotcha: str):
    from sparkops.diagnose.matcher import candidates, match
    from sparkops.diagnose.text import from_text

    return next((c for c in candidates(match(from_text(text, "-", KB.text_limits), KB)) if c.gotcha == gotcha), None)


def test_tp2_in_the_setup_does_not_anchor_g10_but_a_collective_timeout_does():
    assert any(p.setup for p in KB.patterns["G10"])  # the TP flag is a configuration fact
    quiet = _candidate(SETUP_ONLY_TP, "G10")
    assert quiet is not None and not quiet.anchored  # G10 is a candidate (TP=2, two Sparks), on the setup only
    loud = _candidate(TP_FAILS, "G10")
    assert loud is not None and loud.anchored
    assert LM.anchored.get("G10", 0.0) > 0  # learned: a G10 failure pattern on a failure line counts for G10


def test_where_the_tp2_stands_decides_the_g10_answer():
    quiet = diagnose_text(SETUP_ONLY_TP)
    assert not any(f.gotcha == "G10" and f.confidence >= HIGH for f in quiet.findings)
    loud = diagnose_text(TP_FAILS)
    assert loud.top == "G10" and not loud.abstained
    g10 = {f.gotcha: f.confidence for f in loud.findings}["G10"]
    p_quiet = max((c.confidence for c in quiet.findings + quiet.candidates if c.gotcha == "G10"), default=0.0)
    assert g10 > p_quiet


def test_an_anchored_candidate_feature_is_read_and_weighed_per_gotcha():
    cands = [Candidate("G10", 3.0, ("failure",), True, False, False, False, anchored=True),
             Candidate("G10", 3.0, ("failure",), True, False, False, False, anchored=False)]
    f = candidate_features(cands, {}, {})
    assert [x["anchored"] for x in f] == [1.0, 0.0]
    weights = {"a.G10": 2.0}
    u_on = utilities(cands[:1], {}, weights, {}, {})[0][1]
    u_off = utilities(cands[1:], {}, weights, {}, {})[0][1]
    assert u_on - u_off == pytest.approx(2.0)


# --- what a confident answer needs (issue 18, fourth session): learned.ceiling ---------------------------------------

def test_the_ceiling_is_under_high_confidence_and_says_why():
    from sparkops.diagnose.learned import CEILING, ceiling

    assert CEILING < HIGH
    full = Candidate("G3", 5.0, ("failure",), True, False, False, False, anchored=True, body_anchored=True)
    title = Candidate("G3", 5.0, ("failure",), True, False, False, False, anchored=True, body_anchored=False)
    ok = {"failure_reported": 1.0, "platform": 1.0}
    assert ceiling(full, ok) == (1.0, None)
    assert ceiling(title, ok)[0] == CEILING and "title" in ceiling(title, ok)[1]
    assert ceiling(full, {**ok, "failure_reported": 0.0})[0] == CEILING
    assert "GB10" in ceiling(full, {**ok, "platform": 0.0})[1]


@pytest.mark.parametrize(("line", "official"), [
    ("Following the DGX Spark playbook for vLLM, the container exits at start.", True),
    ("https://github.com/NVIDIA/dgx-spark-playbooks/tree/main/nvidia/vllm step 3 fails", True),
    ("the build.nvidia.com/spark instructions for Open WebUI give a 404", True),
    ("NVIDIA's official guide for the connect-two-sparks setup fails at the MTU step", True),
    ("docker-model-plugin fails to install on NVIDIA DGX Spark while following these blog post instructions", False),
    ("Following a MicroK8s guide for the DGX Spark, the GPU addon pods never start", False),
])
def test_g8_is_confident_only_when_nvidia_s_own_instructions_are_named(line, official):
    """G8 is "following an official DGX Spark playbook verbatim fails" (gotchas.md): a vendor's blog or a third-party
    guide going stale holds G8 under high confidence (learned.ceiling); other gotchas are not held by this."""
    from sparkops.diagnose.learned import CEILING, ceiling

    lines = [line, "Error: the step fails"]
    text = text_features(lines, line_roles(lines))
    assert text["official_docs"] == float(official)
    g8 = Candidate("G8", 5.0, ("failure",), True, False, False, False, anchored=True, body_anchored=True)
    g3 = Candidate("G3", 5.0, ("failure",), True, False, False, False, anchored=True, body_anchored=True)
    ok = {**text, "failure_reported": 1.0, "platform": 1.0}
    cap, why = ceiling(g8, ok)
    assert (cap, why) == (1.0, None) if official else (cap == CEILING and "NVIDIA's own" in why)
    assert ceiling(g3, ok) == (1.0, None)


@settings(max_examples=80, deadline=None)
@given(cand_st, lines_st)
def test_the_ceiling_is_a_probability_with_a_reason_whenever_it_holds(cand, lines):
    from sparkops.diagnose.learned import ceiling

    cap, why = ceiling(cand, text_features(lines, line_roles(lines)))
    assert 0.0 < cap <= 1.0 and (cap == 1.0) == (why is None)


TITLE_ONLY = ("[Bug]: DGX Spark playbook fails in trtllm-serve for these models\n\n"
              "I passed an extra flag that the playbook never uses; with it removed both models load.\n\n"
              "Thanks for the quick answer.\n")
BODY_TOO = ("vLLM on the DGX Spark: CUDA out of memory while loading\n\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB\n"
            "The 70B checkpoint does not fit next to the page cache.\n")


def test_a_failure_only_in_the_title_is_held_under_high_confidence():
    c = _candidate(TITLE_ONLY, "G8")
    assert c is not None and c.anchored and not c.body_anchored
    d = diagnose_text(TITLE_ONLY)
    assert all(f.confidence < HIGH for f in d.findings + d.candidates)
    b = _candidate(BODY_TOO, "G3")
    assert b is not None and b.anchored and b.body_anchored
    d = diagnose_text(BODY_TOO)
    assert d.top == "G3" and "held at" not in d.findings[0].why


def test_a_generic_explainer_naming_no_spark_is_not_answered_with_high_confidence():
    # round 18ac: the explainer is a CUDA 12 library missing (G1's own failure); until then it was "no kernel image",
    # which the G1 gate (diagnose-learn-cv-v28.md) no longer answers as G1 at all: a library gap is none of the ten
    text = ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n"
            "This error means the wheel was built for another CUDA than the one installed in the runner.\n"
            "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n")
    d = diagnose_text(text)
    assert d.findings and all(f.confidence < HIGH for f in d.findings)
    assert "names no GB10" in d.findings[0].why
    assert diagnose_text(text + "Seen on a DGX Spark (GB10, sm_121).\n").findings[0].confidence >= HIGH
    gap = ("RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
           "Seen on a DGX Spark (GB10, sm_121).\n")
    assert all(f.gotcha != "G1" for f in diagnose_text(gap).findings)


# --- sealed blind sets (issue 18, rounds 18i, 18k, 18r, 18w, 18y, 18aa, 18af) ---------------------------------------------

# holdout16 (round 18y), holdout17 (round 18aa) and holdout18 (round 18af) are sealed before their one blind score by the lead.
SEALED = ("holdout12", "holdout13", "holdout14", "holdout15", "holdout16", "holdout17", "holdout18")  # scored once, blind; never trained or tuned on
# holdout17 and holdout18 fell short of the 40 reports asked for (their READMEs, "Known gaps"): 31 gathered, floor 30, and 24
# gathered, floor 24; the others keep 40.
SEALED_MIN_CASES = {"holdout17": 30, "holdout18": 24}


@pytest.mark.parametrize("name", SEALED)
def test_a_sealed_blind_set_is_never_trained_on(name):
    """The learned layer's trainer reads only the sets it names; a sealed set is not among them, not among the shipped
    weights' training sets, and has no blind-rules entry that would let the CV read it."""
    import sys

    sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
    import diagnose_cv
    import diagnose_learn

    assert (HERE / name).is_dir() and len(list((HERE / name).glob("*.yaml"))) >= SEALED_MIN_CASES.get(name, 40)
    assert name not in diagnose_learn.SETS and name not in diagnose_learn.NEVER_TUNED
    assert name not in LM.trained_on
    assert name not in diagnose_cv.BLIND_RULES
    assert {c["set"] for c in diagnose_cv.load_sets(list(diagnose_learn.SETS))}.isdisjoint(SEALED)
