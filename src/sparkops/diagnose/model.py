"""What ``diagnose`` answers, per input: findings ranked best first, each with its evidence lines.

These are the JSON contract (``spark-ops diagnose --json``, the MCP server, ``watch``): field names
and meanings only ever grow, never change.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Evidence(_Model):
    """One input line that points at a gotcha, and why it does."""

    line: int  # 1-based line number in the input as given (before any truncation)
    text: str  # the line, ANSI-stripped, shortened around the match when very long
    why: str


class FactEffect(_Model):
    """A fact from a snapshot (``--facts``/``--live``) that confirms or rules out a finding."""

    fact: str  # dotted path in the facts snapshot, e.g. "target.torch.cuda"
    value: Any
    effect: Literal["confirms", "rules-out"]


class Finding(_Model):
    gotcha: str  # "G1".."G10"
    confidence: float = Field(ge=0.0, le=1.0)
    title: str
    evidence: list[Evidence] = Field(default_factory=list)
    why: str  # why these lines point here (and which context rules changed the answer)
    fix: str  # from the gotcha catalog (knowledge/gotchas.yaml)
    facts: list[FactEffect] = Field(default_factory=list)


class Decider(_Model):
    """What would decide whether a candidate gotcha is the cause: a fact to collect or a command to run."""

    gotcha: str
    fact: str | None = None  # dotted path in a facts snapshot (`spark-ops collect`), when one decides it
    command: str  # a command to run on the machine (read-only)
    why: str  # what its answer tells


class Diagnosis(_Model):
    """The answer for one input. No findings means "none of the ten" - or, with ``abstained``, "not enough to
    tell": then ``candidates`` holds what the text weakly points at and ``decide`` what would settle it."""

    file: str  # the path as given, or "-" for stdin
    findings: list[Finding] = Field(default_factory=list)  # best first
    notes: list[str] = Field(default_factory=list)  # harmless messages explained, truncation, fact hints
    truncated: bool = False  # only part of the input was read (the notes say which lines)
    error: str | None = None  # the input could not be read at all (the CLI then exits 3)
    abstained: bool = False  # the evidence was too weak to name a gotcha (calibrated probability under the bar)
    abstain_reason: str | None = None  # why it abstained, with the numbers
    candidates: list[Finding] = Field(default_factory=list)  # weak findings it did not answer with, best first
    decide: list[Decider] = Field(default_factory=list)  # facts/commands that would decide between them

    @property
    def top(self) -> str:
        """The top-1 answer: a G-number, or "none" when nothing matched."""
        return self.findings[0].gotcha if self.findings else "none"
