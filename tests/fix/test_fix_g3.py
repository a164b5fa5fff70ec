"""fix G3: every guard, and the real write — into an injected /proc/sys (a temporary directory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkops.fix import g3
from sparkops.knowledge import load

RAW = Path(__file__).parents[1] / "fixtures" / "raw" / "buddyinfo"


@pytest.fixture
def box(tmp_path):
    """A root with recorded meminfo/buddyinfo and a writable stand-in for /proc/sys."""
    root = tmp_path / "root"
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "meminfo").write_text((RAW / "dev-vm-x86_64.meminfo").read_text())
    (root / "proc" / "buddyinfo").write_text((RAW / "dev-vm-x86_64.buddyinfo").read_text())
    (root / "proc" / "self" / "smaps").write_text("KernelPageSize:        4 kB\n")
    sysdir = tmp_path / "sys"
    (sysdir / "vm").mkdir(parents=True)
    for name in ("drop_caches", "compact_memory"):
        (sysdir / "vm" / name).write_text("")
    return root, sysdir


def _fix(box, action="drop-caches", **kw):
    root, sysdir = box
    args = dict(apply=True, yes=True, euid=0, busy_fn=lambda: [], container_fn=lambda: None, root=root,
                proc_sys=sysdir, kb=load())
    args.update(kw)
    return g3.fix_g3(action, **args)


def test_dry_run_changes_nothing_and_shows_the_numbers(box):
    res = _fix(box, apply=False)
    assert res.status == "dry-run" and res.exit_code == 0 and res.after is None
    assert (box[1] / "vm" / "drop_caches").read_text() == ""
    kb = next(int(ln.split()[1]) for ln in (RAW / "dev-vm-x86_64.meminfo").read_text().splitlines()
              if ln.startswith("MemAvailable:"))
    assert res.before.mem_available_bytes == kb * 1024  # the recorded meminfo
    assert res.before.free_large_bytes > 0


@pytest.mark.parametrize(("action", "name", "value"), [("drop-caches", "drop_caches", "3"),
                                                       ("compact", "compact_memory", "1")])
def test_applied_writes_the_value_and_reads_before_and_after(box, action, name, value):
    res = _fix(box, action)
    assert res.status == "applied" and res.exit_code == 0
    assert (box[1] / "vm" / name).read_text() == value
    assert res.before is not None and res.after is not None and res.after.page_cache_bytes is not None


def test_container_is_refused(box):
    res = _fix(box, container_fn=lambda: "container markers: /.dockerenv")
    assert res.status == "refused" and "host" in res.reason
    assert (box[1] / "vm" / "drop_caches").read_text() == ""


def test_container_detection_reads_the_markers(tmp_path, box):
    root = tmp_path / "croot"
    root.mkdir()
    (root / ".dockerenv").write_text("")
    assert "dockerenv" in (g3.in_container({}, root, box[1]) or "")


def test_not_root_is_refused_with_the_sudo_command(box):
    res = _fix(box, euid=1000)
    assert res.status == "refused" and "sudo" in res.reason and res.exit_code == 1


def test_a_running_trainer_needs_force(box):
    running = lambda: ["python3 (pid 4242, trainer)"]  # noqa: E731
    res = _fix(box, busy_fn=running)
    assert res.status == "refused" and "between runs" in res.reason
    assert (box[1] / "vm" / "drop_caches").read_text() == ""
    forced = _fix(box, busy_fn=running, force=True)
    assert forced.status == "applied" and "trainer" in forced.notes[0]


def test_confirmation(box):
    asked = []
    res = _fix(box, yes=False, confirm=lambda q: asked.append(q) or False)
    assert res.status == "declined" and asked and "drop_caches" in asked[0]
    assert (box[1] / "vm" / "drop_caches").read_text() == ""
    assert _fix(box, yes=False, confirm=lambda q: True).status == "applied"
    assert _fix(box, yes=False, confirm=None).status == "declined"  # no terminal: never assumed yes


def test_a_failed_write_says_why(box, tmp_path):
    res = _fix(box, proc_sys=tmp_path / "nowhere")
    assert res.status == "failed" and res.exit_code == 3 and "nowhere" in res.reason


def test_never_from_the_mcp_server():
    from sparkops.mcp_server import tools

    assert all("fix" not in spec.fn.__name__ for spec in tools.TOOLS)
    assert "sparkops.fix" not in Path(tools.__file__).read_text()


def test_cli_only_g3_and_dry_run_by_default():
    bad = subprocess.run([sys.executable, "-m", "sparkops", "fix", "G4"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert bad.returncode != 0 and "only G3" in bad.stdout + bad.stderr
    dry = subprocess.run([sys.executable, "-m", "sparkops", "fix", "G3", "--json"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert dry.returncode == 0 and '"status": "dry-run"' in dry.stdout
