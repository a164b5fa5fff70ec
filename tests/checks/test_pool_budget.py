"""The one pool budget (checks/pool_budget.py) that preflight's G6/G3 and `plan --serve --beside` share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import pool_budget
from sparkops.core.findings import Status
from sparkops.facts.workload import Workload

GIB = 1024**3


def test_a_share_of_total_server_is_counted_by_its_cap_not_by_what_it_holds():
    assert pool_budget.reservation_gib("vllm", 0.5, 10.0, 121.69) == (pytest.approx(60.845), "cap 0.5 x 121.69 GiB")
    gib, how = pool_budget.reservation_gib("sglang", 0.88, 120.0, 121.69)  # holds more than its cap: what it holds
    assert gib == 120.0 and "more than its cap" in how
    # TensorRT-LLM's fraction is of the memory free after loading, not of total: what it holds
    assert pool_budget.reservation_gib("trtllm", 0.9, 30.0, 121.69) == (30.0, "held")
    assert pool_budget.reservation_gib("ollama", None, None, 121.69) == (0.0, "memory unknown")


def test_judge_says_over_tight_ok_against_the_pool_less_the_os_reserve():
    near = [pool_budget.PoolLine("vllm", 60.0, "cap")]
    plan = [pool_budget.PoolLine("lora", 50.0, "planned peak")]
    b = pool_budget.judge(121.69, near, plan, os_reserve_gib=4.0, fit_margin=0.05)
    assert b.code == "ok" and b.left_gib == pytest.approx(121.69 - 4 - 110) and b.usable_gib == pytest.approx(117.69)
    # 7.69 GiB left is under a 10 % margin of the 117.69 usable
    assert pool_budget.judge(121.69, near, plan, os_reserve_gib=4.0, fit_margin=0.1).code == "tight"
    assert pool_budget.judge(100.0, near, plan, os_reserve_gib=4.0, fit_margin=0.1).code == "over"
    assert pool_budget.judge(None, near, plan, os_reserve_gib=4.0, fit_margin=0.1).code == "unknown"


@given(pool=st.floats(1.0, 1000.0), reserve=st.floats(0.0, 8.0), margin=st.floats(0.0, 0.5),
       claims=st.lists(st.floats(0.0, 300.0), max_size=6), planned=st.lists(st.floats(0.0, 300.0), max_size=3))
def test_judge_adds_every_claim_once_and_its_code_follows_what_is_left(pool, reserve, margin, claims, planned):
    near = [pool_budget.PoolLine(f"n{i}", round(c, 2), "held") for i, c in enumerate(claims)]
    plan = [pool_budget.PoolLine(f"p{i}", round(c, 2), "planned peak") for i, c in enumerate(planned)]
    b = pool_budget.judge(pool, near, plan, os_reserve_gib=reserve, fit_margin=margin)
    committed = sum(round(c, 2) for c in claims) + sum(round(c, 2) for c in planned)
    assert b.committed_gib == pytest.approx(committed, abs=0.02)
    left = b.left_gib
    assert left == pytest.approx(round(pool, 2) - reserve - committed, abs=0.03)
    assert b.code == ("over" if left < 0 else "tight" if left < b.usable_gib * margin else "ok")
    share = pool_budget.largest_share(pool, b.committed_gib, reserve)
    assert 0.0 <= share <= 1.0 and share * pool <= max(0.0, pool - reserve - b.committed_gib) + 1e-9


def test_neighbour_lines_count_a_server_tree_once_by_its_cap():
    facts = load_facts_fixture("gb10_vllm_default")  # vLLM at the default 0.9: API server + engine child
    lines = pool_budget.neighbour_lines(facts, 119.63)
    assert len(lines) == 1 and lines[0].kind == "vllm" and lines[0].gib == pytest.approx(0.9 * 119.63, abs=0.01)
    assert lines[0].how.startswith("cap 0.9 x 119.63 GiB")


def _capped_vllm(frac: float, held_gib: float):
    base = load_facts_fixture("gb10_vllm_default")
    cmd = f"vllm serve m --gpu-memory-utilization {frac}"
    procs = [{"cmdline": cmd, "argv": cmd.split(), "name": "VLLM::EngineCore", "pid": 9100, "ppid": 1,
              "rss_bytes": 3 * 10**9, "state": "running"}]
    gpu = [{"kind": "compute", "name": "VLLM::EngineCore", "pid": 9100, "used_memory_bytes": int(held_gib * GIB)}]
    return patch(base, {"processes.processes": procs, "gpu.devices.0.processes": gpu})


def test_g6_judges_a_planned_run_by_the_neighbours_cap_not_its_current_memory():
    facts = _capped_vllm(0.5, 10.0)  # holds 10 GiB now, will hold 0.5 x 119.6 once its KV cache is allocated
    over = run_check("G6", facts, Workload(method="lora", estimated_peak_gb=64.0))
    assert over.status is Status.fail and "reservations 59.8 GiB" in over.summary
    # the same run beside a vLLM capped at 0.25 fits
    ok = run_check("G6", _capped_vllm(0.25, 10.0), Workload(method="lora", estimated_peak_gb=64.0))
    assert ok.status is Status.passed


def test_plan_serve_beside_uses_the_same_budget():
    from sparkops.planner import serve
    from sparkops.planner.serve_engines import ServeSpec

    m = serve.machine_from_target("dgx-spark", 4.0)
    shape = serve.resolve_shape("qwen3-8b")
    spec = ServeSpec(engine="vllm", model="qwen3-8b", gpu_memory_utilization=0.5, max_model_len=32768)
    beside = [serve.BesideJob(name="lora 70b", gib=60.0, how="planned peak")]
    res = serve.plan_serve(shape, spec, m, beside=beside)
    b = pool_budget.judge(m.available_gib, [pool_budget.PoolLine("lora 70b", 60.0, "planned peak")],
                          [pool_budget.PoolLine("qwen3-8b", res.footprint_gib, "footprint")],
                          os_reserve_gib=4.0, fit_margin=0.10)
    assert res.headroom_gib == pytest.approx(b.left_gib, abs=0.02) and res.budget_gib == pytest.approx(b.usable_gib)
    assert b.code == "over" and res.verdict == "does-not-fit"
