"""Round 18ag: the shipped ``diagnose`` computes only the yes/no readings it uses (sparkops/diagnose/learned.py
``READINGS``, ``WEIGHED``, ``GATES``): those a "none" feature weighs, on every call, and a gate's readings only when
that gotcha would be answered; the CV harness (benchmarks/diagnose_learn.py) still gets all of them. The answer must
not change: checked on the CV's labelled reports against the old eager path (every reading computed up front)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import sparkops.diagnose.learned as learned
from sparkops.diagnose import diagnose_text
from sparkops.diagnose.reading import line_roles
from sparkops.knowledge import safe_load

HERE = Path(__file__).parent
ROOT = HERE.parents[1]

# verbatim excerpts of labelled reports: a TP hang across two Sparks (G10, the gate reads), a cu128 torch (G1)
G10_CASE = "cases/vllm-41725-minimax-tp2-two-sparks-hang.yaml"
G1_CASE = "cases/index-tts-556-torch-cu128-no-aarch64-wheel.yaml"


def _text(rel: str) -> str:
    return str(safe_load((HERE / rel).read_text(encoding="utf-8"))["text"])


def _full_features():
    real = learned.text_features
    return lambda lines, roles, readings=None: real(lines, roles)  # every reading, whatever is asked


def test_text_features_computes_the_readings_asked_for_and_all_by_default() -> None:
    lines = _text(G10_CASE).splitlines()
    roles = line_roles(lines)
    every = learned.text_features(lines, roles)
    assert set(learned.READINGS) <= set(every)  # the harness's call: all of them
    none_asked = learned.text_features(lines, roles, ())
    assert not set(learned.READINGS) & set(none_asked)
    assert {k: v for k, v in every.items() if k not in learned.READINGS} == none_asked
    assert learned.text_features(lines, roles, ("tp_hang",))["tp_hang"] == every["tp_hang"]


def test_the_shipped_path_never_computes_a_reading_it_does_not_use(monkeypatch) -> None:
    used = set(learned.WEIGHED) | {r for rs in learned.GATES.values() for r in rs}
    called: list[str] = []

    def spy(name, fn):
        def wrapped(lines, roles):
            called.append(name)
            if name not in used:
                raise AssertionError(f"the shipped path computed {name}, which nothing it decides with reads")
            return fn(lines, roles)
        return wrapped

    monkeypatch.setattr(learned, "READINGS", {k: spy(k, f) for k, f in learned.READINGS.items()})
    g10 = diagnose_text(_text(G10_CASE))
    assert g10.top == "G10" and {"tp_failure", "tp_hang"} & set(called)  # the gate read its own readings
    called.clear()
    g1 = diagnose_text(_text(G1_CASE))
    assert g1.top == "G1" and set(called) <= set(learned.WEIGHED) | set(learned.GATES.get("G1", ()))
    assert "G1" in learned.GATES or not set(called) - set(learned.WEIGHED)  # no G1 gate: no gate reading computed


def _cv_reports() -> list[tuple[str, str]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import diagnose_learn as dl

    return [(c["set"] + "/" + c["id"], c["text"]) for c in dl.load_sets(list(dl.SETS))]


def test_the_shipped_answer_is_unchanged_on_the_cv_reports(monkeypatch) -> None:
    """Every report of the CV's default sets (293): the Diagnosis with readings computed on demand equals the one
    with every reading computed up front and the gates reading from those (the path before round 18ag)."""
    reports = _cv_reports()
    assert len(reports) >= 290
    lazy = {key: diagnose_text(text, source=key).model_dump() for key, text in reports}
    full = _full_features()
    monkeypatch.setattr(learned, "text_features", full)
    monkeypatch.setattr(learned, "gate_holds", lambda g, lines, roles: any(
        full(lines, roles)[r] for r in learned.GATES.get(g, ())) or not learned.GATES.get(g))
    eager = {key: diagnose_text(text, source=key).model_dump() for key, text in reports}
    differ = [key for key in lazy if lazy[key] != eager[key]]
    assert not differ, differ
    assert sum(d["findings"] != [] for d in lazy.values()) > 50  # the comparison covers answered reports too


@pytest.mark.parametrize("gotcha", sorted(learned.GATES))
def test_every_gate_reading_is_a_known_reading(gotcha: str) -> None:
    assert learned.GATES[gotcha] and set(learned.GATES[gotcha]) <= set(learned.READINGS)
    assert learned.gate_holds("G5", [], [])  # a gotcha without a gate is never held back
