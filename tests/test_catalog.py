"""The catalog is a contract: every G-number has its text, its check, its tests, a fixture that
exercises it, and every threshold the code asks for exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel

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


def _chain(node: ast.AST) -> list[str] | None:
    """``kb.thresholds.g3.os_reserve_gb`` -> ["g3", "os_reserve_gb"]: the attributes after ``thresholds``."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    parts.reverse()
    return parts[parts.index("thresholds") + 1:] if "thresholds" in parts else None


def _threshold_keys() -> set[str]:
    """Every ``<anything>.thresholds.<section>[.<key>...]`` chain in the source (AST, not text: a chain
    split over lines or wrapped in calls is still found), as the longest dotted key it names."""
    keys: set[str] = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and id(node) not in inner:
                chain = _chain(node)
                if chain:
                    keys.add(".".join(chain))
    return keys


def test_threshold_scan_finds_the_checks_keys():
    keys = _threshold_keys()
    assert {"g3.os_reserve_gb", "g4.hot_c", "g6.near_capacity_fraction", "g1.cuda_lib_wheels"} <= keys


def _resolve(model: type[BaseModel], chain: list[str]) -> None:
    """Walk the typed model: every name must be a field (or a property/method of the model it is on)."""
    for i, name in enumerate(chain):
        if name in model.model_fields:
            ann = model.model_fields[name].annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                model = ann
                continue
            assert i == len(chain) - 1 or chain[i + 1] in dir(ann), f"{'.'.join(chain)}: {name} is a leaf"
            return
        assert hasattr(model, name), f"{'.'.join(chain)}: {model.__name__} has no {name!r}"
        return


@pytest.mark.parametrize("key", sorted(_threshold_keys()))
def test_every_threshold_referenced_in_code_exists(key):
    from sparkops.knowledge.thresholds import Thresholds

    _resolve(Thresholds, key.split("."))
    value = load().thresholds
    for name in key.split("."):
        value = getattr(value, name)
    assert value is not None


def test_the_scan_catches_a_misspelled_threshold():
    """The scan is what makes a typo an error: a misspelled chain does not resolve."""
    from sparkops.knowledge.thresholds import Thresholds

    with pytest.raises(AssertionError, match="has no 'page_cache_warn_gib'"):
        _resolve(Thresholds, ["g3", "page_cache_warn_gib"])
    with pytest.raises(AssertionError):
        _resolve(Thresholds, ["g33", "hot_c"])
