"""The bandwidth math (as nccl-tests defines it), the size plan, and NCCL's debug-output parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkops.fleet import collective as c
from sparkops.fleet.settings import SizePlan, load_fleet

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- busbw math
@pytest.mark.parametrize(("op", "n", "factor"), [
    ("all_reduce", 1, 0.0), ("all_reduce", 2, 1.0), ("all_reduce", 4, 1.5), ("all_reduce", 8, 1.75),
    ("all_gather", 1, 0.0), ("all_gather", 2, 0.5), ("all_gather", 4, 0.75), ("all_gather", 8, 0.875),
])
def test_busbw_factor_is_nccl_tests_formula(op, n, factor):
    assert c.busbw_factor(op, n) == pytest.approx(factor)


def test_busbw_reproduces_a_recorded_two_spark_nccl_tests_row():
    # gb10-readings §6.3: all_gather 17179869184 B in 385191 us -> algbw 44.60, busbw 22.30 (2 ranks)
    assert c.algbw_gbs(17179869184, 385191e-6) == pytest.approx(44.60, abs=0.01)
    assert c.busbw_gbs("all_gather", 17179869184, 385191e-6, 2) == pytest.approx(22.30, abs=0.01)
    # and a row of the 1 GiB curve: 1073741824 B in 26932.5 us -> 39.87 / 19.93
    assert c.busbw_gbs("all_gather", 1073741824, 26932.5e-6, 2) == pytest.approx(19.93, abs=0.01)


def test_all_reduce_small_size_row_from_the_playbook_thread():
    # dgx-spark-playbooks#103: all_reduce 65536 B in 67.93 us -> algbw 0.96, busbw 0.96 (2 ranks)
    assert c.busbw_gbs("all_reduce", 65536, 67.93e-6, 2) == pytest.approx(0.96, abs=0.01)


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        c.busbw_factor("broadcast", 2)
    with pytest.raises(ValueError):
        c.busbw_factor("all_reduce", 0)
    with pytest.raises(ValueError):
        c.algbw_gbs(1024, 0.0)


@given(op=st.sampled_from(c.OPS), n=st.integers(1, 4096), size=st.integers(1, 1 << 40),
       seconds=st.floats(1e-7, 1e4, allow_nan=False))
def test_busbw_never_exceeds_the_limit_of_its_factor(op, n, size, seconds):
    bus = c.busbw_gbs(op, size, seconds, n)
    alg = c.algbw_gbs(size, seconds)
    assert 0 <= bus <= 2 * alg
    assert (bus == 0) == (n == 1)


def test_allreduce_seconds_inverts_busbw():
    # an all-reduce of 16 GB at 20 GB/s busbw over 2 ranks takes 16 / 20 * (2*1/2) = 0.8 s
    assert c.allreduce_seconds(16e9, 20.0, 2) == pytest.approx(0.8)
    assert c.allreduce_seconds(16e9, 20.0, 1) is None  # one rank: no link
    assert c.allreduce_seconds(16e9, 0.0, 2) is None


@given(size=st.integers(1, 1 << 34), n=st.integers(1, 64), dtype=st.sampled_from([1, 2, 4, 8]))
def test_aligned_size_splits_into_whole_shards(size, n, dtype):
    s = c.aligned_size(size, n, dtype)
    assert s % (n * dtype) == 0
    assert s >= n * dtype
    assert s <= max(size, n * dtype)


def test_plan_sizes_skips_what_the_tightest_rank_cannot_hold():
    plan = SizePlan(sizes=[1 << 20, 1 << 30], warmup=1, iterations=[10, 2])
    keep, skipped = c.plan_sizes(plan, 2, 4, affordable_bytes=100 << 20)
    assert keep == [(1 << 20, 10)]
    assert len(skipped) == 1 and "1 GiB" in skipped[0] and "1.5 GiB" in skipped[0]
    keep, skipped = c.plan_sizes(plan, 2, 4, affordable_bytes=None)  # unknown budget: nothing cut
    assert [s for s, _ in keep] == [1 << 20, 1 << 30] and skipped == []


def test_packaged_nccl_plan_stays_far_below_the_size_that_froze_a_spark():
    fk = load_fleet()
    biggest = max(fk.bandwidth.nccl.sizes)
    assert c.probe_bytes(biggest, 2) < 2 << 30  # the 16 GB nccl-tests buffer froze a node (playbooks#102)


def test_rows_take_the_slowest_rank_and_leave_out_unreported_sizes():
    sizes = [(1 << 20, 10), (8 << 20, 3)]
    times = {0: {"all_reduce:1048576": 100e-6, "all_reduce:8388608": 1e-3, "all_gather:1048576": 50e-6},
             1: {"all_reduce:1048576": 200e-6, "all_reduce:8388608": 2e-3}}
    rows = c.rows_from_times(2, times, sizes, warmup=2)
    assert [(r.op, r.size_bytes) for r in rows] == [("all_reduce", 1 << 20), ("all_reduce", 8 << 20)]
    r = rows[0]
    assert r.time_us == 200.0 and r.rank_time_us == [100.0, 200.0]
    assert r.algbw_gbs == pytest.approx((1 << 20) / 200e-6 / 1e9, abs=1e-3)
    assert r.busbw_gbs == pytest.approx(r.algbw_gbs, abs=1e-3)  # 2 ranks: factor 1


def test_step_label_names_the_collective():
    sizes = [(1 << 20, 5), (8 << 20, 3)]
    assert c.step_label(1, sizes) == "all-reduce of 1 MiB"
    assert c.step_label(4, sizes) == "all-gather of 8 MiB"
    assert c.step_label(0, sizes) == "ready to start"


# --------------------------------------------------------------------------- NCCL debug parser
def test_two_sparks_recorded_debug_says_roce_without_gdr():
    info = c.parse_nccl_debug((DATA / "nccl_two_sparks_gdr_disabled.log").read_text(), rank=0, source="file")
    assert info.nccl_version == "2.30.7+cuda13.3"
    assert info.network == "IB"
    assert info.devices.startswith("[0]rocep1s0f0:1/RoCE") and "OOB" not in info.devices
    assert info.gdr is False and "Disabled for HCA 0 'rocep1s0f0'".lower() in info.gdr_evidence.lower()


def test_ibext_plugin_with_dmabuf_counts_as_gdr_from_the_hca_lines():
    info = c.parse_nccl_debug((DATA / "nccl_two_sparks_ibext_dmabuf.log").read_text(), rank=1)
    assert info.channels == ["NET/IBext_v10/1", "NET/IBext_v10/0"]
    assert info.gdr is True and "enabled for HCA" in info.gdr_evidence


def test_gdrdma_channels_are_the_strongest_evidence():
    info = c.parse_nccl_debug((DATA / "nccl_a100_gdrdma_channels.log").read_text(), rank=0)
    assert info.gdr is True and info.gdr_evidence == "channel via NET/IB/5/GDRDMA"
    assert info.channels == ["NET/IB/5/GDRDMA", "NET/IB/2/GDRDMA"]


def test_ring_line_without_gdr_and_nccl_tests_version_banner():
    info = c.parse_nccl_debug((DATA / "nccl_roce_mlx5_no_gdr_ring.log").read_text(), rank=0)
    assert info.nccl_version == "2.10.3+cuda11.0"
    assert info.network == "IB" and info.devices == "[0]mlx5_6:1/RoCE"
    assert info.gdr is False and "GDR 0" in info.gdr_evidence


def test_socket_transport_is_named():
    text = ("h:1:1 [0] NCCL INFO NET/Socket : Using [0]enp1s0f1np1:192.168.100.10<0>\n"
            "h:1:1 [0] NCCL INFO Using network Socket\n"
            "h:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n")
    info = c.parse_nccl_debug(text, rank=0)
    assert info.network == "Socket" and info.channels == ["NET/Socket/0"] and info.gdr is None


def test_nothing_said_leaves_everything_unknown():
    info = c.parse_nccl_debug("", rank=3, source="NCCL_DEBUG_FILE /tmp/x")
    assert (info.nccl_version, info.network, info.gdr, info.channels, info.lines_read) == ("", "", None, [], 0)
    assert info.source == "NCCL_DEBUG_FILE /tmp/x"


@given(st.text())
def test_parser_never_raises(text):
    info = c.parse_nccl_debug(text, rank=0)
    assert info.gdr in (True, False, None)
    assert len(info.channels) <= 20


@given(st.lists(st.sampled_from([
    "x:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda13.0",
    "x:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'rocep1s0f0'",
    "x:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA (DMABUF) enabled for HCA 1 'roceP2p1s0f1'",
    "x:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
    "x:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
    "x:1:1 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "garbage \x00 line",
]), max_size=30))
def test_a_gdrdma_channel_always_wins(lines):
    info = c.parse_nccl_debug("\n".join(lines), rank=0)
    if any(line.endswith("/GDRDMA") for line in lines):
        assert info.gdr is True
