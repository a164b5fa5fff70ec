"""The fleet judge, pure: recorded GB10 snapshots as nodes, changed one fact at a time."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import build_fixtures as bf
from conftest import load_facts_fixture
from sparkops.core.findings import Status
from sparkops.facts.model import ConfigHit
from sparkops.facts.workload import Workload
from sparkops.fleet import judge
from sparkops.fleet.model import (
    BandwidthResult,
    BandwidthRow,
    FleetNode,
    MemberStatus,
    RuntimeFacts,
    TransportInfo,
)
from sparkops.fleet.settings import load_fleet
from sparkops.knowledge import load

KB = load()
FK = load_fleet()
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)  # noqa: UP017


def spark_a():
    return load_facts_fixture("fleet_gb10_spark_a")


def spark_b():
    return load_facts_fixture("fleet_gb10_spark_b_drift")


def node(rank: int, facts, host: str | None = None, **kw) -> FleetNode:
    return FleetNode(rank=rank, hostname=host or f"spark-{'ab'[rank % 2]}{rank // 2 or ''}", local_rank=0,
                     facts=facts, facts_source="test", **kw)


def fleet(nodes, members=None, bandwidth=None, transport=(), workload=None, backend="nccl", world=None):
    members = members if members is not None else [MemberStatus(rank=n.rank, joined=True, hostname=n.hostname)
                                                    for n in nodes]
    return judge.assemble(nodes=nodes, members=members, world_size=world or len(members), backend=backend,
                          launcher="torchrun", bandwidth=bandwidth, transport=list(transport),
                          workload=workload or Workload(), kb=KB, fk=FK, join_timeout_s=120, now=NOW)


def finding(report, check):
    return next(f for f in report.findings if f.check == check)


# --------------------------------------------------------------------------- two identical Sparks
def test_two_identical_sparks_are_ready():
    rep = fleet([node(0, spark_a()), node(1, spark_a())], bandwidth=BandwidthResult(status="skipped", reason="test"))
    by = {f.check: f.status for f in rep.findings}
    assert by == {"fleet.membership": Status.passed, "fleet.torch": Status.passed, "fleet.driver": Status.passed,
                  "fleet.nccl": Status.passed, "fleet.container": Status.passed, "fleet.stack": Status.passed,
                  "fleet.thermal": Status.passed, "fleet.memory": Status.info, "fleet.topology": Status.passed,
                  "fleet.bandwidth": Status.skip, "fleet.transport": Status.skip}
    assert rep.fleet_verdict == "ready-with-warnings"  # the skipped measurement and transport
    assert rep.nodes_count == 2 and rep.hosts == {"spark-a": [0], "spark-b": [1]}
    assert [n.report.verdict for n in rep.nodes] == ["ready", "ready"]
    assert rep.verdict == "ready-with-warnings" and judge.exit_code(rep) == 1


def test_each_node_is_judged_with_the_node_count_of_the_process_group():
    rep = fleet([node(0, spark_a()), node(1, spark_a())])
    assert rep.workload.nodes == 2
    assert all(n.report.workload.nodes == 2 for n in rep.nodes)
    one_host = fleet([node(0, spark_a(), "h"), node(1, spark_a(), "h")])
    assert one_host.workload.nodes == 1


# --------------------------------------------------------------------------- differences
def test_drifted_node_is_named_for_torch_driver_nccl_and_container():
    rep = fleet([node(0, spark_a()), node(1, spark_b())])
    assert rep.verdict == "blocked" and rep.fleet_verdict == "blocked"
    torch = finding(rep, "fleet.torch")
    assert torch.status is Status.fail and torch.gotcha == "G1" and torch.ranks == [1]
    assert "2.9.0a0+50eac811a6.nv25.09 (CUDA 13.0) on rank 0" in torch.summary
    assert "2.9.0a0+145a3a7bda.nv25.10 (CUDA 13.0) on rank 1" in torch.summary
    driver = finding(rep, "fleet.driver")
    assert driver.status is Status.fail and driver.ranks == [1] and "580.95.05" in driver.summary
    nccl = finding(rep, "fleet.nccl")
    assert nccl.status is Status.fail and nccl.gotcha == "G10" and "2.27.7 on rank 0; 2.28.3 on rank 1" in nccl.summary
    cont = finding(rep, "fleet.container")
    assert cont.status is Status.fail and cont.gotcha == "G9" and "25.10" in cont.summary
    assert {b.check for b in rep.blocking} >= {"fleet.torch", "fleet.driver", "fleet.nccl", "fleet.container"}
    assert all(b.fix for b in rep.blocking)


def test_the_majority_is_the_reference_and_the_odd_rank_is_named():
    rep = fleet([node(0, spark_b()), node(1, spark_a()), node(2, spark_a())])
    assert finding(rep, "fleet.torch").ranks == [0]


def test_container_digests_compare_when_known():
    a = bf.patch(spark_a(), {"target.container_ref": "nvcr.io/nvidia/pytorch:25.09-py3",
                             "target.container_digest": "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64})
    b = bf.patch(spark_a(), {"target.container_ref": "nvcr.io/nvidia/pytorch:25.09-py3",
                             "target.container_digest": "nvcr.io/nvidia/pytorch@sha256:" + "b" * 64})
    rep = fleet([node(0, a), node(1, b)])
    f = finding(rep, "fleet.container")
    assert f.status is Status.fail and f.ranks == [1] and "sha256:bbbb" in f.summary
    same = finding(fleet([node(0, a), node(1, a)]), "fleet.container")
    assert same.status is Status.passed and "sha256:aaaa" in same.summary


def test_nccl_falls_back_to_the_wheel_then_the_runtime():
    env = {k: v for k, v in spark_a().host.env.items() if k != "NCCL_VERSION"}
    no_env = bf.patch(spark_a(), {"host.env": env})
    wheel = bf.patch(no_env, {"target.distributions": {**spark_a().target.distributions, "nvidia-nccl-cu13": "2.27.7"}})
    rt = RuntimeFacts(torch_version="2.9.0a0", torch_cuda="13.0", nccl_version="2.27.7")
    rep = fleet([node(0, spark_a()), node(1, wheel), node(2, no_env, runtime=rt)])
    f = finding(rep, "fleet.nccl")
    assert f.status is Status.passed and "2.27.7" in f.summary
    sources = [e.fact for e in f.evidence]
    assert any("NCCL_VERSION" in s for s in sources) and any("wheel nvidia-nccl-cu13" in s for s in sources)
    assert any("torch.cuda.nccl.version" in s for s in sources)


def test_an_unreadable_reading_is_unknown_not_a_match():
    env = {k: v for k, v in spark_a().host.env.items() if k != "NCCL_VERSION"}
    rep = fleet([node(0, spark_a()), node(1, bf.patch(spark_a(), {"host.env": env}),
                                            runtime=RuntimeFacts(torch_version="2.13.0+cpu"))])
    f = finding(rep, "fleet.nccl")
    assert f.status is Status.unknown and f.ranks == [1] and "CPU build" in f.detail


def test_training_stack_difference_is_a_warning_naming_the_package():
    b = bf.patch(spark_a(), {"target.distributions": {**spark_a().target.distributions, "transformers": "5.12.0"}})
    f = finding(fleet([node(0, spark_a()), node(1, b)]), "fleet.stack")
    assert f.status is Status.warn and f.gotcha == "G9" and f.ranks == [1]
    assert "transformers 5.13.1 on rank 0, 5.12.0 on rank 1" in f.summary


def test_mixed_gpu_models_warn_while_drivers_match():
    b = bf.patch(spark_a(), {"gpu.devices.0.name": "NVIDIA GB10 (other)"})
    f = finding(fleet([node(0, spark_a()), node(1, b)]), "fleet.driver")
    assert f.status is Status.warn and f.ranks == [1] and "GPU differs" in f.summary


# --------------------------------------------------------------------------- outliers
def test_hot_node_is_an_outlier():
    hot = bf.patch(spark_a(), {"gpu.devices.0.temperature_c": 71.0})
    rep = fleet([node(0, spark_a()), node(1, spark_a()), node(2, hot)])
    f = finding(rep, "fleet.thermal")
    assert f.status is Status.warn and f.gotcha == "G4" and f.ranks == [2] and "rank 2 at 71 °C" in f.summary


def test_capped_clock_node_is_an_outlier():
    capped = bf.patch(spark_a(), {"gpu.devices.0.sm_clock_max_mhz": 2000.0})
    f = finding(fleet([node(0, spark_a()), node(1, capped)]), "fleet.thermal")
    assert f.status is Status.warn and f.ranks == [1] and "2000" in f.summary


def test_small_temperature_spread_is_no_outlier():
    warm = bf.patch(spark_a(), {"gpu.devices.0.temperature_c": 48.0})
    assert finding(fleet([node(0, spark_a()), node(1, warm)]), "fleet.thermal").status is Status.passed


def _less_available(facts, gib: float):
    mi = dict(facts.memory.meminfo_bytes)
    mi["MemAvailable"] -= int(gib * 2**30)
    mi["MemFree"] -= int(gib * 2**30)
    return bf.patch(facts, {"memory.meminfo_bytes": mi})


def test_node_with_less_headroom_binds_the_job():
    low = _less_available(spark_a(), 20)
    rep = fleet([node(0, spark_a()), node(1, low)])
    f = finding(rep, "fleet.memory")
    assert f.status is Status.warn and f.gotcha == "G3" and f.ranks == [1]
    assert "90.8 GiB headroom vs 110.8 GiB" in f.summary


def test_workload_that_fits_one_node_but_not_the_other_blocks():
    low = _less_available(spark_a(), 20)
    rep = fleet([node(0, spark_a()), node(1, low)], workload=Workload(estimated_peak_gb=100))
    f = finding(rep, "fleet.memory")
    assert f.status is Status.fail and f.ranks == [1]
    assert rep.verdict == "blocked"


def test_ranks_sharing_a_host_are_said_to_share_its_memory():
    f = finding(fleet([node(0, spark_a(), "h"), node(1, spark_a(), "h")]), "fleet.memory")
    assert "ranks 0,1 share h's memory" in f.detail


# --------------------------------------------------------------------------- G10 with the real topology
def _with_tp(facts, tp: str):
    cfg = facts.configs.model_dump()
    cfg["hits"] = [ConfigHit(file="/workspace/finetuning/serve.yaml", line=3, key="tensor_parallel_size",
                             value=tp).model_dump()]
    return bf.patch(facts, {"configs": cfg})


def test_tensor_parallel_across_two_sparks_fails_g10():
    rep = fleet([node(0, _with_tp(spark_a(), "2")), node(1, _with_tp(spark_a(), "2"))])
    f = finding(rep, "fleet.topology")
    assert f.status is Status.fail and f.gotcha == "G10" and f.ranks == [0, 1]
    assert f.summary.startswith("2 node(s), world size 2") and "across nodes" in f.summary
    assert f.fix and rep.verdict == "blocked"


def test_no_tensor_parallel_across_two_sparks_passes_g10():
    f = finding(fleet([node(0, spark_a()), node(1, spark_a())]), "fleet.topology")
    assert f.status is Status.passed and "DDP/FSDP" in f.summary


def test_two_nccl_ranks_on_one_spark_fail_topology():
    f = finding(fleet([node(0, spark_a(), "spark-a"), node(1, spark_a(), "spark-a")], backend="nccl"), "fleet.topology")
    assert f.status is Status.fail and "2 ranks on one GB10" in f.summary
    gloo = finding(fleet([node(0, spark_a(), "spark-a"), node(1, spark_a(), "spark-a")], backend="gloo"), "fleet.topology")
    assert gloo.status is Status.passed


# --------------------------------------------------------------------------- membership
def test_missing_rank_is_named():
    members = [MemberStatus(rank=0, joined=True, hostname="spark-a"), MemberStatus(rank=1, joined=False)]
    rep = fleet([node(0, spark_a())], members=members)
    f = finding(rep, "fleet.membership")
    assert f.status is Status.fail and f.ranks == [1]
    assert f.summary == "rank 1 of world size 2 never joined within 120 s; joined: spark-a (rank 0)"
    assert rep.verdict == "blocked" and rep.blocking[0].check == "fleet.membership"


def test_stalled_rank_is_named_with_its_stage():
    members = [MemberStatus(rank=0, joined=True, hostname="spark-a"),
               MemberStatus(rank=1, joined=True, hostname="spark-b", stalled_at="collecting its facts (last reported: collecting)")]
    f = finding(fleet([node(0, spark_a())], members=members), "fleet.membership")
    assert f.status is Status.fail and f.ranks == [1] and "rank 1 (spark-b) stalled in collecting its facts" in f.summary


def test_a_joined_rank_without_facts_is_compared_from_its_runtime():
    rt = RuntimeFacts(torch_version="2.8.0", torch_cuda="13.0")
    other = FleetNode(rank=1, hostname="spark-b", local_rank=0, runtime=rt, error="facts not gathered: test")
    rep = fleet([node(0, spark_a()), other])
    f = finding(rep, "fleet.torch")
    assert f.status is Status.fail and "2.8.0 (CUDA 13.0) on rank 1" in f.summary
    assert finding(rep, "fleet.driver").status is Status.unknown


# --------------------------------------------------------------------------- bandwidth and transport
def _bw(busbw: float, backend: str = "nccl", world: int = 2, status: str = "measured", **kw) -> BandwidthResult:
    size = 1 << 30
    rows = [BandwidthRow(op=op, size_bytes=size, iterations=5, warmup=5, time_us=1e3, algbw_gbs=busbw * (1 if op == "all_reduce" else 2),
                         busbw_gbs=busbw) for op in ("all_reduce", "all_gather")]
    return BandwidthResult(status=status, backend=backend, world_size=world, nodes=2, rows=rows,  # type: ignore[arg-type]
                           reference_busbw_gbs=23.0, **kw)


def test_healthy_two_spark_bandwidth_passes_and_compares_with_ddp():
    f = finding(fleet([node(0, spark_a()), node(1, spark_a())], bandwidth=_bw(20.0)), "fleet.bandwidth")
    assert f.status is Status.passed and "all-gather 20.00 GB/s busbw at 1 GiB" in f.summary
    assert "DDP's gradient all-reduce for a model of 8B parameters in bf16 (16 GB) takes about 0.80 s" in f.detail


def test_workload_size_drives_the_ddp_comparison():
    f = finding(fleet([node(0, spark_a()), node(1, spark_a())], bandwidth=_bw(20.0),
                      workload=Workload(params_b=70)), "fleet.bandwidth")
    assert "70B parameters in bf16 (140 GB) takes about 7.00 s" in f.detail


def test_misconfigured_link_bandwidth_warns():
    f = finding(fleet([node(0, spark_a()), node(1, spark_a())], bandwidth=_bw(3.0)), "fleet.bandwidth")
    assert f.status is Status.warn and "below 50% of the 23 GB/s" in f.summary and "MTU 9000" in f.fix


def test_bandwidth_on_one_host_or_over_gloo_is_only_information():
    one_host = finding(fleet([node(0, spark_a(), "h"), node(1, spark_a(), "h")], bandwidth=_bw(3.0)), "fleet.bandwidth")
    assert one_host.status is Status.info and "one host" in one_host.summary
    gloo = finding(fleet([node(0, spark_a()), node(1, spark_a())], bandwidth=_bw(1.0, "gloo"), backend="gloo"),
                   "fleet.bandwidth")
    assert gloo.status is Status.info and "lower bound" in gloo.summary
    single = finding(fleet([node(0, spark_a())], bandwidth=_bw(0.0, world=1)), "fleet.bandwidth")
    assert single.status is Status.info and "busbw 0 by definition" in single.summary
    # one rank's algbw (38,971 GB/s on the H200 at 1 GiB) is a collective's no-op rate: said as such, never as a link's
    fast = _bw(0.0, world=1)
    fast.rows[0].algbw_gbs = 38971.47
    said = finding(fleet([node(0, spark_a())], bandwidth=fast), "fleet.bandwidth").summary
    assert "38971.47 GB/s) is the rate of a collective with no one to talk to, not of any link" in said


def test_hung_collective_fails_naming_the_rank():
    bw = _bw(0.0, status="timed-out", reason="all-reduce of 1 MiB did not complete within 60 s: rank 1 last reported: "
             "ready, not yet in a collective", stalled_ranks=[1])
    f = finding(fleet([node(0, spark_a()), node(1, spark_a())], bandwidth=bw), "fleet.bandwidth")
    assert f.status is Status.fail and f.ranks == [1] and "rank 1" in f.summary


def test_transport_recorded_between_two_sparks_is_information():
    t = [TransportInfo(rank=r, nccl_version="2.30.7+cuda13.3", network="IB", devices="[0]rocep1s0f0:1/RoCE",
                       gdr=False, gdr_evidence="GPU Direct RDMA disabled for HCA 0 'rocep1s0f0'") for r in (0, 1)]
    f = finding(fleet([node(0, spark_a()), node(1, spark_a())], transport=t), "fleet.transport")
    assert f.status is Status.info and "network IB" in f.summary and "no GPU Direct RDMA" in f.summary


def test_sockets_between_nodes_warn():
    t = [TransportInfo(rank=0, network="IB"), TransportInfo(rank=1, network="Socket")]
    f = finding(fleet([node(0, spark_a()), node(1, spark_a())], transport=t), "fleet.transport")
    assert f.status is Status.warn and f.ranks == [1] and "TCP sockets" in f.summary


def test_no_transport_finding_on_gloo():
    rep = fleet([node(0, spark_a()), node(1, spark_a())], backend="gloo")
    assert "fleet.transport" not in {f.check for f in rep.findings}


# --------------------------------------------------------------------------- verdicts
def test_a_blocked_node_blocks_the_fleet_even_when_the_fleet_checks_pass():
    bad = load_facts_fixture("gb10_bare_pip_cu128")  # G1 fails on that node alone
    rep = fleet([node(0, bad), node(1, bad)])
    assert rep.nodes[0].report.verdict == "blocked"
    assert rep.verdict == "blocked" and judge.exit_code(rep) == 2
    assert any(b.check == "rank 0" and b.gotcha == "G1" for b in rep.blocking)


@pytest.mark.parametrize(("vs", "expected"), [
    (("ready", "ready"), "ready"), (("ready", "ready-with-warnings"), "ready-with-warnings"),
    (("blocked", "ready"), "blocked"), (("ready-with-warnings", "blocked", "ready"), "blocked"),
])
def test_worst_verdict(vs, expected):
    assert judge.worst(*vs) == expected


def test_compare_with_one_rank_is_information():
    f = judge.compare("x", "G1", "thing", {0: judge.Reading("1", "s")}, "fix")
    assert f.status is Status.info and "nothing to compare" in f.summary
