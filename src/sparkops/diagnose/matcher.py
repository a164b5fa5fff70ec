"""Weigh the evidence: which gotcha do these lines point at, how strongly, and why.

Scoring, in order (all of it data in symptoms.yaml, applied deterministically):
1. harmless messages are noted, and the patterns they list do not count inside their lines;
2. each pattern that matches adds its weight to its gotcha once, however often it repeats
   (within a ``group`` only the strongest counts; a negative weight is evidence against);
3. context rules, in file order, redirect, suppress or boost scores when their ids matched
   (the same words mean different things in different settings);
   a gotcha whose positive evidence is only ``topic`` patterns (what the report is about, not that
   anything failed) and that no rule boosted or redirected to counts its strongest topic word only,
   times ``topic_only_keep``;
4. facts from a snapshot confirm (add) or rule out (scale down) gotchas that have text evidence;
5. confidence = 1 - exp(-score / scale); findings under the minimum are dropped.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sparkops.diagnose.model import Evidence, FactEffect
from sparkops.diagnose.reading import line_roles, negated, reports_failure
from sparkops.diagnose.rules import GOTCHAS, Pattern, SymptomKnowledge
from sparkops.diagnose.text import InputText, excerpt

_MAX_MATCHES = 50  # matches looked at per pattern (a pattern counts once anyway)


@dataclass
class _Hit:
    pattern: Pattern
    gotcha: str
    lines: list[tuple[int, int, int]]  # (line index in the kept lines, start col, end col)


@dataclass
class Scored:
    """One gotcha's standing after all steps: what ``diagnose`` turns into a Finding."""

    gotcha: str
    score: float
    confidence: float
    evidence: list[Evidence]
    why: str
    facts: list[FactEffect] = field(default_factory=list)
    failure_evidence: bool = False  # one of its evidence lines reports a failure (reading.py), not only setup
    evidence_roles: tuple[str, ...] = ()  # the role (reading.py) of each distinct line it rests on
    topic_only: bool = False  # only topic words, no failure pattern and no context rule: damped (step 3b)
    ruled: bool = False  # a context rule boosted or redirected evidence into it
    anchored: bool = False  # a failure pattern of its own (not a topic word) matched on a line that reports a failure
    body_anchored: bool = False  # ... and not only on the title (the first line of a longer report: its claim)


@dataclass
class MatchResult:
    scored: list[Scored]  # best first, above the minimum confidence
    notes: list[str]
    matched: set[str]  # every pattern, signal and harmless id that matched (for tests and tuning)
    below: list[Scored] = field(default_factory=list)  # dropped for low confidence (for tuning)
    failure_reported: bool = True  # some line reports something going wrong (reading.py)
    negated: list[tuple[int, str]] = field(default_factory=list)  # (line index, pattern id) matches read as "no X"
    negated_gotchas: set[str] = field(default_factory=set)  # gotchas with at least one negated match
    roles: tuple[str, ...] = ()  # the role of every kept line (reading.py)


def _locate(inp: InputText, starts: list[int], start: int, end: int) -> tuple[int, int, int]:
    i = bisect.bisect_right(starts, start) - 1
    line_end = starts[i] + len(inp.lines[i])
    return i, start - starts[i], min(end, line_end) - starts[i]


_MAX_ANCHOR_HITS = 200  # an anchor seen more often than this: the regex scans the whole text


class _Scanner:
    """Runs each regex only where it can match: around the lines holding one of its required
    literals (rules.py ``anchors``), or over the whole text when it has none or they are everywhere.
    Same matches as a plain scan (a match contains an anchor), far less work on a huge log."""

    def __init__(self, text: str, starts: list[int]) -> None:
        self.text = text
        self.starts = starts
        self.lowered = text.lower()
        self.same_offsets = len(self.lowered) == len(text)  # a few characters lower-case to two
        self.hits: dict[str, list[int] | None] = {}  # anchor -> positions (None: too many to bother)

    def _positions(self, anchor: str) -> list[int] | None:
        if anchor not in self.hits:
            found: list[int] | None = []
            at = self.lowered.find(anchor)
            while at >= 0:
                if len(found) >= _MAX_ANCHOR_HITS:
                    found = None
                    break
                found.append(at)
                at = self.lowered.find(anchor, at + 1)
            self.hits[anchor] = found
        return self.hits[anchor]

    def windows(self, item) -> list[tuple[int, int]] | None:
        """Character ranges to search ([] when the regex cannot match; None: the whole text)."""
        if item.anchors is None:
            return None
        positions: list[int] = []
        for a in item.anchors:
            found = self._positions(a)
            if found is None:
                return None
            positions += found
        if not positions:
            return []
        reach = item.reach
        if reach is None or not self.same_offsets:
            return None
        out: list[tuple[int, int]] = []
        last = len(self.starts) - 1
        for pos in sorted(positions):
            if reach:  # a match that may cross lines lies within `reach` characters of its anchor
                begin, end = max(0, pos - reach), min(len(self.text), pos + reach)
            else:  # a one-line pattern: the anchor's line
                i = bisect.bisect_right(self.starts, pos) - 1
                begin = self.starts[i]
                end = self.starts[i + 1] - 1 if i + 1 <= last else len(self.text)
            if out and begin <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            else:
                out.append((begin, end))
        return out

    def finditer(self, item, limit: int = _MAX_MATCHES) -> list:
        wins = self.windows(item)
        ranges = [(0, len(self.text))] if wins is None else wins
        found = []
        for begin, end in ranges:
            for m in item.rx.finditer(self.text, begin, end):
                found.append(m)
                if len(found) >= limit:
                    return found
        return found


