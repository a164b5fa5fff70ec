"""`watch` marks the watched command's own GPU processes in its log, so that `thermal analyze` of the same log later
does not take the job itself for a new neighbour (G6): the live watcher knew its process tree, the log did not."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sparkops.monitor import csvlog
from sparkops.monitor.analyze import analyze_log
from sparkops.monitor.csvlog import LineParser, LogStream, job_pid_line

THERMAL = Path(__file__).parents[1] / "fixtures" / "raw" / "thermal"
RECORDED = THERMAL / "h200_watch_job_growth_20261203.csv"  # watch on the device H200, before the marks existed
JOB = 684  # the watched gpu_job.py in that run


def _lines() -> list[str]:
    return RECORDED.read_text().splitlines()


def _with_mark(lines: list[str], pid: int) -> list[str]:
    """The log as watch writes it now: the mark just before the first row in which ``pid`` appears."""
    at = next(i for i, ln in enumerate(lines) if f", {pid}:" in ln)
    return [*lines[:at], job_pid_line(pid), *lines[at:]]


def _judge(tmp_path: Path, lines: list[str], name: str = "log.csv"):
    f = tmp_path / name
    f.write_text("\n".join(lines) + "\n")
    return analyze_log(LogStream(f), profile="generic")


def _kinds(res) -> list[tuple[str, str]]:
    return [(e.gotcha, e.kind) for e in res.events]


def test_the_recorded_log_without_marks_takes_the_job_for_a_neighbour(tmp_path):
    res = _judge(tmp_path, _lines())
    g6 = [e for e in res.events if e.kind == "new-neighbour"]
    assert [int(e.evidence["pid"]) for e in g6] == [JOB]


def test_a_marked_job_is_not_a_neighbour_and_the_rest_of_the_judgment_stands(tmp_path):
    plain, marked = _judge(tmp_path, _lines(), "a.csv"), _judge(tmp_path, _with_mark(_lines(), JOB), "b.csv")
    assert ("G6", "new-neighbour") not in _kinds(marked)
    assert [k for k in _kinds(plain) if k != ("G6", "new-neighbour")] == _kinds(marked)
    assert marked.samples == plain.samples
    assert any(f"{JOB} marked by watch as the watched command's own" in n for n in marked.notes)
    assert not any("G6 warn" in v for v in marked.verdict)


def test_a_mark_for_another_pid_excludes_nothing(tmp_path):
    lines = _lines()
    res = _judge(tmp_path, [lines[0], job_pid_line(JOB + 1), *lines[1:]])
    assert ("G6", "new-neighbour") in _kinds(res)


def test_a_newest_first_log_keeps_its_marks(tmp_path):
    # read back to front by seeking (the data lines only): the marks read in the first pass must still count
    lines = _with_mark(_lines(), JOB)
    header, rest = lines[0], lines[1:]
    res = _judge(tmp_path, [header, *reversed(rest)])
    assert ("G6", "new-neighbour") not in _kinds(res)
    assert any("not in time order" in n for n in res.notes)


@given(st.integers(0, 2**32), st.text(max_size=80))
def test_a_mark_names_its_pid_and_no_other_comment_names_any(pid, text):
    p = LineParser()
    p.classify(2, job_pid_line(pid))
    assert p.job_pids == {pid}
    q = LineParser()
    q.classify(2, "# " + text)
    if not text.startswith("spark-ops watch: pid "):
        assert q.job_pids == set()


def test_the_mark_round_trips_and_read_log_skips_it():
    p = LineParser()
    assert p.classify(3, job_pid_line(1234)) == ("skip", [])
    assert p.job_pids == {1234}
    rows, notes = csvlog.read_log("\n".join([csvlog.write_header().strip(), job_pid_line(7)]) + "\n")
    assert rows == [] and not any("skipped" in n for n in notes)
