"""postmortem: excerpts of public reports through fake journalctl/last, kern.log, pstore, own logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops.postmortem import classify, collect, run

TESTS = Path(__file__).parents[1]
CASES = TESTS / "fixtures" / "raw" / "postmortem"
FAKES = TESTS / "fixtures" / "bin" / "postmortem"


def _env(case: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PATH=f"{FAKES}:/usr/bin:/bin", FAKE_PM_DIR=str(CASES / case),
               FAKE_PM_ARGS=str(tmp_path / "args"))
    env.update(extra)
    return env


def _root(case: str, tmp_path: Path) -> Path:
    """A root with the case's pstore / var/log when it has them, empty otherwise."""
    root = tmp_path / "root"
    (root / "sys" / "fs" / "pstore").mkdir(parents=True, exist_ok=True)
    if (CASES / case / "pstore").is_dir():
        for f in (CASES / case / "pstore").iterdir():
            (root / "sys" / "fs" / "pstore" / f.name).write_text(f.read_text())
    if (CASES / case / "var").is_dir():
        (root / "var" / "log").mkdir(parents=True, exist_ok=True)
        for f in (CASES / case / "var" / "log").iterdir():
            (root / "var" / "log" / f.name).write_text(f.read_text())
    return root


def pm(case: str, tmp_path: Path, logs: tuple[Path, ...] = (), **extra: str) -> run.PostmortemReport:
    return run.judge(collect.gather(_env(case, tmp_path, **extra), _root(case, tmp_path), logs))


def test_host_oom_names_the_victim_and_its_size(tmp_path):
    rep = pm("host-oom", tmp_path)
    assert rep.cause.code == "G3.host_oom" and rep.cause.gotcha == "G3"
    assert "lmcache" in rep.cause.summary and "1.1 GB" in rep.cause.summary
    assert rep.unclean_end is False
    args = (tmp_path / "args").read_text()
    assert "-b -1 -k" in args and "-n 4000" in args  # the previous boot, bounded


def test_wedge_after_driver_out_of_memory(tmp_path):
    rep = pm("wedge", tmp_path)
    assert rep.cause.code == "G3.driver_wedge" and "12 allocation" in rep.cause.summary
    assert rep.unclean_end is True and rep.finding_counts["G3.driver_no_memory"] == 12


def test_power_loss_with_a_hot_own_log_suspects_g4(tmp_path):
    rep = pm("power-loss-hot", tmp_path, (CASES / "power-loss-hot",))
    assert rep.cause.code == "G4.suspected" and rep.cause.confidence == "suspected"
    assert rep.own_log["max_temperature_c"] == 91 and rep.own_log["hot"]
    cold = pm("power-loss-hot", tmp_path)  # the same boot without the tool's log
    assert cold.cause.code == "unclean_end" and "no sampler log" in cold.cause.summary


def test_thermal_shutdown_is_certain_g4(tmp_path):
    rep = pm("thermal-shutdown", tmp_path)
    assert (rep.cause.code, rep.cause.gotcha, rep.cause.confidence) == ("G4.thermal_shutdown", "G4", "certain")


def test_hardware_xid_is_none_of_the_ten(tmp_path):
    rep = pm("xid79", tmp_path)
    assert rep.cause.code == "xid.hardware" and rep.cause.gotcha is None
    assert "79" in rep.cause.summary and "fallen off the bus" in rep.cause.summary
    assert "none of the ten" in rep.cause.summary


def test_application_xid_then_orderly_reboot(tmp_path):
    rep = pm("xid31-clean", tmp_path)
    assert rep.cause.code == "orderly_end" and rep.exit_code == 0
    assert "Xid 31" in rep.cause.summary and "application" in rep.cause.summary
    xids = [f.values["xid"] for f in rep.findings if f.code.startswith("xid.")]
    assert xids == [31, 45]


def test_panic_in_pstore(tmp_path):
    rep = pm("panic-pstore", tmp_path)
    assert rep.cause.code == "panic" and "Kernel panic" in rep.cause.summary
    assert next(s for s in rep.sources if s.name == "pstore").status == "read"


