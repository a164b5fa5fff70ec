"""The CV's training-only arm (benchmarks/diagnose_learn.py --train-only, round 18ai, v31): a training-only report joins an
outer fold's training data unless its source group is held out in that fold, and it is never predicted or scored."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))
import diagnose_learn  # noqa: E402


def _case(set_name: str, i: int, group: str, *, train_only: bool = False) -> dict:
    c = {"set": set_name, "id": f"{set_name}-{i}", "group": group, "label": "none", "rules": "none",
         "labels": ["none"], "rows": [[]]}
    if train_only:
        c["train_only"] = True
    return c


def test_training_only_reports_train_outside_their_groups_and_are_never_predicted(monkeypatch):
    cases = [_case("orig", i, f"g{i % 7}") for i in range(21)]
    extra = [_case("topup", 0, "g0", train_only=True), _case("topup", 1, "g3", train_only=True),
             _case("topup", 2, "elsewhere", train_only=True)]
    seen: list[tuple[set[str], list[dict]]] = []

    def fake_fit(train):
        return [0.0] * len(diagnose_learn.PARAMS)

    def fake_choose_bar(train, folds=4):
        return (1.01, 0.4)

    def fake_decide(w, c, bar):
        return ("none", 0.5, None, 0.0)

    def fake_attach_fitted(test, train):
        seen.append(({c["group"] for c in test}, list(train)))

    monkeypatch.setattr(diagnose_learn, "TEXT", "off")
    monkeypatch.setattr(diagnose_learn, "fit", fake_fit)
    monkeypatch.setattr(diagnose_learn, "choose_bar", fake_choose_bar)
    monkeypatch.setattr(diagnose_learn, "decide", fake_decide)
    monkeypatch.setattr(diagnose_learn, "attach_fitted", fake_attach_fitted)
    monkeypatch.setattr(diagnose_learn, "attach_oof", lambda train, folds=5: None)
    diagnose_learn.grouped_cv(cases, 5, extra)

    assert seen, "no fold was run"
    for held, train in seen:
        extras = [c for c in train if c.get("train_only")]
        assert all(c["group"] not in held for c in extras), "a training-only report trained on its held-out group"
        assert {c["id"] for c in extras} == {c["id"] for c in extra if c["group"] not in held}
    assert all("pred" not in c for c in extra), "a training-only report was predicted"
    assert all("pred" in c for c in cases)


def test_the_inner_bar_search_scores_only_reports_that_are_not_training_only(monkeypatch):
    scored_groups: list[set[str]] = []
    real_group_mean = diagnose_learn.group_mean

    def spy(cs, key):
        scored_groups.append({c["group"] for c in cs})
        return real_group_mean(cs, key)

    monkeypatch.setattr(diagnose_learn, "group_mean", spy)
    monkeypatch.setattr(diagnose_learn, "fit", lambda train: [0.0] * len(diagnose_learn.PARAMS))
    monkeypatch.setattr(diagnose_learn, "decide", lambda w, c, bar: ("none", 0.5, None, 0.0))
    train = [_case("orig", i, f"g{i}") for i in range(8)] + [_case("topup", 0, "only-extra", train_only=True)]
    diagnose_learn.choose_bar(train)
    assert scored_groups and all("only-extra" not in g for g in scored_groups)
