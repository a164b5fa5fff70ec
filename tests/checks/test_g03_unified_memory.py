"""G3 — unified-memory budget: page cache, pressure, the workload's fit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from build_fixtures import meminfo, patch, run_check
from conftest import load_facts_fixture
from sparkops.core.findings import Status
from sparkops.facts.reading import Why, missing
from sparkops.facts.workload import Workload

GIB = 1024**3


def test_quiet_box_is_info_with_free_available_and_cache():
    f = run_check("G3", load_facts_fixture("gb10_ngc_2509_healthy"))
    assert f.status is Status.info
    assert "free 113.1" in f.summary and "available 114.8" in f.summary and "page cache 2.6" in f.summary


def test_large_page_cache_warns_with_memfree_vs_memavailable():
    f = run_check("G3", load_facts_fixture("gb10_page_cache"))
    assert f.status is Status.warn
    # MemFree 13355956 kB = 12.7 GiB; MemAvailable 94849180 kB = 90.5 GiB
    assert "12.7 GiB" in f.summary and "90.5 GiB" in f.summary


def test_page_cache_warning_uses_memfree_without_live_torch():
    facts = patch(load_facts_fixture("gb10_page_cache"), {"target.live": missing(Why.not_collected)})
    f = run_check("G3", facts)
    assert f.status is Status.warn and "MemFree 12.7 GiB" in f.summary


def test_small_cache_does_not_warn():
    f = run_check("G3", load_facts_fixture("gb10_vllm_default"))
    assert f.status is Status.info


def test_workload_over_budget_fails():
    f = run_check("G3", load_facts_fixture("gb10_ngc_2509_healthy"), Workload(estimated_peak_gb=140.0))
    assert f.status is Status.fail and "130.4 GiB (140 GB) exceeds the 110.8 GiB budget" in f.summary


def test_workload_within_margin_warns():
    f = run_check("G3", load_facts_fixture("gb10_ngc_2509_healthy"), Workload(estimated_peak_gb=112.0))  # 104.3 GiB
    assert f.status is Status.warn and "within 10%" in f.summary


def test_workload_with_room_is_info():
    f = run_check("G3", load_facts_fixture("gb10_ngc_2509_healthy"), Workload(estimated_peak_gb=40.0))
    assert f.status is Status.info


def test_memory_pressure_warns():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"memory.psi.full_avg10": 2.5})
    f = run_check("G3", facts)
    assert f.status is Status.warn and "PSI" in f.summary


def test_low_available_and_swap_warn():
    # ASUS GX10 serving two models (gb10-readings §1.4): 121Gi total, 5.0Gi free, 5.7Gi available, 8.0Gi swap used
    mem = meminfo(MemTotal=127600524, MemFree=5242880, MemAvailable=5976883, Cached=2097152, Buffers=1024,
                  SReclaimable=943718, Shmem=785408, SwapTotal=16777212, SwapFree=8300000)
    f = run_check("G3", patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"memory.meminfo_bytes": mem,
                                                                           "target.live": missing(Why.not_collected)}))
    assert f.status is Status.warn and "only 5.7 GiB available" in f.summary
    assert "swap" in f.detail


def test_cgroup_limit_on_unified_memory_is_noted():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"memory.cgroup.limit_bytes": 64 * GIB})
    f = run_check("G3", facts)
    assert any("does not bound the driver" in n for n in f.notes)


def test_unread_meminfo_skips():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {
        "memory.meminfo_bytes": missing(Why.no_permission, "/proc/meminfo: Permission denied")})
    f = run_check("G3", facts)
    assert f.status is Status.skip and "Permission denied" in f.summary


def test_unified_memory_never_uses_nvml_memory_even_if_it_answers():
    # some reports claim NVML answers with MemTotal on GB10; the GB10 profile keeps the meminfo budget
    facts = patch(load_facts_fixture("gb10_page_cache"), {
        "gpu.devices.0.memory_total_bytes": 128452014080, "gpu.devices.0.memory_free_bytes": 120 * GIB,
        "gpu.devices.0.memory_used_bytes": 8 * GIB})
    f = run_check("G3", facts)
    assert f.status is Status.warn and "90.5 GiB" in f.summary


def test_discrete_gpu_uses_device_free_memory():
    f = run_check("G3", load_facts_fixture("h200_generic"))
    assert f.status is Status.info and "GPU0 free 139.9 of 140.4 GiB" in f.summary


def test_discrete_gpu_workload_over_device_free_fails():
    f = run_check("G3", load_facts_fixture("h200_generic"), Workload(estimated_peak_gb=155.0))  # 144.4 GiB > 139.9 GiB free
    assert f.status is Status.fail


def test_no_gpu_skips():
    f = run_check("G3", load_facts_fixture("no_gpu"))
    assert f.status is Status.skip


_KEYS = ["MemTotal", "MemFree", "MemAvailable", "Cached", "Buffers", "SReclaimable", "Shmem", "SwapTotal", "SwapFree"]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(_KEYS), st.integers(min_value=0, max_value=2**42)),
       st.one_of(st.none(), st.floats(min_value=0, max_value=1000)))
def test_any_meminfo_gives_exactly_one_finding(mi, peak):
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"memory.meminfo_bytes": mi})
    f = run_check("G3", facts, Workload(estimated_peak_gb=peak))
    assert f.gotcha == "G3" and f.summary


def test_workload_without_a_peak_says_its_fit_was_not_tested():
    from sparkops.facts.workload import parse_workload

    f = run_check("G3", load_facts_fixture("gb10_ngc_2509_healthy"), parse_workload("qlora 70b seq 8192"))
    assert f.status is Status.unknown  # checked, but undecided: the verdict must not read "ready"
    assert "fit was not tested" in f.summary and "--peak-gb" in f.fix


def test_page_cache_inside_a_container_says_the_flush_runs_on_the_host():
    """Issue 15: inside a container /proc/sys is read-only; the fix must say where it runs."""
    base = load_facts_fixture("gb10_page_cache")
    f = run_check("G3", patch(base, {"host.container.markers": ["/.dockerenv"]}))
    assert f.code == "G3.page-cache-container" and f.fix_where == "host"
    assert "on the host" in f.fix and "read-only" in f.fix
    g = run_check("G3", patch(base, {"host.container.markers": []}))
    assert g.code == "G3.page-cache" and "on the host as root" in g.fix


def test_an_inference_workload_is_not_asked_for_an_optimizer():
    f = run_check("G3", load_facts_fixture("gb10_ngc_2509_healthy"), Workload(method="inference", params_b=70))
    assert f.code == "G3.fit-untested" and "KV cache" in f.summary and "optimizer" not in f.summary
