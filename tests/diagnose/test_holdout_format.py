"""The held-out sets of GB10 failure reports (tests/diagnose/holdout*/) keep their contract.

Each held-out set measures the diagnose matcher on reports its authors never saw when it was
scored, so it must follow the case format of tests/diagnose/cases/, keep its own coverage
thresholds, describe itself honestly in its README, and share no thread with the sets before it
(a shared thread would leak tuning or already-measured data into the measurement). Like
test_cases_format.py this checks data only and never imports the matcher.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from diagnose.test_cases_format import LABELS, OTHER_MACHINE_MARK, check_case

DIAGNOSE_DIR = Path(__file__).parent
GOTCHAS = sorted(LABELS - {"none"}, key=lambda g: int(g[1:]))
SOURCE_LINE = re.compile(r"^source:\s*(\S+)", re.MULTILINE)
COUNTS_ROW = re.compile(r"^\|\s*(G\d+|none)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*$", re.MULTILINE)


@dataclass(frozen=True)
class HoldoutSet:
    """One held-out folder, the sets it must not overlap with, and the floors it keeps."""

    name: str
    others: tuple[str, ...]  # the measured set, the earlier holdouts and the tuning set (dev)
    min_cases: int
    min_per_gotcha: int
    min_none: int = 6
    min_hard_negatives: int = 6
    max_borrowed_fraction: float = 0.15

    @property
    def folder(self) -> Path:
        return DIAGNOSE_DIR / self.name


HOLDOUTS = (
    HoldoutSet("holdout", ("cases", "dev"), min_cases=30, min_per_gotcha=2),
    # holdout2 kept 2 per gotcha until round 18p relabelled its pr263 case G9 -> G1 (README): one G9 case is left.
    HoldoutSet("holdout2", ("cases", "holdout", "dev"), min_cases=30, min_per_gotcha=1),
    # holdout3 and holdout4 were built inside a time box and fall short of the 30 cases / 2 per gotcha
    # first asked for (see their README, "Known gaps"); these are the floors they do keep. Raise them
    # when they are topped up.
    HoldoutSet("holdout3", ("cases", "holdout", "holdout2", "dev"), min_cases=24, min_per_gotcha=1),
    HoldoutSet("holdout4", ("cases", "holdout", "holdout2", "holdout3", "dev"), min_cases=20, min_per_gotcha=1),
    # holdout5 (issue 18) is mostly hard negatives and has no G6 case (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout5", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "dev"), min_cases=40,
               min_per_gotcha=0, min_none=20, min_hard_negatives=18),
    # holdout6 (issue 18, second session) tops up the thin labels and adds hard negatives; it has no G1, G3, G7,
    # G9 or G10 case (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout6", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "dev"), min_cases=40,
               min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout7 (issue 18, second session) is the post-freeze blind set: mostly hard negatives, no G4/G6/G8/G10 case
    # (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout7", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # topup8 (issue 18, third session) tops up G2 and G6 to 15 reports each for the cross-validation: three
    # positives, two of them from other aarch64 machines with the same failure (README, "Known gaps").
    HoldoutSet("topup8", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                          "dev"),
               min_cases=3, min_per_gotcha=0, min_none=0, min_hard_negatives=0, max_borrowed_fraction=0.7),
    # holdout8 (issue 18, third session) is the post-freeze blind set: mostly hard negatives, no G4/G6/G7 case
    # (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout8", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                            "topup8", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout9 (issue 18, fourth session) is the post-freeze blind set: mostly hard negatives, no G4/G6 case (README,
    # "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout9", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                            "topup8", "holdout8", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout10 (issue 18, fifth session) is the post-freeze blind set: mostly hard negatives, no G2/G4/G5/G6/G8/G10
    # positive (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout10", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # topup11 (issue 18, eighth round) is a training top-up of hard negatives (the corpus's >= 40 % floor), not a held-out
    # set: 14 of its 15 cases are hard negatives, one G8 positive, all from GB10 machines (README, "Known gaps").
    HoldoutSet("topup11", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                           "topup8", "holdout8", "holdout9", "holdout10", "dev"),
               min_cases=15, min_per_gotcha=0, min_none=12, min_hard_negatives=12, max_borrowed_fraction=0.0),
    # holdout12 (issue 18, round 18i) is a SEALED blind set (README): scored once, never trained or tuned on; 36 of its 43 cases
    # are hard negatives and it has only G1 and G3 positives (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout12", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "holdout10", "topup11", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout13 (issue 18, round 18k) is a SEALED blind set (README): scored once, never trained or tuned on; 36 of its 41 cases
    # are hard negatives and it has only G1, G3, G7, G8 and G10 cases (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout13", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "holdout10", "topup11", "holdout12", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout14 (issue 18, round 18r) is a SEALED blind set (README): to be scored once by the lead, never trained or tuned on; 33
    # of its 42 cases are hard negatives and it has no G2 or G7 case (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout14", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "holdout10", "topup11", "holdout12", "holdout13", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout15 (issue 18, round 18w) is a SEALED blind set (README): to be scored once by the lead, never trained or tuned on; 27
    # of its 40 cases are hard negatives and it has no G4 or G5 case (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout15", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "holdout10", "topup11", "holdout12", "holdout13", "holdout14",
                             "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout16 (issue 18, round 18y) is a SEALED blind set (README): to be scored once by the lead, never trained or tuned on; 30
    # of its 41 cases are hard negatives and it has no G2 or G6 case (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout16", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "holdout10", "topup11", "holdout12", "holdout13", "holdout14",
                             "holdout15", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=25, min_hard_negatives=25),
    # holdout17 (issue 18, round 18aa) is a SEALED blind set (README): to be scored once by the lead, never trained or tuned on; 31
    # reports, not the 40 asked for (the time box ran out), 24 of them hard negatives, positives only for G1, G2, G3 and G10
    # (README, "Known gaps"): no per-gotcha floor.
    HoldoutSet("holdout17", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "holdout10", "topup11", "holdout12", "holdout13", "holdout14",
                             "holdout15", "holdout16", "dev"),
               min_cases=30, min_per_gotcha=0, min_none=24, min_hard_negatives=24),
    # holdout18 (issue 18, round 18af) is a SEALED blind set (README): to be scored once by the lead, never trained or tuned on; 24
    # reports, not the 40 asked for (GB10 reports are exhausted and at most half may come from other machines), 12 of them hard
    # negatives, positives only for G1, G2, G3, G6, G7 and G9 (README, "Known gaps"): no per-gotcha floor. Half of it comes from
    # other sm_12x / Blackwell / unified-memory machines showing the same mechanisms, the ceiling the round's brief set.
    HoldoutSet("holdout18", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                             "topup8", "holdout8", "holdout9", "holdout10", "topup11", "holdout12", "holdout13", "holdout14",
                             "holdout15", "holdout16", "holdout17", "dev"),
               min_cases=24, min_per_gotcha=0, min_none=12, min_hard_negatives=12, max_borrowed_fraction=0.5),
    # topup13 (issue 18, round 18ai) is a TRAINING top-up (README), not a held-out set: 41 reports of the same mechanisms on other
    # sm_12x / Blackwell / unified-memory machines (RTX 50 / RTX PRO, Jetson Thor / Orin / Xavier, GH200 / GB200), because no new
    # GB10 report was found. The borrowed ceiling is for measured sets; a training top-up follows topup8's precedent, and here
    # every case is borrowed (ceiling 1.0). 14 hard negatives, no G3 or G9 case (README, "Known gaps"): no per-gotcha floor. Its
    # overlap checks cover every other set, the sealed ones included (by their source lines only).
    HoldoutSet("topup13", ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                           "topup8", "holdout8", "holdout9", "holdout10", "topup11", "holdout12", "holdout13", "holdout14",
                           "holdout15", "holdout16", "holdout17", "holdout18", "dev"),
               min_cases=40, min_per_gotcha=0, min_none=12, min_hard_negatives=12, max_borrowed_fraction=1.0),
)
BY_NAME = {h.name: h for h in HOLDOUTS}
SET_FILES = [(h.name, p) for h in HOLDOUTS for p in sorted(h.folder.glob("*.yaml"))]
OVERLAPS = [(h.name, other) for h in HOLDOUTS for other in h.others]
ALL_OTHERS = sorted({other for h in HOLDOUTS for other in h.others})


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


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _sources_in(directory: Path) -> set[str]:
    """Every `source:` in a set's YAML files, read as text so a malformed file there still counts."""
    found: set[str] = set()
    for path in directory.glob("*.yaml"):
        found.update(SOURCE_LINE.findall(path.read_text(encoding="utf-8")))
    return found


