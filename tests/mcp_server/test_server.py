"""``spark-ops mcp`` end to end: the server runs as a subprocess (``python -m sparkops mcp``) and the
official SDK's stdio client drives it, as an agent's client would. Results are compared on their wire
form (``isError``, ``structuredContent``...) with what the CLI prints for the same question.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Submodules, not a bare `mcp`: keep test folders from ever passing for the SDK package.
stdio = pytest.importorskip("mcp.client.stdio", reason="the MCP SDK is not installed (the `mcp` extra)")
client_pkg = pytest.importorskip("mcp.client")  # Client: SDK 2.x
client_session = pytest.importorskip("mcp.client.session")  # ClientSession: SDK 1.x (and 2.x)
mcp_exceptions = pytest.importorskip("mcp.shared.exceptions")

import anyio  # noqa: E402 - after the skip: anyio comes with the SDK

from conftest import FIXTURES  # noqa: E402
from sparkops import api  # noqa: E402
from sparkops.probes import PROBES  # noqa: E402

PROTOCOL_ERROR = getattr(mcp_exceptions, "MCPError", None) or mcp_exceptions.McpError  # 2.x / 1.x
SECRET = "hf_Zq7secretvalue0123456789"
TOOLS = {"preflight", "explain", "diagnose", "plan", "plan_serve", "collect_facts", "postmortem"}


def _wire(result) -> dict:
    """A result as it travels (camelCase keys), the same for SDK 1.x and 2.x objects."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


class Session:
    """The calls a test makes, answering in wire form."""

    def __init__(self, client) -> None:
        self.client = client

    async def tools(self) -> list[dict]:
        return _wire(await self.client.list_tools())["tools"]

    async def call(self, name: str, arguments: dict | None = None) -> dict:
        return _wire(await self.client.call_tool(name, arguments or {}))

    async def resources(self) -> list[dict]:
        return _wire(await self.client.list_resources())["resources"]

    async def templates(self) -> list[dict]:
        return _wire(await self.client.list_resource_templates())["resourceTemplates"]

    async def read(self, uri: str) -> dict:
        return _wire(await self.client.read_resource(uri))["contents"][0]


@contextlib.asynccontextmanager
async def _connect(params):
    if hasattr(client_pkg, "Client"):  # SDK 2.x: the high-level client negotiates the protocol itself
        async with client_pkg.Client(params) as client:
            yield client
    else:  # SDK 1.x
        async with stdio.stdio_client(params) as (read, write), \
                client_session.ClientSession(read, write) as client:
            await client.initialize()
            yield client


def serve(cwd: Path, scenario, env: dict | None = None, limit_s: float = 180):
    """Start ``python -m sparkops mcp`` in ``cwd``, run ``scenario(session)`` against it, return its value."""
    params = stdio.StdioServerParameters(command=sys.executable, args=["-m", "sparkops", "mcp"], cwd=str(cwd),
                                         env=env)

    async def main():
        with anyio.fail_after(limit_s):
            async with _connect(params) as client:
                return await scenario(Session(client))

    return anyio.run(main)


def structured(result: dict) -> dict:
    """The structured result, after checking that the text block carries the same JSON."""
    assert not result.get("isError"), result["content"]
    text = json.loads(result["content"][0]["text"])
    assert text == result["structuredContent"]
    return result["structuredContent"]


def error_text(result: dict) -> str:
    assert result.get("isError") is True, result
    return result["content"][0]["text"]


def spark_ops(*args: str, cwd: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True, timeout=120,
                       cwd=cwd)
    assert p.returncode in (0, 1, 2), p.stderr
    return json.loads(p.stdout)


def test_lists_five_documented_tools_and_the_knowledge_resources(tmp_path):
    async def scenario(s: Session):
        return await s.tools(), await s.resources(), await s.templates()

    tools, resources, templates = serve(tmp_path, scenario)
    assert {t["name"] for t in tools} == TOOLS
    for t in tools:
        assert len(t["description"]) > 80, t["name"]
        for name, prop in t["inputSchema"]["properties"].items():
            assert prop.get("description"), f"{t['name']}({name}) is undocumented"
        ann = t["annotations"]
        assert ann["destructiveHint"] is False
        # writes a file only where a *_path argument names one: those two are not advertised read-only
        writes = {p for p in t["inputSchema"]["properties"] if p in ("report_path", "output_path")}
        assert ann["readOnlyHint"] is (not writes), t["name"]
    uris = {r["uri"] for r in resources}
    assert {"sparkops://gotchas", "sparkops://stack-matrix", "sparkops://schema/report",
            "sparkops://schema/facts"} <= uris
    assert all(r["mimeType"] == "application/json" for r in resources)
    assert [t["uriTemplate"] for t in templates] == ["sparkops://gotchas/{gotcha_id}"]


