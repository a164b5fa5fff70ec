"""Map an error log, traceback or symptom to its G-number (issue 5).

Library entry points (the CLI, the MCP server and ``watch`` call these)::

    diagnose_text(text, source="-", facts=None, kb=None) -> Diagnosis
    diagnose_files(paths, facts=None, kb=None) -> list[Diagnosis]   # "-" is stdin; input order kept

Pure apart from reading the files: no network, no clock, deterministic. The knowledge is data
(``knowledge/symptoms.yaml``); the fix text comes from the gotcha catalog (``gotchas.yaml``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO

from sparkops.diagnose.model import Decider, Diagnosis, Evidence, FactEffect, Finding
from sparkops.diagnose.rules import SymptomKnowledge
from sparkops.diagnose.rules import load as load_symptoms

if TYPE_CHECKING:
    from sparkops.diagnose.text import InputText
    from sparkops.facts.model import Facts

Knowledge = SymptomKnowledge  # the name the API uses

__all__ = ["diagnose_text", "diagnose_files", "diagnose_input", "Diagnosis", "Finding", "Evidence",
           "FactEffect", "Decider", "SymptomKnowledge", "Knowledge", "load_symptoms"]


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

    def finding(s) -> Finding:
        return Finding(gotcha=s.gotcha, confidence=s.confidence, title=catalog.gotcha(s.gotcha).title,
                       evidence=s.evidence, why=s.why, fix=catalog.gotcha(s.gotcha).fix, facts=s.facts)

    cal = kb.scoring.calibration
    abstained, reason, candidates, decide = False, None, [], []
    if cal is None:  # knowledge without a calibration map: the v5 behaviour (every finding over min_confidence)
        findings = [finding(s) for s in res.scored]
    elif kb.learned is not None:
        findings, abstained, reason, candidates, decide = _learned(res, inp, kb, finding)
    else:
        findings, abstained, reason, candidates, decide = _calibrated(res, kb, finding)
    if top is not None:
        findings = findings[: max(top, 0)]
    shown = {f.gotcha for f in findings}
    notes = list(inp.notes) + res.notes
    notes += [text for gotcha, text in hints if gotcha not in shown]  # facts alone never make a finding
    from sparkops.facts.redact import redact_model

    # evidence quotes the input: an OPENAI_API_KEY=sk-... line must not be echoed back
    return redact_model(Diagnosis(file=inp.source, findings=findings, notes=notes, truncated=inp.truncated,
                                  abstained=abstained, abstain_reason=reason, candidates=candidates, decide=decide))


def _calibrated(res, kb: SymptomKnowledge, finding):
    """Findings with calibrated confidences (issue 18): the top candidate is answered when the rules' own threshold
    (min_confidence) passes or its probability of being right reaches ``answer_at``, a second one when its own
    probability reaches ``second_at``; otherwise diagnose abstains and says what would decide between the
    candidates."""
    from sparkops.diagnose.matcher import calibrated, calibration_features

    cal = kb.scoring.calibration
    ranked = sorted(res.scored + res.below, key=lambda x: -x.score)[:3]
    if not ranked:
        return [], False, None, [], []
    out = []
    for rank, s in enumerate(ranked):
        p = round(calibrated(calibration_features(res, rank), cal.bias, cal.coef), 3)
        out.append(finding(s).model_copy(update={"confidence": p}))
    top = out[0]
    # several clear problems in one report (each strong on a failure line): all of them are named
    strong = [f for f, s in zip(out, ranked, strict=True) if s.confidence >= cal.several_at and s.failure_evidence]
    # answered when the rules' own (tuned) threshold passes or the calibrated probability reaches the bar: under
    # grouped cross-validation the calibrated bar alone lost top-1 accuracy (benchmarks/results/diagnose-cv.md)
    if top.confidence >= cal.answer_at or ranked[0] in res.scored:
        extra = [f for f in out[1:] if f.confidence >= cal.second_at or f in strong]
        return [top, *extra], False, None, [], []
    if len(strong) >= 2:
        return strong, False, None, [], []
    names = ", ".join(f"{f.gotcha} (p = {f.confidence:.2f})" for f in out)
    reason = (f"not one of the ten, or not enough to tell: the strongest candidates, {names}, are under the "
              f"{cal.answer_at:.2f} bar"
              + ("" if res.failure_reported else "; no line of the input reports a failure") + ".")
    decide = [Decider(gotcha=f.gotcha, **kb.decide[f.gotcha].model_dump()) for f in out if f.gotcha in kb.decide]
    return [], True, reason, out, decide


def _learned(res, inp: InputText, kb: SymptomKnowledge, finding):
    """Findings chosen by the learned decision layer (issue 18, sparkops/diagnose/learned.py): the most likely of the
    rules' candidates and "none"; a gotcha is answered when it is the most likely and its probability reaches
    ``answer_at``, a second one when its own probability reaches ``second_at``; otherwise diagnose abstains, says
    why with the numbers, and lists the candidates and what would decide between them."""
    from sparkops.diagnose.learned import (
        GATE_WHY,
        GATES,
        NONE,
        WEIGHED,
        ceiling,
        gate_holds,
        probabilities,
        text_features,
        utilities,
    )
    from sparkops.diagnose.matcher import candidates as rule_candidates

    lm = kb.learned
    cands = rule_candidates(res)
    if not cands:
        return [], False, None, [], []
    text = text_features(inp.lines, res.roles, WEIGHED)  # the gates' readings are read below, only when needed
    words, by_text = None, {}
    if lm.text is not None:  # the learned text layer: one more feature, and gotchas no rule found (never confident)
        from sparkops.diagnose.learned import text_candidates, text_scores

        tl = lm.text
        words = text_scores(inp.lines, res.roles, tl.read, tl.idf, tl.centroids, tl.scale)
        extra = text_candidates(cands, words, tl.only_at)
        by_text = {c.gotcha: _text_finding(c.gotcha, inp, res.roles, tl, finding) for c in extra}
        cands = [*cands, *extra]
    probs = probabilities(utilities(cands, text, lm.weights, lm.priors, lm.families, words))
    caps = {c.gotcha: ceiling(c, text) for c in cands}
    if words is not None:  # the words alone never make a finding confident
        from sparkops.diagnose.learned import words_hold

        for g, cap in words_hold(cands, text, lm.weights, lm.priors, lm.families).items():
            caps[g] = min(caps[g], cap, key=lambda t: t[0])

    def held(fs):  # what the report allows: a finding it does not back fully stays under high confidence
        out_ = []
        for f in fs:
            cap, why = caps[f.gotcha]
            if f.confidence > cap:
                f = f.model_copy(update={"confidence": cap, "why": f"{f.why}; confidence held at {cap:.2f}: {why}"})
            out_.append(f)
        return out_

    p_of = dict(probs)
    by_gotcha = {s.gotcha: s for s in res.scored + res.below}
    ranked = [(g, p) for g, p in probs if g != NONE][:3]
    out = [(by_text[g] if g in by_text else finding(by_gotcha[g])).model_copy(update={"confidence": round(p, 3)})
           for g, p in ranked]
    best, p_best = probs[0]
    # several clear problems in one report (each strong in the rules' own terms, on a line that reports a failure):
    # all of them are named, whatever share of the probability each gets
    several = kb.scoring.calibration.several_at if kb.scoring.calibration is not None else 1.0
    strong = [f for f in out if f.gotcha in by_gotcha and by_gotcha[f.gotcha].confidence >= several
              and by_gotcha[f.gotcha].failure_evidence]
    if len(strong) >= 2:  # each against "none" alone: the share of one cause among several says nothing here
        pn = p_of[NONE]
        strong = [f.model_copy(update={"confidence": round(f.confidence / (f.confidence + pn), 3)}) for f in strong]
        return held(sorted(strong, key=lambda f: -f.confidence)), False, None, [], []
    # decision-time gates (learned.GATES): a gotcha whose own failure no line shows is not answered (the next one
    # over the bar is); its readings are computed only here. G10 (round 18ab, diagnose-learn-cv-v27.md); G1 (rounds
    # 18ac/18ag, diagnose-learn-cv-v28.md / v30.md), which a machine fact (--facts / --live) confirming G1 also opens
    g1_fact = "G1" in by_gotcha and any(fe.effect == "confirms" for fe in by_gotcha["G1"].facts)

    opened: dict[str, bool] = {}  # each gate's readings are read at most once per report

    def gate_open(g: str) -> bool:
        if g not in opened:
            opened[g] = (g == "G1" and g1_fact) or gate_holds(g, inp.lines, res.roles)
        return opened[g]

    gated = None
    if best in GATES and p_best >= lm.answer_at and not gate_open(best):
        shut = {g for g in GATES if not gate_open(g)}
        gated = f"{best} (p = {p_best:.2f}) is not answered: {GATE_WHY[best][0]} ({GATE_WHY[best][1]})"
        ranked = [(g, p) for g, p in probs if g != NONE and g not in shut]
        out_ok = [f for f in out if f.gotcha not in shut]
        if ranked and ranked[0][1] >= lm.answer_at and out_ok and out_ok[0].gotcha == ranked[0][0]:
            extra = [f for f in out_ok[1:2] if f.confidence >= lm.second_at]
            return held([out_ok[0], *extra]), False, None, [], []
    if best != NONE and p_best >= lm.answer_at and gated is None:
        # a second finding passes its own gate too (a "no kernel image" line beside an OOM is not a second G1)
        extra = [f for f in out[1:2] if f.confidence >= lm.second_at and (f.gotcha not in GATES or gate_open(f.gotcha))]
        return held([out[0], *extra]), False, None, [], []
    names = ", ".join(f"{f.gotcha} (p = {f.confidence:.2f})" for f in out)
    if gated is not None:
        why = gated
    elif best == NONE:
        why = (f"the learned reading finds none of the ten most likely (p = {p_of[NONE]:.2f}); the candidates, "
               f"{names}, stay under it")
    else:
        why = f"the strongest candidates, {names}, are under the {lm.answer_at:.2f} bar"
    reason = (f"not one of the ten, or not enough to tell: {why}"
              + ("" if res.failure_reported else "; no line of the input reports a failure") + ".")
    decide = [Decider(gotcha=f.gotcha, **kb.decide[f.gotcha].model_dump()) for f in out if f.gotcha in kb.decide]
    return [], True, reason, out, decide


def _text_finding(gotcha: str, inp: InputText, roles, tl, finding) -> Finding:
    """A finding for a gotcha only the text layer speaks for: the lines whose words weigh most toward it."""
    from sparkops.diagnose.learned import text_evidence
    from sparkops.diagnose.matcher import Scored
    from sparkops.diagnose.text import excerpt

    ev = [Evidence(line=inp.numbers[i], text=excerpt(inp.lines[i], 0, 0),
                   why="words like " + ", ".join(f"'{w}'" for w in words) + f" stand in the labelled {gotcha} reports")
          for i, words in text_evidence(inp.lines, roles, tl.read, tl.idf, tl.centroids.get(gotcha, {}))]
    why = (f"no rule matched {gotcha}; the learned text layer finds the report's words close to its labelled reports "
           "(a lead to check, never a confident answer)")
    return finding(Scored(gotcha=gotcha, score=0.0, confidence=0.0, evidence=ev, why=why))


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
