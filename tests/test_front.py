"""The front door (sparkops.front) answers as typer would, and its early starts never change the facts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops import api, cli, front
from sparkops.report.render import render_gotcha


def spark_ops(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.mark.parametrize("columns", ["80", "132"])
def test_fast_help_is_typers_help(columns):
    fast = spark_ops("--help", env={"COLUMNS": columns})
    slow = spark_ops("--help", env={"COLUMNS": columns, front.FAST_OFF_ENV: "1"})
    assert fast.returncode == slow.returncode == 0
    assert fast.stdout == slow.stdout


def test_narrow_terminals_get_clicks_own_wrapping(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert front.columns() == 60 and front.fast_answer(["--help"]) is None
    narrow = spark_ops("--help", env={"COLUMNS": "60"})
    assert narrow.returncode == 0 and narrow.stdout.startswith("Usage: python -m sparkops")


def _group():
    group = typer.main.get_command(cli.app)
    return group, typer.Context(group)


def test_the_command_table_is_every_command_with_its_help():
    """COMMANDS lists every command once, in --help's order, with the help typer would print at 80
    columns; a lazily registered module adds exactly the commands the table names for it."""
    group, ctx = _group()
    names = [n for n, _m, _h in front.COMMANDS]
    assert len(names) == len(set(names))
    limit = 78 - 6 - max(len(n) for n in names)
    for name, module, short in front.COMMANDS:
        cmd = group.get_command(ctx, name)
        assert cmd is not None, f"{name}: no such command"
        want = cmd.get_short_help_str(limit)
        assert short == want, f'front.COMMANDS: write ("{name}", {module!r}, "{want}")'
    extra = sorted(set(group.commands) - set(names))
    assert not extra, f"commands missing from front.COMMANDS: {extra}"
    for module in set(front.LAZY.values()):
        added = set(cli.load_feature(module))
        assert added == {n for n, m in front.LAZY.items() if m == module}, module


def test_a_feature_module_loads_only_when_its_command_is_asked_for():
    code = ("import sys; from sparkops.cli import main\n"
            "try:\n    main(['plan', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('sparkops.planner', 'sparkops.diagnose', "
            "'sparkops.fleet', 'sparkops.mcp_server', 'sparkops.setup', 'sparkops.commands.'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = json.loads(p.stdout.strip().splitlines()[-1].replace("'", '"'))
    assert "sparkops.commands.plan" in loaded
    own = ("sparkops.planner", "sparkops.commands.plan", "sparkops.commands.contract")  # plan's module, its contract
    assert not [m for m in loaded if not m.startswith(own)], loaded


@pytest.mark.parametrize("gid", ["identity", *[f"G{i}" for i in range(1, 11)], "g3", "7", " G09 "])
def test_explain_from_the_raw_catalog_is_the_typed_text(gid):
    kb = api.knowledge()
    assert front.explain_text(gid) == render_gotcha(api.explain(gid, kb), kb.matrix)


@pytest.mark.parametrize("bad", ["G42", "G", "", "identities", "G1x"])
def test_unknown_ids_go_to_typer(bad):
    assert front.explain_text(bad) is None
    with pytest.raises(KeyError):
        api.explain(bad)


def test_only_exact_simple_forms_are_answered_fast():
    assert front.fast_answer(["version"]) == f"dgx-spark-ops {front.__version__}\n"
    for argv in (["version", "--help"], ["explain", "--help"], ["schema", "nothing"], ["schema", "../x"],
                 ["explain"], ["preflight"], [], ["-h"]):
        assert front.fast_answer(argv) is None, argv


# ---- peek: the early guess at what a command line will collect, checked against typer's own parse

PATHS = st.text(alphabet="abc/._-~", min_size=1, max_size=12).filter(lambda s: not s.startswith("-"))
OPTION = st.one_of(
    st.just(["--quick"]), st.just(["--offline"]), st.just(["--json"]),
    PATHS.map(lambda p: ["--python", p]), PATHS.map(lambda p: [f"--python={p}"]),
    PATHS.map(lambda p: ["--config", p]), PATHS.map(lambda p: [f"--config={p}"]),
    st.floats(0.5, 100, allow_nan=False).map(lambda b: ["--budget", repr(b)]),
    st.text(alphabet="abc 8", max_size=10).map(lambda t: ["--workload", t]),
    st.sampled_from(["table", "lines", "json"]).map(lambda f: ["--format", f]),
    PATHS.map(lambda p: ["--report", p]), st.integers(1, 8).map(lambda n: ["--tp", str(n)]),
)


def _typer_prestart(argv: list[str]) -> tuple[str | None, bool]:
    """(python, quick) as the CLI hands them to target_launch.prestart after typer's own parse."""
    group, _ctx = _group()
    cmd = group.get_command(typer.Context(group), argv[0])
    params = cmd.make_context(argv[0], list(argv[1:])).params
    return (str(params["python"]) if params["python"] else None), params["quick"]


