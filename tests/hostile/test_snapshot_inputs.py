"""Hostile facts snapshots: impossible readings become unknown with a reason, the file is bounded,
schema_version is validated, fields a newer minor added are ignored with a note, and every
failure is one plain sentence, never a traceback (issue 17, item 7)."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparkops import api
from sparkops.core.errors import SnapshotError
from sparkops.facts.model import BOUNDS, Facts
from sparkops.facts.reading import Unavailable
from sparkops.facts.snapshot import load_facts

FIXTURES = Path(__file__).parent.parent / "fixtures" / "facts"
HEALTHY = json.loads((FIXTURES / "gb10_ngc_2509_healthy.json").read_text())


def _write(tmp_path: Path, doc: object, name: str = "f.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc, allow_nan=True))
    return p


def _with_device(**fields) -> dict:
    doc = copy.deepcopy(HEALTHY)
    doc["gpu"]["devices"][0].update(fields)
    return doc


IMPOSSIBLE = [float("nan"), float("inf"), float("-inf"), -5.0, 1e308]


@pytest.mark.parametrize("field", ["temperature_c", "power_draw_w"])
@pytest.mark.parametrize("value", IMPOSSIBLE, ids=repr)
def test_impossible_gpu_readings_become_unknown_with_the_reason(tmp_path, field, value):
    p = _write(tmp_path, _with_device(**{field: value}))
    facts = load_facts(p)
    reading = getattr(facts.gpu.devices[0], field)
    assert isinstance(reading, Unavailable) and "implausible reading" in reading.detail
    rep = api.preflight(facts=p)
    assert any(n.name == "implausible" and field in n.reason for n in rep.probe_notes)
    out = json.dumps([f.model_dump(mode="json") for f in rep.findings])  # the notes name the bad value
    assert "nan °C" not in out and "inf °C" not in out and "1e+308" not in out


def test_a_nan_temperature_is_reported_as_implausible_not_as_nan_degrees(tmp_path):
    rep = api.preflight(facts=_write(tmp_path, _with_device(temperature_c=float("nan"))))
    g4 = next(f for f in rep.findings if f.gotcha == "G4")
    assert "nan" not in g4.summary and "°C" not in g4.summary, g4.summary
    note = next(n for n in rep.probe_notes if n.name == "implausible")
    assert "gpu.devices[0].temperature_c: nan is not a finite number" in note.reason


@pytest.mark.parametrize("value", [-1, 10**400, float("nan"), 1e300])
def test_impossible_mem_available_is_unknown_not_a_crash(tmp_path, value):
    doc = copy.deepcopy(HEALTHY)
    doc["memory"]["meminfo_bytes"]["MemAvailable"] = value
    facts = load_facts(_write(tmp_path, doc))
    assert isinstance(facts.memory.meminfo_bytes, Unavailable)
    assert "MemAvailable" in facts.memory.meminfo_bytes.detail
    rep = api.preflight(facts=facts)  # no OverflowError, no negative budget warning
    assert rep.headroom_gb is None or rep.headroom_gb >= 0


def test_impossible_psi_is_unknown(tmp_path):
    doc = copy.deepcopy(HEALTHY)
    doc["memory"]["psi"]["some_avg10"] = -3.0
    assert isinstance(load_facts(_write(tmp_path, doc)).memory.psi, Unavailable)


@pytest.mark.parametrize("version", [0, -1, True, "1", 1.0, None, [1]])
def test_schema_version_must_be_a_positive_integer(tmp_path, version):
    doc = dict(HEALTHY, schema_version=version)
    with pytest.raises(SnapshotError, match="schema_version"):
        load_facts(_write(tmp_path, doc))


def test_a_missing_schema_version_is_refused(tmp_path):
    doc = {k: v for k, v in HEALTHY.items() if k != "schema_version"}
    with pytest.raises(SnapshotError, match="no schema_version"):
        load_facts(_write(tmp_path, doc))


def test_added_fields_are_ignored_and_named(tmp_path):
    doc = copy.deepcopy(HEALTHY)
    doc["future_section"] = {"x": 1}
    doc["gpu"]["devices"][0]["fan_speed_pct"] = 30
    doc["host"]["container"]["runtime"] = "podman"
    facts = load_facts(_write(tmp_path, doc))
    note = facts.probes["snapshot"].reason
    for name in ("future_section", "gpu.devices.0.fan_speed_pct", "host.container.runtime"):
        assert name in note
    rep = api.preflight(facts=facts)
    assert any(n.name == "snapshot" and "fan_speed_pct" in n.reason for n in rep.probe_notes)
    assert rep.verdict == api.preflight(facts=FIXTURES / "gb10_ngc_2509_healthy.json").verdict


def test_a_wrong_type_says_where_and_what_without_union_noise(tmp_path):
    doc = _with_device(temperature_c="hot")
    with pytest.raises(SnapshotError) as err:
        load_facts(_write(tmp_path, doc))
    msg = str(err.value)
    assert "gpu.devices.0.temperature_c" in msg and '"hot"' in msg
    assert "unavailable" not in msg.lower().replace("facts snapshot", "") and "Field required" not in msg


def test_non_utf8_nested_and_oversized_files_are_plain_refusals(tmp_path):
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"schema_version": 1, "host": {"hostname": "caf\xe9"}}')
    with pytest.raises(SnapshotError, match="not UTF-8"):
        load_facts(bad)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SnapshotError, match="nested"):
        load_facts(deep)
    deep_obj = tmp_path / "deep2.json"
    deep_obj.write_text('{"schema_version": 1, "x": ' + '{"a": ' * 200 + "1" + "}" * 200 + "}")
    with pytest.raises(SnapshotError, match="nested"):
        load_facts(deep_obj)
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(2_000_000)
    with pytest.raises(SnapshotError, match="limit"):
        load_facts(big, max_bytes=1_000_000)


def test_a_fifo_snapshot_is_refused_not_waited_on(tmp_path):
    import os

    fifo = tmp_path / "facts.fifo"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "sparkops", "preflight", "--facts", str(fifo), "--report",
                        str(tmp_path / "r.json")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "not a regular file" in p.stderr


def test_the_cli_says_one_plain_sentence(tmp_path):
    p = tmp_path / "f.json"
    p.write_bytes(b"\xff\xfe garbage")
    r = subprocess.run([sys.executable, "-m", "sparkops", "preflight", "--facts", str(p), "--report",
                        str(tmp_path / "r.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert r.stderr.startswith("spark-ops: ") and len(r.stderr.strip().splitlines()) == 1
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


# ---- properties: any value in any bounded reading loads, and what loads is in bounds
_BOUNDED = {"temperature_c": "temperature_c", "power_draw_w": "power_w", "power_limit_w": "power_w",
            "sm_clock_mhz": "clock_mhz", "sm_clock_max_mhz": "clock_mhz", "utilization_pct": "percent"}
_NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**30), max_value=10**30))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(_BOUNDED)), value=_NUMBERS)
def test_any_number_in_a_bounded_reading_is_in_bounds_or_unknown(tmp_path, field, value):
    facts = load_facts(_write(tmp_path, _with_device(**{field: value})))
    got = getattr(facts.gpu.devices[0], field)
    lo, hi, _unit = BOUNDS[_BOUNDED[field]]
    assert isinstance(got, Unavailable) or (math.isfinite(got) and lo <= got <= hi)


_JSON = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                     lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
                     max_leaves=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(st.sampled_from(["gpu", "devices", 0, "host", "memory", "meminfo_bytes", "psi", "target",
                                      "schema_version", "probes", "cgroup", "x"]), min_size=1, max_size=4),
       value=_JSON)
@example(path=["probes"], value={"\n": None})  # found by this test (session 11): a key with a newline in the message
def test_any_value_anywhere_loads_or_is_refused_plainly(tmp_path, path, value):
    doc = copy.deepcopy(HEALTHY)
    node = doc
    for part in path[:-1]:
        nxt = node[part] if isinstance(node, dict) and part in node else (
            node[part] if isinstance(node, list) and isinstance(part, int) and part < len(node) else None)
        if not isinstance(nxt, dict | list):
            break
        node = nxt
    if isinstance(node, dict):
        node[str(path[-1])] = value
    p = _write(tmp_path, doc)
    try:
        facts = load_facts(p)
    except SnapshotError as exc:
        assert "\n" not in str(exc).strip() and "Traceback" not in str(exc)
        return
    assert isinstance(facts, Facts)
    api.preflight(facts=facts)  # judging what loaded never raises


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400))
def test_any_bytes_load_or_are_refused_plainly(tmp_path, data):
    p = tmp_path / "b.json"
    p.write_bytes(data)
    try:
        facts = load_facts(p)
    except SnapshotError as exc:
        assert "Traceback" not in str(exc)
    else:
        assert isinstance(facts, Facts)
