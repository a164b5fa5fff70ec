"""The import budget: what `spark-ops` loads before it answers, counted in a fresh process.

Each scenario runs the real entry point (``sparkops.front.main``) in a subprocess and lists the
modules it added to ``sys.modules`` beyond a bare interpreter's. :data:`BUDGET` is the one place
that says what each path may load; a new import on a fast path fails here with the module named.
Speed itself is measured by ``benchmarks/bench_preflight.py``, never asserted in a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Heavy or off-path top-level packages no scenario below may load in the main process.
NEVER = frozenset({"torch", "numpy", "mcp", "httpx", "matplotlib", "asyncio", "multiprocessing", "unittest",
                   "sqlite3", "xml", "http", "ssl", "concurrent", "tkinter"})
NEVER_EXCEPT: dict[str, frozenset[str]] = {}  # scenario -> what it may load of NEVER after all (none today)
FEATURES = ("sparkops.diagnose", "sparkops.planner", "sparkops.fleet", "sparkops.mcp_server", "sparkops.monitor",
            "sparkops.setup")
# preflight --quick is run without typer (sparkops.front.fast_preflight) and its models on the lite runtime
# (sparkops.core.lite): no pydantic. With SPARKOPS_NO_LITE=1 it keeps pydantic's stack, and only that.
MODELS = frozenset({"pydantic", "pydantic_core", "annotated_types", "typing_extensions", "typing_inspection"})
QUICK_DEPS = frozenset({"yaml", "packaging", "pynvml", "elftools"})

# scenario -> (argv; sparkops modules allowed: exact set, or None for "any but the forbidden prefixes";
#              forbidden sparkops prefixes; third-party top-level packages allowed; most stdlib
#              top-level modules; most modules in all)
BUDGET: dict[str, tuple[list[str], frozenset[str] | None, tuple[str, ...], frozenset[str], int, int]] = {
    "import sparkops": (["IMPORT"], frozenset({"sparkops"}), (), frozenset(), 0, 1),
    "--help": (["--help"], frozenset({"sparkops", "sparkops.front"}), (), frozenset(), 4, 8),
    "version": (["version"], frozenset({"sparkops", "sparkops.front"}), (), frozenset(), 4, 8),
    "schema report": (["schema", "report"], frozenset({"sparkops", "sparkops.front"}), (), frozenset(), 4, 8),
    "explain G3": (["explain", "G3"], frozenset({"sparkops", "sparkops.front", "sparkops.report",
                                                 "sparkops.report.gotcha_text"}), (), frozenset({"yaml"}), 30, 70),
    # measured 2026-12-04 on the 2-core box: 161 modules, 66 stdlib top-level (262 and 89 on pydantic)
    "preflight --quick": (["preflight", "--quick", "--offline", "--format", "lines"], None,
                          FEATURES + ("sparkops.bandwidth.probe",), QUICK_DEPS, 80, 185),
    "preflight --quick on pydantic": (["preflight", "--quick", "--offline", "--format", "lines"], None,
                                      FEATURES + ("sparkops.bandwidth.probe",), MODELS | QUICK_DEPS, 110, 280),
}
SCENARIO_ENV = {"preflight --quick on pydantic": {"SPARKOPS_NO_LITE": "1"}}  # scenario -> extra environment

DRIVER = r"""
import atexit, json, sys
base = set(sys.modules)
out, args = sys.argv[1], sys.argv[2:]

def dump():
    with open(out, "w") as f:
        json.dump({"modules": sorted(set(sys.modules) - base)}, f)

atexit.register(dump)  # registered first: runs last, after the tool's own exit handlers
sys.argv = ["spark-ops", *args]
if args == ["IMPORT"]:
    import sparkops
else:
    from sparkops.front import main
    main(args)
"""


def loaded(tmp_path: Path, argv: list[str], env: dict[str, str] | None = None) -> dict:
    out = tmp_path / "modules.json"
    extra = ["--report", str(tmp_path / "r.json"), "--config", str(tmp_path)] if argv[0] == "preflight" else []
    p = subprocess.run([sys.executable, "-c", DRIVER, str(out), *argv, *extra], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "SPARKOPS_NO_FAST": "", "SPARKOPS_NO_LITE": "",
                                          **(env or {})}, timeout=180)
    assert p.returncode in (0, 1, 2), p.stderr
    return json.loads(out.read_text())


def classify(modules: list[str]) -> tuple[list[str], set[str], set[str]]:
    stdlib = sys.stdlib_module_names
    tops = {m.split(".")[0] for m in modules}
    ours = sorted(m for m in modules if m.split(".")[0] == "sparkops")
    third = {t for t in tops if t not in stdlib and t != "sparkops" and not t.startswith("_") and t != "cython_runtime"}
    std = {t for t in tops if t in stdlib}
    return ours, third, std


@pytest.mark.parametrize("scenario", sorted(BUDGET))
def test_each_path_loads_only_its_budget(tmp_path, scenario):
    argv, ours_allowed, forbidden, third_allowed, std_max, total_max = BUDGET[scenario]
    got = loaded(tmp_path, argv, SCENARIO_ENV.get(scenario))
    modules = got["modules"]
    ours, third, std = classify(modules)
    if ours_allowed is not None:
        assert set(ours) <= ours_allowed, f"{scenario} loads {sorted(set(ours) - ours_allowed)}"
    bad = [m for m in ours if m.startswith(forbidden)] if forbidden else []
    assert not bad, f"{scenario} loads {bad}"
    assert third <= third_allowed, f"{scenario} loads third-party {sorted(third - third_allowed)}"
    heavy = {m.split(".")[0] for m in modules} & (NEVER - NEVER_EXCEPT.get(scenario, frozenset()))
    assert not heavy, f"{scenario} loads {sorted(heavy)}"
    assert len(std) <= std_max, f"{scenario} loads {len(std)} stdlib top-level modules: {sorted(std)}"
    assert len(modules) <= total_max, f"{scenario} loads {len(modules)} modules (budget {total_max})"


def test_the_budget_catches_a_heavy_import(tmp_path):
    """The budget is not vacuous: the typer path of --help loads typer, which --help's budget forbids."""
    out = tmp_path / "m.json"
    code = DRIVER.replace("from sparkops.front import main", "from sparkops.cli import main")
    subprocess.run([sys.executable, "-c", code, str(out), "--help"], capture_output=True, text=True, timeout=60)
    _ours, third, _std = classify(json.loads(out.read_text())["modules"])
    assert "typer" in third and not third <= BUDGET["--help"][3]