def test_clean_power_down(tmp_path):
    rep = pm("clean", tmp_path)
    assert rep.cause.code == "orderly_end" and rep.exit_code == 0


def test_without_a_journal_kern_log_previous_boot_only(tmp_path):
    rep = pm("kernlog", tmp_path)  # no kernel.txt: the journal is not persistent
    assert next(s for s in rep.sources if s.name.startswith("journal")).status == "absent"
    assert rep.cause.code == "G3.cgroup_oom" and "python3" in rep.cause.summary and "64.4 GB" in rep.cause.summary
    assert all("this-boot" not in f.line for f in rep.findings)  # the current boot's lines do not count


def test_without_permission_it_says_what_it_could_not_read(tmp_path):
    root = _root("clean", tmp_path)
    (root / "var" / "log").mkdir(parents=True)
    (root / "var" / "log" / "kern.log").write_text("x\n")
    os.chmod(root / "var" / "log" / "kern.log", 0)
    env = _env("clean", tmp_path, FAKE_PM_DENIED="1", PATH=f"{FAKES}:/usr/bin:/bin")
    if os.geteuid() == 0:  # root reads a 000 file anyway: imitate the refusal at the open
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(collect, "_tail", lambda p, limit=0: (_ for _ in ()).throw(PermissionError(13, "denied")))
            rep = run.judge(collect.gather(env, root, ()))
    else:
        rep = run.judge(collect.gather(env, root, ()))
    assert any("no permission to read the system journal" in r for r in rep.could_not_read)
    assert any(r.startswith("/var/log/kern.log:") for r in rep.could_not_read)
    assert rep.cause.code == "orderly_end"  # last -x still tells a clean end


def test_cli_json(tmp_path):
    env = _env("host-oom", tmp_path)
    p = subprocess.run([sys.executable, "-m", "sparkops", "postmortem", "--json", "--log", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["cause"]["code"] == "G3.host_oom"


def test_previous_boot_segment():
    lines = ["a", "kernel: Linux version 6.1", "b", "c", "kernel: [    0.000000] Linux version 6.2", "d"]
    assert classify.previous_boot(lines) == (["kernel: Linux version 6.1", "b", "c"], True)
    assert classify.previous_boot(["x"]) == (["x"], False)


@given(st.lists(st.text(max_size=200), max_size=30))
def test_scan_and_verdict_never_raise(lines):
    found = classify.scan(lines, "fuzz", run.xid_table())
    cause = classify.verdict(found, unclean=None, log_read=bool(lines), own=None, fixes=run.cause_fixes())
    assert cause.code


@given(st.integers(0, 200), st.sampled_from(["python3", "VLLM::EngineCore", "a b"]), st.integers(0, 10**9))
def test_generated_oom_and_xid_lines(xid, name, kb):
    lines = [f"2026-01-01T00:00:00+0000 h kernel: NVRM: Xid (PCI:000f:01:00): {xid}, pid=42, name={name}, Ch 1",
             f"2026-01-01T00:00:01+0000 h kernel: Out of memory: Killed process 42 ({name}) total-vm:1kB, "
             f"anon-rss:{kb}kB, file-rss:0kB"]
    found = classify.scan(lines, "gen", run.xid_table())
    assert found[0].values["xid"] == xid and found[0].values["process"] == name
    assert found[1].code == "G3.host_oom" and found[1].values["anon_rss_bytes"] == kb * 1024


def test_mcp_tool_returns_the_cli_json(tmp_path, monkeypatch):
    from sparkops.mcp_server import tools

    for k, v in _env("xid79", tmp_path).items():
        monkeypatch.setenv(k, v)
    got = tools.postmortem(log_paths=[str(tmp_path)])
    assert got["cause"]["code"] == "xid.hardware" and got["cause"]["gotcha"] is None
    assert run.PostmortemReport.model_validate(got).exit_code == 1
