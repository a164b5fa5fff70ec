"""The symptom knowledge (knowledge/symptoms.yaml): patterns per gotcha, context signals, context
rules and harmless messages, validated once at load and compiled once.

A bad edit fails loudly here (unknown ids in a rule, a regex that does not compile, a gotcha that
is not G1..G10), not halfway through a diagnosis.
"""

from __future__ import annotations

import re
from datetime import date
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sparkops import knowledge
from sparkops.diagnose.text import Limits
from sparkops.knowledge import safe_load

try:  # the regex parser: internal, so anything unexpected means "no anchors" (the pattern always runs)
    import re._parser as _sre_parse  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]

GOTCHAS = tuple(f"G{i}" for i in range(1, 11))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class _Regex(_Model):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    re: str
    case: bool = False  # case-sensitive when true
    why: str

    @field_validator("re")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from exc
        return v

    @cached_property
    def rx(self) -> re.Pattern[str]:
        return re.compile(self.re, re.MULTILINE | (0 if self.case else re.IGNORECASE))

    @cached_property
    def reach(self) -> int | None:
        """How far (in characters) a match can extend from any of its characters: 0 when it cannot
        contain a newline (it stays on one line), None when unbounded or unknown (scan everything)."""
        try:
            parsed = _sre_parse.parse(self.re)
            if not _newline_possible(parsed):
                return 0
            width = parsed.getwidth()[1]
        except Exception:  # noqa: BLE001 - unknown shape: the safe answer
            return None
        return width if width <= _MAX_REACH else None

    @cached_property
    def anchors(self) -> tuple[str, ...] | None:
        """Lower-case literals of which every match contains at least one (None: no such set).

        A fast necessary condition: when none of them is in the lower-cased text the regex cannot
        match, so it is not run (Python's re scans case-insensitive alternations slowly)."""
        try:
            found = _required(_sre_parse.parse(self.re))
        except Exception:  # noqa: BLE001 - an unparseable shape just disables the shortcut
            return None
        return tuple(sorted(found)) if found else None


_MAX_REACH = 20_000
_NEWLINE_CATEGORIES = {"CATEGORY_SPACE", "CATEGORY_NOT_WORD", "CATEGORY_NOT_DIGIT", "CATEGORY_LINEBREAK",
                       "CATEGORY_UNI_SPACE", "CATEGORY_UNI_NOT_WORD", "CATEGORY_UNI_NOT_DIGIT",
                       "CATEGORY_UNI_LINEBREAK"}


def _set_has_newline(items) -> bool:
    negate, has = False, False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif (name == "LITERAL" and av == 10) or (name == "RANGE" and av[0] <= 10 <= av[1]) or (
                name == "CATEGORY" and str(av) in _NEWLINE_CATEGORIES):
            has = True
    return has != negate


def _newline_possible(seq) -> bool:
    """Can the parsed (sub)pattern match a newline? ``.`` cannot (no DOTALL); unknown ops: yes."""
    for op, av in seq:
        name = str(op)
        if name == "LITERAL":
            if av == 10:
                return True
        elif name == "NOT_LITERAL":
            if av != 10:
                return True
        elif name == "IN":
            if _set_has_newline(av):
                return True
        elif name in ("ANY", "AT"):
            continue
        elif name == "SUBPATTERN":
            if _newline_possible(av[-1]):
                return True
        elif name == "BRANCH":
            if any(_newline_possible(b) for b in av[1]):
                return True
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if _newline_possible(av[2]):
                return True
        elif name in ("ASSERT", "ASSERT_NOT"):
            if _newline_possible(av[1]):
                return True
        else:
            return True
    return False


def _required(seq) -> set[str] | None:
    """A set of lower-case literals one of which occurs in every match of the parsed pattern:
    literals of 3+ characters when there is such a set, else of 2 (still a cheap, useful filter)."""
    return _analyse(seq, 3)[1] or _analyse(seq, 2)[1]


