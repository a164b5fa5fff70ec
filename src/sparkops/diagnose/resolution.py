"""What the reporter says resolved it, read against the ten gotchas' own fixes (issue 18, round 18t: experiment).

A report often tells what made the problem go away ("fixed by pinning SGLANG_HOST_IP", "the fix was
--enforce-eager", "solved after reinstalling the cu130 wheel", "workaround: drop_caches"). Such a line is a
RESOLUTION line. Its words are compared with each gotcha's fix texts (``knowledge/gotchas.yaml``: the gotcha's
``fix`` and its sub-codes' ``fix`` templates): a resolution whose fix words point to one gotcha is evidence for
it; a resolution that points to none of the ten is evidence that the cause was something else.

Pure functions over the kept lines (no I/O except ``catalog_fixes``); shallow regexes, never raises.

- ``resolution_units(lines)``: the lines that tell a resolution (a line that only opens one, "Workaround:", is
  read with the next non-empty line); a denied or hoped-for resolution ("did not fix it",
  "should fix", "may help") is not one.
- ``fix_weights(fixes)``: per gotcha, the weight of each of its fix words (not the words that tell a resolution,
  "fix", "workaround", "helped"): log(10 / how many of the ten fixes use
  the word); a word in every fix weighs nothing.
- ``fix_match(line, weights)``: per gotcha, the weight of the line's fix words that stand in that gotcha's fix.
- ``resolution_features(lines, weights, bar)``: per gotcha, the best lead of a resolution line toward its fix over
  the other nine (share of the line's fix-word weight in its fix minus the best other share), and whether some
  resolution line matches none of the ten (its best match under ``bar``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

from sparkops.diagnose.reading import negated

# the phrasing of a resolution in general (not any report's words): something fixed, solved, resolved or worked
# around it; the fix / solution / workaround is or was ...; it works (again, now) after / once / with ...; what
# helped; ... did the trick
_RESOLUTION = re.compile(
    r"\b(fixed|fixes|solved|solves|resolved|resolves|cured)\b(?=\W+(by|with|via|after|it|this|that|the|my|for|"
    r"when|once|using|in)\b)|"
    r"\b(fixed|solved|resolved) (it|this|the (issue|problem|error|crash|hang))\b|"
    r"\b(the|a|my|our|one|possible|temporary|quick|simple|only) (fix|solution|workaround|cure|remedy|resolution|"
    r"trick|way around)\b(?=\W+(is|was|for|here|that|:|-|—|=))|"
    r"^\W*(fix|fixes|fixed|solution|workaround|resolution|resolved|solved|update|edit)\s*[:—-]|"
    r"\bas a workaround\b|\bwork(ed|s|ing)? ?around (it|this|that|the)\b|"
    r"\b(works?|worked|working|runs?|ran|running|loads?|loaded|starts?|started)\b( \w+){0,2} "
    r"(now|again|fine|properly|correctly)\b( \w+){0,3} (after|once|with|by|when)\b|"
    r"\b(works?|worked|runs?|ran) (after|once)\b|"
    r"\b(got|get|getting) (it|this|that|everything|things) (to work|working|running|to run|to load)\b|"
    r"\bwhat (helped|fixed it|worked|solved it)\b|\b(this|that|which) (helped|fixed it|solved it|did the trick)\b|"
    r"\bdid the trick\b|\bno longer (crash|hang|fail|oom|error|happen)\w*\b.{0,40}\b(after|once|with|since)\b",
    re.IGNORECASE,
)
# a resolution hoped for or denied: "should fix", "may help", "did not fix it", "not fixed", "still fails after"
_HOPED = re.compile(r"\b(should|would|could|may|might|will|to|hopefully|probably|try to)\W+(?:\w+\W+)?$",
                    re.IGNORECASE)
# a resolution line "matches" a gotcha's fix when its fix words there weigh at least one word used by at most three of
# the ten fixes (log(10 / 3)); fixed before any run (round 18t, variant B)
BAR = math.log(10 / 3)
_OPENS = re.compile(r"[:—-]\s*$")  # a line that only opens the resolution ("Workaround:")

# words that carry no fix: function words, the catalog's template placeholders, and words of every fix text
_STOP_WORDS = (
    "a an the and or of to in on at by for from with without as is are be been was were it its this that these those "
    "then than not no only when where which what who how if unless before after between into onto over under per "
    "you your their there here do does did can could should would may might must will just also any each every some "
    "all one two e.g eg use using used re run")
# the words that tell a resolution are no fix: "the fix is", "workaround", "it helped", "solved the problem"
_RESOLUTION_WORDS = ("fix fixed fixes fixing workaround workarounds solution solve solved resolve resolved resolution "
                     "help helped helps work works worked working trick problem problems issue issues error errors")
_STOP = frozenset(_STOP_WORDS.split()) | frozenset(_RESOLUTION_WORDS.split())
_WORD = re.compile(r"[a-z_][a-z0-9_.]*[a-z0-9_]|[a-z]")
_PLACEHOLDER = re.compile(r"\{[^}]*\}")


def _stem(w: str) -> str:
    """A crude stem, enough to meet "pinning" with "pin" and "reinstalled" with "reinstall"."""
    for suf, keep in (("ing", 4), ("ed", 4), ("es", 4), ("s", 4)):
        if w.endswith(suf) and len(w) - len(suf) >= keep:
            w = w[: -len(suf)]
            break
    if len(w) >= 4 and w[-1] == w[-2] and w[-1] not in "sl":  # pinn -> pin, stopp -> stop
        w = w[:-1]
    return w


def words(text: str) -> frozenset[str]:
    """The distinct stemmed content words of a text (lower-case; placeholders and function words dropped)."""
    text = _PLACEHOLDER.sub(" ", text.lower())
    return frozenset(_stem(w) for w in _WORD.findall(text) if w not in _STOP and len(w) >= 2)


def resolution_units(lines: Sequence[str]) -> list[tuple[int, str]]:
    """(index, text) of each resolution the lines tell (see the module doc), in order: a line that only opens one
    ("Workaround:") is read together with the next non-empty line."""
    out: list[tuple[int, str]] = []
    for i, ln in enumerate(lines):
        told = [m for m in _RESOLUTION.finditer(ln)
                if not negated(ln, m.start()) and not _HOPED.search(ln[max(0, m.start() - 30):m.start()])]
        if not told:
            continue
        text = ln
        if _OPENS.search(ln):  # "Workaround:" -> the next non-empty line holds it
            nxt = next((lines[j] for j in range(i + 1, min(i + 4, len(lines))) if lines[j].strip()), "")
            text = ln + " " + nxt
        out.append((i, text))
    return out


def resolution_lines(lines: Sequence[str]) -> list[int]:
    """Indexes of the lines that tell a resolution."""
    return [i for i, _t in resolution_units(lines)]


def fix_weights(fixes: Mapping[str, Iterable[str]]) -> dict[str, dict[str, float]]:
    """Per gotcha, each of its fix words' weight: log(n / the number of the n gotchas whose fixes use it)."""
    vocab = {g: frozenset().union(*(words(t) for t in texts)) for g, texts in fixes.items()}
    n = len(vocab)
    df: dict[str, int] = {}
    for ws in vocab.values():
        for w in ws:
            df[w] = df.get(w, 0) + 1
    return {g: {w: math.log(n / df[w]) for w in ws if df[w] < n} for g, ws in vocab.items()}