@settings(max_examples=60, deadline=None)
@given(st.lists(OPTION, max_size=6), st.sampled_from(["preflight", "collect"]))
def test_peek_reads_what_typer_parses(options, cmd):
    """The early start is keyed exactly as the CLI's own call: the same interpreter and depth."""
    if cmd == "collect":
        options = [o for o in options if o[0].split("=")[0] not in ("--json", "--workload", "--format", "--report",
                                                                     "--tp")]
    argv = [cmd] + [tok for opt in options for tok in opt]
    python, quick, container = front.peek(argv)
    assert container is None
    assert (python, quick) == _typer_prestart(argv)


@given(st.lists(st.text(max_size=12), max_size=8))
def test_peek_never_raises(argv):
    got = front.peek(argv)
    assert got is None or (len(got) == 3 and isinstance(got[1], bool))


@pytest.mark.parametrize("argv", [["preflight", "--facts", "f.json"], ["preflight", "--help"], ["explain", "G3"],
                                  ["collect", "stray"], ["triage"], ["preflight", "--python"],
                                  ["preflight", "--quick=1"]])
def test_peek_declines_what_it_cannot_read(argv):
    assert front.peek(argv) is None


def test_peek_reads_containers_and_the_other_collecting_commands():
    assert front.peek(["preflight", "--container", "ngc"]) == (None, False, "ngc")
    assert front.peek(["stack"]) == (None, True, None)
    assert front.peek(["triage", "gpu", "--python", "/x/py"]) == ("/x/py", False, None)
    assert front.peek(["collect", "-o", "f.json", "--quick"]) == (None, True, None)


def test_the_early_start_is_the_one_the_probe_takes(monkeypatch, tmp_path):
    """front.prestart starts the quick child for exactly the command line the target probe runs."""
    from sparkops.probes import target_launch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPARKOPS_NO_NVML", "1")
    try:
        front.prestart(["preflight", "--quick", "--python", sys.executable])
        argv = target_launch.argv_for(sys.executable, "quick")
        pending = target_launch.take(argv, dict(os.environ))
        assert pending is not None and pending.result(60).ok
        assert target_launch.take(argv, dict(os.environ)) is None  # taken once
    finally:
        target_launch._kill_leftovers()


def test_one_catalog_entry_is_the_whole_files_entry(tmp_path, monkeypatch):
    """Parsing only an entry's lines gives what parsing the whole catalog gives, and another layout
    of the same data (no indented list, so no entry lines to find) falls back to the whole file."""
    import yaml

    whole = yaml.safe_load((Path(front.KNOWLEDGE_DIR) / "gotchas.yaml").read_text(encoding="utf-8"))
    by_id = {e["id"]: e for e in whole["gotchas"]}
    for key, entry in by_id.items():
        assert front.catalog_entry(key) == entry
    assert front.catalog_entry("G42") is None
    (tmp_path / "gotchas.yaml").write_text(yaml.safe_dump(whole, indent=4, sort_keys=False), encoding="utf-8")
    monkeypatch.setattr(front, "KNOWLEDGE_DIR", str(tmp_path))
    for key, entry in by_id.items():
        assert front.catalog_entry(key) == entry
