"""The command contract: every command lives in sparkops.commands, returns a result with
render(format) and exit_code(), and `--format json` prints exactly what `--json` prints."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES
from sparkops import api, cli, front
from sparkops.commands.contract import OutputFormat, Result
from sparkops.report.schemas import SCHEMAS, json_schema

SRC = Path(__file__).parents[1] / "src" / "sparkops"
FRONT_ENDS = ("commands", "cli.py", "front.py", "__main__.py", "mcp_server")  # may import sparkops.commands
FACTS = FIXTURES / "facts"


def run(*args: str):
    res = CliRunner().invoke(cli.app, list(args), standalone_mode=False, catch_exceptions=False)
    return res, res.return_value


def command_modules() -> list[str]:
    import sparkops.commands as pkg

    return sorted(f"sparkops.commands.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)
                  if not m.name.startswith("_") and m.name != "contract")


def result_classes() -> list[type[Result]]:
    seen = []
    for module in command_modules():
        for obj in vars(importlib.import_module(module)).values():
            if isinstance(obj, type) and issubclass(obj, Result) and obj is not Result and obj not in seen:
                seen.append(obj)
    return seen


def test_every_command_module_is_in_the_table_and_the_table_names_only_them():
    listed = set(front.LAZY.values())
    assert all(m.startswith("sparkops.commands.") for m in listed), listed
    # soak is registered on the thermal sub-app by sparkops.commands.thermal, not on the main app
    assert set(command_modules()) - listed == {"sparkops.commands.soak"}
    assert not list(SRC.glob("*/command.py")), "a feature's command.py belongs in sparkops/commands/"


def test_no_library_module_imports_the_commands():
    """Front ends import the commands; features and the pipeline never do."""
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in FRONT_ENDS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{rel}: {n}" for n in names if n == "sparkops.commands" or n.startswith("sparkops.commands.")]
    assert not offenders, offenders


def test_every_result_offers_json_and_names_a_registered_schema():
    classes = result_classes()
    assert len(classes) >= 12, [c.__name__ for c in classes]
    for cls in classes:
        assert OutputFormat.json in cls.formats, cls.__name__
        assert set(cls.formats) <= set(OutputFormat), cls.__name__
        if cls.schema is not None:
            assert cls.schema in SCHEMAS, f"{cls.__name__}.schema {cls.schema!r} is not registered"
            assert json_schema(cls.schema)["type"] == "object"


def test_a_format_the_command_does_not_offer_is_refused():
    res = Result(None)
    with pytest.raises(ValueError, match="this command prints table | json"):
        res.render(OutputFormat.markdown)
    out = CliRunner().invoke(cli.app, ["plan", "--target", "dgx-spark", "-w", "qlora 8b", "--format", "lines"],
                             standalone_mode=False)
    assert "'lines' is not one of 'table', 'json'" in str(out.exception)  # a usage error: exit 3 in cli.main


@pytest.mark.parametrize("args", [
    ["stack", "--facts", str(FACTS / "gb10_torchao_013.json")],
    ["stack", "--facts", str(FACTS / "gb10_ngc_2509_healthy.json")],
    ["triage", "gpu", "--facts", str(FACTS / "no_gpu.json")],
    ["triage", "gpu", "--facts", str(FACTS / "h200_device_recorded.json")],
    ["plan", "--target", "dgx-spark", "-w", "qlora llama-3.1-70b seq 8192 bs 1 gc"],
    ["plan", "--target", "dgx-spark", "-w", "full llama-3.1-70b seq 8192"],
    ["plan", "--serve", "--target", "dgx-spark", "-w", "vllm serve Qwen/Qwen3-8B --max-model-len 32768"],
    ["setup", "--use", "unsloth"],
    ["setup", "bare-pip", "--uv"],
    ["thermal", "analyze", str(FIXTURES / "raw" / "thermal" / "gb10_throttling.csv")],
    ["thermal", "analyze", str(FIXTURES / "raw" / "thermal" / "gb10_normal_plateau.csv")],
])
def test_format_json_is_the_json_flag(args):
    """`--format json` and the older `--json` print the same bytes and exit alike; the table's exit
    code is the JSON's too (one result, two renderings)."""
    flag, rc_flag = run(*args, "--json")
    fmt, rc_fmt = run(*args, "--format", "json")
    table, rc_table = run(*args)
    assert flag.stdout == fmt.stdout and json.loads(fmt.stdout)
    assert rc_flag == rc_fmt == rc_table and isinstance(rc_fmt, int)
    assert table.stdout != fmt.stdout


def test_explain_json_is_the_catalog_entry():
    out, rc = run("explain", "G3", "--format", "json")
    assert rc == 0 and json.loads(out.stdout) == api.explain("G3").model_dump(mode="json")
    text, rc = run("explain", "G3")
    assert rc == 0 and text.stdout == front.explain_text("G3")


@pytest.mark.parametrize("quick", [True, False])
def test_the_cli_and_the_mcp_tools_collect_with_the_apis_defaults(quick):
    """One owner of the collection defaults: the CLI's and the MCP tools' options are api.collect_options'."""
    from sparkops.commands._common import collect_options
    from sparkops.mcp_server import tools

    want = api.collect_options(quick=quick)
    assert collect_options(None, quick, None, False) == want
    assert tools._collect_options(None, quick, None, False, None) == want
    kb = api.knowledge()
    assert want.budget_s == float(kb.thresholds.probes.budget_s) and want.depth == ("quick" if quick else "full")
    assert want.counter_window_s == (0.1 if quick else 1.0)
    boxed = api.collect_options(quick=quick, container="ngc", engine="podman")
    assert boxed.budget_s == float(kb.thresholds.setup.container_budget_s) and boxed.container_engine == "podman"
    assert api.collect_options(budget_s=7).budget_s == 7.0


def test_an_unknown_engine_is_the_users_error():
    from sparkops.core.errors import InputError

    with pytest.raises(InputError, match="--engine lxc: docker or podman"):
        api.collect_options(engine="lxc")


def test_stack_and_triage_return_their_models():
    from sparkops.report.views import StackView, TriageView

    st = api.stack(FACTS / "gb10_torchao_013.json")
    tri = api.triage_gpu(FACTS / "no_gpu.json")
    assert isinstance(st, StackView) and isinstance(tri, TriageView)
    assert st.G9.gotcha == "G9" and [h.number for h in tri.hypotheses] == [1, 2, 3, 4, 5]
