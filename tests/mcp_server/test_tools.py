"""The MCP tools as plain functions (no SDK needed): arguments reach the library, bad input says why,
nothing is written unless asked, and ``spark-ops mcp`` without the SDK names the extra to install."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic.fields import FieldInfo

from conftest import FIXTURES
from sparkops import api
from sparkops.core.errors import InputError
from sparkops.mcp_server import tools

PAGE_CACHE = FIXTURES / "facts" / "gb10_page_cache.json"
HEALTHY = FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"


def test_preflight_passes_the_workload_through_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rep = tools.preflight(workload="lora llama-3.1-8b seq 4096", tp=2, nodes=2, components=["vllm"],
                          precision="NVFP4", facts_path=str(PAGE_CACHE))
    wl = rep["workload"]
    assert (wl["method"], wl["model"], wl["seq_len"]) == ("lora", "llama-3.1-8b", 4096)
    assert (wl["tensor_parallel"], wl["nodes"], wl["precision"]) == (2, 2, "nvfp4")
    assert "vllm" in wl["components"]
    assert rep["facts_source"] == str(PAGE_CACHE)
    assert sorted(rep["checks"]) == sorted(f"G{i}" for i in range(1, 11))
    assert rep["plan"]["peak_gb"] > 0  # a fine-tune with a model: the planner sized it for G3
    assert list(tmp_path.iterdir()) == []  # no env-report.json unless report_path says so


def test_preflight_fields_override_the_text():
    rep = tools.preflight(workload="qlora 70b seq 8192", method="full", seq_len=1024, facts_path=str(HEALTHY))
    assert (rep["workload"]["method"], rep["workload"]["seq_len"]) == ("full", 1024)


def test_preflight_writes_the_report_where_asked(tmp_path):
    target = tmp_path / "out" / "env-report.json"
    rep = tools.preflight(facts_path=str(HEALTHY), report_path=str(target))
    assert json.loads(target.read_text()) == rep


def test_a_report_that_cannot_be_written_is_an_input_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot write the report"):
        tools.preflight(facts_path=str(HEALTHY), report_path=str(blocker / "env-report.json"))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"facts_path": "/nonexistent/facts.json"}, "cannot read"),
    ({"facts_path": str(FIXTURES / "bin" / "python-hang")}, "is not JSON"),
    ({"facts_path": str(HEALTHY), "method": "banana"}, "unknown method 'banana'"),
    ({"facts_path": str(HEALTHY), "matrix_path": "/nonexistent/matrix.yaml"}, "cannot read the matrix"),
])
def test_preflight_bad_input_says_why(kwargs, message):
    with pytest.raises(InputError, match=message):
        tools.preflight(**kwargs)


@pytest.mark.parametrize("spelling", ["G3", "g3", "3", " G03 "])
def test_explain_accepts_the_spellings_of_a_g_number(spelling):
    entry = tools.explain(spelling)
    assert entry == api.knowledge().gotchas["G3"].model_dump(mode="json")
    assert {"symptom", "cause", "check", "fix", "last_verified"} <= entry.keys()


@given(st.integers(min_value=1, max_value=10), st.sampled_from(["G", "g", ""]),
       st.sampled_from(["", " ", "\t"]))
def test_every_g_number_spelling_finds_its_entry(n, prefix, pad):
    assert tools.explain(f"{pad}{prefix}{n}{pad}")["id"] == f"G{n}"


@given(st.text(max_size=20))
def test_explain_never_fails_other_than_with_an_input_error(text):
    try:
        entry = tools.explain(text)
    except InputError as exc:
        assert "known: identity, G1" in str(exc)
    else:
        assert entry["id"] in api.knowledge().gotchas


def test_plan_splits_comma_targets_and_takes_an_explicit_budget_first(tmp_path):
    res = tools.plan(model="llama-3.1-8b", method="lora", lora_targets=["q_proj,v_proj", " o_proj "],
                     budget_gb=50, facts_path=str(tmp_path / "never-read.json"))
    assert res["run"]["lora"]["targets"] == ["q_proj", "v_proj", "o_proj"]
    assert (res["budget"]["source"], res["budget_gb"]) == ("explicit", 50)
    assert res["verdict"] in ("fits", "tight", "does-not-fit")


def test_plan_budget_from_a_snapshot_and_from_a_target():
    from_facts = tools.plan(model="llama-3.1-8b", method="qlora", facts_path=str(HEALTHY))
    assert from_facts["budget"]["source"] == str(HEALTHY)
    from_target = tools.plan(model="llama-3.1-70b", method="full", target="dgx-spark")
    assert from_target["verdict"] == "does-not-fit"  # 70B full fine-tune: ~1 TB of states
    assert from_target["ladder"]


def test_the_plan_tools_pass_offline_to_the_hub_reader(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # only the tool's argument keeps the Hub closed here
    with pytest.raises(InputError, match=r"the Hugging Face Hub was not read \(--offline given\)"):
        tools.plan(model="acme/not-in-any-catalog", method="lora", target="dgx-spark", offline=True)
    with pytest.raises(InputError, match=r"unknown model.*the Hugging Face Hub was not read: --offline given"):
        tools.plan_serve(model="acme/not-in-any-catalog", target="dgx-spark", offline=True)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"model": "no-such-model-xyz", "target": "dgx-spark"}, "unknown model"),
    ({"model": "llama-3.1-8b", "target": "a-toaster"}, "no planning budget for target"),
    ({"model": "llama-3.1-8b", "optimizer": "magic", "target": "dgx-spark"}, "unknown optimizer"),
])
def test_plan_bad_input_says_why(kwargs, message):
    with pytest.raises(InputError, match=message):
        tools.plan(**kwargs)


def test_collect_facts_is_quick_by_default_and_saves_only_where_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    facts = tools.collect_facts(offline=True, budget_s=30)
    assert facts["depth"] == "quick"
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "snap.json"
    again = tools.collect_facts(offline=True, budget_s=30, output_path=str(out))
    assert api.load_facts(out).model_dump(mode="json") == again


def test_the_registry_exposes_exactly_the_read_only_tools():
    names = {spec.fn.__name__ for spec in tools.TOOLS}
    assert names == {"preflight", "explain", "diagnose", "plan", "plan_serve", "collect_facts", "postmortem"}
    for spec in tools.TOOLS:  # what agents read: a description, and a documented argument for every parameter
        assert spec.fn.__doc__ and len(spec.fn.__doc__) > 80, spec.fn.__name__
        hints = typing.get_type_hints(spec.fn, include_extras=True)
        for param in inspect.signature(spec.fn).parameters:
            meta = [m for m in getattr(hints[param], "__metadata__", ()) if isinstance(m, FieldInfo)]
            assert meta and meta[0].description, f"{spec.fn.__name__}({param}) has no description"


def test_without_the_sdk_the_command_names_the_extra_and_exits_3(tmp_path):
    code = ("import sys; sys.modules['mcp'] = None; from sparkops.cli import main; "
            "sys.argv = ['spark-ops', 'mcp']; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    assert 'pip install "dgx-spark-ops[mcp]"' in p.stderr
    assert "Traceback" not in p.stderr
    assert p.stdout == ""


def test_help_lists_the_mcp_command():
    p = subprocess.run([sys.executable, "-m", "sparkops", "mcp", "--help"], capture_output=True, text=True,
                       timeout=60, cwd=Path(__file__).parent)
    assert p.returncode == 0, p.stderr
    assert "Model Context Protocol" in p.stdout
