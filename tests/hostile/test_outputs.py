"""Hostile output targets: write_atomic never replaces a device, a FIFO, a link or a standard
stream, refuses other special files plainly, and preflight prints its verdict before a report that
cannot be written (issue 17, items 1-3)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.core.errors import OutputError
from sparkops.facts.snapshot import write_atomic
from sparkops.report.formats import EXIT_REPORT_NOT_WRITTEN

FIXTURES = Path(__file__).parent.parent / "fixtures"
HEALTHY = FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"
BLOCKED = FIXTURES / "facts" / "gb10_bare_pip_cu128.json"


def spark_ops(*args: str, cwd: Path | None = None, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkops", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120, cwd=cwd)


def test_a_link_to_a_character_device_stays_a_link_and_the_device_stays_a_device(tmp_path):
    link = tmp_path / "null-link"
    link.symlink_to("/dev/null")
    write_atomic(link, "kept nowhere\n")
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert Path("/dev/null").read_text() == ""
    assert [p.name for p in tmp_path.iterdir()] == ["null-link"]  # no temporary file left


def test_a_link_to_a_regular_file_writes_the_file_and_keeps_the_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_fifo_is_written_through_to_its_reader(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe\n")
    reader.join(10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_fifo_nobody_reads_is_refused_within_its_time_bound(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="FIFO and nothing read it"):
        write_atomic(fifo, "x", fifo_timeout_s=0.2)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_and_a_socket_are_refused_by_name(tmp_path):
    with pytest.raises(OutputError, match="it is a directory"):
        write_atomic(tmp_path, "x")
    sock_path = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(sock_path))
        with pytest.raises(OutputError, match="it is a socket"):
            write_atomic(sock_path, "x")
        assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
    finally:
        s.close()


def test_dev_stdout_is_written_through_the_open_stream(tmp_path):
    """`-o /dev/stdout` with stdout redirected to a file: the text lands in that file (appended
    after what was printed before, not truncating it) and /dev/stdout is still what it was."""
    before = os.lstat("/dev/stdout")
    out = tmp_path / "out.txt"
    code = ("import sys; from pathlib import Path; from sparkops.facts.snapshot import write_atomic; "
            "print('first', flush=False); write_atomic(Path('/dev/stdout'), 'second\\n')")
    with out.open("w") as fh:
        subprocess.run([sys.executable, "-c", code], stdout=fh, check=True, timeout=60)
    assert out.read_text() == "first\nsecond\n"
    after = os.lstat("/dev/stdout")
    assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino)


def test_collect_to_dev_stdout_through_the_cli_leaves_dev_stdout_alone(tmp_path):
    before = os.lstat("/dev/stdout")
    p = spark_ops("preflight", "--facts", str(HEALTHY), "--json", "--report", "/dev/stdout", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    dec = json.JSONDecoder()
    first, end = dec.raw_decode(p.stdout)
    second, _ = dec.raw_decode(p.stdout[end:].lstrip())
    assert first["verdict"] == second["verdict"] == "ready"
    assert os.lstat("/dev/stdout").st_ino == before.st_ino


@pytest.mark.parametrize("make_target", ["directory", "under-a-file"])
def test_a_report_that_cannot_be_written_does_not_hide_the_verdict(tmp_path, make_target):
    if make_target == "directory":
        target = tmp_path / "reports"
        target.mkdir()
    else:
        (tmp_path / "plain").write_text("")
        target = tmp_path / "plain" / "env-report.json"  # a file where a directory should be
    p = spark_ops("preflight", "--facts", str(BLOCKED), "--report", str(target), "--format", "lines", cwd=tmp_path)
    assert p.returncode == EXIT_REPORT_NOT_WRITTEN == 4, (p.stdout, p.stderr)
    assert p.stdout.splitlines()[-1].startswith("verdict BLOCKED: ")
    assert str(target) in p.stderr and "not written" in p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr


def test_a_read_only_working_directory_still_prints_the_verdict(tmp_path):
    if os.geteuid() == 0:  # root writes through mode bits; a path under a file is read-only for everyone
        ro = tmp_path / "file-not-dir"
        ro.write_text("")
        report = ro / "env-report.json"
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        report = ro / "env-report.json"
    p = spark_ops("preflight", "--facts", str(HEALTHY), "--report", str(report), cwd=tmp_path)
    assert p.returncode == 4
    assert p.stdout.lstrip().startswith("Verdict: READY")


def test_lines_carry_identity_and_verdict_when_identity_blocks(tmp_path):
    """A run blocked by identity (no GPU) printed no FAIL and no verdict in the lines format."""
    p = spark_ops("preflight", "--facts", str(FIXTURES / "facts" / "no_gpu.json"), "--format", "lines",
                  "--report", str(tmp_path / "r.json"))
    lines = p.stdout.splitlines()
    rep = json.loads((tmp_path / "r.json").read_text())
    ident = next(f for f in rep["findings"] if f["gotcha"] == "identity")
    assert lines[0].startswith(f"identity {ident['status'].upper()}: ")
    assert lines[-1].startswith(f"verdict {rep['verdict'].upper()}: ")
    assert rep["verdict"] == "blocked" and ident["status"] == "fail"  # the fixture is a no-GPU container
    assert p.returncode == 2 and lines[-1] == "verdict BLOCKED: fix first: identity"


@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=2000))
def test_regular_file_round_trip_any_text(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("w") / "f.txt"
    write_atomic(p, text)
    assert p.read_bytes() == text.encode("utf-8")
