"""Map an error log, traceback or symptom to its G-number (issue 5).

Library entry points (the CLI, the MCP server and ``watch`` call these)::

    diagnose_text(text, source="-", facts=None, kb=None) -> Diagnosis
    diagnose_files(paths, facts=None, kb=None) -> list[Diagnosis]   # "-" is stdin; input order kept

Pure apart from reading the files: no network, no clock, deterministic. The knowledge is data
(``knowledge/symptoms.yaml``); the fix text comes from the gotcha catalog (``gotchas.yaml``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO

from sparkops.diagnose.model import Diagnosis, Evidence, FactEffect, Finding
from sparkops.diagnose.rules import SymptomKnowledge
from sparkops.diagnose.rules import load as load_symptoms

if TYPE_CHECKING:
    from sparkops.diagnose.text import InputText
    from sparkops.facts.model import Facts

Knowledge = SymptomKnowledge  # the name the API uses

__all__ = ["diagnose_text", "diagnose_files", "diagnose_input", "Diagnosis", "Finding", "Evidence",
           "FactEffect", "SymptomKnowledge", "Knowledge", "load_symptoms"]


def diagnose_input(inp: InputText, facts: Facts | None = None, kb: SymptomKnowledge | None = None,
                   top: int | None = None) -> Diagnosis:
    """Diagnose one already-read input (see :mod:`sparkops.diagnose.text`)."""
    from sparkops.diagnose.matcher import match
    from sparkops.knowledge import load as load_catalog

    if inp.error is not None:
        return Diagnosis(file=inp.source, error=inp.error)
    kb = kb or load_symptoms()
    catalog = load_catalog()
    signals: set[str] = set()
    effects: dict = {}
    hints: list[tuple[str, str]] = []
    if facts is not None:
        from sparkops.diagnose.facts_confirm import judge

        fj = judge(facts, catalog)
        signals, effects, hints = fj.signals, fj.effects, fj.hints
    res = match(inp, kb, signals, effects)
    findings = [Finding(gotcha=s.gotcha, confidence=s.confidence, title=catalog.gotcha(s.gotcha).title,
                        evidence=s.evidence, why=s.why, fix=catalog.gotcha(s.gotcha).fix, facts=s.facts)
                for s in res.scored]
    if top is not None:
        findings = findings[: max(top, 0)]
    shown = {f.gotcha for f in findings}
    notes = list(inp.notes) + res.notes
    notes += [text for gotcha, text in hints if gotcha not in shown]  # facts alone never make a finding
    from sparkops.facts.redact import redact_obj

    # evidence quotes the input: an OPENAI_API_KEY=sk-... line must not be echoed back
    return Diagnosis.model_validate(redact_obj(Diagnosis(file=inp.source, findings=findings, notes=notes,
                                                         truncated=inp.truncated).model_dump(mode="json")))


def diagnose_text(text: str, source: str = "-", facts: Facts | None = None,
                  kb: SymptomKnowledge | None = None, *, top: int | None = None) -> Diagnosis:
    """Diagnose a text already in memory (a pasted log, a child's output in ``watch``)."""
    from sparkops.diagnose.text import from_text

    kb = kb or load_symptoms()
    return diagnose_input(from_text(text, source, kb.text_limits), facts, kb, top)


def diagnose_files(paths: list[str], facts: Facts | None = None, kb: SymptomKnowledge | None = None, *,
                   top: int | None = None, stdin: BinaryIO | None = None,
                   read_timeout_s: float | None = None) -> list[Diagnosis]:
    """One Diagnosis per path, in order; ``-`` reads standard input (once). An unreadable path gives
    a Diagnosis with ``error`` set instead of raising, so the others are still diagnosed; so does a
    pipe or FIFO that sent nothing within ``read_timeout_s`` (default: symptoms.yaml's limits)."""
    from dataclasses import replace

    from sparkops.diagnose.text import read_input

    kb = kb or load_symptoms()
    limits = kb.text_limits if read_timeout_s is None else replace(kb.text_limits, read_timeout_s=read_timeout_s)
    return [diagnose_input(read_input(p, limits, stdin), facts, kb, top) for p in (paths or ["-"])]
