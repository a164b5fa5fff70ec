"""G6 — neighbours in the one pool: judged by their cap, not their presence."""

from __future__ import annotations

from build_fixtures import MIB, patch, run_check
from conftest import load_facts_fixture
from sparkops.core.findings import Status
from sparkops.facts.reading import Why, missing
from sparkops.facts.workload import Workload

GIB = 1024**3
VLLM = "gb10_vllm_default"


def test_vllm_at_default_utilisation_warns_naming_it_and_its_memory():
    f = run_check("G6", load_facts_fixture(VLLM))
    assert f.status is Status.warn
    assert "VLLM::EngineCore pid 400721" in f.summary and "0.9" in f.summary and "default" in f.summary
    assert "94.3 GiB" in f.summary  # 96581 MiB
    assert "400650" not in f.summary  # the `vllm serve` front process is the same neighbour


def raw(p, argv, **update):
    """A recorded process as schema 2 records it: the raw argv, no collect-time judgment."""
    return p.model_copy(update={"argv": argv, "v1_class": None, **update}).model_dump()


def capped_front(p, **update):
    """The fixture's `vllm serve` front process given --gpu-memory-utilization 0.5; its engine child
    (setproctitle "VLLM::EngineCore") has no flags of its own."""
    argv = [*p.cmdline.split(), "--gpu-memory-utilization", "0.5"] if p.pid == 400650 else ["VLLM::EngineCore"]
    return raw(p, argv, **update)


def test_vllm_capped_small_passes_with_a_note():
    base = load_facts_fixture(VLLM)
    procs = [capped_front(p) for p in base.processes.processes]
    f = run_check("G6", patch(base, {"processes.processes": procs}))
    assert f.status is Status.passed
    assert any("capped at 0.5" in n and "400721" in n for n in f.notes)


def test_cap_from_the_front_process_reaches_the_engine_child_without_ppids():
    base = load_facts_fixture(VLLM)
    procs = [capped_front(p, ppid=None) for p in base.processes.processes]
    f = run_check("G6", patch(base, {"processes.processes": procs}))
    assert f.status is Status.passed


def test_planned_workload_plus_neighbours_over_the_pool_fails():
    f = run_check("G6", load_facts_fixture(VLLM), Workload(estimated_peak_gb=40.0))
    assert f.status is Status.fail and "exceeds the 119.6 GiB pool" in f.summary


def test_small_workload_beside_a_small_neighbour_is_fine():
    f = run_check("G6", load_facts_fixture("gb10_ngc_2509_healthy"), Workload(estimated_peak_gb=40.0))
    assert f.status is Status.passed and "no heavy neighbour" in f.summary


def test_uncapped_heavy_gpu_process_warns():
    base = load_facts_fixture("gb10_ngc_2509_healthy")
    procs = [*[p.model_dump() for p in base.gpu.devices[0].processes],
             {"pid": 5120, "name": "/usr/local/bin/ollama", "kind": "compute", "used_memory_bytes": 41000 * MIB}]
    f = run_check("G6", patch(base, {"gpu.devices.0.processes": procs}))
    assert f.status is Status.warn and "Ollama" in f.summary and "no cap" in f.summary


def test_d_state_process_warns():
    base = load_facts_fixture("gb10_ngc_2509_healthy")
    stuck = {"pid": 7001, "name": "python3", "argv": ["python3"], "state": "disk-sleep", "rss_bytes": 12 * GIB}
    f = run_check("G6", patch(base, {"processes.processes": [stuck]}))
    assert f.status is Status.warn and "uninterruptible" in f.summary and "7001" in f.summary