def _analyse(seq, least: int) -> tuple[str, set[str] | None]:
    """(the literal every match of ``seq`` starts with, a required set for ``seq``).

    The parser factors common prefixes out of alternations (``tok|t/s`` becomes ``t`` + ``ok|/s``),
    so a group's candidates are the literal run before it joined with each alternative's own prefix."""
    best: set[str] | None = None
    run: list[str] = []
    prefix: str | None = None

    def consider(cand: set[str] | None) -> None:
        nonlocal best
        if cand and all(len(c) >= least for c in cand) and (
                best is None or min(map(len, cand)) > min(map(len, best))):
            best = cand

    def close_run() -> None:
        nonlocal prefix
        if prefix is None:
            prefix = "".join(run)
        if len(run) >= least:
            consider({"".join(run)})
        run.clear()

    def joined(parts: list[tuple[str, set[str] | None]]) -> set[str] | None:
        out: set[str] = set()
        lead = "".join(run)
        for pre, req in parts:
            if len(lead + pre) >= least:
                out.add(lead + pre)
            elif req:
                out |= req
            else:
                return None
        return out

    for op, av in seq:
        name = str(op)
        if name == "LITERAL" and 32 <= av < 127:
            run.append(chr(av).lower())
            continue
        if name == "BRANCH":
            consider(joined([_analyse(b, least) for b in av[1]]))
        elif name == "SUBPATTERN":
            consider(joined([_analyse(av[-1], least)]))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[0] >= 1:
            consider(joined([_analyse(av[2], least)]))
        close_run()
    close_run()
    return prefix or "", best


class Pattern(_Regex):
    """A symptom: a match adds ``weight`` to its gotcha (negative: evidence against it)."""

    weight: float = Field(ge=-10, le=10)
    group: str = ""  # within one group of a gotcha only the strongest match counts
    # topic: the words only say what the report is about (NVFP4, two Sparks, a temperature, flash-attn),
    # not that anything failed; a gotcha whose evidence is all topic is damped (scoring.topic_only_keep)
    topic: bool = False
    # setup: the words state the configuration (TP=2, a cap), which is the cause, not the failure: they score as
    # usual but never "anchor" a gotcha on the failure (matcher.Scored.anchored, issue 18: where the TP=2 stands)
    setup: bool = False


class Signal(_Regex):
    """A context word (a build tag, a setting, a topology) that rules read; it scores nothing itself."""


class Harmless(_Regex):
    """A message that looks alarming and is not: it becomes a note, and the listed patterns that
    match inside its lines (the match plus ``lines_after``) do not count."""

    note: str
    lines_after: int = Field(default=0, ge=0, le=20)
    silences: list[str] = Field(default_factory=list)