def fix_match(line: str, weights: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Per gotcha, the summed weight of the line's words that stand in that gotcha's fix texts."""
    ws = words(line)
    return {g: sum(v for w, v in fw.items() if w in ws) for g, fw in weights.items()}


def resolution_features(lines: Sequence[str], weights: Mapping[str, Mapping[str, float]],
                        bar: float) -> tuple[dict[str, float], bool, int]:
    """(per gotcha: the best lead of a resolution line toward its fix, in [-1, 1]; whether some resolution line
    matches no gotcha's fix (its best match weighs under ``bar``); how many resolution lines)."""
    units = resolution_units(lines)
    lead = dict.fromkeys(weights, 0.0)
    unmatched = False
    seen = dict.fromkeys(weights, False)
    for _i, text in units:
        m = fix_match(text, weights)
        total = sum(m.values())
        if max(m.values(), default=0.0) < bar:
            unmatched = True
        if total <= 0:
            continue
        share = {g: v / total for g, v in m.items()}
        for g in weights:
            other = max((s for h, s in share.items() if h != g), default=0.0)
            v = share[g] - other
            lead[g] = v if not seen[g] else max(lead[g], v)
            seen[g] = True
    return lead, unmatched, len(units)


def catalog_fixes() -> dict[str, list[str]]:
    """The ten gotchas' fix texts from the packaged catalog: each gotcha's ``fix`` and its sub-codes' ``fix``."""
    from sparkops.knowledge import load

    out = {}
    for gid, g in load().gotchas.items():
        if gid.startswith("G"):
            out[gid] = [g.fix] + [c.fix for c in g.codes.values() if c.fix]
    return out
