"""Every sub-code in the catalog, reached from a fixture, with its rendered line and fix as a golden file.

One scenario per sub-code (``knowledge/gotchas.yaml``): a recorded snapshot (``tests/fixtures/facts``)
changed only where the decision needs it. The test asserts the owner reaches that code, and compares
the worded finding (status, summary, fix, where the fix runs) with ``golden/subcodes.json``, so a
wording change shows up in review. Regenerate after a deliberate change with
``SPARKOPS_REGEN_GOLDEN=1 pytest tests/checks/test_subcodes.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import identity
from sparkops.checks.base import Reason, conclude, template_fields
from sparkops.core.findings import Finding
from sparkops.facts.model import BandwidthFacts, BandwidthMethod, Facts, ProbeRecord
from sparkops.facts.reading import Why, missing
from sparkops.facts.workload import Workload
from sparkops.knowledge import load

GOLDEN = Path(__file__).parent / "golden" / "subcodes.json"
GIB = 1024**3
SPARK, BARE, CACHE, VLLM, TP2, TORCHAO, H200, NOGPU = (
    "gb10_ngc_2509_healthy", "gb10_bare_pip_cu128", "gb10_page_cache", "gb10_vllm_default", "gb10_two_node_tp2",
    "gb10_torchao_013", "h200_generic", "no_gpu")
HIT = {"file": "/srv/job.yaml", "line": 3, "key": "tensor_parallel_size", "value": "2", "kind": "tensor_parallel"}
NODES = {"file": "/srv/job.yaml", "line": 4, "key": "num_nodes", "value": "2", "kind": "nodes"}


def f(name: str, **changes) -> Facts:
    return patch(load_facts_fixture(name), {k.replace("__", "."): v for k, v in changes.items()}) if changes \
        else load_facts_fixture(name)


def ident(facts: Facts) -> Finding:
    kb = load()
    return identity.check(facts, kb, identity.identify(facts, kb))


def measured(base: Facts | None = None, device: str = "NVIDIA GB10", **gbs: float) -> Facts:
    methods = [BandwidthMethod(method=k, operation="dst.copy_(src)", counts="bytes read + bytes written",
                               bytes_per_iteration=2 * 10**9, iterations_per_rep=1, reps=15, gbs_median=v,
                               gbs_q1=v - 1, gbs_q3=v + 1, gbs_min=v - 2, gbs_max=v + 2) for k, v in gbs.items()]
    bw = BandwidthFacts(python="/usr/bin/python", device_name=device, buffer_bytes=998244352, buffers=2,
                        sizing="L2 size unknown: the cap", methods=methods, peak_allocated_bytes=1996489216,
                        allocated_after_bytes=0, gpu_time_s=0.7, wall_s=0.75)
    base = base if base is not None else f(SPARK)
    return Facts.model_validate_json(base.model_copy(update={"bandwidth": bw}).model_dump_json())


def unsloth_on(name: str, fa: str | None = "2.7.4.post1") -> Facts:
    base = load_facts_fixture(name)
    dists = {**base.target.distributions, "unsloth": "2025.11.1"}
    if fa:
        dists["flash-attn"] = fa
    return patch(base, {"target.distributions": dists})


def meminfo(name: str, **values: float) -> Facts:
    base = load_facts_fixture(name)
    return patch(base, {"memory.meminfo_bytes": {**base.memory.meminfo_bytes, **{k: int(v * GIB) for k, v in values.items()}}})


def gpu_procs(name: str, *held_gib: float) -> Facts:
    procs = [{"kind": "compute", "name": f"python{i}", "pid": 7000 + i, "used_memory_bytes": int(h * GIB)}
             for i, h in enumerate(held_gib)]
    return f(name, gpu__devices__0__processes=procs)


def fragmented(pagetype: str = "gb10-built-fragmented-unmovable.pagetypeinfo") -> Facts:
    from sparkops.probes import fragmentation

    raw = Path(__file__).parents[1] / "fixtures" / "raw" / "buddyinfo"
    order, pt = fragmentation.parse_pagetypeinfo((raw / pagetype).read_text())
    frag = {"page_size_bytes": 4096, "pageblock_order": order, "pagetypeinfo": [z.model_dump() for z in pt],
            "buddyinfo": [z.model_dump() for z in fragmentation.parse_buddyinfo(
                (raw / "gb10-built-fragmented.buddyinfo").read_text())]}
    return f(SPARK, memory__fragmentation=frag)


def vllm_caps(*caps: tuple[float, float]) -> Facts:
    procs, gpu = [], []
    for n, (frac, held) in enumerate(caps):
        pid = 500000 + n
        cmd = f"vllm serve m{n} --gpu-memory-utilization {frac}"
        procs.append({"cmdline": cmd, "argv": cmd.split(), "name": "VLLM::EngineCore", "pid": pid,
                      "ppid": 1, "rss_bytes": 3_900_000_000, "state": "running"})
        gpu.append({"kind": "compute", "name": "VLLM::EngineCore", "pid": pid, "used_memory_bytes": int(held * GIB)})
    return f(VLLM, processes__processes=procs, gpu__devices__0__processes=gpu)


def configs(*hits: dict, **extra) -> Facts:
    return f(SPARK, configs__hits=list(hits), **{f"configs__{k}": v for k, v in extra.items()})


LATER = datetime(2027, 1, 20, tzinfo=timezone.utc)  # noqa: UP017
S = tuple[str, Facts, Workload | None]
SCENARIOS: dict[str, Callable[[], S | Finding]] = {
    # identity
    "identity.dgx-spark": lambda: ident(f(SPARK)),
    "identity.dgx-spark-unexpected": lambda: ident(f(SPARK, host__arch="x86_64")),
    "identity.generic": lambda: ident(f(H200)),
    "identity.probe-unfinished": lambda: ident(f(NOGPU).model_copy(update={"probes": {
        "gpu": ProbeRecord(name="gpu", ok=False, reason="timeout: abandoned at the collection deadline")}})),
    "identity.triage-runtime": lambda: ident(f(NOGPU, host__container__markers=["/.dockerenv"], host__dev_nvidia={})),
    "identity.triage-visible-devices": lambda: ident(f(SPARK, host__env={"CUDA_VISIBLE_DEVICES": ""},
                                                       target__live__cuda_available=False)),
    "identity.triage-device-nodes": lambda: ident(f(NOGPU, host__dev_nvidia={"/dev/nvidia0": "r", "/dev/nvidiactl": "rw"})),
    "identity.triage-wedged": lambda: ident(f(SPARK, target__live__cuda_available=False,
                                             target__live__cuda_error="CUDA error: unknown error")),
    "identity.triage-abi": lambda: ident(f(NOGPU, host__dev_nvidia={"/dev/nvidia0": "rw", "/dev/nvidiactl": "rw"},
                                          target__torch=load_facts_fixture(BARE).target.torch.model_dump(),
                                          target__live=missing(Why.not_collected))),
    "identity.no-gpu": lambda: ident(f(NOGPU, host__dev_nvidia={"/dev/nvidia0": "rw", "/dev/nvidiactl": "rw"},
                                      target__torch=missing(Why.not_found, "no torch"), target__live=missing(Why.not_collected))),
    # G1
    "G1.wheel-cuda12": lambda: ("G1", f(BARE), None),
    "G1.cpu-only": lambda: ("G1", f(SPARK, target__torch__version="2.9.1+cpu", target__torch__cuda=None,
                                    target__torch__local_tag="cpu", target__live=missing(Why.not_collected)), None),
    "G1.driver-cuda-too-old": lambda: ("G1", f(H200, gpu__cuda_driver_version="12.8", target__torch__cuda="13.0",
                                             target__torch__version="2.9.1+cu130", target__torch__local_tag="cu130"), None),
    "G1.import-died": lambda: ("G1", f(SPARK, target__live={"import_ok": False, "died_by_signal": 11}), None),
    "G1.import-raised": lambda: ("G1", f(SPARK, target__live={"import_ok": False,
                                                              "error": "ImportError: libcudart.so.12: cannot open shared object file"}), None),
    "G1.import-timeout": lambda: ("G1", f(SPARK, target__live={"import_ok": False, "timed_out": True, "duration_s": 45.0}), None),
    "G1.no-gpu-in-torch": lambda: ("G1", f(SPARK, target__live__cuda_available=False,
                                           target__live__cuda_error="no CUDA-capable device is detected"), None),
    "G1.extension-missing-lib": lambda: ("G1", f(SPARK, target__extensions=[
        {"package": "xformers", "file": "xformers/_C.so", "needed": ["libc10.so", "libcudart.so.12", "libcuda.so.1"]}]), None),
    "G1.arch-no-kernels": lambda: ("G1", f(SPARK, target__live__arch_list=["sm_80", "sm_90"]), None),
    "G1.cudart12-registered": lambda: ("G1", f(SPARK, cuda_libs__ldconfig={
        **load_facts_fixture(SPARK).cuda_libs.ldconfig, "libcudart.so.12": ["/usr/local/cuda-12.8/lib64/libcudart.so.12"]}), None),
    "G1.cu12-wheels-beside-cu13": lambda: ("G1", f(SPARK, target__distributions={
        **load_facts_fixture(SPARK).target.distributions, "nvidia-cublas-cu12": "12.8.4.1"}), None),
    "G1.torch-missing": lambda: ("G1", f(SPARK, target__torch=missing(Why.not_found, "no torch"),
                                        target__live=missing(Why.not_collected)), None),
    "G1.build-unread": lambda: ("G1", f(SPARK, target__torch=missing(Why.error, "unreadable version.py"),
                                       target__live=missing(Why.not_collected)), None),
    "G1.no-gpu-host": lambda: ("G1", f(NOGPU, target__torch=load_facts_fixture(SPARK).target.torch.model_dump()), None),
    "G1.ok": lambda: ("G1", f(SPARK), None),
    # G2
    "G2.unsloth-autodetect": lambda: ("G2", unsloth_on(SPARK), None),
    "G2.broken": lambda: ("G2", f(SPARK, target__live__flash_attn_import=False,
                                 target__live__flash_attn_error="undefined symbol: _ZN3c104cuda"), None),
    "G2.absent": lambda: ("G2", f(VLLM), None),
    "G2.bundled": lambda: ("G2", f(SPARK), None),
    "G2.local-build": lambda: ("G2", f(VLLM, target__distributions={**load_facts_fixture(VLLM).target.distributions,
                                                                    "flash-attn": "2.8.3"},
                                      target__live__flash_attn_import=True), None),
    "G2.untested": lambda: ("G2", f(SPARK, target__live=missing(Why.not_collected)), None),
    "G2.unread": lambda: ("G2", f(SPARK, target__distributions=missing(Why.error, "pip list failed")), None),
    # G3
    "G3.page-cache": lambda: ("G3", f(CACHE, host__container__markers=[]), None),
    "G3.page-cache-container": lambda: ("G3", f(CACHE, host__container__markers=["/.dockerenv"]), None),
    "G3.neighbours": lambda: ("G3", patch(gpu_procs(VLLM, 100.0), {"memory.meminfo_bytes": {
        **load_facts_fixture(VLLM).memory.meminfo_bytes, "MemAvailable": 10 * GIB, "MemFree": int(9.5 * GIB)}}), None),
    "G3.low-available": lambda: ("G3", meminfo(SPARK, MemAvailable=10.0, MemFree=9.5), None),
    "G3.swap-pressure": lambda: ("G3", meminfo(SPARK, SwapTotal=16, SwapFree=4), None),
    "G3.fragmented": lambda: ("G3", fragmented(), None),
    "G3.fragmented-for-plan": lambda: ("G3", fragmented("gb10-built-fragmented-movable.pagetypeinfo"),
                                       Workload(method="lora", params_b=8, estimated_peak_gb=20.0)),
    # a vLLM before its unified-memory reading (engines.yaml vllm.unified_memory.since) reads CUDA's MemFree
    "G3.serve-start-after-flush": lambda: ("G3", patch(meminfo(SPARK, MemFree=20.0, MemAvailable=112.0), {
        "target.distributions": {**load_facts_fixture(SPARK).target.distributions, "vllm": "0.10.1.1"}}),
        Workload(method="inference", components=["vllm"])),
    "G3.serve-start-refused": lambda: ("G3", f(VLLM), Workload(method="inference", components=["vllm"])),
    # a server past the budget (its plan says it does not fit): the serving fix, not the fine-tune ladder
    "G3.serve-exceeds-budget": lambda: ("G3", f(SPARK), Workload(method="inference", components=["vllm"],
                                                                  estimated_peak_gb=200.0, serve_verdict="does-not-fit")),
    # a vLLM share past the budget whose start-up check passes: the serving planner says tight, so does G3
    "G3.serve-over-reserve": lambda: ("G3", f(SPARK), Workload(method="inference", components=["vllm"],
                                                                estimated_peak_gb=200.0, serve_verdict="tight")),
    # the serving planner's own refusal of the launch line (ServePlanResult.refusals), whatever memory is free
    "G3.serve-launch-refused": lambda: ("G3", f(SPARK), Workload(
        method="inference", components=["vllm"], estimated_peak_gb=20.0,
        serve_refusals=["--max-model-len 131072 is beyond the 32,768 tokens the model's config allows"])),
    # a second vLLM capped at 0.5 is still loading (CUDA free still high): the 0.9 asked for passes the
    # start-up check now, but both shares together are more than the pool
    "G3.serve-share-over-reservations": lambda: ("G3", patch(meminfo(SPARK, MemFree=112.0, MemAvailable=113.0), {
        "processes.processes": [{"cmdline": "vllm serve m0 --gpu-memory-utilization 0.5",
                                 "argv": ["vllm", "serve", "m0", "--gpu-memory-utilization", "0.5"], "name": "vllm",
                                 "pid": 4100, "ppid": 1, "rss_bytes": 2_000_000_000, "state": "running"}]}),
        Workload(method="inference", components=["vllm"])),
    "G3.psi-pressure": lambda: ("G3", f(SPARK, memory__psi={"some_avg10": 40.0, "full_avg10": 12.5, "some_avg60": 30.0,
                                                            "full_avg60": 10.0}), None),
    "G3.plan-exceeds-budget": lambda: ("G3", f(SPARK), Workload(method="full", params_b=70, estimated_peak_gb=140.0)),
    "G3.plan-tight": lambda: ("G3", f(SPARK), Workload(method="lora", params_b=70, estimated_peak_gb=115.0)),
    "G3.fit-untested": lambda: ("G3", f(SPARK), Workload(method="inference", params_b=70)),
    "G3.ok": lambda: ("G3", f(SPARK), None),
    "G3.discrete-ok": lambda: ("G3", f(H200), None),
    "G3.no-gpu": lambda: ("G3", f(NOGPU), None),
    "G3.meminfo-unread": lambda: ("G3", f(SPARK, memory__meminfo_bytes=missing(Why.error, "permission denied")), None),
    "G3.meminfo-incomplete": lambda: ("G3", f(SPARK, memory__meminfo_bytes={"MemTotal": 128452014080}), None),
    "G3.discrete-unread": lambda: ("G3", f(H200, gpu__devices__0__memory_free_bytes=missing(Why.error, "nvml")), None),
    # G4
    "G4.low-clock-state": lambda: ("G4", f(SPARK, gpu__devices__0__utilization_pct=98.0, gpu__devices__0__sm_clock_mhz=699.0,
                                           gpu__devices__0__power_draw_w=17.0, gpu__devices__0__clock_event_reasons=0), None),
    "G4.thermal-reasons": lambda: ("G4", f(SPARK, gpu__devices__0__clock_event_reasons=0x20), None),
    "G4.thermal-counter-growing": lambda: ("G4", f(SPARK, gpu__devices__0__violation_us={"sw_thermal": 0, "hw_thermal": 0},
                                                   gpu__devices__0__violation_us_end={"sw_thermal": 250_000, "hw_thermal": 0}), None),
    "G4.hot": lambda: ("G4", f(SPARK, gpu__devices__0__temperature_c=91.0), None),
    "G4.snapshot": lambda: ("G4", f(SPARK), None),
    "G4.no-gpu": lambda: ("G4", f(NOGPU), None),
    "G4.unread": lambda: ("G4", f(H200, gpu__devices=[], target__live__device_name="NVIDIA H200"), None),
    "G4.no-reading": lambda: ("G4", f(H200, **{f"gpu__devices__0__{k}": missing(Why.not_supported) for k in (
        "temperature_c", "power_draw_w", "sm_clock_mhz", "pstate", "clock_event_reasons")}), None),
    # G5
    "G5.degraded": lambda: ("G5", measured(copy=120.0, read=140.0), None),
    "G5.no-result": lambda: ("G5", measured(), None),
    "G5.measured-in-range": lambda: ("G5", measured(copy=186.0, read=232.0), None),
    "G5.measured-no-reference": lambda: ("G5", measured(f(H200, gpu__devices__0__name="Tesla T4",
                                                           target__live__device_name="Tesla T4"), "Tesla T4", copy=250.0), None),
    "G5.spec-and-measured-range": lambda: ("G5", f(SPARK), None),
    "G5.spec-only": lambda: ("G5", f(H200, gpu__devices__0__name="NVIDIA H100 80GB HBM3",
                                     target__live__device_name="NVIDIA H100 80GB HBM3"), None),
    "G5.no-spec": lambda: ("G5", f(H200, gpu__devices__0__name="Tesla T4", target__live__device_name="Tesla T4"), None),
    "G5.not-measured": lambda: ("G5", f(SPARK, bandwidth=missing(Why.error, "refused: other GPU jobs running")), None),
    "G5.no-gpu": lambda: ("G5", f(NOGPU), None),
    # G6
    "G6.total-contention": lambda: ("G6", vllm_caps((0.45, 55.0), (0.38, 48.0)), None),
    "G6.uncapped-server": lambda: ("G6", f(VLLM), None),
    "G6.near-capacity": lambda: ("G6", vllm_caps((0.85, 90.0)), None),
    "G6.heavy-uncapped": lambda: ("G6", gpu_procs(SPARK, 30.0), None),
    "G6.dstate": lambda: ("G6", f(SPARK, processes__processes=[{"cmdline": "python load_shards.py", "argv": ["python", "load_shards.py"], "name": "python",
                                                                "pid": 4242, "ppid": 1, "rss_bytes": 12 * GIB,
                                                                "state": "disk-sleep"}]), None),
    "G6.plan-plus-neighbours": lambda: ("G6", gpu_procs(SPARK, 30.0), Workload(method="lora", estimated_peak_gb=110.0)),
    # a vLLM capped at 0.5 that holds only 10 GiB so far: by what it holds the run fits, by its cap it does not
    "G6.plan-plus-reservations": lambda: ("G6", vllm_caps((0.5, 10.0)), Workload(method="lora", estimated_peak_gb=64.0)),
    "G6.plan-tight-beside-reservations": lambda: ("G6", vllm_caps((0.5, 10.0)),
                                                  Workload(method="lora", estimated_peak_gb=50.0)),
    "G6.no-per-process": lambda: ("G6", f(SPARK, gpu__devices__0__processes=missing(Why.not_supported)), None),
    "G6.ok": lambda: ("G6", f(SPARK), None),
    "G6.no-gpu": lambda: ("G6", f(NOGPU), None),
    "G6.unread": lambda: ("G6", f(SPARK, processes__processes=missing(Why.error, "no /proc"),
                              gpu__devices__0__processes=missing(Why.not_supported)), None),
    # G7
    "G7.nvfp4-no-sm121a": lambda: ("G7", f(SPARK), Workload(precision="nvfp4")),
    "G7.engine-without-sm121a": lambda: ("G7", f(SPARK, target__extensions=[
        {"package": "vllm", "file": "vllm/_C.abi3.so", "needed": [], "kernels": ["sm_100", "sm_120", "sm_90"]}]),
        Workload(precision="nvfp4")),
    "G7.nvfp4-sm121a": lambda: ("G7", f(SPARK, host__env={"TORCH_CUDA_ARCH_LIST": "12.1a"}), Workload(precision="nvfp4")),
    "G7.other-precision": lambda: ("G7", f(SPARK), Workload(precision="fp8")),
    "G7.hardware-only": lambda: ("G7", f(SPARK), None),
    "G7.not-sm121": lambda: ("G7", f(H200, gpu__devices__0__name="NVIDIA B200", gpu__devices__0__capability=[10, 0],
                                     target__live__device_name="NVIDIA B200", target__live__capability=[10, 0]), None),
    "G7.no-fp4": lambda: ("G7", f(H200), None),
    "G7.capability-unread": lambda: ("G7", f(H200, gpu__devices__0__name="Tesla T4", gpu__devices__0__capability=missing(Why.error),
                                             target__live=missing(Why.not_collected)), None),
    "G7.no-gpu": lambda: ("G7", f(NOGPU), None),
    # G8
    "G8.open-issues": lambda: ("G8", patch(unsloth_on(SPARK, fa=None), {"playbooks.issues": [
        *[i.model_dump() for i in f(SPARK).playbooks.issues],
        {"number": 140, "title": "Unsloth notebook fails on DGX Spark", "labels": ["bug"], "updated_at": "2026-08-20T00:00:00Z"}]}),
        None),
    "G8.no-match": lambda: ("G8", f(SPARK), None),
    "G8.nothing-to-match": lambda: ("G8", f(SPARK, target__distributions={"torch": "2.9.0a0"}), None),
    "G8.not-fetched": lambda: ("G8", f(SPARK, playbooks__issues=missing(Why.not_collected, "--offline")), None),
    # G9
    "G9.hard-blocker": lambda: ("G9", f(TORCHAO), None),
    "G9.bare-pip": lambda: ("G9", f(VLLM), None),
    "G9.bare-pip-off-matrix": lambda: ("G9", f(BARE, host__os_release={"NAME": "Ubuntu"}), None),
    "G9.newer-majors": lambda: ("G9", f(SPARK, target__distributions={**load_facts_fixture(SPARK).target.distributions,
                                                                      "transformers": "6.0.0"}), None),
    "G9.triton-ptxas": lambda: ("G9", f(SPARK, host__env={}), None),
    "G9.stale-matrix-off-matrix": lambda: ("G9", f(SPARK, collected_at=LATER, host__container__v1_class__image_kind="other",
                                                   target__distributions={**load_facts_fixture(SPARK).target.distributions,
                                                                          "transformers": "4.58.0"}), None),
    "G9.blessed-container": lambda: ("G9", f(SPARK), None),
    "G9.other-container": lambda: ("G9", f(SPARK, host__container__v1_class__image_kind="other", host__container__v1_class__image_hint="myorg/trainer:1"), None),
    "G9.no-marker": lambda: ("G9", f(VLLM, host__os_release={"NAME": "Ubuntu"}), None),
    # G10
    "G10.train-tp-across-nodes": lambda: ("G10", configs(HIT, NODES), Workload(method="full")),
    "G10.train-tp-exceeds-node": lambda: ("G10", configs(HIT), Workload(method="lora")),
    "G10.serve-tp-across-nodes": lambda: ("G10", configs(HIT, NODES), Workload(method="inference")),
    "G10.tp-unresolved": lambda: ("G10", configs({**HIT, "value": "${TP}"}), None),
    "G10.nodes-unresolved": lambda: ("G10", f(H200, configs__scanned=True, configs__hits=[HIT, {**NODES, "value": "$NNODES"}],
                                             gpu__devices=[{**load_facts_fixture(H200).gpu.devices[0].model_dump(), "index": i}
                                                           for i in range(2)]), None),
    "G10.tp-topology-unknown": lambda: ("G10", f(H200, gpu__devices=[], configs__scanned=True, configs__hits=[HIT]), None),
    "G10.tp-maybe-across-nodes": lambda: ("G10", f(H200, configs__scanned=True, configs__hits=[HIT], gpu__devices=[
        {**load_facts_fixture(H200).gpu.devices[0].model_dump(), "index": i} for i in range(2)]), Workload(nodes=2)),
    "G10.tp-within-node": lambda: ("G10", f(H200, configs__scanned=True, configs__hits=[HIT], gpu__devices=[
        {**load_facts_fixture(H200).gpu.devices[0].model_dump(), "index": i} for i in range(2)]), None),
    "G10.unread-config": lambda: ("G10", configs(skipped=[{"path": "/srv/big.yaml", "reason": "over 1048576 bytes"}]), None),
    "G10.ddp-across-nodes": lambda: ("G10", configs(NODES), None),
    "G10.no-tp": lambda: ("G10", f(SPARK), None),
    "G10.not-scanned": lambda: ("G10", f(SPARK, configs__scanned=False), None),
}


def reach(code: str) -> Finding:
    out = SCENARIOS[code]()
    if isinstance(out, Finding):
        return out
    gid, facts, workload = out
    return run_check(gid, facts, workload)


def catalog_codes() -> list[str]:
    return sorted(c for g in load().gotchas.values() for c in g.codes)


def test_every_catalog_sub_code_has_a_scenario_and_no_scenario_is_stale():
    assert sorted(SCENARIOS) == catalog_codes()


@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_the_owner_reaches_each_sub_code(code):
    finding = reach(code)
    assert finding.code == code, f"{code}: reached {finding.code}: {finding.summary}"
    entry = load().subcode(code)
    assert finding.status.value == entry.status
    if entry.status in ("fail", "warn", "unknown"):
        assert finding.fix and finding.fix_where == entry.where, f"{code} has no fix or no place to run it"


def _golden(finding: Finding) -> dict[str, str]:
    return {"status": finding.status.value, "summary": finding.summary, "fix": finding.fix, "where": finding.fix_where}


def test_golden_lines_and_fixes():
    got = {code: _golden(reach(code)) for code in sorted(SCENARIOS)}
    if os.environ.get("SPARKOPS_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    changed = sorted(c for c in got if got[c] != want.get(c))
    assert not changed, f"worded differently from the golden file: {changed} (SPARKOPS_REGEN_GOLDEN=1 after review)"


def test_catalog_entries_are_complete():
    kb = load()
    for gotcha in kb.gotchas.values():
        for code, entry in gotcha.codes.items():
            assert code.split(".", 1)[0] == gotcha.id, code
            assert entry.status in ("pass", "fail", "warn", "skip", "info", "unknown"), code
            if entry.status in ("fail", "warn", "unknown"):
                assert entry.fix and entry.where in ("host", "container", "target-env", "anywhere"), code
            template_fields(entry.line), template_fields(entry.fix)  # both parse as templates


def test_a_missing_template_value_fails_loudly():
    with pytest.raises(KeyError, match="template value"):
        conclude(load(), "G3", [Reason("G3.page-cache", {})])
