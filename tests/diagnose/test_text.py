"""Reading inputs: bounded, decoded, ANSI-free, and every kept line still knows its input line number."""

from __future__ import annotations

import io
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.diagnose.text import Limits, excerpt, from_text, normalise_line, read_input, read_stream

SMALL = Limits(head_bytes=10_000, tail_bytes=10_000, head_lines=10, tail_lines=10, max_line_chars=200,
               max_read_bytes=1_000_000)


@pytest.mark.parametrize("raw,clean", [
    ("\x1b[31mRuntimeError\x1b[0m: CUDA error", "RuntimeError: CUDA error"),
    ("\x1b[1;33mWARNING\x1b[0m \x1b]8;;http://x\x07link\x1b]8;;\x07", "WARNING link"),
    ("Loading:  10%|#         | 1/10\rLoading: 100%|##########| 10/10", "Loading: 100%|##########| 10/10"),
    ("trailing carriage return\r", "trailing carriage return"),
    ("nul\x00byte and bell\x07", "nulbyte and bell"),
    ("tabs\tstay", "tabs\tstay"),
    ("   \r   ", ""),
    ("`gpu_memory_utilization` does **not** act as a hard bound", "gpu_memory_utilization does not act as a hard bound"),
    ("```bash", "bash"),
    ("    return f(*args, **kwargs)", "    return f(*args, kwargs)"),  # a stray ** costs nothing a pattern reads
])
def test_normalise_line(raw, clean):
    assert normalise_line(raw) == clean


def test_line_numbers_refer_to_the_input():
    inp = from_text("first\n\n\x1b[31mthird\x1b[0m\r\nfourth")
    assert inp.lines == ("first", "", "third", "fourth")
    assert inp.numbers == (1, 2, 3, 4)
    assert inp.total_lines == 4 and not inp.truncated


def test_huge_input_keeps_head_and_tail_and_says_so():
    text = "\n".join(f"line {i}" for i in range(1, 1001))
    inp = from_text(text, limits=SMALL)
    assert inp.truncated
    assert inp.numbers == tuple(range(1, 11)) + tuple(range(991, 1001))
    assert inp.lines[-1] == "line 1000" and inp.lines[10] == "line 991"
    assert any("lines 11-990 were skipped" in n for n in inp.notes)


def test_a_stream_past_the_old_read_cap_is_read_to_its_end_and_keeps_its_tail():
    """max_read_bytes used to stop a stream there (the error at the end was never read)."""
    lim = Limits(head_bytes=1000, tail_bytes=1000, head_lines=5, tail_lines=5, max_line_chars=200,
                 max_read_bytes=200_000)
    data = b"".join(b"row %06d\n" % i for i in range(100_000)) + b"RuntimeError: the end\n"  # ~1.1 MB
    inp = read_stream(io.BytesIO(data), "big.log", lim)
    assert inp.truncated
    assert inp.total_lines == 100_002
    assert inp.lines[-2:] == ("RuntimeError: the end", "") and inp.numbers[-2:] == (100_001, 100_002)
    assert len(inp.lines) <= 10


def test_a_giant_line_without_newlines_is_cut_not_held():
    data = b"x" * 5_000_000 + b"\nImportError: libcudart.so.12: cannot open shared object file\n"
    lim = Limits(head_bytes=10_000, tail_bytes=10_000, head_lines=10, tail_lines=10, max_line_chars=200,
                 max_read_bytes=50_000_000)
    inp = read_stream(io.BytesIO(data), "one-line.log", lim)
    assert len(inp.lines[0]) <= SMALL.max_line_chars
    assert inp.lines[1].startswith("ImportError") and inp.numbers[1] == 2
    assert any("cut to their start" in n for n in inp.notes)


def test_binary_garbage_is_read_without_error_and_flagged():
    data = bytes(range(256)) * 200 + b"\n\xff\xfe\x00\x01"
    inp = read_stream(io.BytesIO(data), "core.bin", SMALL)
    assert inp.error is None and inp.binary
    assert any("looks binary" in n for n in inp.notes)


def test_read_input_refuses_binary_input_by_name(tmp_path):
    f = tmp_path / "core.bin"
    f.write_bytes(os.urandom(50_000))
    inp = read_input(str(f), SMALL)
    assert inp.error is not None and "looks binary" in inp.error and not inp.lines


def test_read_input_file_stdin_and_dash(tmp_path):
    f = tmp_path / "log.txt"
    f.write_bytes(b"a\nb\n")
    assert read_input(str(f)).lines == ("a", "b", "")
    assert read_input("-", stdin=io.BytesIO(b"from stdin\n")).lines == ("from stdin", "")
    assert read_input("-", stdin=io.BytesIO(b"x")).source == "-"


def test_unreadable_inputs_come_back_with_a_reason(tmp_path):
    assert "no such file" in read_input(str(tmp_path / "missing.log")).error
    assert "directory" in read_input(str(tmp_path)).error
    locked = tmp_path / "locked.log"
    locked.write_text("secret")
    locked.chmod(0)
    try:
        if os.geteuid() != 0:  # root reads anything
            assert "permission denied" in read_input(str(locked)).error
    finally:
        locked.chmod(0o600)


def test_excerpt_keeps_the_match_visible():
    line = "x" * 500 + "undefined symbol: cudaFoo" + "y" * 500
    start = line.index("undefined")
    out = excerpt(line, start, start + 25, width=120)
    assert "undefined symbol: cudaFoo" in out and len(out) <= 122


# ---------------------------------------------------------------- properties
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4000))
def test_reading_any_bytes_never_raises_and_numbers_map_back(data):
    inp = read_stream(io.BytesIO(data), "fuzz", SMALL)
    raw_lines = data.split(b"\n")
    assert inp.total_lines == len(raw_lines)
    assert list(inp.numbers) == sorted(set(inp.numbers))
    for n, line in zip(inp.numbers, inp.lines, strict=True):
        assert 1 <= n <= len(raw_lines)
        raw = raw_lines[n - 1]
        if len(raw) <= SMALL.max_line_chars:  # uncut lines are exactly the normalised input line
            assert line == normalise_line(raw.decode("utf-8", errors="replace"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3000))
def test_normalising_any_text_never_raises_and_numbers_map_back(text):
    inp = from_text(text, limits=SMALL)
    raw_lines = text.split("\n")
    assert inp.total_lines == len(raw_lines)
    for n, line in zip(inp.numbers, inp.lines, strict=True):
        raw = raw_lines[n - 1]
        if len(raw) <= SMALL.max_line_chars:
            assert line == normalise_line(raw)
        assert "\x1b" not in line and "\r" not in line and "\n" not in line
    if len(raw_lines) <= SMALL.head_lines + SMALL.tail_lines:
        assert not inp.truncated and inp.numbers == tuple(range(1, len(raw_lines) + 1))


@given(st.text(max_size=300), st.integers(0, 300), st.integers(0, 300))
def test_excerpt_never_raises(line, a, b):
    start, end = sorted((min(a, len(line)), min(b, len(line))))
    out = excerpt(line, start, end, width=80)
    assert len(out) <= max(len(line), 82)
