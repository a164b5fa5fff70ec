"""Read a report the way an expert does: which lines say what went wrong, which only set the scene.

Pure functions over the kept lines of one input (no knowledge file, no I/O), used by the matcher to weigh a
pattern's evidence by where it stands (issue 18):

- ``failure``  a line that reports something going wrong: an error or exception, a traceback line, an exit
               status, a kernel/driver complaint, or the reporter saying it failed, hung, slowed or crashed;
- ``quoted``   a line that repeats someone else's words: a Markdown quote (``> ...``) or the added/removed
               lines of a pasted diff (documentation or code under review, not this user's failure);
- ``context``  a line that describes the setup: a shell command or flag line, an environment variable,
               a ``key: value`` bullet or a table row of a configuration, a ``collect_env`` field;
- ``plain``    any other prose.

``negated(line, start)`` says whether a match starting at ``start`` sits right after a negation in its own
clause ("no OOM", "did not hang", "without any throttling"), so it is evidence of absence, not of presence.

Everything here is deliberately shallow (a few regexes per line, linear in the input): it must stay cheap on a
200 MB log and must never raise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

FAILURE, QUOTED, CONTEXT, PLAIN = "failure", "quoted", "context", "plain"
ROLES = (FAILURE, QUOTED, CONTEXT, PLAIN)

_FAILURE = re.compile(
    r"(\w(error|exception)\b|\bno (available|free|usable) |\binsufficient\b|\bnot enough\b|\bno space\b)|"
    r"\b(error|errors|exception|traceback|fatal|panic|segfault|segmentation fault|abort(ed)?|"
    r"fail(s|ed|ing|ure|ures)?|crash(es|ed|ing)?|hang(s|ing)?|hung|stuck|freez(es|ing)|froze(n)?|wedge[sd]?|"
    r"timed? ?out|timeout|oom|out of memory|killed|nv_err_\w+|xid \d+|refus(es|ed|ing)|unable to|cannot|can't|"
    r"could not|couldn't|does(n't| not) work|did(n't| not) work|won't|not supported|unsupported|"
    r"no kernel image|undefined symbol|no such file|not found|slow(er|ly|down|s)?|throttl\w*|degrad\w*|"
    r"dropp?(ed|s) to|only (reaches|gets|manages|hits|about|around)|reboot(s|ed)?|power(s|ed)? off|shut(s)? ?down|"
    r"exit(ed)? (code|status) [1-9]|returned non-zero|broken|regress\w*|deadlock\w*|spin-?wait)\b",
    re.IGNORECASE,
)
_QUOTE = re.compile(r"^\s{0,3}>")
_DIFF = re.compile(r"^[+-](?![+-])\S?")
_CONTEXT = re.compile(
    r"^\s*(\$ |# ?\$ |sudo |docker |podman |pip3? |uv |python3? -m |vllm serve|sglang|trtllm-serve|export \w+=|"
    r"--[a-z][\w-]*|[A-Z][A-Z0-9_]{2,}=|(- |\* |• )?[A-Za-z][\w ./()-]{0,40}:\s+\S|\|)"
)
_NEGATION = re.compile(  # a negation at most two words before the match, in the same clause
    r"(?:\b(?:no|not|without|never|zero|nor)|n't)\W+(?:[\w/.+-]+[ \t]+){0,2}$", re.IGNORECASE)
# "no available memory", "no kernel image", "no space left": a missing resource is the failure itself
_LACK = re.compile(r"(available|free|space|room|headroom|memory|kernel|device|gpus?|cuda|more|enough|such|"
                   r"valid|supported|usable|progress|response|output)\b", re.IGNORECASE)
_PROSE = re.compile(r"\b(the|my|our|its|is|was|are|were|it|this|that|but|when|after|brings|makes|fixes|works)\b",
                    re.IGNORECASE)
_COMMAND_START = re.compile(r"^\s*(sudo|docker|podman|pip3?|uv|python3?|vllm|sglang|trtllm-serve)\b")
_NEG_REACH = 40  # characters looked back from a match for a negation in the same clause
# a failure word in the hypothetical mood ("can fail", "may crash", "could also OOM", "might hang"): a warning or a
# possibility (documentation, a PR description, advice), not this report's failure
_MODAL = re.compile(r"\b(can|may|might|could)\W+(?:(?:also|still|even|easily|sometimes|then|"
                    r"potentially|eventually|quickly)\W+)?$", re.IGNORECASE)


def line_role(line: str, in_diff: bool = False) -> str:
    """The role of one line (see the module doc). ``in_diff``: the input is a pasted diff."""
    if _QUOTE.match(line) or (in_diff and _DIFF.match(line)):
        return QUOTED
    if any(not _MODAL.search(line[max(0, m.start() - 30):m.start()]) for m in _FAILURE.finditer(line)):
        return FAILURE  # (a failure word only in the hypothetical mood, "can fail", does not make a failure line)
    if _CONTEXT.match(line) and not (_COMMAND_START.match(line) and _PROSE.search(line)):
        return CONTEXT  # (a sentence that merely starts with a command word is prose)
    return PLAIN


def looks_like_diff(lines: Sequence[str]) -> bool:
    """A pasted diff: a ``diff`` fence or hunk header, or several lines opened by a lone ``+``."""
    plus = 0
    for ln in lines:
        if ln.startswith(("```diff", "@@ ", "diff --git")):
            return True
        if ln.startswith("+") and not ln.startswith("++"):
            plus += 1
            if plus >= 3:
                return True
    return False


def line_roles(lines: Sequence[str]) -> tuple[str, ...]:
    """The role of every line, in order."""
    diff = looks_like_diff(lines)
    return tuple(line_role(ln, diff) for ln in lines)


def negated(line: str, start: int) -> bool:
    """Is a match starting at ``start`` in ``line`` negated within its clause ("no OOM", "did not hang")?
    A missing resource ("no available memory", "no kernel image") is not a negation: it is the failure."""
    if start <= 0:
        return False
    before = line[max(0, start - _NEG_REACH):start]
    if not _NEGATION.search(before):
        return False
    return not _LACK.match(line, start)


def reports_failure(roles: Sequence[str]) -> bool:
    """Does the input report anything going wrong at all (one failure line is enough)?"""
    return FAILURE in roles
