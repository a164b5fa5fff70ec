"""Shared test plumbing: fixture paths, the GPU marker, snapshot loading, the fast and full runs.

Two runs of one suite:

- ``pytest -q`` (the developer's run, every few minutes): the tests listed in ``tests/slow_tests.py``
  are deselected and property tests run under the hypothesis profile ``dev`` (fewer examples).
- ``pytest -q --full`` (CI and the README's test command): every test, property tests at the
  example counts written in their ``@settings`` (hypothesis profile ``ci``).

A slow test still runs in the fast run when the command line names its file or node id; with ``-m``
the marker expression alone selects (``pytest -m slow``: just the slow ones; ``pytest -m gpu``: every
GPU test). ``SPARKOPS_CI=1`` without ``--full`` is a usage error: on CI the engine and Prometheus
tests must run, not vanish.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from slow_tests import SLOW, is_slow

SLOW_MODULES = frozenset(s.key for s in SLOW if "::" not in s.key)
_LEFT_OUT = pytest.StashKey[dict]()

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent

# Hypothesis profiles. `ci` is hypothesis' default (100 examples where a test sets none); `dev` caps
# every property test, including those whose @settings names a count, at dev_examples(count).
DEV_MIN_EXAMPLES = 10
DEV_DIVISOR = 10


def dev_examples(count: int) -> int:
    """The example count a property test runs with in the fast run: a tenth, at least 10 (never more)."""
    return min(count, max(DEV_MIN_EXAMPLES, count // DEV_DIVISOR))


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="run every test, the slow ones too (tests/slow_tests.py), with property tests at their "
                          "full example counts (hypothesis profile 'ci'): what CI and the README command run")


def _full(config) -> bool:
    return bool(config.getoption("--full"))


def pytest_unconfigure(config):
    cache = getattr(config, "_sparkops_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


def pytest_configure(config):
    # Hermetic: no test reads the Hugging Face Hub (tests/planner/test_hub.py serves its own over HTTP), and the
    # tool's caches (the Hub's, the playbooks') start empty in a directory of this run, never the user's.
    os.environ["HF_HUB_OFFLINE"] = "1"
    import tempfile

    os.environ["XDG_CACHE_HOME"] = config._sparkops_cache = tempfile.mkdtemp(prefix="sparkops-test-cache-")
    if os.environ.get("SPARKOPS_CI") == "1" and not _full(config):
        raise pytest.UsageError("SPARKOPS_CI=1 needs the full run: add --full (the README's test command has it)")
    from hypothesis import settings

    settings.register_profile("ci", settings())
    settings.register_profile("dev", max_examples=dev_examples(settings().max_examples))
    if not config.getoption("--hypothesis-profile", None):  # an explicit --hypothesis-profile wins
        settings.load_profile("ci" if _full(config) else "dev")


def pytest_report_header(config):
    from hypothesis import settings

    if _full(config):
        return f"sparkops: full run (slow tests included), hypothesis profile {settings.get_current_profile_name()!r}"
    return (f"sparkops: fast run ({len(SLOW)} slow entries of tests/slow_tests.py left out unless named), "
            f"hypothesis profile {settings.get_current_profile_name()!r}; everything: add --full")


def pytest_terminal_summary(terminalreporter, config):
    left = config.stash.get(_LEFT_OUT, None)
    if left and left["tests"]:
        terminalreporter.write_line(
            f"fast run: {left['tests']} slow tests deselected, the slow modules not collected (tests/slow_tests.py), "
            "property tests at a tenth of their examples; `pytest --full` runs everything")


def _named_on_command_line(config) -> set[str]:
    """Files and node ids given as arguments, relative to the root (directories are not 'named')."""
    named = set()
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        p = Path(path)
        p = p if p.is_absolute() else Path(config.invocation_params.dir) / p
        if not p.is_file():
            continue
        try:
            rel = p.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            continue
        named.add(rel + sep + rest)
    return named


def _cap_examples(item) -> None:
    """Under the `dev` profile, lower an explicit @settings(max_examples=N) to dev_examples(N).

    Hypothesis reads a test's settings at call time from ``_hypothesis_internal_use_settings`` (a
    private attribute: tests/test_slow_tests.py fails if a hypothesis upgrade drops it)."""
    fn = getattr(item, "function", None)
    if not getattr(fn, "is_hypothesis_test", False):
        return
    from hypothesis import settings

    current = getattr(fn, "_hypothesis_internal_use_settings", None)
    if current is None or getattr(fn, "_sparkops_dev_capped", False):
        return
    fn._hypothesis_internal_use_settings = settings(current, max_examples=dev_examples(current.max_examples))
    fn._sparkops_dev_capped = True


def _leave_out_slow(config) -> bool:
    """The fast run's rule: no --full and no -m (a marker expression selects on its own: `-m gpu` on a GPU
    host, `-m slow` for just the slow ones)."""
    return not _full(config) and not (config.option.markexpr or "").strip()


def pytest_ignore_collect(collection_path, config):
    """A module listed whole is not even imported by the fast run (torch, the MCP client...)."""
    if collection_path.suffix != ".py" or not _leave_out_slow(config):
        return None
    try:
        rel = collection_path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    if rel in SLOW_MODULES and rel not in {n.partition("::")[0] for n in _named_on_command_line(config)}:
        return True
    return None


def pytest_collection_modifyitems(config, items):
    leave_out = _leave_out_slow(config)
    named = _named_on_command_line(config)
    dev = not config.getoption("--hypothesis-profile", None) and not _full(config)
    keep, dropped = [], []
    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
        if dev:
            _cap_examples(item)
        if (leave_out and "slow" in item.keywords
                and not any(item.nodeid == n or item.nodeid.startswith((n + "::", n + "[")) for n in named)):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        config.stash[_LEFT_OUT] = {"tests": len(dropped)}

    if not _has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU/driver here (GPU tests run on the device machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return bool(shutil.which("nvidia-smi")) and False


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


def load_facts_fixture(name: str):
    """A replayable snapshot from tests/fixtures/facts/<name>.json."""
    from sparkops.facts.model import Facts

    return Facts.model_validate(json.loads((FIXTURES / "facts" / f"{name}.json").read_text()))
