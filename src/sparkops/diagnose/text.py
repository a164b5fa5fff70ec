"""Read what the user pasted or piped: bounded, decoded, ANSI-free, every line keeping its number.

Logs put the error at the end, so a huge input keeps its head *and* its tail (the middle is skipped
and the notes say which lines); line numbers always refer to the input as given. Reading never
raises on content: undecodable bytes become U+FFFD, control characters are dropped, a terminal's
carriage-return overwrites (progress bars) keep what the terminal showed last.
"""

from __future__ import annotations

import re
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

# CSI (colours, cursor moves), OSC (titles, hyperlinks; BEL or ST terminated) and two-byte escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
# Control characters other than tab; U+FFFD stays (it marks bytes that were not text).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Markdown emphasis and code-span markers in pasted issue text ("is **not**", "`torch.version.cuda` is `None`"):
# not part of any message, and they would split the phrases the symptom patterns read.
_MARKDOWN = re.compile(r"\*\*|`")
_CHUNK = 1 << 16


@dataclass(frozen=True)
class Limits:
    """How much of one input is read. Numbers are data: the defaults come from symptoms.yaml."""

    head_bytes: int = 2_000_000
    tail_bytes: int = 2_000_000
    head_lines: int = 20_000
    tail_lines: int = 20_000
    max_line_chars: int = 4_000  # a longer line is cut (its start kept) before matching
    max_read_bytes: int = 256_000_000  # stop reading a stream after this much (tail then ends there)


@dataclass(frozen=True)
class InputText:
    """One input, normalised. ``numbers[i]`` is the 1-based input line of ``lines[i]``."""

    source: str
    lines: tuple[str, ...] = ()
    numbers: tuple[int, ...] = ()
    total_lines: int = 0
    truncated: bool = False
    notes: tuple[str, ...] = ()
    error: str | None = None
    _text: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The kept lines joined by newlines (what the patterns run over)."""
        if not self._text:
            self._text.append("\n".join(self.lines))
        return self._text[0]


def normalise_line(line: str) -> str:
    """One physical line as a terminal showed it: ANSI escapes and control characters removed,
    a carriage-return overwrite reduced to its last non-empty segment, trailing space dropped;
    as a reader sees pasted Markdown: ``**`` and backticks dropped (the words stay)."""
    if "\x1b" in line or "\x9b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if _CONTROL.search(line):
        line = _CONTROL.sub("", line)
    if "`" in line or "**" in line:
        line = _MARKDOWN.sub("", line)
    return line.rstrip()


class _Bounded:
    """Keeps the first lines up to the head budget and a rolling window of the last ones."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.head: list[tuple[int, str]] = []
        self.head_size = 0
        self.head_full = False
        self.tail: deque[tuple[int, str, int]] = deque()
        self.tail_size = 0
        self.count = 0
        self.cut_lines = 0

    def add(self, raw: str, cut: bool = False) -> None:
        """One physical line; ``cut`` says the reader already dropped its end."""
        self.count += 1
        lim = self.limits
        if len(raw) > lim.max_line_chars:
            raw = raw[: lim.max_line_chars]
            cut = True
        self.cut_lines += cut
        line = normalise_line(raw)
        size = len(raw) + 1  # what is kept counts against the budget, not what was skipped
        if not self.head_full:
            if self.head_size + size <= lim.head_bytes and len(self.head) < lim.head_lines:
                self.head.append((self.count, line))
                self.head_size += size
                return
            self.head_full = True
        self.tail.append((self.count, line, size))
        self.tail_size += size
        while self.tail and (self.tail_size > lim.tail_bytes or len(self.tail) > lim.tail_lines):
            _n, _l, s = self.tail.popleft()
            self.tail_size -= s

    def result(self, source: str, stopped_at: int | None = None, binary: bool = False) -> InputText:
        kept = self.head + [(n, line) for n, line, _s in self.tail]
        notes: list[str] = []
        skipped_from = self.head[-1][0] + 1 if self.head else 1
        skipped_to = self.tail[0][0] - 1 if self.tail else self.count
        truncated = skipped_to >= skipped_from or stopped_at is not None
        if skipped_to >= skipped_from:
            notes.append(f"input truncated: read lines 1-{skipped_from - 1} and {skipped_to + 1}-{self.count} "
                         f"of {self.count}; lines {skipped_from}-{skipped_to} were skipped")
        if stopped_at is not None:
            notes.append(f"input truncated: stopped reading after {stopped_at // 1_000_000} MB "
                         f"(line {self.count}); anything later was not read")
        if self.cut_lines:
            notes.append(f"{self.cut_lines} line(s) longer than {self.limits.max_line_chars} characters "
                         "were cut to their start")
        if binary:
            notes.append("the input looks binary (mostly non-text bytes); only its text-like parts can match")
        return InputText(source=source, lines=tuple(line for _n, line in kept),
                         numbers=tuple(n for n, _l in kept), total_lines=self.count,
                         truncated=truncated, notes=tuple(notes))


