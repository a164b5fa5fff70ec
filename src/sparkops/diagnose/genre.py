"""What kind of text is it? A user's failure report, or something else (issue 18, round 18u).

A careful reader first asks what a text *is* before asking what went wrong in it: a pull-request description or a
changelog, a README or a how-to, a benchmark or review write-up, a question or a plan are not a user's report of a
failure, even when they name errors ("you will hit OOM without this flag") or gotcha words. This module reads the
genre from the text's structure, in general terms (section headings of a PR template, checklists, "Fixes #N", numbered
install steps, tables of numbers, a title that asks), never from any labelled case's words.

``genre(lines, roles)`` returns the strongest genre among ``pr``, ``docs``, ``writeup``, ``question`` (or ``""`` when
none reaches its bar) and whether the text is a user's failure report: the first person telling what happened to them
(past tense or a present complaint: "I ran", "we got", "I'm getting") together with an error (a failure line of
reading.py, a traceback or log line). ``not_a_report`` is a genre other than a report with no such first-person
failure. A bug-report form (its "Describe the bug" / "Steps to reproduce" / "Expected behavior" sections, a "[Bug]"
title) stands for the first person: the text is a report of a failure by its form. Pure functions, a few regexes per line, never raise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sparkops.diagnose.reading import FAILURE

GENRES = ("pr", "docs", "writeup", "question")

# --- a pull-request description or a changelog ----------------------------------------------------------------------
_PR_SELF = re.compile(r"\bthis (pr|pull request|patch|change ?set|commit|change|diff)\b|\bin this pr\b", re.IGNORECASE)
_PR_SECTION = re.compile(r"^\s*(#{1,4}\s*|\*\*)?(summary|changes|changes made|changelog|what changed|what this does|"
                         r"what does this pr do\??|motivation|purpose|description|test plan|testing( done)?|tests?|"
                         r"checklist|related issues?|breaking changes?|release notes?|how (was|to) (this )?tested\??)"
                         r"\s*(\*\*)?\s*:?\s*$", re.IGNORECASE)
_CHECKBOX = re.compile(r"^\s*[-*]\s*\[[ xX]\]")
_CLOSES = re.compile(r"\b(fix(es|ed)?|close[sd]?|resolve[sd]?)\s+(#\d+|https?://\S+/(issues|pull)/\d+)", re.IGNORECASE)
_PR_TITLE = re.compile(r"^\s*((feat|fix|docs?|chore|refactor|build|ci|perf|test|style)(\([^)]*\))?!?:|"
                       r"\[(build|misc|bugfix|feature|feat|docs?|kernel|hardware|ci|core|model|perf|platform|fix|"
                       r"wip|rfc)\]|(add|adds|added|support|enable|enables|update|updates|bump|introduce|implement)\s)",
                       re.IGNORECASE)
# --- a README, docs, a how-to ---------------------------------------------------------------------------------------
_MD_HEADING = re.compile(r"^\s*#{1,4}\s+\S")
_DOC_SECTION = re.compile(r"^\s*(#{1,4}\s*)?(prerequisites|requirements|installation|install|usage|quick ?start|"
                          r"getting started|setup|set ?up|configuration|overview|features|how it works|"
                          r"troubleshooting|faq|license|contributing)\s*:?\s*$", re.IGNORECASE)
_STEP = re.compile(r"^\s*(\d+[.)]\s+[A-Z]|step \d+\b)", re.IGNORECASE)
_IMPERATIVE = re.compile(r"^\s*([-*]\s+|\d+[.)]\s+)?(install|run|clone|download|create|open|configure|build|start|copy|"
                         r"edit|enable|verify|check|set|use|add|pull|launch|navigate|make sure|ensure|replace|export)"
                         r"\b", re.IGNORECASE)
_YOU = re.compile(r"\b(you (can|should|must|need|will|may)|your (spark|system|machine|gpu|model))\b", re.IGNORECASE)
# --- a benchmark or review write-up ---------------------------------------------------------------------------------
_NUM_ROW = re.compile(r"^\s*\|.*\d.*\|")
_COMPARE = re.compile(r"\b(vs\.?|versus|compared (to|with)|faster than|slower than|\d+(\.\d+)?\s*x (faster|slower)|"
                      r"benchmarks?|results?|verdict|conclusions?|takeaways?|review|tested|throughput)\b", re.IGNORECASE)
# --- a question or a plan -------------------------------------------------------------------------------------------
_ASK = re.compile(r"\b(should i|should we|how (do|can|would|should) (i|we|you)|is it possible|is there (a|any) way|"
                  r"does anyone|has anyone|anyone (tried|know|else)|any (advice|recommendations?|suggestions?|ideas?)|"
                  r"what('s| is) the best|which (one|model|is better)|would it|will it|can i|could i|"
                  r"i('m| am) (planning|thinking|considering|looking)|i (want|plan|intend|hope) to|we (plan|want) to|"
                  r"planning to)\b", re.IGNORECASE)
# --- a user's own failure -------------------------------------------------------------------------------------------
_FIRST_PERSON = re.compile(r"\b(i|we)\s+(tried|try|ran|run|got|get|getting|see|saw|seeing|hit|hitting|encountered|"
                           r"noticed|observed|was|were|have been|had|started|launched|installed|followed|built|"
                           r"followed|used|deployed|can't|cannot|could not|couldn't|keep|kept)\b|"
                           r"\b(i'm|i am|we're|we are) (getting|seeing|hitting|running|trying|unable)\b|"
                           r"\bwhen i\b|\bmy (spark|gx10|machine|unit|box|node|server|setup|system|container|run|job|"
                           r"model|gpu|cluster|dgx)\b", re.IGNORECASE)
# a bug-report template's own sections (GitHub / GitLab issue forms): the text is a report of a failure by its form
_BUG_FORM = re.compile(r"^\s*(#{1,4}\s*|\*\*)?(describe the bug|bug description|steps to reproduce|to reproduce|"
                       r"reproduction( steps)?|expected (behaviou?r|result)|actual (behaviou?r|result)|observed behaviou?r|"
                       r"what happened\??|current behaviou?r|error (message|log|output)s?)\s*(\*\*)?\s*:?", re.IGNORECASE)
_BUG_TITLE = re.compile(r"^\s*(\[bug\]|bug:|\[issue\])", re.IGNORECASE)
_LOG = re.compile(r"^\s*(Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|\w*(Error|Exception):|"
                  r"ERROR\b|WARNING\b|INFO\b|E\d{4} |\[rank\d+\]|NVRM: |\(EngineCore|\(APIServer|RuntimeError\b|"
                  r"\[\d{4}-\d\d-\d\d|\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\[\s*\d+\.\d+\]|\w+@[\w-]+:)")


@dataclass(frozen=True)
class Genre:
    """The genre of a text as this module reads it."""

    genre: str  # "pr" | "docs" | "writeup" | "question" | "" (none reached its bar)
    report: bool  # the first person tells a failure of their own, next to an error, a traceback or a log
    scores: dict[str, float]

    @property
    def not_a_report(self) -> bool:
        """Another genre, and no first-person failure of the user's own."""
        return bool(self.genre) and not self.report