class Rule(_Model):
    """Context that changes the answer. ``when_all`` ids must all have matched, at least one of
    ``when_any`` (when given), none of ``unless``. Ids name patterns, signals or facts signals
    (``fact.*``). Effects: ``redirect`` moves ``factor`` of ``source``'s score to ``target``;
    ``suppress`` keeps (1 - factor) of it (of each of ``sources`` too, when one cause rules out
    several gotchas at once); ``boost`` adds ``add`` to ``target``."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    why: str
    when_all: list[str] = Field(default_factory=list)
    when_any: list[str] = Field(default_factory=list)
    unless: list[str] = Field(default_factory=list)
    effect: Literal["redirect", "suppress", "boost"]
    source: str | None = None
    sources: list[str] = Field(default_factory=list)  # suppress only: more gotchas weakened alike
    target: str | None = None
    factor: float = Field(default=1.0, ge=0, le=1)
    add: float = Field(default=0.0, ge=0, le=10)

    @model_validator(mode="after")
    def _shape(self) -> Rule:
        if not (self.when_all or self.when_any):
            raise ValueError("a rule needs when_all or when_any")
        need = {"redirect": ("source", "target"), "suppress": ("source",), "boost": ("target",)}[self.effect]
        for name in need:
            if getattr(self, name) not in GOTCHAS:
                raise ValueError(f"{self.effect} needs {name} in G1..G10, got {getattr(self, name)!r}")
        if self.sources and self.effect != "suppress":
            raise ValueError("sources is for suppress rules only")
        bad = [g for g in self.sources if g not in GOTCHAS]
        if bad:
            raise ValueError(f"sources must be in G1..G10, got {bad}")
        return self

    @property
    def suppressed(self) -> list[str]:
        """The gotchas a suppress rule weakens: ``source`` and then ``sources``."""
        return list(dict.fromkeys([self.source, *self.sources])) if self.source else []


class Scoring(_Model):
    scale: float = Field(gt=0)  # confidence = 1 - exp(-score / scale)
    min_confidence: float = Field(ge=0, le=1)  # weaker findings are dropped
    fact_confirm_add: float = Field(ge=0)  # score a confirming fact adds to a finding with text evidence
    fact_rule_out_keep: float = Field(ge=0, le=1)  # share of the score left when a fact rules it out
    # share of the score kept by a gotcha whose only evidence is topic words (no failure, no context rule):
    # a report that merely mentions NVFP4 or two Sparks is not yet that gotcha
    topic_only_keep: float = Field(default=1.0, ge=0, le=1)
    evidence_per_pattern: int = Field(ge=1)  # evidence lines shown per pattern
    max_evidence: int = Field(ge=1)  # evidence lines shown per finding
    reading: Reading = Field(default_factory=lambda: Reading())  # where evidence stands (issue 18)
    calibration: Calibration | None = None  # raw score -> probability the top finding is right (issue 18)
    # who decides what diagnose answers: "learned" (knowledge/diagnose_model.yaml, sparkops/diagnose/learned.py) or
    # "calibrated" (the rules' threshold and the calibration map above, the v6 behaviour)
    decision: Literal["learned", "calibrated"] = "calibrated"


class Reading(_Model):
    """How much a match counts by the role of its line (sparkops/diagnose/reading.py); 1.0 everywhere and
    ``negation: false`` reproduce the v5 matcher exactly."""

    failure: float = Field(default=1.0, ge=0, le=1)
    plain: float = Field(default=1.0, ge=0, le=1)
    context: float = Field(default=1.0, ge=0, le=1)
    quoted: float = Field(default=1.0, ge=0, le=1)
    negation: bool = False  # a match negated in its clause ("no OOM") is not evidence for its gotcha
    no_failure_keep: float = Field(default=1.0, ge=0, le=1)  # share of every score kept when no line fails

    def weight(self, role: str) -> float:
        return float(getattr(self, role))


class Calibration(_Model):
    """A logistic map from the matcher's raw numbers to the probability that the top finding is right,
    fitted by benchmarks/diagnose_cv.py on the labelled sets named in ``fitted_on`` (never holdout5).
    p = 1 / (1 + exp(-(bias + sum(coef[k] * feature[k])))); features: matcher.calibration_features."""

    fitted_on: list[str]
    bias: float
    coef: dict[str, float]
    answer_at: float = Field(ge=0, le=1)  # below this probability diagnose abstains
    second_at: float = Field(ge=0, le=1)  # a second finding is offered at or above this probability
    # two or more strong, different problems in one report (each with the rules' own confidence at or above
    # this, on a line that reports a failure): answered with all of them instead of abstaining on the tie
    several_at: float = Field(default=1.0, ge=0, le=1)


Scoring.model_rebuild()


class LimitsModel(_Model):
    head_bytes: int = Field(gt=0)
    tail_bytes: int = Field(gt=0)
    head_lines: int = Field(gt=0)
    tail_lines: int = Field(gt=0)
    max_line_chars: int = Field(gt=80)
    max_read_bytes: int = Field(gt=0)
    count_max_bytes: int = Field(default=64 << 20, ge=0)  # newlines counted in a skipped middle (exact line numbers)


class Decide(_Model):
    """What settles one gotcha when the text alone does not (diagnose --json ``decide``)."""

    fact: str | None = None
    command: str
    why: str


class LearnedModel(_Model):
    """The learned decision layer's weights (knowledge/diagnose_model.yaml, written by
    benchmarks/diagnose_learn.py; sparkops/diagnose/learned.py reads them)."""

    version: int
    last_verified: date
    trained_on: list[str]
    cases: int = Field(ge=0)
    groups: int = Field(ge=0)
    answer_at: float = Field(ge=0, le=1)  # a gotcha is answered when it is the most likely and reaches this
    second_at: float = Field(ge=0, le=1)  # a second gotcha is offered at or above this probability
    families: dict[str, list[Literal["speed", "thermal", "memory", "bandwidth"]]]
    priors: dict[str, float]
    candidate: dict[str, float]
    none: dict[str, float]
    anchored: dict[str, float] = Field(default_factory=dict)  # per gotcha: weight of "anchored" (learned.py)

    @model_validator(mode="after")
    def _known(self) -> LearnedModel:
        from sparkops.diagnose.learned import CANDIDATE_FEATURES, NONE_FEATURES

        bad = [g for g in [*self.priors, *self.families, *self.anchored] if g not in GOTCHAS]
        bad += [k for k in self.candidate if k not in CANDIDATE_FEATURES]
        bad += [k for k in self.none if k not in NONE_FEATURES]
        if bad:
            raise ValueError(f"unknown gotchas or features in the learned model: {bad}")
        return self

    @cached_property
    def weights(self) -> dict[str, float]:
        return {**{"c." + k: v for k, v in self.candidate.items()}, **{"n." + k: v for k, v in self.none.items()},
                **{"a." + g: v for g, v in self.anchored.items()}}


class SymptomKnowledge(_Model):
    version: int
    last_verified: date
    scoring: Scoring
    limits: LimitsModel
    signals: list[Signal]
    patterns: dict[str, list[Pattern]]
    rules: list[Rule]
    harmless: list[Harmless]
    decide: dict[str, Decide] = Field(default_factory=dict)
    # the learned decision layer (knowledge/diagnose_model.yaml); None: the rules and calibration map decide
    learned: LearnedModel | None = None

    @model_validator(mode="after")
    def _ids(self) -> SymptomKnowledge:
        bad = [g for g in self.patterns if g not in GOTCHAS] + [g for g in self.decide if g not in GOTCHAS]
        if bad:
            raise ValueError(f"patterns or decide entries for unknown gotchas: {bad}")
        ids: list[str] = [s.id for s in self.signals] + [p.id for ps in self.patterns.values() for p in ps]
        ids += [h.id for h in self.harmless]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"ids used twice: {dupes}")
        known = set(ids)
        for r in self.rules:
            for ref in r.when_all + r.when_any + r.unless:
                if ref not in known and ref not in GOTCHAS and not ref.startswith("fact."):
                    raise ValueError(f"rule {r.id} names an unknown id {ref!r}")
        pattern_ids = {p.id for ps in self.patterns.values() for p in ps}
        for h in self.harmless:
            for ref in h.silences:
                if ref not in pattern_ids:
                    raise ValueError(f"harmless {h.id} silences an unknown pattern {ref!r}")
        return self

    @cached_property
    def gotcha_of(self) -> dict[str, str]:
        """Pattern id -> its gotcha."""
        return {p.id: g for g, ps in self.patterns.items() for p in ps}

    @cached_property
    def text_limits(self) -> Limits:
        return Limits(**self.limits.model_dump())


def parse(data: object) -> SymptomKnowledge:
    """Validate already-loaded YAML data (tests feed variants through here)."""
    return SymptomKnowledge.model_validate(data)


@lru_cache(maxsize=1)
def load() -> SymptomKnowledge:
    """The packaged symptoms.yaml (cached: immutable data, regexes compiled on first use)."""
    kb = knowledge.load_file("symptoms.yaml", SymptomKnowledge)
    return kb.model_copy(update={"learned": load_learned()}) if kb.scoring.decision == "learned" else kb


def load_learned() -> LearnedModel:
    """The packaged learned decision layer (knowledge/diagnose_model.yaml)."""
    return knowledge.load_file("diagnose_model.yaml", LearnedModel)


def load_file(path: Path) -> SymptomKnowledge:
    """A user-supplied symptoms file of the same shape (for calibrating new patterns); ``decision: learned`` in it
    uses the packaged learned layer."""
    kb = parse(safe_load(Path(path).read_text(encoding="utf-8")))
    return kb.model_copy(update={"learned": load_learned()}) if kb.scoring.decision == "learned" else kb