def _looks_binary(sample: bytes) -> bool:
    if not sample:
        return False
    if b"\x00" in sample[:8192]:
        return True
    text = sample[:8192].decode("utf-8", errors="replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\x1b"))
    return bad > len(text) * 0.3


def from_text(text: str, source: str = "-", limits: Limits | None = None) -> InputText:
    """An in-memory text (library callers, ``watch``). Sizes are counted in characters."""
    acc = _Bounded(limits or Limits())
    for raw in text.split("\n"):
        acc.add(raw)
    return acc.result(source, binary=_looks_binary(text[:8192].encode("utf-8", errors="replace")))


def _byte_lines(stream: BinaryIO, limits: Limits) -> Iterator[tuple[bytes, bool] | int]:
    """Physical lines as (bytes, was_cut); a line longer than the cut keeps its start only. Yields
    the number of bytes read (an int) last when the read cap stopped it early."""
    cap = max(limits.max_line_chars * 4, 1024)  # bytes: up to 4 per character in UTF-8
    partial = bytearray()
    partial_size = 0
    total = 0
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if len(partial) < cap:
                partial += piece[: cap - len(partial)]
            partial_size += len(piece)
            if nl < 0:
                break
            yield bytes(partial), partial_size > cap
            partial.clear()
            partial_size = 0
            start = nl + 1
        if total >= limits.max_read_bytes:
            if partial_size:
                yield bytes(partial), partial_size > cap
            yield total
            return
    yield bytes(partial), partial_size > cap  # the last line (empty when the input ended with a newline)


def read_stream(stream: BinaryIO, source: str = "-", limits: Limits | None = None) -> InputText:
    """Read a binary stream (a file, stdin) line by line within the limits."""
    lim = limits or Limits()
    acc = _Bounded(lim)
    stopped: int | None = None
    first: bytes | None = None
    for item in _byte_lines(stream, lim):
        if isinstance(item, int):
            stopped = item
            break
        raw, cut = item
        if first is None or len(first) < 8192:
            first = (first or b"") + raw[:8192] + b"\n"
        acc.add(raw.decode("utf-8", errors="replace"), cut)
    return acc.result(source, stopped_at=stopped, binary=_looks_binary(first or b""))


def read_input(path: str, limits: Limits | None = None, stdin: BinaryIO | None = None) -> InputText:
    """``path`` read within the limits; ``-`` is standard input. An unreadable input comes back with
    ``error`` set (never an exception): the caller reports it and carries on with the others."""
    if path == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        try:
            return read_stream(stream, "-", limits)
        except OSError as exc:
            return InputText(source="-", error=f"cannot read standard input: {exc.strerror or exc}")
    p = Path(path)
    try:
        if p.is_dir():
            return InputText(source=path, error=f"cannot read {path}: it is a directory")
        with p.open("rb") as fh:
            return read_stream(fh, path, limits)
    except FileNotFoundError:
        return InputText(source=path, error=f"cannot read {path}: no such file")
    except PermissionError:
        return InputText(source=path, error=f"cannot read {path}: permission denied")
    except OSError as exc:
        return InputText(source=path, error=f"cannot read {path}: {exc.strerror or exc}")


def excerpt(line: str, start: int, end: int, width: int = 240) -> str:
    """``line`` shortened to about ``width`` characters around [start, end) (evidence stays readable)."""
    if len(line) <= width:
        return line
    span = end - start
    left = max(0, start - max(20, (width - span) // 2))
    right = min(len(line), max(end, left + width))
    left = max(0, min(left, right - width))
    return ("…" if left else "") + line[left:right] + ("…" if right < len(line) else "")


def line_starts(lines: Iterable[str]) -> list[int]:
    """Offsets in ``"\\n".join(lines)`` where each line starts (to map a match back to its line)."""
    starts: list[int] = []
    pos = 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    return starts
