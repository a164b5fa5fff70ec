"""The catalog is a contract: every G-number has its text, its check, its tests, a fixture that
exercises it, and every threshold the code asks for exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import build_fixtures as bf
import sparkops.checks
from conftest import load_facts_fixture
from sparkops.checks import CHECKS
from sparkops.knowledge import load

GIDS = [f"G{i}" for i in range(1, 11)]
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "sparkops"
SECTIONS = ("title", "symptom", "cause", "check", "fix")


@pytest.mark.parametrize("gid", GIDS)
def test_catalog_entry_has_every_section(gid):
    kb = load()
    assert gid in kb.gotchas, f"{gid} missing from gotchas.yaml"
    entry = kb.gotcha(gid)
    assert entry.id == gid
    for section in SECTIONS:
        assert getattr(entry, section).strip(), f"{gid} has an empty {section}"
    assert entry.last_verified


def test_registry_is_exactly_g1_to_g10_in_order():
    assert list(CHECKS) == GIDS
    for gid, mod in CHECKS.items():
        assert callable(getattr(mod, "check", None)), f"{gid}: {mod.__name__} has no check()"
        assert getattr(mod, "GID", gid) == gid


@pytest.mark.parametrize("gid", GIDS)
def test_each_gotcha_has_its_own_test_file(gid):
    n = int(gid[1:])
    module = CHECKS[gid].__name__.rsplit(".", 1)[1]  # g01_cuda_abi
    assert module.startswith(f"g{n:02d}_")
    assert (ROOT / "tests" / "checks" / f"test_{module}.py").is_file()


def test_every_gotcha_is_exercised_by_a_fixture_with_a_non_pass_finding():
    kb = load()
    seen: set[str] = set()
    for name in bf.SCENARIOS:
        findings = sparkops.checks.judge(load_facts_fixture(name), kb, bf.WORKLOADS[name]).findings
        seen |= {f.gotcha for f in findings if f.status.value != "pass"}
    assert set(GIDS) <= seen, f"no fixture shows a non-pass finding for {sorted(set(GIDS) - seen)}"


def test_every_gotcha_fails_or_warns_in_some_fixture_or_test_scenario():
    """Stronger than non-pass: the warn/fail paths of the fixture-backed gotchas are replayed."""
    kb = load()
    hit: set[str] = set()
    for name in bf.SCENARIOS:
        findings = sparkops.checks.judge(load_facts_fixture(name), kb, bf.WORKLOADS[name]).findings
        hit |= {f.gotcha for f in findings if f.status.value in ("fail", "warn")}
    assert {"G1", "G2", "G3", "G6", "G8", "G9", "G10"} <= hit


_T_CALL = re.compile(r"""\.t\(\s*(["'])([A-Za-z0-9_.]+)\1\s*\)""")


def _threshold_keys() -> set[str]:
    keys: set[str] = set()
    for path in SRC.rglob("*.py"):
        keys |= {m.group(2) for m in _T_CALL.finditer(path.read_text(encoding="utf-8"))}
    return keys


def test_threshold_scan_finds_the_checks_keys():
    keys = _threshold_keys()
    assert {"g3.os_reserve_gb", "g4.hot_c", "g6.near_capacity_fraction", "g1.cuda_lib_wheels"} <= keys


@pytest.mark.parametrize("key", sorted(_threshold_keys()))
def test_every_threshold_referenced_in_code_exists(key):
    value = load().t(key)
    assert value is not None
