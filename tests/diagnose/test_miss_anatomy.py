"""The miss anatomy of round 18l (benchmarks/diagnose_miss_anatomy.py): it reads only the CV's training sets, finds the
reader's decisive line in the real excerpt, and gives every held-out miss of the committed study exactly one class."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
import diagnose_learn  # noqa: E402
import diagnose_miss_anatomy as anatomy  # noqa: E402


def test_it_reads_exactly_the_training_sets_and_never_a_sealed_one():
    assert anatomy.SETS == diagnose_learn.SETS
    assert not {"holdout12", "holdout13", "holdout14", "holdout15", "holdout16", "holdout17", "holdout18"} & set(anatomy.SETS)


def _excerpt(case: str) -> list[str]:
    doc = yaml.safe_load((HERE / f"{case}.yaml").read_text(encoding="utf-8"))
    return doc["text"].splitlines()


def test_a_quoted_fragment_of_the_why_finds_its_line():
    lines = _excerpt("cases/spark-vllm-docker-212-cpu-90c-no-shutdown")
    why = "CPU at 90-92 C on two-node cluster, 'Just high temperature, no shutdown issue'."
    i, score = anatomy.locate(why, lines)
    assert i is not None and "no shutdown issue" in lines[i] and score >= 10


def test_a_paraphrase_finds_the_line_sharing_its_rare_words():
    lines = _excerpt("holdout/nemoclaw-4113-ollama-model-beside-gpu-workload")
    why = "Another GPU workload already running; Ollama sees only ~12 GiB available and runner exits."
    i, _score = anatomy.locate(why, lines)
    assert i is not None and "another GPU workload was already running" in lines[i]


def test_a_why_sharing_no_word_with_the_excerpt_is_not_located():
    lines = _excerpt("holdout/nemoclaw-4113-ollama-model-beside-gpu-workload")
    assert anatomy.locate("zzz qqq www", lines) == (None, 0.0)


@pytest.fixture(scope="module")
def rows():
    return anatomy.anatomy(anatomy.STUDY)


def test_every_miss_of_the_committed_study_has_exactly_one_class(rows):
    oof = json.loads((anatomy.STUDY / "diagnose-oof-dealing0.json").read_text(encoding="utf-8"))
    misses = {k for k, v in oof.items() if v["answer"] != v["label"]}
    assert {r["case"] for r in rows} == misses
    assert all(r["cls"] in anatomy.CLASSES for r in rows)
    # a class says what happened: "none" labels are d/d', a label no rule offered is a, the rest are b or c
    for r in rows:
        if r["label"] == "none":
            assert r["cls"] in ("d", "d'") and r["answer"] != "none"
        elif r["cls"] == "a":
            assert r["label"] not in r["cands"]
        else:
            assert r["label"] in r["cands"]
            assert (r["cls"] == "c") == (r["role"] == "failure" and r["ev_on_line"])


def test_the_report_counts_add_up(rows):
    text = anatomy.report(rows)
    counts = Counter(r["cls"] for r in rows)
    assert f"| all | | {sum(r['reader_right'] for r in rows)} | {sum(not r['reader_right'] for r in rows)} | " \
           f"{len(rows)} |" in text
    for k in anatomy.CLASSES:
        assert f"| {k} | {anatomy.NAMES[k]} |" in text and text.count(f" | {k} | ") >= counts[k]
