"""Read what the user pasted or piped: bounded, decoded, ANSI-free, every line keeping its number.

Logs put the error at the end, so a huge input keeps its head *and* its tail (the middle is skipped
and the notes say which lines); line numbers always refer to the input as given. Reading never
raises on content: undecodable bytes become U+FFFD, control characters are dropped, a terminal's
carriage-return overwrites (progress bars) keep what the terminal showed last.
"""

from __future__ import annotations

import os
import re
import select
import stat
import sys
import time
from collections import deque
from collections.abc import Iterable
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
_CHUNK = 1 << 20  # one read; the head is split into lines, the tail only counted


@dataclass(frozen=True)
class Limits:
    """How much of one input is read. Numbers are data: the defaults come from symptoms.yaml."""

    head_bytes: int = 2_000_000
    tail_bytes: int = 2_000_000
    head_lines: int = 20_000
    tail_lines: int = 20_000
    max_line_chars: int = 4_000  # a longer line is cut (its start kept) before matching
    # Kept for symptoms.yaml's schema; no longer stops reading: a stream's tail is kept by a ring
    # buffer and a regular file's by seeking, so the error at the end of a huge log is always read.
    max_read_bytes: int = 256_000_000
    read_timeout_s: float = 60.0  # a pipe, FIFO or terminal is read for at most this long
    count_budget_s: float = 2.0  # counting the skipped middle of a big file (exact line numbers); past it, estimated
    count_max_bytes: int = 64 << 20  # ...and at most this many of its bytes (symptoms.yaml); past them, estimated


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
    binary: bool = False  # mostly non-text bytes: not a log (read_input refuses it)
    timed_out: bool = False  # a pipe/FIFO/terminal read stopped at its time bound
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

    def result(self, source: str, binary: bool = False, extra_notes: Iterable[str] = (),
               estimated_from: int | None = None, timed_out: bool = False, estimate_why: str = "") -> InputText:
        kept = self.head + [(n, line) for n, line, _s in self.tail]
        notes: list[str] = []
        skipped_from = self.head[-1][0] + 1 if self.head else 1
        skipped_to = self.tail[0][0] - 1 if self.tail else self.count
        truncated = skipped_to >= skipped_from or timed_out
        approx = "about " if estimated_from is not None else ""
        if skipped_to >= skipped_from:
            notes.append(f"input truncated: read lines 1-{skipped_from - 1} and {approx}{skipped_to + 1}-{self.count} "
                         f"of {approx}{self.count}; lines {skipped_from}-{skipped_to} were skipped")
        if estimated_from is not None:
            notes.append(f"line numbers from {estimated_from} on are estimates: {estimate_why or 'the skipped middle was not counted'}")
        notes += extra_notes
        if self.cut_lines:
            notes.append(f"{self.cut_lines} line(s) longer than {self.limits.max_line_chars} characters "
                         "were cut to their start")
        if binary:
            notes.append("the input looks binary (mostly non-text bytes); only its text-like parts can match")
        return InputText(source=source, lines=tuple(line for _n, line in kept),
                         numbers=tuple(n for n, _l in kept), total_lines=self.count,
                         truncated=truncated, notes=tuple(notes), binary=binary, timed_out=timed_out)


_SAMPLE = 8192


def _looks_binary(sample: bytes) -> bool:
    """Mostly non-text: more than 30 % NULs, control bytes or invalid UTF-8 (a log with a few NULs
    from a crash, or some mojibake, is still a log)."""
    if not sample:
        return False
    text = sample[:_SAMPLE].decode("utf-8", errors="replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or (ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c"))
    return bad > len(text) * 0.3


def from_text(text: str, source: str = "-", limits: Limits | None = None) -> InputText:
    """An in-memory text (library callers, ``watch``). Sizes are counted in characters."""
    acc = _Bounded(limits or Limits())
    for raw in text.split("\n"):
        acc.add(raw)
    return acc.result(source, binary=_looks_binary(text[:_SAMPLE].encode("utf-8", errors="replace")))


