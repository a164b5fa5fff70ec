"""``preflight --quick`` without typer (front.fast_preflight) is the typer command, byte for byte.

Both paths run in this process on a recorded GB10 snapshot (the collection is the one thing
replaced: it is live and would differ between two runs), with the clock frozen; every format,
``--json``, an unwritable report and a failing collection print the same bytes, write the same
report and exit the same. The option reader is checked against typer's own parse (hypothesis).
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops import api, cli, front
from sparkops.core.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
FROZEN = datetime(2026, 12, 3, 17, 0, 0, 123456, tzinfo=timezone.utc)  # noqa: UP017


class _Frozen(datetime):
    @classmethod
    def now(cls, tz=None):  # noqa: ANN001, ANN206
        return FROZEN if tz is not None else FROZEN.replace(tzinfo=None)


@pytest.fixture
def replay(monkeypatch, tmp_path):
    """Run a command line through one path; (exit code, stdout, stderr, report bytes, collect options)."""
    from sparkops.probes import target_launch
    from sparkops.report import build

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPARKOPS_NO_NVML", "1")
    monkeypatch.delenv(front.FAST_OFF_ENV, raising=False)
    monkeypatch.setattr(target_launch, "prestart", lambda *a, **k: None)
    monkeypatch.setattr(build, "datetime", _Frozen)

    def run(path: str, argv: list[str], capsys, facts: str = "gb10_ngc_2509_healthy.json", fail: Exception | None = None):
        seen = []

        def collect(opts, also_import=()):  # noqa: ANN001, ANN202
            seen.append(opts)
            if fail is not None:
                raise fail
            return api.load_facts(FIXTURES / facts)

        monkeypatch.setattr(api, "collect", collect)
        report = tmp_path / "env-report.json"
        for p in tmp_path.glob("*.json"):
            p.unlink()
        capsys.readouterr()
        if path == "fast":
            code = front.fast_preflight(argv)
            assert code is not None, "the fast path declined"
        else:
            with pytest.raises(SystemExit) as ex:
                cli.main(argv)
            code = ex.value.code
        out, err = capsys.readouterr()
        written = report.read_bytes() if report.exists() else None
        return code, out, err, written, seen

    return run


LINES = [
    ["preflight", "--quick", "--offline", "--format", "lines"],
    ["preflight", "--quick", "--format=json"],
    ["preflight", "--quick", "--json", "--offline"],
    ["preflight", "--quick", "--format", "table"],
    ["preflight", "--quick"],
    ["preflight", "--offline", "--quick", "--format", "lines", "--budget", "7.5", "--config", "a", "--config=b"],
]


@pytest.mark.parametrize("argv", LINES, ids=[" ".join(a[1:]) for a in LINES])
@pytest.mark.parametrize("facts", ["gb10_ngc_2509_healthy.json", "gb10_vllm_default.json", "gb10_bare_pip_cu128.json"])
def test_the_fast_path_prints_what_typer_prints(replay, capsys, argv, facts):
    fast = replay("fast", argv, capsys, facts)
    slow = replay("typer", argv, capsys, facts)
    assert fast[:4] == slow[:4]
    assert fast[3] is not None and fast[1].strip()
    assert fast[4] == slow[4] and len(fast[4]) == 1  # the same collection options


def test_an_unwritable_report_is_said_the_same_way(replay, capsys, tmp_path):
    (tmp_path / "a-file").write_text("")
    argv = ["preflight", "--quick", "--format", "lines", "--report", str(tmp_path / "a-file" / "r.json")]
    fast = replay("fast", argv, capsys)
    slow = replay("typer", argv, capsys)
    assert fast[:3] == slow[:3]
    assert fast[0] == 4 and "the verdict above stands" in fast[2]


@pytest.mark.parametrize("fail", [InputError("a snapshot nobody can read"), RuntimeError("boom")])
def test_failures_map_to_the_same_exit_and_words(replay, capsys, fail):
    argv = ["preflight", "--quick", "--format", "json"]
    fast = replay("fast", argv, capsys, fail=fail)
    slow = replay("typer", argv, capsys, fail=fail)
    assert fast[:4] == slow[:4]
    assert fast[0] == 3 and str(fail) in fast[2]


# ---- which lines the fast path takes, and that it reads them as typer does

PATHS = st.text(alphabet="abc/._-~", min_size=1, max_size=12).filter(lambda s: not s.startswith("-"))
OPTION = st.one_of(
    st.just(["--quick"]), st.just(["--offline"]), st.just(["--json"]),
    PATHS.map(lambda p: ["--python", p]), PATHS.map(lambda p: [f"--python={p}"]),
    PATHS.map(lambda p: ["--config", p]), PATHS.map(lambda p: [f"--config={p}"]),
    st.floats(0.5, 100, allow_nan=False).map(lambda b: ["--budget", repr(b)]),
    st.sampled_from(["1e1", "3", " 4", "x", "inf"]).map(lambda b: ["--budget", b]),
    st.sampled_from(["table", "lines", "json", "JSON", "md"]).map(lambda f: ["--format", f]),
    PATHS.map(lambda p: ["--report", p]), PATHS.map(lambda p: [f"--report={p}"]),
    st.text(alphabet="abc 8", max_size=10).map(lambda t: ["--workload", t]),
    st.integers(1, 8).map(lambda n: ["--tp", str(n)]), st.just(["--facts", "f.json"]), st.just(["--measure"]),
)
READ = {"python": "python", "quick": "quick", "config": "config", "offline": "offline", "budget": "budget",
        "report": "report", "json": "as_json"}  # the fast reader's key -> the typer parameter


def _typer_params(argv: list[str]) -> dict | None:
    group = typer.main.get_command(cli.app)
    cmd = group.get_command(typer.Context(group), argv[0])
    try:
        params = cmd.make_context(argv[0], list(argv[1:])).params
    except (typer.BadParameter, Exception) as exc:  # click's UsageError family: typer refuses the line
        if type(exc).__name__ in ("UsageError", "BadParameter", "NoSuchOption", "BadOptionUsage"):
            return None
        raise
    return params


@settings(max_examples=120, deadline=None)
@given(st.lists(OPTION, max_size=7))
def test_the_fast_reader_reads_what_typer_parses(options):
    argv = ["preflight"] + [tok for opt in options for tok in opt]
    got = front.quick_preflight_args(argv)
    params = _typer_params(argv)
    if got is None:
        return  # typer handles it: nothing to compare
    assert params is not None, f"the fast path took a line typer refuses: {argv}"
    assert params["quick"] and not params["facts"] and not params["measure"] and params["workload"] is None
    assert {k: got[k] for k in READ} == {k: params[p] if k != "config" else (params[p] or []) for k, p in READ.items()}
    assert got["format"] == params["fmt"].value


@pytest.mark.parametrize("argv", [
    ["preflight"], ["preflight", "--offline"], ["preflight", "--quick", "--help"], ["preflight", "--quick", "x"],
    ["preflight", "--quick", "--facts", "f.json"], ["preflight", "--quick", "--python"],
    ["preflight", "--quick", "--python", "--offline"], ["preflight", "--quick=1"], ["preflight", "--quick", "--"],
    ["preflight", "--quick", "--format", "markdown"], ["preflight", "--quick", "--budget", "soon"],
    ["preflight", "--quick", "--container", "ngc"], ["preflight", "--quick", "--workload", "qlora 70b"],
    ["collect", "--quick"], ["preflight", "--quick", "--report", ""],
])
def test_the_fast_path_declines_what_it_does_not_read(argv):
    assert front.quick_preflight_args(argv) is None


def test_a_bad_interpreter_goes_to_typer_for_its_usage_error(monkeypatch, tmp_path):
    monkeypatch.delenv(front.FAST_OFF_ENV, raising=False)
    assert front.fast_preflight(["preflight", "--quick", "--python", str(tmp_path / "nope")]) is None
    monkeypatch.setenv(front.FAST_OFF_ENV, "1")
    assert front.fast_preflight(["preflight", "--quick", "--python", sys.executable]) is None


def test_shell_completion_stays_typers(monkeypatch):
    monkeypatch.setenv("_SPARK_OPS_COMPLETE", "bash_complete")
    assert front.quick_preflight_args(["preflight", "--quick"]) is None
    monkeypatch.delenv("_SPARK_OPS_COMPLETE")
    assert front.quick_preflight_args(["preflight", "--quick"]) is not None
    assert os.environ.get("_SPARK_OPS_COMPLETE") is None