@pytest.mark.parametrize(("fixture", "workload"), [
    ("gb10_page_cache", "qlora llama-3.1-70b seq 8192"),
    ("gb10_bare_pip_cu128", None),
    ("gb10_two_node_tp2", "vllm tp 2 on 2 nodes"),
    ("no_gpu", None),
])
def test_preflight_on_a_snapshot_is_the_cli_report(tmp_path, fixture, workload):
    facts = str(FIXTURES / "facts" / f"{fixture}.json")
    args = {"facts_path": facts} | ({"workload": workload} if workload else {})

    async def scenario(s: Session):
        return await s.call("preflight", args)

    got = structured(serve(tmp_path, scenario))
    assert list(tmp_path.iterdir()) == []  # no env-report.json unless report_path asks for one
    cli = spark_ops("preflight", "--facts", facts, *(["--workload", workload] if workload else []), "--json",
                    "--report", str(tmp_path / "cli" / "env-report.json"), cwd=tmp_path)
    got.pop("generated_at"), cli.pop("generated_at")
    assert got == cli


def test_explain_plan_and_diagnose_answer_as_the_cli(tmp_path):
    plan_args = {"model": "llama-3.1-8b", "method": "qlora", "seq_len": 4096, "target": "dgx-spark"}

    async def scenario(s: Session):
        return [await s.call("explain", {"gotcha": g}) for g in ("G3", "7", "identity")], \
            await s.call("plan", plan_args)

    explained, planned = serve(tmp_path, scenario)
    kb = api.knowledge()
    expected = [kb.gotchas[g].model_dump(mode="json") for g in ("G3", "G7", "identity")]
    assert [structured(r) for r in explained] == expected
    cli = spark_ops("plan", "--model", "llama-3.1-8b", "--method", "qlora", "--seq-len", "4096",
                    "--target", "dgx-spark", "--json", cwd=tmp_path)
    assert structured(planned) == cli


def test_diagnose_maps_a_log_to_its_g_number(tmp_path):
    try:
        from sparkops.diagnose import diagnose_text
    except ImportError:
        pytest.skip("sparkops.diagnose.diagnose_text is not built yet (issue 5)")
    log = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
           "    import flash_attn\n"
           "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n")

    snapshot = FIXTURES / "facts" / "gb10_bare_pip_cu128.json"

    async def scenario(s: Session):
        return await s.call("diagnose", {"text": log}), \
            await s.call("diagnose", {"text": log, "facts_path": str(snapshot)})

    alone, with_facts = serve(tmp_path, scenario)
    got = structured(alone)
    assert got == diagnose_text(log, source="-", facts=None).model_dump(mode="json")
    assert got["findings"] and got["findings"][0]["gotcha"] in ("G1", "G2")
    assert structured(with_facts) == \
        diagnose_text(log, source="-", facts=api.load_facts(snapshot)).model_dump(mode="json")


def test_collect_facts_live_quick_is_redacted_and_replayable(tmp_path):
    env = {"HF_TOKEN": SECRET, "NVIDIA_API_KEY": SECRET, "PATH": os.environ.get("PATH", "")}
    snap = tmp_path / "snap.json"

    async def scenario(s: Session):
        plain = await s.call("collect_facts", {"offline": True, "budget_s": 30})
        saved = await s.call("collect_facts", {"offline": True, "budget_s": 30, "output_path": str(snap)})
        judged = await s.call("preflight", {"facts_path": str(snap)})
        return plain, saved, judged

    plain, saved, judged = serve(tmp_path, scenario, env=env)
    facts = structured(plain)
    assert facts["depth"] == "quick"
    assert set(facts["probes"]) == set(PROBES)  # every probe said how it went
    assert SECRET not in plain["content"][0]["text"]
    assert facts["host"]["env"].get("NVIDIA_API_KEY") == "***"
    assert api.load_facts(snap).model_dump(mode="json") == structured(saved)
    assert SECRET not in snap.read_text()
    assert structured(judged)["facts_source"] == str(snap)


def test_live_preflight_is_bounded_by_its_budget(tmp_path):
    """A target interpreter that never answers: the call still returns, with G1 unknown, not a hang."""
    hang = str(FIXTURES / "bin" / "python-hang")

    async def scenario(s: Session):
        t0 = time.monotonic()
        res = await s.call("preflight", {"python": hang, "budget_s": 5, "offline": True})
        return res, time.monotonic() - t0

    res, took = serve(tmp_path, scenario)
    rep = structured(res)
    assert took < 60
    assert rep["checks"]["G1"].startswith("unknown:")
    assert "python-hang" in rep["target_python"]


