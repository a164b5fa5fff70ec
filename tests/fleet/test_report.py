"""fleet-report.json and its renderings: schema, round trip, the G-line contract, the fleet knowledge file."""

from __future__ import annotations

import importlib.util
import json
import re
from datetime import date
from pathlib import Path

from conftest import FIXTURES, load_facts_fixture
from sparkops.facts.workload import Workload
from sparkops.fleet import judge, render
from sparkops.fleet.model import FleetNode, FleetReport, MemberStatus
from sparkops.fleet.settings import load_fleet
from sparkops.knowledge import load

_spec = importlib.util.spec_from_file_location("build_fleet_fixtures", Path(__file__).with_name("build_fleet_fixtures.py"))
bff = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(bff)  # type: ignore[union-attr]

LINE = re.compile(r"^G(10|[1-9]) (PASS|FAIL|WARN|SKIP|INFO|UNKNOWN): fleet\.[a-z]+: \S")


def _report(b_name: str = "fleet_gb10_spark_b_drift", missing: bool = False) -> FleetReport:
    a, b = load_facts_fixture("fleet_gb10_spark_a"), load_facts_fixture(b_name)
    nodes = [FleetNode(rank=0, hostname="spark-a", local_rank=0, facts=a)]
    members = [MemberStatus(rank=0, joined=True, hostname="spark-a")]
    if missing:
        members.append(MemberStatus(rank=1, joined=False))
    else:
        nodes.append(FleetNode(rank=1, hostname="spark-b", local_rank=0, facts=b))
        members.append(MemberStatus(rank=1, joined=True, hostname="spark-b"))
    return judge.assemble(nodes=nodes, members=members, world_size=2, backend="nccl", launcher="torchrun",
                          bandwidth=None, transport=[], workload=Workload(), kb=load(), fk=load_fleet(),
                          join_timeout_s=30)


def test_json_round_trips_and_keeps_each_node_report_whole():
    rep = _report()
    back = FleetReport.model_validate_json(render.render_json(rep))
    assert back == rep
    data = json.loads(render.render_json(rep))
    assert data["verdict"] == "blocked" and data["fleet_verdict"] == "blocked"
    node_report = data["nodes"][1]["report"]
    assert set(node_report) >= {"platform", "checks", "headroom_gb", "verdict"}  # the env-report.json contract
    assert set(node_report["checks"]) == {f"G{i}" for i in range(1, 11)}
    assert data["nodes"][1]["facts"]["host"]["hostname"] == "spark-b"  # replayable


def test_schema_names_the_contract_fields():
    schema = FleetReport.model_json_schema()
    assert {"world_size", "nodes", "findings", "fleet_verdict", "verdict", "members"} <= set(schema["required"])
    assert {"Report", "Facts", "FleetFinding", "BandwidthResult"} <= set(schema["$defs"])
    assert schema["properties"]["verdict"]["enum"] == ["ready", "ready-with-warnings", "blocked"]


def test_text_puts_blocking_fixes_first_and_fleet_lines_follow_the_g_line_contract():
    text = render.render_text(_report(), "fleet-report.json")
    lines = text.splitlines()
    assert lines[0].startswith("Fleet verdict: BLOCKED   2 rank(s) on 2 nodes · backend nccl")
    assert lines[1] == "Blocking — fix these first:"
    g_lines = [ln.strip() for ln in lines if re.match(r"^\s+G\d+ [A-Z]+: fleet\.", ln)]
    assert g_lines and all(LINE.match(ln) for ln in g_lines)
    assert any(ln.startswith("G1 FAIL: fleet.torch: torch build differs") for ln in g_lines)
    assert text.rstrip().endswith("report: fleet-report.json (each node's own report inside)")


def test_text_lists_a_rank_that_never_joined():
    text = render.render_text(_report(missing=True))
    assert re.search(r"^  1 +- +- +never joined$", text, re.M)
    assert "G10 FAIL: fleet.membership: rank 1 of world size 2 never joined within 30 s" in text


def test_fleet_knowledge_is_dated_data():
    fk = load_fleet()
    assert fk.version >= 1 and isinstance(fk.last_verified, date)
    for key in ("membership", "stalled", "torch", "nccl", "driver", "container", "stack", "thermal", "memory",
                "topology", "bandwidth", "transport", "gpu"):
        assert fk.fix(key), key
    assert 0 < fk.bandwidth.warn_fraction < 1 and fk.bandwidth.reference_busbw_gbs > 0


def test_committed_fleet_fixtures_match_their_generator():
    for name, build in bff.SCENARIOS.items():
        committed = json.loads((FIXTURES / "facts" / f"{name}.json").read_text())
        assert load_facts_fixture(name) == build(), name
        assert committed["host"]["hostname"] in ("spark-a", "spark-b")


def test_fleet_knowledge_ships_in_the_wheel():
    # package data is listed by pattern in pyproject.toml; a wheel without fleet.yaml cannot run `fleet`
    import fnmatch

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the project depends on tomli there
        import tomli as tomllib

    data = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["sparkops"]
    assert any(fnmatch.fnmatch("knowledge/fleet.yaml", p) for p in patterns), patterns
