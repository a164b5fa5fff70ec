"""The process scan reads /proc itself (issue 23: psutil's import cost more than the scan): it must
yield exactly what ``psutil.process_iter(ATTRS, ad_value=None)`` yielded.

psutil reads any procfs root (``psutil.PROCFS_PATH``), so both readers run on the same recorded
trees: hypothesis builds processes with hostile names (parentheses, spaces, 15-character cuts),
command lines (NUL or space separated, empty, carriage returns, bytes that are not UTF-8), every
state letter, missing or deleted executables, kernel threads and zombies. Denied reads cannot be
built as a tree (root reads everything) and are covered by the rules' shape only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkops.probes import processes
from sparkops.probes.processes import ATTRS, STATUSES, proc_infos

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="procfs layout is Linux's")

EXE = sys.executable  # an existing, executable, absolute path (psutil's exe guess accepts it)
NAME = st.one_of(st.sampled_from(["python3", "vllm", "a b", "x(y)", "pt_main_thread", "gnome-keyring-d",
                                  "kworker/0:1", ")(", "((", ""]),
                 st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=15))
ARG = st.one_of(st.sampled_from([EXE, "/usr/bin/" + "gnome-keyring-daemon", "--port", "8000", "a b", "x\ry",
                                 "gnome-keyring-daemon", "/nonexistent/tool"]),
                st.text(st.characters(min_codepoint=1, max_codepoint=0x2FF), max_size=8))
CMDLINE = st.one_of(
    st.lists(ARG, min_size=1, max_size=4).map(lambda a: "\0".join(a).encode("utf-8", "surrogateescape") + b"\0"),
    st.lists(ARG, min_size=1, max_size=4).map(lambda a: " ".join(a).encode("utf-8", "surrogateescape")),
    st.just(b""), st.just(b"\xff\xfe bad\0bytes\0"), st.just(b"one arg with spaces\0"), st.just(b"\r\n\0"),
)
EXE_LINK = st.sampled_from([("link", EXE), ("link", "/opt/gone/tool (deleted)"), ("link", EXE + " (deleted)"),
                            ("none", ""), ("link", "/bin/x\0garbage")])
PROC = st.fixed_dictionaries({
    "comm": NAME, "state": st.sampled_from([*STATUSES, "?", "Z"]), "ppid": st.integers(0, 99999),
    "cmdline": CMDLINE, "exe": EXE_LINK, "rss_pages": st.integers(0, 10**7),
})


def build(root: Path, procs: list[dict]) -> None:
    (root / "stat").write_text("cpu  1 2 3 4\nbtime 1764700000\n")
    for n, p in enumerate(procs):
        d = root / str(900001 + n)
        d.mkdir()
        fields = [p["state"], str(p["ppid"])] + ["0"] * 50
        (d / "stat").write_bytes(f"{900001 + n} ({p['comm']}) ".encode() + " ".join(fields).encode() + b"\n")
        (d / "cmdline").write_bytes(p["cmdline"])
        (d / "statm").write_text(f"{p['rss_pages'] * 2} {p['rss_pages']} 10 1 0 5 0\n")
        kind, target = p["exe"]
        if kind == "link":
            os.symlink(target.replace("\0", "_") if "\0" in target else target, d / "exe")


def psutil_infos(root: Path) -> list[dict]:
    old = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = str(root)
    psutil.process_iter.cache_clear()
    try:
        return [p.info for p in psutil.process_iter(list(ATTRS), ad_value=None)]
    finally:
        psutil.PROCFS_PATH = old
        psutil.process_iter.cache_clear()


def plain(infos: list[dict]) -> list[dict]:
    return [{**i, "memory_info": None if i["memory_info"] is None else i["memory_info"].rss} for i in infos]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(PROC, min_size=1, max_size=6))
def test_the_scan_reads_what_psutil_reads(tmp_path_factory, procs):
    root = tmp_path_factory.mktemp("proc")
    build(root, procs)
    assert plain(list(proc_infos(str(root)))) == plain(psutil_infos(root))


def test_a_recorded_tree_with_every_case_at_once(tmp_path):
    procs = [
        {"comm": "pt_main_thread", "state": "R", "ppid": 1, "cmdline": f"{EXE}\0-m\0vllm\0".encode(), "exe": ("link", EXE),
         "rss_pages": 1000},
        {"comm": "gnome-keyring-d", "state": "S", "ppid": 1, "cmdline": b"/usr/bin/gnome-keyring-daemon\0--start\0",
         "exe": ("link", "/opt/gone/gnome-keyring-daemon (deleted)"), "rss_pages": 5},
        {"comm": "kworker/0:1", "state": "I", "ppid": 2, "cmdline": b"", "exe": ("none", ""), "rss_pages": 0},
        {"comm": "defunct", "state": "Z", "ppid": 1, "cmdline": b"", "exe": ("none", ""), "rss_pages": 0},
        {"comm": "x) (y", "state": "D", "ppid": 7, "cmdline": f"{EXE} serve --port 8000".encode(), "exe": ("none", ""),
         "rss_pages": 3},
    ]
    build(tmp_path, procs)
    mine = plain(list(proc_infos(str(tmp_path))))
    assert mine == plain(psutil_infos(tmp_path))
    by_name = {i["name"]: i for i in mine}
    assert by_name["gnome-keyring-daemon"]["exe"] == "/opt/gone/gnome-keyring-daemon"  # name made whole, link cleaned
    assert by_name["kworker/0:1"]["exe"] == "" and by_name["kworker/0:1"]["cmdline"] == []
    assert by_name["defunct"]["status"] == "zombie" and by_name["defunct"]["cmdline"] is None
    assert by_name["x) (y"]["exe"] == EXE and by_name["x) (y"]["status"] == "disk-sleep"  # exe guessed from argv[0]
    assert by_name["pt_main_thread"]["memory_info"] == 1000 * os.sysconf("SC_PAGE_SIZE")


def test_a_process_gone_between_listing_and_reading_is_left_out(tmp_path):
    build(tmp_path, [{"comm": "a", "state": "S", "ppid": 1, "cmdline": b"a\0", "exe": ("none", ""), "rss_pages": 1}])
    (tmp_path / "900002").mkdir()  # listed, but its files are gone
    got = list(proc_infos(str(tmp_path)))
    assert [i["pid"] for i in got] == [900001] == [i["pid"] for i in psutil_infos(tmp_path)]


def test_the_state_words_are_psutils():
    from psutil import _pslinux

    assert dict(_pslinux.PROC_STATUSES) == STATUSES


def test_the_live_scan_agrees_with_psutil_on_what_does_not_move():
    """This machine's /proc: every process both saw has the same name, argv, exe and parent (its
    memory and state move between two reads)."""
    mine = {i["pid"]: i for i in proc_infos()}
    theirs = {p.info["pid"]: p.info for p in psutil.process_iter(list(ATTRS), ad_value=None)}
    both = [pid for pid in mine if pid in theirs and pid != os.getpid()]
    assert len(both) >= 1
    stable = ("ppid", "name", "exe", "cmdline")
    differ = [pid for pid in both if any(mine[pid][k] != theirs[pid][k] for k in stable)]
    assert len(differ) <= max(1, len(both) // 20), [(mine[p], theirs[p]) for p in differ[:3]]


def test_status_of_a_pid_that_is_gone_is_none(tmp_path):
    assert processes._status_of(900001, str(tmp_path)) is None
    build(tmp_path, [{"comm": "d", "state": "D", "ppid": 1, "cmdline": b"d\0", "exe": ("none", ""), "rss_pages": 1}])
    assert processes._status_of(900001, str(tmp_path)) == "disk-sleep"