def test_bad_calls_are_clear_tool_errors_and_the_server_survives(tmp_path):
    not_json = tmp_path / "notes.txt"
    not_json.write_text("not a snapshot")

    async def scenario(s: Session):
        out = {
            "unknown gotcha": await s.call("explain", {"gotcha": "G11"}),
            "missing argument": await s.call("explain", {}),
            "negative budget": await s.call("plan", {"model": "llama-3.1-8b", "budget_gb": -5}),
            "unknown model": await s.call("plan", {"model": "no-such-model-xyz", "target": "dgx-spark"}),
            "missing file": await s.call("preflight", {"facts_path": str(tmp_path / "nope.json")}),
            "not a snapshot": await s.call("preflight", {"facts_path": str(not_json)}),
            "unknown method": await s.call("preflight", {"facts_path": str(not_json), "method": "banana"}),
            "zero budget_s": await s.call("collect_facts", {"budget_s": 0}),
            "wrong type": await s.call("preflight", {"tp": "two"}),
            "unknown tool": await s.call("setup_exec", {}),
        }
        try:
            await s.read("sparkops://gotchas/G99")
        except PROTOCOL_ERROR as exc:
            out["unknown resource"] = str(exc)
        out["still answers"] = await s.call("explain", {"gotcha": "G1"})
        out["resource after"] = await s.read("sparkops://gotchas/G1")
        return out

    out = serve(tmp_path, scenario)
    assert "no gotcha 'G11'; known: identity, G1" in error_text(out["unknown gotcha"])
    assert "gotcha" in error_text(out["missing argument"])
    assert "budget_gb" in error_text(out["negative budget"])
    assert "unknown model 'no-such-model-xyz'" in error_text(out["unknown model"])
    assert "cannot read" in error_text(out["missing file"])
    assert "is not JSON" in error_text(out["not a snapshot"])
    assert "unknown method 'banana'" in error_text(out["unknown method"])
    assert "budget_s" in error_text(out["zero budget_s"])
    assert "tp" in error_text(out["wrong type"])
    assert "setup_exec" in error_text(out["unknown tool"])
    assert "no gotcha 'G99'" in out["unknown resource"]
    for text in (error_text(r) for k, r in out.items() if isinstance(r, dict) and r.get("isError")):
        assert "Traceback" not in text
    assert structured(out["still answers"])["id"] == "G1"
    assert json.loads(out["resource after"]["text"])["id"] == "G1"


def test_resources_are_the_packaged_knowledge_and_the_cli_schemas(tmp_path):
    async def scenario(s: Session):
        uris = ["sparkops://gotchas", "sparkops://gotchas/g3", "sparkops://stack-matrix",
                "sparkops://schema/report", "sparkops://schema/facts", "sparkops://schema/plan"]
        return {u: await s.read(u) for u in uris}

    got = serve(tmp_path, scenario)
    kb = api.knowledge()
    catalog = json.loads(got["sparkops://gotchas"]["text"])
    assert catalog["version"] == kb.catalog_version
    assert catalog["last_verified"] == kb.catalog_last_verified.isoformat()
    assert [g["id"] for g in catalog["gotchas"]] == list(kb.gotchas)
    assert json.loads(got["sparkops://gotchas/g3"]["text"]) == kb.gotchas["G3"].model_dump(mode="json")
    assert json.loads(got["sparkops://stack-matrix"]["text"]) == kb.matrix.model_dump(mode="json")
    for name in ("report", "facts"):  # what `spark-ops schema` prints (test_cli.py pins the checked-in copy)
        assert json.loads(got[f"sparkops://schema/{name}"]["text"]) == spark_ops("schema", name, cwd=tmp_path)
    assert "verdict" in json.loads(got["sparkops://schema/plan"]["text"])["properties"]
    assert all(c["mimeType"] == "application/json" for c in got.values())


# ---- in process: the guard around every tool (bound, error mapping)

def _call_guarded(spec, **arguments):
    from sparkops.mcp_server import server

    return anyio.run(lambda: server._guarded(spec)(**arguments))


def test_a_call_past_its_bound_comes_back_as_a_tool_error(monkeypatch):
    from sparkops.mcp_server import server, tools

    def slow() -> dict:
        """Sleeps past the bound."""
        time.sleep(3)
        return {}

    monkeypatch.setattr(server, "BASE_BOUND_S", 0.3)
    spec = tools.ToolSpec(slow, "slow", open_world=False, writes_on_request=False, collects=False)
    t0 = time.monotonic()
    with pytest.raises(server.ToolError, match=r"slow did not finish within 0\.3 s"):
        _call_guarded(spec)
    assert time.monotonic() - t0 < 2.5


def test_an_unexpected_failure_is_a_tool_error_that_says_what_happened():
    from sparkops.mcp_server import server, tools

    def broken() -> dict:
        """Fails the way a bug would."""
        raise ZeroDivisionError("division by zero")

    spec = tools.ToolSpec(broken, "broken", open_world=False, writes_on_request=False, collects=False)
    with pytest.raises(server.ToolError, match="internal error: ZeroDivisionError: division by zero"):
        _call_guarded(spec)
