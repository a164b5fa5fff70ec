"""The text-classifier experiment (benchmarks/diagnose_train.py): it is not part of ``spark-ops diagnose``
(it did not pass its keep-rule), but its numbers are in the results, so the script that made them must
stay right: deterministic training, a hash that follows the data, sane answers on fresh text, and a
combination that never overrides strong rule evidence."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import diagnose_train as exp  # noqa: E402

# Short reports written for this test (not copied from any set), one per gotcha.
FRESH = {
    "G1": "ImportError: libcudart.so.12 missing, the wheel was built for CUDA 12 but the box has CUDA 13 only",
    "G2": "pip install flash-attn fails, no prebuilt wheel for aarch64 sm121, building from source takes hours",
    "G3": "the process was OOM killed by the kernel while loading the 70B checkpoint, unified memory exhausted",
    "G4": "GPU clocks drop and the fan runs loud; thermal slowdown after twenty minutes of training",
    "G5": "decode speed is low, memory bandwidth bound at 273 GB/s, tokens per second far below the H100",
    "G6": "two services share the Spark memory pool, one gets evicted when the other grows",
    "G7": "NVFP4 quantized model is slower than FP8 because there is no native FP4 kernel for sm121",
    "G8": "the NVIDIA playbook container tag does not exist, instructions are out of date",
    "G9": "torchao version is incompatible with the installed torch nightly, import fails",
    "G10": "tensor parallel across two Sparks over the ConnectX link is slower than a single node, NCCL",
}
POOL_DOCS = [(label, text) for name in exp.POOL for _n, label, text in exp.load_set(name)]
SETTINGS = {k: v for k, v in exp.CHOSEN.items() if k != "blend"}
RULE = exp.BlendRule(**exp.CHOSEN["blend"])


@pytest.fixture(scope="module")
def clf():
    return exp.train(POOL_DOCS, **SETTINGS)


def test_training_is_deterministic_and_records_its_data():
    a, b = exp.dump(exp.build()), exp.dump(exp.build())
    assert a == b
    data = json.loads(a)
    items = [c for name in exp.POOL for c in exp.load_set(name)]
    assert data["data_hash"] == exp.data_hash(items) and data["cases"] == len(items) >= 250
    assert data["trained_on"] == list(exp.POOL) and "holdout3" not in a
    assert data["version"] and data["last_verified"]


def test_the_hash_follows_the_data():
    items = exp.load_set("holdout")
    changed = [*items[:-1], (items[-1][0], items[-1][1], items[-1][2] + " ")]
    assert exp.data_hash(items) == exp.data_hash(list(reversed(items)))  # order does not matter
    assert exp.data_hash(items) != exp.data_hash(changed)


def test_fresh_text_mostly_gets_its_gotcha(clf):
    # the training pool grows (dev cases are added): demand a clear majority, not every single text,
    # so one new case near a class boundary does not break the suite
    right = []
    for gotcha, text in FRESH.items():
        probs = clf.probabilities(text)
        assert abs(sum(probs.values()) - 1.0) < 1e-9
        right.append(max(probs, key=probs.get) == gotcha)
    assert sum(right) >= 8, dict(zip(FRESH, right, strict=True))


def test_tokens_normalise_versions_and_drop_stop_words():
    toks = exp.tokens("The sm_121a build of cu130 wheels at 12.8 is 90C hot: see https://x.y/z and 0xdeadbeef")
    assert "sm121" in toks and "cu13" in toks and "<ver>" in toks and "<num>c" in toks
    assert "the" not in toks and not any("http" in t or "dead" in t for t in toks)


@given(conf=st.floats(min_value=RULE.rules_strong, max_value=1.0),
       top=st.sampled_from(exp.CLASSES[:-1]), other=st.sampled_from(exp.CLASSES[:-1]),
       p=st.floats(min_value=0.0, max_value=1.0))
def test_strong_rule_evidence_is_never_overridden(conf, top, other, p):
    probs = {c: 0.0 for c in exp.CLASSES}
    probs[other] = p
    probs["none"] = 1.0 - p
    ranked = [(top, 5.0, conf), (other, 4.99, conf * 0.99)]
    assert exp.blend(ranked, probs, RULE).action == "none"


def test_weak_or_silent_rules_let_a_confident_classifier_speak():
    rule = RULE
    probs = {c: 0.0 for c in exp.CLASSES}
    probs["G4"] = 0.95
    probs["none"] = 0.05
    assert exp.blend([], probs, rule).gotcha == "G4"
    assert exp.blend([("G3", 0.5, 0.3)], probs, rule).gotcha == "G4"
    probs["G4"], probs["none"] = 0.5, 0.5  # unsure: the rules' silence stands
    assert exp.blend([], probs, rule).action == "none"


def test_classifying_one_report_takes_milliseconds(clf):
    text = "\n".join(t for _l, t in POOL_DOCS[:20])
    clf.probabilities(text)
    t0 = time.perf_counter()
    for _ in range(5):
        clf.probabilities(text)
    assert (time.perf_counter() - t0) / 5 < 0.2  # measured ~ a few ms; generous for a slow runner
