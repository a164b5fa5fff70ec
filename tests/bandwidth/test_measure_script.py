"""The measuring script's pure parts (sizing, statistics) and what it prints where torch is missing.

``plan_buffer`` is the one sizing rule: the tool imports it from the script, so the properties here
hold on both sides of the process boundary.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.bandwidth import _measure_script as ms
from sparkops.bandwidth.probe import SCRIPT
from sparkops.probes import _target_script
from sparkops.probes.target_env import parse_result

MIB = 1 << 20
GIB = 1 << 30
FLOOR = 256 * MIB
BUF_CAP = 1_000_000_000
TOTAL_CAP = 2_000_000_000

sizes = st.integers(min_value=0, max_value=512 * GIB)
l2s = st.one_of(st.none(), st.just(0), st.integers(min_value=1, max_value=512 * MIB))
frees = st.one_of(st.none(), sizes)


def auto(l2, free, n=2, multiple=16, fraction=0.25, floor=FLOOR, buf_cap=BUF_CAP, total_cap=TOTAL_CAP):
    return ms.plan_buffer(l2, free, n, floor, multiple, buf_cap, total_cap, fraction)


def test_markers_are_the_target_probes():
    # the launcher reads the child's output with the target probe's parser
    assert ms.RESULT_MARKER == _target_script.RESULT_MARKER
    assert ms.STAGE_MARKER == _target_script.STAGE_MARKER


@settings(max_examples=400)
@given(l2=l2s, free=frees, n=st.integers(1, 4), multiple=st.integers(1, 64),
       fraction=st.floats(0.01, 1.0), floor=st.integers(1, 1024 * MIB))
def test_auto_size_never_above_the_caps_never_below_the_floor(l2, free, n, multiple, fraction, floor):
    plan = auto(l2, free, n, multiple, fraction, floor)
    cap = min(BUF_CAP, TOTAL_CAP // n)
    if free is not None:
        cap = min(cap, int(fraction * free) // n)
    size = plan["buffer_bytes"]
    if size is None:  # memory short: the caps leave less than the floor -> a skip, never a tiny buffer
        assert cap < floor or ms._align_down(cap) < floor
        assert "memory is short" in plan["basis"]
        return
    assert floor <= size <= cap
    assert size * n <= TOTAL_CAP
    assert free is None or size * n <= fraction * free
    assert size % ms.ALIGN_BYTES == 0 or size == cap


@given(l2=st.integers(min_value=MIB, max_value=128 * MIB))
def test_auto_size_scales_with_l2_when_memory_allows(l2):
    plan = auto(l2, 100 * GIB)
    want = 16 * l2
    expected = min(max(want, FLOOR), ms._align_down(BUF_CAP))
    assert abs(plan["buffer_bytes"] - expected) < ms.ALIGN_BYTES
    assert "16 x L2" in plan["basis"]


def test_h200_and_gb10_shapes():
    # H200 (torch reports a 60 MiB L2): 960 MiB wanted, cut to the 1 GB cap -> 952 MiB, two within 2 GB
    h200 = auto(60 * MIB, 139 * GIB)
    assert h200["buffer_bytes"] == 952 * MIB and h200["basis"] == "16 x L2 (60 MiB) = 960 MiB, cut to the 952 MiB cap"
    # a 24 MiB L2: 384 MiB, no cap involved
    assert auto(24 * MIB, 100 * GIB) == {"buffer_bytes": 384 * MIB, "cap_bytes": 952 * MIB,
                                         "basis": "16 x L2 (24 MiB) = 384 MiB"}
    # a small L2 is raised to the floor; an unknown L2 takes the cap
    assert auto(4 * MIB, 100 * GIB)["buffer_bytes"] == FLOOR
    assert "raised to the 256 MiB floor" in auto(4 * MIB, 100 * GIB)["basis"]
    unknown = auto(None, 100 * GIB)
    assert unknown["buffer_bytes"] == ms._align_down(BUF_CAP) and "L2 size unknown" in unknown["basis"]
    # 1.5 GiB free: a quarter of it over two buffers is below the floor -> no buffer, said why
    short = auto(50 * MIB, int(1.5 * GIB))
    assert short["buffer_bytes"] is None and "25% of 1.5 GiB free" in short["basis"]


@given(explicit=st.integers(min_value=1, max_value=64 * GIB), free=frees, force=st.booleans())
def test_explicit_size_is_honoured_within_free_memory_unless_forced(explicit, free, force):
    plan = ms.plan_buffer(50 * MIB, free, 2, FLOOR, 16, BUF_CAP, TOTAL_CAP, 0.25, explicit, force)
    size = plan["buffer_bytes"]
    if explicit < ms.ALIGN_BYTES:
        assert size is None
        return
    if free is not None and not force and ms._align_down(explicit) > int(0.25 * free) // 2:
        assert size is None and "--force" in plan["basis"]
        return
    assert size == ms._align_down(explicit)


@given(st.lists(st.floats(min_value=0.001, max_value=1e5, allow_nan=False), min_size=1, max_size=50))
def test_summary_orders_min_q1_median_q3_max(values):
    s = ms.summarize(values)
    assert s["gbs_min"] <= s["gbs_q1"] <= s["gbs_median"] <= s["gbs_q3"] <= s["gbs_max"]
    assert s["gbs_min"] == round(min(values), 2) and s["gbs_max"] == round(max(values), 2)


def test_percentile_interpolates():
    assert ms.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert ms.percentile([10.0], 0.25) == 10.0
    with pytest.raises(ValueError):
        ms.percentile([], 0.5)


def _run_script(config: str, *python_args: str) -> tuple[dict | None, str]:
    res = subprocess.run([sys.executable, *python_args, str(SCRIPT), config], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    return parse_result(res.stdout)


def test_a_bad_configuration_is_reported_not_raised():
    payload, _ = _run_script("{not json")
    assert payload["mode"] == "bandwidth" and payload["kind"] == "error" and "bad configuration" in payload["error"]
    payload, _ = _run_script("[1, 2]")
    assert "not a JSON object" in payload["error"]


def test_without_torch_the_script_says_so():
    # -S: no site-packages, so no torch even where the test venv has one (CI installs a CPU torch)
    payload, _ = _run_script(json.dumps({"l2_multiple": 16}), "-S")
    assert payload["kind"] == "no_torch" and "No module named 'torch'" in payload["error"]
    assert payload["executable"] == sys.executable


def test_the_script_does_not_let_its_own_folder_shadow_modules(tmp_path):
    # `python path/_measure_script.py` puts sparkops/bandwidth/ first on sys.path, and that folder holds
    # settings.py, probe.py...; the script drops it before importing torch. A `torch` placed first on
    # PYTHONPATH reports what sys.path looks like at that moment, then fails the import.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "import os, sys\n"
        f"here = {str(SCRIPT.parent)!r}\n"
        "print('SCRIPT_DIR_ON_PATH', any(os.path.abspath(p or os.curdir) == here for p in sys.path))\n"
        "raise ImportError('sys.path observed')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    res = subprocess.run([sys.executable, str(SCRIPT), "{}"], capture_output=True, text=True, timeout=60, env=env)
    assert "SCRIPT_DIR_ON_PATH False" in res.stdout, res.stdout + res.stderr
    payload, _ = parse_result(res.stdout)
    assert payload["kind"] == "no_torch" and "sys.path observed" in payload["error"]