_loaded: dict[str, list[dict]] = {}


def _cases(name: str) -> list[dict]:
    if name not in _loaded:
        _loaded[name] = [_load(p) for p in sorted(BY_NAME[name].folder.glob("*.yaml"))]
    return _loaded[name]


each_set = pytest.mark.parametrize("hs", HOLDOUTS, ids=lambda h: h.name)


@pytest.mark.parametrize(("name", "path"), SET_FILES, ids=lambda v: v if isinstance(v, str) else v.stem)
def test_holdout_case_is_well_formed(name: str, path: Path):
    check_case(_load(path), path, stripped=True)


@each_set
def test_holdout_folder_holds_only_cases_and_readme(hs: HoldoutSet):
    stray = [p.name for p in hs.folder.iterdir() if p.suffix != ".yaml" and p.name != "README.md"]
    assert not stray, f"unexpected files in {hs.name}/: {stray}"


@each_set
def test_holdout_ids_and_threads_are_unique(hs: HoldoutSet):
    cases = _cases(hs.name)
    ids = Counter(c["id"] for c in cases)
    assert not [i for i, n in ids.items() if n > 1], "duplicate ids"
    threads = Counter(thread_key(c["source"]) for c in cases)
    dupes = [t for t, n in threads.items() if n > 1]
    assert not dupes, f"one thread is one case; repeated threads: {dupes}"