def _context_evidence(ev: list, rule, context: Mapping[str, tuple[tuple[int, int, int], str]],
                      weight: float) -> None:
    """The lines of the context signals a rule relied on become evidence too (ranked last)."""
    for x in rule.when_all + rule.when_any:
        if x in context:
            (i, s, e), why = context[x]
            ev.append((weight, i, s, e, f"context: {why} — {rule.why}"))


def match(inp: InputText, kb: SymptomKnowledge, fact_signals: Iterable[str] = (),
          fact_effects: Mapping[str, list[FactEffect]] | None = None) -> MatchResult:
    """Score every gotcha for one input; pure and deterministic."""
    text = inp.text
    starts = []
    pos = 0
    for line in inp.lines:
        starts.append(pos)
        pos += len(line) + 1
    scan = _Scanner(text, starts)
    sc = kb.scoring

    # 1. harmless messages: a note each, and the lines where listed patterns are silenced
    notes: list[str] = []
    matched: set[str] = set(fact_signals)
    silenced: dict[str, set[int]] = {}
    for h in kb.harmless:
        first = None
        for m in scan.finditer(h):
            i, _s, _e = _locate(inp, starts, m.start(), m.end())
            last, _s2, _e2 = _locate(inp, starts, max(m.end() - 1, m.start()), m.end())
            first = i if first is None else first
            for pid in h.silences:
                silenced.setdefault(pid, set()).update(range(i, last + h.lines_after + 1))
        if first is not None:
            matched.add(h.id)
            notes.append(f"line {inp.numbers[first]}: {h.note}")

    # 2. context signals and patterns
    context: dict[str, tuple[tuple[int, int, int], str]] = {}  # signal id -> (its first line, why)
    for s in kb.signals:
        found = scan.finditer(s, limit=1)
        if found:
            matched.add(s.id)
            context[s.id] = (_locate(inp, starts, found[0].start(), found[0].end()), s.why)
    reading = sc.reading
    roles = line_roles(inp.lines)
    failure_reported = reports_failure(roles)
    negated_hits: list[tuple[int, str]] = []
    negated_g: set[str] = set()
    hits: list[_Hit] = []
    for g in GOTCHAS:
        for p in kb.patterns.get(g, []):
            quiet = silenced.get(p.id, set())
            lines: list[tuple[int, int, int]] = []
            for m in scan.finditer(p):
                loc = _locate(inp, starts, m.start(), m.end())
                if reading.negation and p.weight > 0 and negated(inp.lines[loc[0]], loc[1]):
                    negated_hits.append((loc[0], p.id))
                    negated_g.add(g)
                    continue
                if loc[0] not in quiet and all(loc[0] != x[0] for x in lines):
                    lines.append(loc)
            if lines:
                hits.append(_Hit(p, g, lines))
                matched.add(p.id)
    for h_ in hits:
        if h_.pattern.weight > 0:
            matched.add(h_.gotcha)  # "G3" in a rule: any positive evidence for G3

    score = {g: 0.0 for g in GOTCHAS}
    best_in_group: dict[tuple[str, str], float] = {}
    for h_ in hits:
        w = h_.pattern.weight
        if w > 0:  # evidence counts by where it stands: a failure line in full, the setup or a quote less
            w *= max(reading.weight(roles[i]) for i, _s, _e in h_.lines)
        if h_.pattern.group:
            key = (h_.gotcha, h_.pattern.group)
            prev = best_in_group.get(key)
            if prev is not None and abs(prev) >= abs(w):
                continue
            score[h_.gotcha] += w - (prev or 0.0)
            best_in_group[key] = w
        else:
            score[h_.gotcha] += w

    # evidence per gotcha: (weight, line index, start, end, why)
    ev: dict[str, list[tuple[float, int, int, int, str]]] = {g: [] for g in GOTCHAS}
    counter: dict[str, list[tuple[int, str]]] = {g: [] for g in GOTCHAS}
    for h_ in hits:
        for i, s, e in h_.lines[: sc.evidence_per_pattern]:
            if h_.pattern.weight > 0:
                ev[h_.gotcha].append((h_.pattern.weight, i, s, e, h_.pattern.why))
            else:
                counter[h_.gotcha].append((i, h_.pattern.why))
    ids_lines = {h_.pattern.id: h_ for h_ in hits}

    # where the evidence stands: a gotcha is anchored when one of its failure patterns (not a topic word such as "two
    # Sparks", not a setup fact such as "TP=2") matched on a line that reports the failure (issue 18, G10)
    # An issue's title (the first of three or more lines) is the reporter's claim, not yet the evidence: a gotcha
    # anchored only there is "title-anchored" (body_anchored False) and is not answered with high confidence.
    anchored = {g: False for g in GOTCHAS}
    body = {g: False for g in GOTCHAS}
    for h_ in hits:
        if h_.pattern.weight > 0 and not (h_.pattern.topic or h_.pattern.setup):
            on = [i for i, _s, _e in h_.lines if roles[i] == "failure"]
            if on:
                anchored[h_.gotcha] = True
                body[h_.gotcha] = body[h_.gotcha] or any(i > 0 for i in on) or len(inp.lines) < 3

    # 3. context rules
    applied: dict[str, list[str]] = {g: [] for g in GOTCHAS}
    rule_added = {g: False for g in GOTCHAS}  # a boost or redirect read context into this gotcha
    for r in kb.rules:
        if not all(x in matched for x in r.when_all):
            continue
        if r.when_any and not any(x in matched for x in r.when_any):
            continue
        if any(x in matched for x in r.unless):
            continue
        if r.effect == "redirect":
            moved = r.factor * max(score[r.source], 0.0)
            if moved <= 0:
                continue
            score[r.source] -= moved
            score[r.target] += moved
            anchored[r.target] = anchored[r.target] or anchored[r.source]
            body[r.target] = body[r.target] or body[r.source]
            rule_added[r.target] = True
            ev[r.target] += [(w, i, s, e, f"{why} — read in context: {r.why}") for w, i, s, e, why in ev[r.source]]
            if r.factor >= 1.0:
                ev[r.source] = []
            applied[r.target].append(f"{r.why} (rule {r.id}: moved from {r.source})")
            applied[r.source].append(f"rule {r.id} moved most of this to {r.target}: {r.why}")
            _context_evidence(ev[r.target], r, context, 0.0)
        elif r.effect == "suppress":
            for g in r.suppressed:
                if score[g] > 0:
                    score[g] *= 1.0 - r.factor
                    applied[g].append(f"weakened by rule {r.id}: {r.why}")
        else:  # boost
            score[r.target] += r.add
            rule_added[r.target] = True
            applied[r.target].append(f"{r.why} (rule {r.id})")
            for x in r.when_all + r.when_any:
                h_ = ids_lines.get(x)
                if h_ is not None:
                    i, s, e = h_.lines[0]
                    ev[r.target].append((r.add, i, s, e, f"{h_.pattern.why} — read in context: {r.why}"))
            _context_evidence(ev[r.target], r, context, 0.0)

    # 3b. minimum evidence: topic words alone (NVFP4, two Sparks, a temperature) do not name a gotcha
    failure = {h_.gotcha for h_ in hits if h_.pattern.weight > 0 and not h_.pattern.topic}
    topic_only = {g: score[g] > 0 and g not in failure and not rule_added[g] for g in GOTCHAS}
    if sc.topic_only_keep < 1.0:
        strongest_topic = {g: 0.0 for g in GOTCHAS}
        for h_ in hits:
            strongest_topic[h_.gotcha] = max(strongest_topic[h_.gotcha], h_.pattern.weight)
        for g in GOTCHAS:
            if topic_only[g]:
                # many words on one topic are one piece of evidence, not several: the strongest counts
                score[g] = min(score[g], strongest_topic[g]) * sc.topic_only_keep
                applied[g].append("only topic words, no sign of a failure: damped")

    # 3c. a report in which no line says anything went wrong (a how-to page, a success report, pasted docs)
    if not failure_reported and reading.no_failure_keep < 1.0:
        for g in GOTCHAS:
            if score[g] > 0:
                score[g] *= reading.no_failure_keep
                applied[g].append("no line of the input reports a failure: damped")

    # 4. facts
    effects = fact_effects or {}
    for g in GOTCHAS:
        if score[g] <= 0:
            continue
        for fe in effects.get(g, []):
            if fe.effect == "confirms":
                score[g] += sc.fact_confirm_add
            else:
                score[g] *= sc.fact_rule_out_keep

    # 5. confidence and explanation
    out: list[Scored] = []
    for g in GOTCHAS:
        if score[g] <= 0 or not ev[g]:
            continue
        conf = round(1.0 - math.exp(-score[g] / sc.scale), 3)
        seen: set[int] = set()
        evidence: list[Evidence] = []
        for _w, i, s, e, why in sorted(ev[g], key=lambda t: (-t[0], t[1])):
            if i in seen:
                continue
            seen.add(i)
            evidence.append(Evidence(line=inp.numbers[i], text=excerpt(inp.lines[i], s, e), why=why))
            if len(evidence) >= sc.max_evidence:
                break
        evidence.sort(key=lambda x: x.line)
        best = max(ev[g], key=lambda t: (t[0], -t[1]))
        why_parts = list(dict.fromkeys(applied[g]))
        why_parts.append(f"strongest evidence, line {inp.numbers[best[1]]}: {best[4]}")
        if counter[g]:
            i, why = counter[g][0]
            why_parts.append(f"counter-evidence, line {inp.numbers[i]}: {why}")
        out.append(Scored(gotcha=g, score=round(score[g], 3), confidence=conf, evidence=evidence,
                          why="; ".join(why_parts), facts=list(effects.get(g, [])),
                          failure_evidence=any(roles[i] == "failure" for _w, i, _s, _e, _y in ev[g]),
                          evidence_roles=tuple(roles[i] for i in sorted({t[1] for t in ev[g]})),
                          topic_only=topic_only[g], ruled=rule_added[g], anchored=anchored[g],
                          body_anchored=body[g]))
    out.sort(key=lambda x: (-x.score, GOTCHAS.index(x.gotcha)))
    kept = [x for x in out if x.confidence >= sc.min_confidence]
    below = [x for x in out if x.confidence < sc.min_confidence]
    return MatchResult(scored=kept, notes=notes, matched=matched, below=below, failure_reported=failure_reported,
                       negated=negated_hits, negated_gotchas=negated_g, roles=roles)


