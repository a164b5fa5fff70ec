"""The layers, enforced: collect -> judge -> report, and features beside them, never backwards.

This file is the one statement of the allowed import graph (README "How it is built" describes
it). Every import in ``src/sparkops`` counts, lazy ones inside functions and ``TYPE_CHECKING``
ones too: a lazy import is still a dependency, it only moves the cost.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "sparkops"

# The pipeline, bottom up. ``sparkops`` itself (its __init__ holds only ``__version__``) is core.
CORE = "core"
PIPELINE: dict[str, set[str]] = {
    "core": set(),                                    # Status, Finding, Verdict, exit codes, units, errors
    "knowledge": {"core"},                            # the data the tool judges by, typed
    "facts": {"core", "knowledge"},                   # what was read: the snapshot model, the workload
    "probes": {"core", "knowledge", "facts"},         # collect: impure, bounded, never raising
    "checks": {"core", "knowledge", "facts"},         # judge: pure functions of facts (+ workload)
    "report": {"core", "knowledge", "facts", "checks"},  # report: the judgment as contracts and text
}
# Features build on the whole pipeline, and on the other features named here (a DAG).
FEATURES: dict[str, set[str]] = {
    "planner": set(),
    "monitor": set(),
    "diagnose": set(),
    "setup": set(),
    "bandwidth": {"setup"},                            # --container resolves images as setup does
    "fix": set(),
    "postmortem": {"monitor"},
    "soak": {"monitor", "bandwidth"},
    "exporter": {"monitor", "soak"},
    "fleet": {"planner", "setup", "bandwidth"},
}
API = "api"  # the library façade: the pipeline and every feature, for the front ends
FRONT_ENDS = {"cli", "front", "__main__", "commands", "mcp_server"}  # parse, call, render, exit


def allowed(unit: str) -> set[str]:
    if unit in PIPELINE:
        return PIPELINE[unit] | {unit}
    if unit in FEATURES:
        return set(PIPELINE) | FEATURES[unit] | {unit}
    if unit == API:
        return set(PIPELINE) | set(FEATURES) | {API}
    if unit in FRONT_ENDS:
        return set(PIPELINE) | set(FEATURES) | {API} | FRONT_ENDS
    raise AssertionError(f"sparkops.{unit} is in no layer: add it to tests/test_layers.py")


def unit_of(module: str) -> str:
    """The layer unit of a dotted module name: its top-level package under ``sparkops``."""
    parts = module.split(".")
    return CORE if len(parts) == 1 else parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every sparkops import in ``path``, relative ones resolved."""
    mod = module_name(path)
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            if target == "sparkops":  # "from sparkops import setup" imports the unit "setup"
                out += [(node.lineno, f"sparkops.{a.name}") for a in node.names if a.name != "__version__"]
    return [(line, m) for line, m in out if m == "sparkops" or m.startswith("sparkops.")]


def backward_imports() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src_unit = unit_of(module_name(path))
        ok = allowed(src_unit)
        for line, target in imports_of(path):
            if unit_of(target) not in ok:
                bad.append(f"{path.relative_to(SRC)}:{line}: {src_unit} imports {target} ({unit_of(target)})")
    return bad


def test_no_import_points_backwards():
    bad = backward_imports()
    assert not bad, "imports against the layers (tests/test_layers.py states the allowed graph):\n" + "\n".join(bad)


def test_every_package_has_a_layer():
    """A new package or top-level module must be placed in the graph, not slip in unjudged."""
    for child in PACKAGE.iterdir():
        if child.name.startswith(("_", ".")) and child.name != "__main__.py":
            continue
        if child.is_dir() and (child / "__init__.py").exists() or child.suffix == ".py":
            allowed(unit_of(f"sparkops.{child.stem}"))


def test_the_core_imports_nothing_of_the_tool():
    for path in (PACKAGE / "core").rglob("*.py"):
        assert all(unit_of(m) == CORE for _, m in imports_of(path)), path


def test_features_never_import_the_api():
    for feature in FEATURES:
        for path in (PACKAGE / feature).rglob("*.py") if (PACKAGE / feature).is_dir() else [PACKAGE / f"{feature}.py"]:
            assert "sparkops.api" not in {m for _, m in imports_of(path)}, path


@pytest.mark.parametrize("source, target", [
    ("sparkops.checks.g05_bandwidth", "sparkops.bandwidth.probe"),   # a check reading a feature
    ("sparkops.checks.base", "sparkops.report.formats"),             # judging from the report layer
    ("sparkops.probes.gpu", "sparkops.checks.identity"),             # a probe interpreting
    ("sparkops.core.verdict", "sparkops.facts.model"),               # the core reaching up
    ("sparkops.planner.plan", "sparkops.api"),                       # a feature through the façade
    ("sparkops.soak.run", "sparkops.fleet.judge"),                   # a feature outside its DAG
])
def test_the_rule_rejects_what_it_must(source, target):
    """The graph is not vacuous: the backward edges this round removed would each be caught."""
    assert unit_of(target) not in allowed(unit_of(source))


@pytest.mark.parametrize("source, target", [
    ("sparkops.fleet.judge", "sparkops.planner.preflight"),
    ("sparkops.report.build", "sparkops.checks"),
    ("sparkops.api", "sparkops.diagnose"),
    ("sparkops.commands.plan", "sparkops.api"),
    ("sparkops.cli", "sparkops.api"),
])
def test_the_rule_allows_what_it_must(source, target):
    assert unit_of(target) in allowed(unit_of(source))
