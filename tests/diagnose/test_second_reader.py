"""The second-reader study (benchmarks/diagnose_second_reader.py): the reader must see only what diagnose sees, the
study must cover exactly the CV's training sets, and agreement must be scored as written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
import diagnose_learn  # noqa: E402
import diagnose_second_reader as study  # noqa: E402


def test_the_readers_split_exactly_the_training_sets_and_never_a_sealed_one():
    split = [s for sets in study.READERS.values() for s in sets]
    assert sorted(split) == sorted(diagnose_learn.SETS)
    assert not {"holdout12", "holdout13", "holdout14", "holdout15", "holdout16", "holdout17", "holdout18"} & set(split)


@pytest.fixture(scope="module")
def blinded(tmp_path_factory):
    out, key = tmp_path_factory.mktemp("blind"), tmp_path_factory.mktemp("key")
    study.blind(out, key)
    return out, key


def test_the_blind_copy_shows_the_excerpt_and_nothing_that_names_the_case_or_its_label(blinded):
    out, key = blinded
    for reader, sets in study.READERS.items():
        mapping = yaml.safe_load((key / f"{reader}.yaml").read_text())
        files = sorted((out / reader).glob("*.txt"))
        assert len(files) == len(mapping) == sum(len(list((study.CASES / s).glob("*.yaml"))) for s in sets)
        for f in files:
            case = mapping[f.stem]["case"]
            doc = yaml.safe_load((study.CASES / f"{case}.yaml").read_text())
            text = f.read_text()
            assert text.split("\n", 1)[1] == doc["text"]  # the excerpt, verbatim
            assert doc["id"] not in text and doc["source"] not in text and doc["why"].strip() not in text


def test_the_blind_copy_is_the_same_every_time(blinded, tmp_path):
    out, key = blinded
    study.blind(tmp_path / "out", tmp_path / "key")
    for reader in study.READERS:
        assert (tmp_path / "key" / f"{reader}.yaml").read_text() == (key / f"{reader}.yaml").read_text()


def test_scoring_counts_agreement_and_leaves_a_skipped_case_unlabelled(blinded, tmp_path):
    _out, key = blinded
    mapping = yaml.safe_load((key / "A.yaml").read_text())
    names = sorted(mapping)
    first, other = names[0], names[1]
    wrong = "G4" if mapping[other]["label"] != "G4" else "G5"
    (tmp_path / "A-labels.yaml").write_text(yaml.safe_dump({
        first: {"label": mapping[first]["label"], "confidence": "high", "decidable": "yes", "why": "a | b"},
        other: {"label": wrong, "confidence": "low", "decidable": "no", "why": "c"}}))
    rows = study.load(key, tmp_path)
    done = [r for r in rows if r["read"]]
    assert len(done) == 2 and sum(r["read"] == r["gold"] for r in done) == 1
    text = study.score(rows, None)
    assert "| all | 2 | 1/2 = 50.0 % |" in text
    assert f"| {mapping[other]['case']} | {mapping[other]['label']} | {wrong} | low | no | c |" in text


@given(st.lists(st.sampled_from(study.LABELS), min_size=1, max_size=40))
def test_kappa_is_one_for_a_reader_who_always_agrees(labels):
    k = study.kappa([(x, x) for x in labels])
    assert k == pytest.approx(1.0)


def test_kappa_is_zero_when_agreement_is_what_chance_gives():
    # each reader says G3 half the time, independently: agreement 50 %, chance 50 %
    pairs = [("G3", "G3"), ("G3", "none"), ("none", "G3"), ("none", "none")]
    assert study.kappa(pairs) == pytest.approx(0.0)


def test_the_recorded_study_labels_every_case_of_its_key_with_a_known_label():
    folder = HERE.parents[1] / "benchmarks" / "results" / "diagnose-second-reader"
    for reader in study.READERS:
        key = yaml.safe_load((folder / "key" / f"{reader}.yaml").read_text())
        labels = yaml.safe_load((folder / f"{reader}-labels.yaml").read_text())
        assert set(labels) == set(key)
        assert all(a["label"] in study.LABELS for a in labels.values())
        assert all((study.CASES / f"{k['case']}.yaml").exists() for k in key.values())