# --------------------------------------------------------------------------- byte sources
class _Source:
    """Chunks of one input. ``read`` returns b"" at the end, or when the time bound passed (then
    ``timed_out`` is set). A regular file can also seek (``size`` is known, else None)."""

    timed_out = False
    size: int | None = None

    def read(self, n: int) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def seek(self, pos: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class _StreamSource(_Source):
    """A file-like object without a usable descriptor (library callers, tests): no time bound."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def read(self, n: int) -> bytes:
        return self.stream.read(n) or b""


class _FdSource(_Source):
    """A descriptor. Regular files read directly (and seek); anything else (pipe, FIFO, terminal,
    socket) waits with ``poll`` against one deadline, so a writer that never comes or never stops
    cannot hold the command."""

    def __init__(self, fd: int, timeout_s: float) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.regular = stat.S_ISREG(st.st_mode)
        self.size = st.st_size if self.regular else None
        self.deadline = time.monotonic() + timeout_s
        self.poller = None
        if not self.regular:
            self.poller = select.poll()
            self.poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def read(self, n: int) -> bytes:
        if self.poller is not None:
            while True:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self.timed_out = True
                    return b""
                if self.poller.poll(min(left, 1.0) * 1000):
                    break
        try:
            return os.read(self.fd, n)
        except BlockingIOError:  # a FIFO opened non-blocking with nothing written yet
            return self.read(n) if not self.timed_out else b""
        except InterruptedError:
            return self.read(n)

    def seek(self, pos: int) -> None:
        os.lseek(self.fd, pos, os.SEEK_SET)


class _Reader:
    """Read one input: the head line by line, then only the tail, at C speed.

    Once the head budget is full, nothing more is split into lines until the end: a regular file
    seeks to its last bytes (counting the newlines it skipped, in a time budget, so line numbers
    stay exact), a stream keeps its last bytes in a ring of chunks. Memory stays about
    head + tail + one chunk whatever the input's size."""

    def __init__(self, src: _Source, limits: Limits) -> None:
        self.src, self.lim = src, limits
        self.acc = _Bounded(limits)
        self.cap = max(limits.max_line_chars * 4, 1024)  # bytes of one line kept: up to 4 per character
        self.keep = limits.tail_bytes + self.cap  # ring size: enough bytes for the tail budget
        self.head_sample = bytearray()
        self.tail_sample = b""
        self.bytes_read = 0
        self.estimated_from: int | None = None
        self.estimate_why = ""
        self.ranges_note = ""  # a regular file read by seeking: which byte ranges were read

    def run(self, source: str) -> InputText:
        rest = self._head()
        if rest is not None:
            self._tail(rest)
        binary = _looks_binary(bytes(self.head_sample)) and (not self.tail_sample or _looks_binary(self.tail_sample))
        notes = [self.ranges_note] if self.ranges_note else []
        if self.src.timed_out:
            notes.append(f"input timed out after {self.lim.read_timeout_s:g} s: diagnosed the "
                         f"{self.bytes_read} bytes read by then")
        return self.acc.result(source, binary=binary, extra_notes=notes, estimated_from=self.estimated_from,
                               timed_out=self.src.timed_out, estimate_why=self.estimate_why)

    def _chunk(self) -> bytes:
        data = self.src.read(_CHUNK)
        self.bytes_read += len(data)
        return data

    def _head(self) -> bytes | None:
        """Lines into the accumulator until the head is full. Returns the bytes after the line that
        filled it (None when the input ended first)."""
        partial = bytearray()
        partial_size = 0
        while True:
            chunk = self._chunk()
            if not chunk:
                self._line(bytes(partial), partial_size)  # the last line (empty after a final newline)
                return None
            if len(self.head_sample) < _SAMPLE:
                self.head_sample += chunk[: _SAMPLE - len(self.head_sample)]
            start = 0
            while True:
                nl = chunk.find(b"\n", start)
                piece = chunk[start:] if nl < 0 else chunk[start:nl]
                if len(partial) < self.cap:
                    partial += piece[: self.cap - len(partial)]
                partial_size += len(piece)
                if nl < 0:
                    break
                self._line(bytes(partial), partial_size)
                partial.clear()
                partial_size = 0
                start = nl + 1
                if self.acc.head_full:
                    return chunk[start:]

    def _line(self, raw: bytes, size: int) -> None:
        self.acc.add(raw.decode("utf-8", errors="replace"), size > self.cap)

    def _tail(self, rest: bytes) -> None:
        line = self.acc.count + 1  # the line that starts at ``pos``, the first byte not yet split
        pos = self.bytes_read - len(rest)
        at_line_start = True  # whether ``pos`` starts a line
        ring: deque[bytes] = deque([rest] if rest else [])
        ring_size = len(rest)
        size = self.src.size
        if size is not None and size - self.bytes_read > self.keep + _CHUNK:
            # a regular file: count the newlines up to its tail (within the byte and time bounds), then seek there
            # and read only that
            tail_start = size - self.keep
            head_end = self.bytes_read
            before = rest.count(b"\n")  # newlines between the head's last split line and ``head_end``
            newlines, last = self._count_to(tail_start, before)
            counted = f"; bytes {head_end}-{self._counted_to} counted for newlines only" \
                if self._counted_to > head_end else ""
            self.ranges_note = (f"read bytes 0-{head_end} and {tail_start}-{size} of {size}{counted}"
                                + (f"; bytes {self._counted_to}-{tail_start} not read" if self._counted_to < tail_start
                                   else ""))
            line += before + newlines
            at_line_start = last == b"\n"
            ring.clear()
            ring_size = 0
            self.src.seek(tail_start)
            self.bytes_read = pos = tail_start
        while chunk := self._chunk():
            ring.append(chunk)
            ring_size += len(chunk)
            while ring and ring_size - len(ring[0]) >= self.keep:
                old = ring.popleft()
                ring_size -= len(old)
                pos += len(old)
                line += old.count(b"\n")
                at_line_start = old.endswith(b"\n")
        data = b"".join(ring)
        self.tail_sample = data[-_SAMPLE:]
        parts = data.split(b"\n")
        if not at_line_start and len(parts) > 1:
            parts = parts[1:]  # the kept bytes begin inside a line: drop that fragment
            line += 1
        self.acc.count = line - 1
        for raw in parts:
            self._line(raw[: self.cap], len(raw))

    _counted_to = 0

    def _count_to(self, end: int, before: int = 0) -> tuple[int, bytes]:
        """Newlines from the current position to ``end`` and the byte just before ``end``, read in
        chunks into one buffer, at most ``count_max_bytes`` of them and within ``count_budget_s``.
        Past either bound the rest is estimated from the density counted (or, with nothing counted,
        the head's); the notes say from which line on numbers are estimates and why (the last byte is
        then unknown). ``before``: newlines already seen after the head's last split line."""
        buf = bytearray(_COUNT_CHUNK)
        view = memoryview(buf)
        count = counted = 0
        start = self.bytes_read
        todo = end - start
        cap = min(todo, max(self.lim.count_max_bytes, 0))
        last = b""
        deadline = time.monotonic() + self.lim.count_budget_s
        fd = self.src.fd  # type: ignore[attr-defined] - only a regular file (an _FdSource) seeks
        why = ""
        while counted < todo:
            if counted >= cap:
                why = f"newlines were counted in the first {counted} of the {todo} skipped bytes (the count_max_bytes bound)"
                break
            n = os.readv(fd, [view[: min(_COUNT_CHUNK, cap - counted)]])
            if n <= 0:
                break
            count += buf.count(b"\n", 0, n)
            counted += n
            last = bytes(buf[n - 1:n])
            if counted < todo and time.monotonic() > deadline:
                why = (f"counting the skipped middle ran out of its {self.lim.count_budget_s:g} s budget after "
                       f"{counted} of its {todo} bytes")
                break
        self._counted_to = start + counted
        if not why:
            return count, last
        self.estimated_from = self.acc.count + before + count + 1
        # lines per byte: of what was counted, or (nothing counted) of the bytes read so far
        density = count / counted if counted else (self.acc.count + before) / max(start, 1)
        self.estimate_why = why + ", the rest estimated from the line density counted"
        return count + round(density * (todo - counted)), b""


_COUNT_CHUNK = 1 << 20


def read_stream(stream: BinaryIO, source: str = "-", limits: Limits | None = None,
                timeout_s: float | None = None) -> InputText:
    """Read a binary stream (a file, stdin) within the limits: the head, then the tail (seeking in
    a regular file, a ring buffer otherwise); a pipe, FIFO or terminal has a time bound."""
    lim = limits or Limits()
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    src: _Source = _FdSource(fd, timeout_s if timeout_s is not None else lim.read_timeout_s) \
        if fd is not None else _StreamSource(stream)
    return _Reader(src, lim).run(source)


def _binary_refusal(inp: InputText) -> InputText:
    if not inp.binary:
        return inp
    return InputText(source=inp.source, error=f"{inp.source} looks binary (mostly non-text bytes), not a log or "
                     "text: nothing diagnosed", binary=True)


def read_input(path: str, limits: Limits | None = None, stdin: BinaryIO | None = None) -> InputText:
    """``path`` read within the limits; ``-`` is standard input. An unreadable input comes back with
    ``error`` set (never an exception): the caller reports it and carries on with the others. So
    does binary input, and a pipe or FIFO that sent nothing before its time bound."""
    lim = limits or Limits()
    if path == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        try:
            inp = read_stream(stream, "-", lim)
        except OSError as exc:
            return InputText(source="-", error=f"cannot read standard input: {exc.strerror or exc}")
        return _timeout_refusal(_binary_refusal(inp), lim)
    p = Path(path)
    try:
        if p.is_dir():
            return InputText(source=path, error=f"cannot read {path}: it is a directory")
        # O_NONBLOCK: opening a FIFO must not wait for a writer (the read has its own time bound)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb", buffering=0) as fh:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.set_blocking(fd, True)
            inp = read_stream(fh, path, lim)
    except FileNotFoundError:
        return InputText(source=path, error=f"cannot read {path}: no such file")
    except PermissionError:
        return InputText(source=path, error=f"cannot read {path}: permission denied")
    except OSError as exc:
        return InputText(source=path, error=f"cannot read {path}: {exc.strerror or exc}")
    return _timeout_refusal(_binary_refusal(inp), lim)


def _timeout_refusal(inp: InputText, lim: Limits) -> InputText:
    """Nothing at all arrived before the time bound: that input could not be read."""
    if inp.timed_out and inp.total_lines <= 1 and not any(inp.lines):
        return InputText(source=inp.source, timed_out=True,
                         error=f"cannot read {inp.source}: nothing arrived within {lim.read_timeout_s:g} s "
                         "(a FIFO or pipe with no writer?)")
    return inp


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