CALIBRATION_FEATURES = ("log_score", "margin", "failure_reported", "failure_evidence", "rivals")


def calibration_features(res: MatchResult, rank: int = 0) -> dict[str, float]:
    """The numbers the calibration map reads for the finding at ``rank`` (0: the top one) of a match:
    its score (log), its lead over the next finding, whether any line reports a failure, whether its own
    evidence stands on a failure line, and how many other gotchas scored at all."""
    ranked = sorted(res.scored + res.below, key=lambda x: -x.score)
    if rank >= len(ranked):
        return {k: 0.0 for k in CALIBRATION_FEATURES}
    me = ranked[rank]
    nxt = ranked[rank + 1].score if rank + 1 < len(ranked) else 0.0
    return {"log_score": math.log1p(max(me.score, 0.0)), "margin": math.log1p(max(me.score - nxt, 0.0)),
            "failure_reported": float(res.failure_reported), "failure_evidence": float(me.failure_evidence),
            "rivals": float(min(len(ranked) - 1, 4))}


def calibrated(features: dict[str, float], bias: float, coef: dict[str, float]) -> float:
    """Logistic probability from features and fitted coefficients (missing coefficients count 0)."""
    z = bias + sum(coef.get(k, 0.0) * v for k, v in features.items())
    z = max(-30.0, min(30.0, z))
    return 1.0 / (1.0 + math.exp(-z))


def candidates(res: MatchResult) -> list:
    """The rules' candidates (kept and dropped, best first) as the learned layer reads them (learned.py)."""
    from sparkops.diagnose.learned import Candidate

    ranked = sorted(res.scored + res.below, key=lambda x: (-x.score, GOTCHAS.index(x.gotcha)))
    return [Candidate(gotcha=x.gotcha, score=x.score, evidence_roles=x.evidence_roles,
                      failure_evidence=x.failure_evidence, topic_only=x.topic_only, ruled=x.ruled,
                      negated=x.gotcha in res.negated_gotchas, kept=x in res.scored, anchored=x.anchored,
                      body_anchored=x.body_anchored)
            for x in ranked]
