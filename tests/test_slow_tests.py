"""The fast run and the full run (tests/conftest.py, tests/slow_tests.py).

The README's test command, which `.ci/run` executes, must run every test: the check below collects
with that command's own pytest arguments and fails if a slow test is missing or anything is
deselected.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slow_tests import SLOW, Slow, is_slow

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _defines(text: str, name: str) -> bool:
    """Whether a module's text defines this test function or class (Class::method: both)."""
    return all(re.search(rf"^\s*(async\s+)?(def|class)\s+{re.escape(part)}\b", text, re.M) for part in name.split("::"))


def test_every_slow_entry_names_an_existing_test_with_its_measurement():
    keys = [s.key for s in SLOW]
    assert len(keys) == len(set(keys)), "an entry is listed twice"
    texts: dict[str, str] = {}
    for s in SLOW:
        path, _, name = s.key.partition("::")
        assert path.startswith("tests/") and path.endswith(".py"), s.key
        assert (ROOT / path).is_file(), f"{s.key}: no such test module"
        if name:
            if path not in texts:
                texts[path] = (ROOT / path).read_text()
            assert _defines(texts[path], name), f"{s.key}: no such test in {path}"
        assert s.why.strip(), f"{s.key}: say why it is slow"
        assert (s.seconds or 0) > 0 or "not measured here" in s.why, f"{s.key}: give its measured seconds"
    whole = {k for k in keys if "::" not in k}
    covered = [k for k in keys if "::" in k and k.partition("::")[0] in whole]
    assert not covered, f"already covered by their module's entry: {covered}"


_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


@given(module=_name, test=_name, tail=st.text("abcxyz019_-.", max_size=8))
def test_is_slow_matches_the_entry_its_tests_and_parameter_sets_only(module, test, tail):
    key = f"tests/{module}.py::{test}"
    entries = (Slow(key, 1.0, "x"),)
    assert is_slow(key, entries)
    assert is_slow(f"{key}[{tail}]", entries)
    assert is_slow(f"{key}::sub", entries)
    assert not is_slow(f"{key}{tail}x", entries)  # test_ab is not test_a
    assert not is_slow(f"tests/{module}.py::{test}x", entries)
    assert is_slow(f"tests/{module}.py::{test}", (Slow(f"tests/{module}.py", 1.0, "x"),))
    assert not is_slow(f"tests/{module}x.py::{test}", (Slow(f"tests/{module}.py", 1.0, "x"),))


def test_dev_profile_cap_lowers_an_explicit_example_count():
    import conftest

    def counted():
        calls = []

        @settings(max_examples=100, database=None)
        @given(st.integers())
        def prop(n):
            calls.append(n)

        return prop, calls

    prop, calls = counted()
    prop()
    assert len(calls) == 100  # what the full run does: the count written in @settings

    prop, calls = counted()
    conftest._cap_examples(SimpleNamespace(function=prop))
    conftest._cap_examples(SimpleNamespace(function=prop))  # a second pass (parametrized items) keeps the cap
    prop()
    assert 0 < len(calls) <= conftest.dev_examples(100) == 10


def test_dev_examples_is_a_tenth_at_least_ten_never_more_than_written():
    from conftest import dev_examples

    assert [dev_examples(n) for n in (1, 10, 25, 100, 150, 300, 500)] == [1, 10, 10, 10, 15, 30, 50]


def _pytest_args_of_readme_command() -> list[str]:
    """The pytest arguments of the README's test command, read the way `.ci/run` reads it."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "test-command:start" in ci and 'bash -euo pipefail -c "$cmd"' in ci, ".ci/run no longer runs the README"
    block = re.search(r"<!-- test-command:start -->\n(.*?)<!-- test-command:end -->", README.read_text(), re.S)
    assert block, "README has no test-command block"
    cmd = " ".join(ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("```"))
    runs = [shlex.split(part) for part in cmd.split("&&") if shlex.split(part)[:1] == [".venv/bin/pytest"]]
    assert len(runs) == 1, f"expected one .venv/bin/pytest run in the README command: {cmd}"
    return runs[0][1:]


def _collect(args: list[str], **env: str) -> subprocess.CompletedProcess:
    """`pytest --collect-only` with these arguments, at the verbosity that lists one node id a line."""
    verbosity = args.count("-v") - args.count("-q") + sum(a.count("v") - a.count("q") for a in args
                                                         if re.fullmatch(r"-[qv]{2,}", a))
    level = ["-q"] * (verbosity + 1) if verbosity >= 0 else ["-v"] * (-1 - verbosity)
    clean = {k: v for k, v in os.environ.items() if k not in ("SPARKOPS_CI", "PYTEST_ADDOPTS")}
    return subprocess.run([sys.executable, "-m", "pytest", *args, *level, "--collect-only", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env={**clean, **env})


def _small_folder_with_slow_tests() -> tuple[str, list[Slow]]:
    """The sub-folder of tests/ with slow entries and the fewest bytes of test modules: cheap to collect."""
    folders: dict[str, list[Slow]] = {}
    for s in SLOW:
        folder = Path(s.key.partition("::")[0]).parent
        if folder != Path("tests"):
            folders.setdefault(folder.as_posix(), []).append(s)
    size = {f: sum(p.stat().st_size for p in (ROOT / f).rglob("test_*.py")) for f in folders}
    best = min(folders, key=lambda f: (size[f], f))
    return best, folders[best]


@pytest.mark.slow
def test_readme_command_collects_every_test_the_slow_ones_too():
    # one small folder keeps this cheap: the command's own -m/-k/--deselect/--full apply to it as to all
    folder, entries = _small_folder_with_slow_tests()
    res = _collect([*_pytest_args_of_readme_command(), folder], SPARKOPS_CI="1")  # as .ci/run runs it
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ids = [ln for ln in res.stdout.splitlines() if "::" in ln]
    missing = [s.key for s in entries if not any(is_slow(i, (s,)) for i in ids)]
    assert not missing, f"the README command leaves out slow tests: {missing}"
    assert "deselected" not in res.stdout, res.stdout[-500:]


@pytest.mark.slow
def test_fast_run_leaves_out_slow_tests_unless_named_and_ci_refuses_it():
    folder, entries = _small_folder_with_slow_tests()
    fast = _collect([folder])
    assert fast.returncode == 0, fast.stdout[-2000:] + fast.stderr[-2000:]
    ids = [ln for ln in fast.stdout.splitlines() if "::" in ln]
    assert ids and not any(is_slow(i, tuple(entries)) for i in ids)
    assert re.search(r"\d+ deselected", fast.stdout)

    named = _collect([entries[0].key])
    assert named.returncode == 0 and any(is_slow(i, entries[:1]) for i in named.stdout.splitlines()), named.stdout

    ci = _collect([folder], SPARKOPS_CI="1")
    assert ci.returncode == 4 and "--full" in ci.stderr, (ci.returncode, ci.stderr[-2000:])