@each_set
def test_holdout_size_and_label_coverage(hs: HoldoutSet):
    cases = _cases(hs.name)
    assert len(cases) >= hs.min_cases, f"only {len(cases)} {hs.name} cases"
    labels = Counter(c["label"] for c in cases)
    thin = {g: labels[g] for g in GOTCHAS if labels[g] < hs.min_per_gotcha}
    assert not thin, f"gotchas with fewer than {hs.min_per_gotcha} {hs.name} cases: {thin}"
    assert labels["none"] >= hs.min_none, f"only {labels['none']} {hs.name} cases labelled none"


@each_set
def test_holdout_hard_negatives_are_plentiful(hs: HoldoutSet):
    hard = [c for c in _cases(hs.name) if c["kind"] == "hard-negative"]
    assert len(hard) >= hs.min_hard_negatives, f"only {len(hard)} hard negatives"


@each_set
def test_holdout_cases_from_other_machines_stay_a_minority(hs: HoldoutSet):
    cases = _cases(hs.name)
    borrowed = [c["id"] for c in cases if c["why"].startswith(OTHER_MACHINE_MARK)]
    assert len(borrowed) <= hs.max_borrowed_fraction * len(cases), f"{len(borrowed)} non-GB10: {borrowed}"


@pytest.mark.parametrize(("name", "other"), OVERLAPS, ids=lambda v: v)
def test_holdout_shares_no_thread_with_other_sets(name: str, other: str):
    folder = DIAGNOSE_DIR / other
    assert folder.is_dir(), f"{folder} is missing, so the overlap check would pass vacuously"
    taken = {thread_key(s) for s in _sources_in(folder)}
    assert taken, f"no sources read from {folder}"
    shared = sorted(c["id"] for c in _cases(name) if thread_key(c["source"]) in taken)
    assert not shared, f"{name} cases whose thread is already in {other}/: {shared}"


def _readme_counts_table(text: str) -> dict[str, tuple[int, int, int]]:
    rows: dict[str, tuple[int, int, int]] = {}
    for match in COUNTS_ROW.finditer(text):
        rows[match.group(1)] = (int(match.group(2)), int(match.group(3)), int(match.group(4)))
    return rows


@each_set
def test_holdout_readme_counts_match_the_files(hs: HoldoutSet):
    readme = hs.folder / "README.md"
    assert readme.is_file(), f"{hs.name}/README.md describes the set"
    rows = _readme_counts_table(readme.read_text(encoding="utf-8"))
    for label in [*GOTCHAS, "none"]:
        mine = [c for c in _cases(hs.name) if c["label"] == label]
        positive = sum(c["kind"] == "positive" for c in mine)
        expected = (positive, len(mine) - positive, len(mine))
        assert rows.get(label) == expected, f"README row for {label}: {rows.get(label)}, files say {expected}"


@each_set
def test_holdout_readme_lists_every_case_with_its_source(hs: HoldoutSet):
    text = (hs.folder / "README.md").read_text(encoding="utf-8")
    unlisted = [c["id"] for c in _cases(hs.name) if f"`{c['id']}`" not in text or c["source"] not in text]
    assert not unlisted, f"cases missing from {hs.name}/README.md sources: {unlisted}"


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


@pytest.mark.parametrize("other", ALL_OTHERS)
def test_overlap_check_would_catch_a_copied_thread(other: str):
    """The overlap test is only worth something if a case from another set would be flagged."""
    sources = _sources_in(DIAGNOSE_DIR / other)
    taken = {thread_key(s) for s in sources}
    respelled = sorted(sources)[0].replace("/issues/", "/pull/").rstrip("/") + "/"
    assert thread_key(respelled) in taken
