"""The labelled set of real GB10 failure reports (tests/diagnose/cases/) keeps its contract.

The diagnose matcher is measured against these files, so a malformed case or a set that has
drifted below its coverage would make that measurement silently meaningless. This module checks
the data only; it deliberately does not import the matcher.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

CASES_DIR = Path(__file__).parent / "cases"
CASE_FILES = sorted(CASES_DIR.glob("*.yaml"))

LABELS = {f"G{n}" for n in range(1, 11)} | {"none"}
KINDS = {"positive", "hard-negative"}
INPUT_KINDS = {"traceback", "log", "dmesg", "issue-text", "collect-env", "nvidia-smi", "mixed"}
REQUIRED = ("id", "source", "label", "kind", "why", "input_kind", "text")
# A label changed after the set was built carries a note: the date, the old -> new label, the reason and the source.
OPTIONAL = ("relabelled",)
RELABEL_NOTE = re.compile(r"(\d{4}-\d{2}-\d{2}) \(round \w+\): (G\d+|none) -> (G\d+|none)\. .*Source: \S+", re.S)
MAX_TEXT_LINES = 60
ID_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
URL_PATTERN = re.compile(r"https?://[^\s/]+\.[^\s/]+/\S*")
# Cases taken from another machine showing the same failure mode say so with this opening.
OTHER_MACHINE_MARK = "Not a GB10 thread"
# Credential shapes that must never be pasted into a case (HF, GitHub, OpenAI-style, AWS, bearer).
SECRET_PATTERNS = (
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"(?i)authorization:\s*bearer\s+[A-Za-z0-9._-]{20,}"),
)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return [_load(p) for p in CASE_FILES]


def check_case(case: object, path: Path, *, stripped: bool = False) -> None:
    """One case file's contract (shared with the held-out sets); ``stripped``: excerpts carry no
    trailing spaces (the held-out sets promise that; this set does not)."""
    assert isinstance(case, dict), "a case file holds one mapping"
    missing = [k for k in REQUIRED if k not in case]
    assert not missing, f"missing fields: {missing}"
    unknown = set(case) - set(REQUIRED) - set(OPTIONAL)
    assert not unknown, f"unexpected fields: {sorted(unknown)}"
    for key in REQUIRED:
        assert isinstance(case[key], str) and case[key].strip(), f"{key} must be a non-empty string"
    if "relabelled" in case:
        note = RELABEL_NOTE.match(str(case["relabelled"]))
        assert note, "relabelled: 'YYYY-MM-DD (round R): OLD -> NEW. reason ... Source: path-or-URL'"
        assert note.group(3) == case["label"], "the relabelled note's new label is the case's label"
        assert note.group(2) != note.group(3), "a relabelled note records a change"

    assert ID_PATTERN.fullmatch(case["id"]), f"id {case['id']!r} is not lowercase [a-z0-9-]"
    assert case["id"] == path.stem, "id must equal the file name without .yaml"
    assert case["label"] in LABELS, f"label {case['label']!r} is not G1..G10 or none"
    assert case["kind"] in KINDS, f"kind {case['kind']!r}"
    assert case["input_kind"] in INPUT_KINDS, f"input_kind {case['input_kind']!r}"
    assert URL_PATTERN.fullmatch(case["source"]), f"source {case['source']!r} is not a URL"

    lines = case["text"].splitlines()
    assert len(lines) <= MAX_TEXT_LINES, f"text has {len(lines)} lines, limit {MAX_TEXT_LINES}"
    if stripped:
        assert all(line == line.rstrip() for line in lines), "trailing spaces are stripped from excerpts"
    for pattern in SECRET_PATTERNS:
        hit = pattern.search(case["text"])
        assert hit is None, f"text contains something shaped like a credential: {hit.group(0)[:12]}..."


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.stem)
def test_case_file_is_well_formed(path: Path):
    check_case(_load(path), path)


def test_ids_and_sources_are_unique(cases):
    ids = Counter(c["id"] for c in cases)
    assert not [i for i, n in ids.items() if n > 1], "duplicate ids"
    sources = Counter(c["source"] for c in cases)
    dupes = [s for s, n in sources.items() if n > 1]
    assert not dupes, f"one thread is one case; repeated sources: {dupes}"


def test_set_size_and_label_coverage(cases):
    assert len(cases) >= 60
    labels = Counter(c["label"] for c in cases)
    absent = sorted(LABELS - {"none"} - set(labels), key=lambda g: int(g[1:]))
    assert not absent, f"gotchas with no case: {absent}"
    assert labels["none"] >= 10, f"only {labels['none']} cases labelled none"


def test_hard_negatives_are_plentiful(cases):
    hard = [c for c in cases if c["kind"] == "hard-negative"]
    assert len(hard) >= 10, f"only {len(hard)} hard negatives"


def test_cases_from_other_machines_stay_a_minority(cases):
    borrowed = [c["id"] for c in cases if c["why"].startswith(OTHER_MACHINE_MARK)]
    assert len(borrowed) <= 0.15 * len(cases), f"{len(borrowed)} non-GB10 cases: {borrowed}"
