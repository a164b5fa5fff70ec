"""The held-out GB10 failure reports (tests/diagnose/holdout/) keep their contract.

The holdout set measures the diagnose matcher on reports its authors never saw, so it must follow the
same case format as tests/diagnose/cases/, keep its own coverage thresholds, describe itself honestly
in its README, and share no thread with cases/ or dev/ (a shared thread would leak tuning data into
the measurement). Like test_cases_format.py this checks data only and never imports the matcher.
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

DIAGNOSE_DIR = Path(__file__).parent
HOLDOUT_DIR = DIAGNOSE_DIR / "holdout"
HOLDOUT_FILES = sorted(HOLDOUT_DIR.glob("*.yaml"))
README = HOLDOUT_DIR / "README.md"
# Sets the holdout must not overlap with: the measured set and the matcher's tuning set.
OTHER_SETS = (DIAGNOSE_DIR / "cases", DIAGNOSE_DIR / "dev")

MIN_CASES = 30
MIN_PER_GOTCHA = 2
MIN_NONE = 6
MIN_HARD_NEGATIVES = 6
MAX_BORROWED_FRACTION = 0.15
GOTCHAS = sorted(LABELS - {"none"}, key=lambda g: int(g[1:]))
SOURCE_LINE = re.compile(r"^source:\s*(\S+)", re.MULTILINE)
COUNTS_ROW = re.compile(r"^\|\s*(G\d+|none)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*$", re.MULTILINE)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def thread_key(url: str) -> str:
    """One key per public thread, so two spellings of the same thread count as one.

    GitHub issues and pull requests share one number space (``/pull/N`` and ``/issues/N`` are the
    same thread), and trailing slashes, fragments and query strings do not change the thread.
    """
    key = url.strip().split("#", 1)[0].rstrip("/").lower()
    key = re.sub(r"^https?://(www\.)?", "", key)
    if key.startswith("github.com/"):
        key = key.split("?", 1)[0].replace("/pull/", "/issues/")
    return key


def _sources_in(directory: Path) -> set[str]:
    """Every `source:` in a set's YAML files, read as text so a malformed file there still counts."""
    found: set[str] = set()
    for path in directory.glob("*.yaml"):
        found.update(SOURCE_LINE.findall(path.read_text(encoding="utf-8")))
    return found


@pytest.fixture(scope="module")
def holdout() -> list[dict]:
    return [_load(p) for p in HOLDOUT_FILES]


@pytest.mark.parametrize("path", HOLDOUT_FILES, ids=lambda p: p.stem)
def test_holdout_case_is_well_formed(path: Path):
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


def test_holdout_folder_holds_only_cases_and_readme():
    stray = [p.name for p in HOLDOUT_DIR.iterdir() if p.suffix != ".yaml" and p.name != "README.md"]
    assert not stray, f"unexpected files in holdout/: {stray}"


def test_holdout_ids_and_threads_are_unique(holdout):
    ids = Counter(c["id"] for c in holdout)
    assert not [i for i, n in ids.items() if n > 1], "duplicate ids"
    threads = Counter(thread_key(c["source"]) for c in holdout)
    dupes = [t for t, n in threads.items() if n > 1]
    assert not dupes, f"one thread is one case; repeated threads: {dupes}"


def test_holdout_size_and_label_coverage(holdout):
    assert len(holdout) >= MIN_CASES, f"only {len(holdout)} holdout cases"
    labels = Counter(c["label"] for c in holdout)
    thin = {g: labels[g] for g in GOTCHAS if labels[g] < MIN_PER_GOTCHA}
    assert not thin, f"gotchas with fewer than {MIN_PER_GOTCHA} holdout cases: {thin}"
    assert labels["none"] >= MIN_NONE, f"only {labels['none']} holdout cases labelled none"


def test_holdout_hard_negatives_are_plentiful(holdout):
    hard = [c for c in holdout if c["kind"] == "hard-negative"]
    assert len(hard) >= MIN_HARD_NEGATIVES, f"only {len(hard)} hard negatives"


def test_holdout_cases_from_other_machines_stay_a_minority(holdout):
    borrowed = [c["id"] for c in holdout if c["why"].startswith(OTHER_MACHINE_MARK)]
    assert len(borrowed) <= MAX_BORROWED_FRACTION * len(holdout), f"{len(borrowed)} non-GB10: {borrowed}"


@pytest.mark.parametrize("other", OTHER_SETS, ids=lambda p: p.name)
def test_holdout_shares_no_thread_with_other_sets(holdout, other: Path):
    assert other.is_dir(), f"{other} is missing, so the overlap check would pass vacuously"
    taken = {thread_key(s) for s in _sources_in(other)}
    assert taken, f"no sources read from {other}"
    shared = sorted(c["id"] for c in holdout if thread_key(c["source"]) in taken)
    assert not shared, f"holdout cases whose thread is already in {other.name}/: {shared}"


def _readme_counts_table(text: str) -> dict[str, tuple[int, int, int]]:
    rows: dict[str, tuple[int, int, int]] = {}
    for match in COUNTS_ROW.finditer(text):
        rows[match.group(1)] = (int(match.group(2)), int(match.group(3)), int(match.group(4)))
    return rows


def test_holdout_readme_counts_match_the_files(holdout):
    assert README.is_file(), "holdout/README.md describes the set"
    rows = _readme_counts_table(README.read_text(encoding="utf-8"))
    for label in [*GOTCHAS, "none"]:
        mine = [c for c in holdout if c["label"] == label]
        positive = sum(c["kind"] == "positive" for c in mine)
        expected = (positive, len(mine) - positive, len(mine))
        assert rows.get(label) == expected, f"README row for {label}: {rows.get(label)}, files say {expected}"


def test_holdout_readme_lists_every_case_with_its_source(holdout):
    text = README.read_text(encoding="utf-8")
    unlisted = [c["id"] for c in holdout if f"`{c['id']}`" not in text or c["source"] not in text]
    assert not unlisted, f"cases missing from holdout/README.md sources: {unlisted}"


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        ("https://github.com/a/b/pull/7", "https://github.com/a/b/issues/7", True),
        ("https://github.com/a/b/issues/7/", "https://github.com/A/B/issues/7#issuecomment-1", True),
        ("https://github.com/a/b/issues/7", "https://github.com/a/b/issues/70", False),
        ("https://www.example.org/post/", "http://example.org/post", True),
        ("https://example.org/?p=1", "https://example.org/?p=2", False),
    ],
)
def test_thread_key_treats_spellings_of_one_thread_as_one(left, right, same):
    assert (thread_key(left) == thread_key(right)) is same
