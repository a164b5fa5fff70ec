"""Hostile inputs to ``diagnose``: a huge log's tail is read by seeking (the error at the end is
found, with exact line numbers), a stream keeps its tail in a ring buffer, a FIFO or a silent pipe
is read within a time bound and the other inputs are still reported, binary input is said to be
binary (issue 17, items 4, 5 and 8)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.diagnose import diagnose_files, load_symptoms
from sparkops.diagnose import text as text_mod
from sparkops.diagnose.text import Limits, normalise_line, read_input, read_stream

ERROR = b"ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
TINY = Limits(head_bytes=300, tail_bytes=300, head_lines=4, tail_lines=6, max_line_chars=90,
              read_timeout_s=5.0)


def _big_log(path: Path, mb: int, last: bytes = ERROR) -> int:
    """``mb`` MB of harmless lines, then ``last``; returns the line number of ``last``."""
    row = b"step 1234 loss 1.2345 lr 2e-05 grad_norm 0.98 tokens/s 5123.4\n"
    n = mb * 1_000_000 // len(row)
    with path.open("wb") as fh:
        fh.write(row * n)
        fh.write(last + b"\n")
    return n + 1


def test_the_error_at_the_end_of_a_big_log_is_found_with_its_real_line_number(tmp_path):
    log = tmp_path / "train.log"
    line = _big_log(log, 12)
    kb = load_symptoms()
    [diag] = diagnose_files([str(log)], kb=kb)
    g1 = next(f for f in diag.findings if f.gotcha == "G1")
    assert any(e.line == line and "libcudart.so.12" in e.text for e in g1.evidence)
    note = next(n for n in diag.notes if n.startswith("input truncated"))
    assert f"of {line + 1}" in note  # the empty line after the final newline counts, as it always did


def test_a_big_file_is_read_by_seeking_not_split_line_by_line(tmp_path):
    log = tmp_path / "big.log"
    line = _big_log(log, 8)
    calls = []
    real = text_mod._Reader._line
    with mock.patch.object(text_mod._Reader, "_line", lambda self, raw, size: (calls.append(1), real(self, raw, size))):
        inp = read_input(str(log), TINY)
    assert len(calls) < 50  # the head, the tail and a few more: not the 130k lines in between
    assert inp.lines[-2] == ERROR.decode() and inp.numbers[-2] == line and inp.total_lines == line + 1


def test_count_budget_exhausted_gives_estimated_numbers_and_says_so(tmp_path):
    log = tmp_path / "big.log"
    line = _big_log(log, 8)
    lim = Limits(**{**TINY.__dict__, "count_budget_s": 0.0})
    inp = read_input(str(log), lim)
    assert inp.lines[-2] == ERROR.decode()
    assert any("are estimates" in n for n in inp.notes)
    assert abs(inp.numbers[-2] - line) < line * 0.05


def test_a_fifo_without_writer_times_out_and_the_other_inputs_are_still_reported(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    log = tmp_path / "ok.log"
    log.write_bytes(b"hello\n" + ERROR + b"\n")
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "sparkops", "diagnose", "--timeout", "1", str(fifo), str(log)],
                       capture_output=True, text=True, timeout=120)
    assert time.monotonic() - start < 30
    assert p.returncode == 3
    assert "nothing arrived within" in p.stderr and str(fifo) in p.stderr
    assert "G1" in p.stdout and str(log) in p.stdout


def test_a_fifo_whose_writer_stalls_is_diagnosed_up_to_the_time_bound(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = threading.Event()

    def writer():
        with open(fifo, "wb") as fh:
            fh.write(ERROR + b"\n")
            fh.flush()
            done.wait(10)  # keeps the FIFO open: never an end of file

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    lim = Limits(**{**TINY.__dict__, "read_timeout_s": 1.0})
    try:
        inp = read_input(str(fifo), lim)
    finally:
        done.set()
        t.join(5)
    assert inp.error is None and inp.timed_out
    assert inp.lines[0] == ERROR.decode()
    assert any("timed out after 1 s" in n for n in inp.notes)


def test_random_bytes_are_binary_not_a_confident_finding(tmp_path):
    f = tmp_path / "random.bin"
    f.write_bytes(os.urandom(200_000))
    [diag] = diagnose_files([str(f)])
    assert diag.error is not None and "binary" in diag.error and not diag.findings


def test_a_log_with_a_few_nul_bytes_is_still_a_log(tmp_path):
    f = tmp_path / "crashed.log"
    f.write_bytes(b"\x00" * 200 + b"\n" + (b"ordinary line of a training log\n" * 200) + ERROR + b"\n")
    [diag] = diagnose_files([str(f)])
    assert diag.error is None and any(x.gotcha == "G1" for x in diag.findings)


# ---- properties: with tiny chunks every path (head, ring, seek, count) runs on small inputs
_LINES = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                          max_size=120), min_size=0, max_size=120)


def _check(inp, raw_lines: list[bytes]) -> None:
    assert inp.total_lines == len(raw_lines)
    assert list(inp.numbers) == sorted(set(inp.numbers))
    assert inp.numbers[-1:] == (len(raw_lines),) or not inp.numbers
    for n, line in zip(inp.numbers, inp.lines, strict=True):
        raw = raw_lines[n - 1]
        if len(raw) <= TINY.max_line_chars * 4 and len(raw.decode("utf-8", "replace")) <= TINY.max_line_chars:
            assert line == normalise_line(raw.decode("utf-8", errors="replace"))


@settings(max_examples=120, deadline=None)
@given(lines=_LINES, chunk=st.sampled_from([7, 64, 1000]))
def test_any_file_read_by_seeking_keeps_exact_line_numbers(tmp_path_factory, lines, chunk):
    data = "\n".join(lines).encode()
    f = tmp_path_factory.mktemp("seek") / "f.log"
    f.write_bytes(data)
    with mock.patch.object(text_mod, "_CHUNK", chunk), mock.patch.object(text_mod, "_COUNT_CHUNK", chunk):
        inp = read_stream(f.open("rb", buffering=0), "f", TINY)
    _check(inp, data.split(b"\n"))


@settings(max_examples=120, deadline=None)
@given(lines=_LINES, chunk=st.sampled_from([7, 64, 1000]))
def test_any_stream_through_the_ring_buffer_keeps_exact_line_numbers(lines, chunk):
    data = "\n".join(lines).encode()
    with mock.patch.object(text_mod, "_CHUNK", chunk):
        inp = read_stream(io.BytesIO(data), "-", TINY)
    _check(inp, data.split(b"\n"))


# ---- issue 17, the speed goal: a big file is never read whole, and the matcher gets a bounded window
def test_past_count_max_bytes_the_middle_is_not_read_and_the_numbers_are_estimated(tmp_path):
    log = tmp_path / "big.log"
    line = _big_log(log, 8)
    size = log.stat().st_size
    lim = Limits(**{**TINY.__dict__, "count_max_bytes": 1_000_000})
    read = []
    real = os.readv
    with mock.patch.object(text_mod.os, "readv", lambda fd, bufs: read.append(real(fd, bufs)) or read[-1]):
        inp = read_input(str(log), lim)
    assert sum(read) <= lim.count_max_bytes  # the newline count stopped at its bound
    assert inp.lines[-2] == ERROR.decode() and abs(inp.numbers[-2] - line) < line * 0.01
    est = next(n for n in inp.notes if "are estimates" in n)
    assert f"counted in the first {sum(read)} of the" in est and "count_max_bytes" in est
    ranges = next(n for n in inp.notes if n.startswith("read bytes 0-"))
    assert f"of {size}" in ranges and "not read" in ranges and "counted for newlines only" in ranges


def test_within_count_max_bytes_the_numbers_are_exact_and_the_note_names_the_ranges(tmp_path):
    log = tmp_path / "big.log"
    line = _big_log(log, 8)
    size = log.stat().st_size
    inp = read_input(str(log), TINY)
    assert inp.numbers[-2] == line and not any("are estimates" in n for n in inp.notes)
    ranges = next(n for n in inp.notes if n.startswith("read bytes 0-"))
    assert ranges.endswith("counted for newlines only") and f"-{size} of {size}" in ranges


def test_the_packaged_window_bounds_what_the_matcher_reads(tmp_path):
    """symptoms.yaml's limits, whatever they are, bound the kept text of a big log; its last line is in it."""
    log = tmp_path / "train.log"
    line = _big_log(log, 12)
    lim = load_symptoms().text_limits
    inp = read_input(str(log), lim)
    assert len(inp.lines) <= lim.head_lines + lim.tail_lines
    assert len(inp.text) <= lim.head_bytes + lim.tail_bytes
    assert inp.numbers[-2] == line and inp.lines[-2] == ERROR.decode()