BARS = {"pr": 2.0, "docs": 3.0, "writeup": 3.0, "question": 1.0}


def scores(lines: Sequence[str]) -> dict[str, float]:
    """Per genre, how much of its structure the text shows (counts, a few capped)."""
    title = lines[0] if lines else ""
    pr = (2.0 * any(_PR_SELF.search(ln) for ln in lines) + sum(bool(_PR_SECTION.match(ln)) for ln in lines)
          + min(sum(bool(_CHECKBOX.match(ln)) for ln in lines), 2) + 2.0 * any(_CLOSES.search(ln) for ln in lines)
          + 1.0 * bool(_PR_TITLE.match(title)))
    docs = (min(sum(bool(_MD_HEADING.match(ln)) for ln in lines), 3) + 2.0 * sum(bool(_DOC_SECTION.match(ln)) for ln in lines)
            + min(sum(bool(_STEP.match(ln)) for ln in lines), 3) + min(sum(bool(_IMPERATIVE.match(ln)) for ln in lines), 3)
            + min(sum(bool(_YOU.search(ln)) for ln in lines), 2))
    writeup = (min(sum(bool(_NUM_ROW.match(ln)) for ln in lines), 4) + min(sum(bool(_COMPARE.search(ln)) for ln in lines), 3))
    question = 2.0 * title.rstrip().endswith("?") + min(sum(bool(_ASK.search(ln)) for ln in lines), 2)
    return {"pr": pr, "docs": docs, "writeup": writeup, "question": question}


def genre(lines: Sequence[str], roles: Sequence[str]) -> Genre:
    """The text's genre and whether it is a user's own failure report (see the module doc)."""
    s = scores(lines)
    over = [(s[g] / BARS[g], g) for g in GENRES if s[g] >= BARS[g]]
    best = max(over)[1] if over else ""
    first = any(_FIRST_PERSON.search(ln) for ln in lines) or any(_BUG_FORM.match(ln) for ln in lines) \
        or bool(lines and _BUG_TITLE.match(lines[0]))
    error = any(r == FAILURE for r in roles) or any(_LOG.match(ln) for ln in lines)
    return Genre(genre=best, report=first and error, scores=s)