def test_small_d_state_process_does_not_contend():
    """A 0.2 GiB python stuck in D (seen live on the H200 during a pip install) is no G6 neighbour."""
    base = load_facts_fixture("gb10_ngc_2509_healthy")
    small = {"pid": 429, "name": "python3", "argv": ["python3"], "state": "disk-sleep", "rss_bytes": GIB // 5}
    f = run_check("G6", patch(base, {"processes.processes": [small]}))
    assert f.status is Status.passed, f.summary


def test_server_without_gpu_context_yet_is_judged_by_its_cap():
    base = load_facts_fixture("gb10_ngc_2509_healthy")
    sg = {"pid": 8100, "name": "python3", "cmdline": "python3 -m sglang.launch_server --model x",
          "argv": ["python3", "-m", "sglang.launch_server", "--model", "x"], "rss_bytes": 2 * GIB}
    f = run_check("G6", patch(base, {"processes.processes": [sg]}))
    assert f.status is Status.warn and "SGLang" in f.summary


def test_no_process_information_at_all_skips():
    facts = patch(load_facts_fixture(VLLM), {
        "processes.processes": missing(Why.error, "process scan failed"),
        "gpu.devices.0.processes": missing(Why.not_supported, "nvmlDeviceGetComputeRunningProcesses")})
    f = run_check("G6", facts)
    assert f.status is Status.skip


def test_gpu_list_alone_still_judges_and_says_what_was_not_checked():
    facts = patch(load_facts_fixture(VLLM), {"processes.processes": missing(Why.error, "process scan failed")})
    f = run_check("G6", facts)
    assert f.status is Status.warn and "400721" in f.summary
    assert any("D-state" in n for n in f.notes)


def test_no_gpu_skips():
    assert run_check("G6", load_facts_fixture("no_gpu")).status is Status.skip


# --------------------------------------------------------------------------- issue 15: contention in total
def two_capped_vllm_servers():
    """Issue 15 case 5, from the recorded vLLM box: two vLLM servers capped at 0.45 and 0.38 hold 103 of
    the pool, 5.7 GiB available and 11 GiB swapped — each within its own cap."""
    base = load_facts_fixture("gb10_vllm_default")
    gib = 1024**3
    procs, gpu = [], []
    for n, (frac, held) in enumerate(((0.45, 55.0), (0.38, 48.0))):
        front, engine = 500000 + 10 * n, 500001 + 10 * n
        cmd = f"/usr/bin/python3 /usr/local/bin/vllm serve model-{n} --gpu-memory-utilization {frac}"
        procs += [{"cmdline": cmd, "argv": cmd.split(),
                   "name": "vllm", "pid": front, "ppid": 1, "rss_bytes": 1_200_000_000, "state": "sleeping"},
                  {"cmdline": cmd, "argv": cmd.split(),
                   "name": "VLLM::EngineCore", "pid": engine, "ppid": front, "rss_bytes": 3_900_000_000,
                   "state": "running"}]
        gpu.append({"kind": "compute", "name": "VLLM::EngineCore", "pid": engine, "used_memory_bytes": int(held * gib)})
    mi = dict(base.memory.meminfo_bytes)
    mi.update({"MemAvailable": int(5.7 * gib), "MemFree": int(4.9 * gib), "Cached": int(1.2 * gib),
               "SwapTotal": 16 * gib, "SwapFree": 5 * gib})
    return patch(base, {"processes.processes": procs, "gpu.devices.0.processes": gpu, "memory.meminfo_bytes": mi})


def test_capped_neighbours_that_fill_the_pool_together_warn():
    f = run_check("G6", two_capped_vllm_servers())
    assert f.status is Status.warn and f.code == "G6.total-contention", f.summary
    assert "2 GPU/server processes together hold 103.0 of" in f.summary and "caps add up to 0.83" in f.summary
    assert "11.0 GiB swapped" in f.summary and f.fix_where == "host"


def test_g3_names_neighbours_and_swap_not_the_page_cache_when_they_hold_the_pool():
    f = run_check("G3", two_capped_vllm_servers())
    assert f.status is Status.warn and f.code == "G3.neighbours", f.summary
    assert "G3.swap-pressure" in f.codes and "G3.page-cache" not in f.codes
    assert "drop_caches" not in f.fix and "will not free this" in f.fix
