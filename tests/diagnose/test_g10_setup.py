"""Round 18z's two readings of a multi-node report (sparkops/diagnose/learned.py ``setup_fault``, ``tp_failure``):
is the failure the setup's own (an address, an interface, SSH, a rendezvous) or tensor parallelism's (a collective
that hangs or costs time, TP slower than one Spark)? Read on the verbatim excerpts of labelled reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkops.diagnose.learned import setup_fault, text_features, tp_failure, tp_hang
from sparkops.diagnose.reading import line_roles
from sparkops.knowledge import safe_load

HERE = Path(__file__).parent


def _lines(rel: str) -> tuple[list[str], tuple[str, ...]]:
    case = safe_load((HERE / rel).read_text(encoding="utf-8"))
    lines = str(case["text"]).splitlines()
    return lines, line_roles(lines)


@pytest.mark.parametrize("rel", [
    "topup11/sparkrun-176-ring-topology-wrong-ip-ssh-timeout.yaml",  # none: a wrong IP, an SSH connect timing out
])
def test_a_multi_node_launch_failing_on_its_own_network_setting_is_a_setup_fault(rel: str) -> None:
    lines, roles = _lines(rel)
    assert setup_fault(lines, roles)
    assert not tp_failure(lines, roles)


@pytest.mark.parametrize("rel", [
    "holdout4/b12x-pr295-nccl-allreduce-dominates-multi-spark-tp-decode.yaml",  # G10: all-reduce time per step
    "holdout2/vllm-46097-minimax-multinode-tp4-nccl-deadlock-gb10.yaml",  # G10: ranks deadlocked in a collective
])
def test_a_collective_that_hangs_or_costs_time_is_tp_s_own_failure(rel: str) -> None:
    lines, roles = _lines(rel)
    assert tp_failure(lines, roles)
    assert not setup_fault(lines, roles)


def test_a_network_item_on_a_collective_line_or_cleared_is_not_a_setup_fault() -> None:
    lines = ["Two DGX Sparks, TP=2 across nodes over ConnectX-7.",
             "Error: all-reduce timed out although NCCL_SOCKET_IFNAME=enp1s0f0np0 is set",
             "The hang is not the network: MTU verified at 9000 on both nodes, still fails"]
    roles = line_roles(lines)
    assert not setup_fault(lines, roles)
    assert tp_failure(lines, roles)
    one_node = ["ssh: connect to host port 22: Connection timed out"]
    assert not setup_fault(one_node, line_roles(one_node))  # nothing spans nodes


def test_the_readings_are_text_features_and_never_raise_on_odd_input() -> None:
    for lines in ([], [""], ["\x00\xff" * 50], ["two Sparks"] * 3):
        f = text_features(lines, line_roles(lines))
        assert f["setup_fault"] in (0.0, 1.0) and f["tp_failure"] in (0.0, 1.0) and f["tp_hang"] in (0.0, 1.0)


@pytest.mark.parametrize("rel", [
    "cases/sglang-33289-multinode-tp-rank-divergence.yaml",  # G10 by the cross-node hang convention
    "cases/vllm-41725-minimax-tp2-two-sparks-hang.yaml",  # G10: a recurring hang of TP=2 across two Sparks
])
def test_a_hang_of_tp_across_nodes_is_tp_s_own_failure_by_the_labelling_rule(rel: str) -> None:
    lines, roles = _lines(rel)
    assert tp_hang(lines, roles)
    assert not tp_failure(lines, roles)  # (B)'s reading alone missed these: the hang names no collective


def test_a_multi_node_timeout_or_a_hang_without_tp_is_not_a_tp_hang() -> None:
    lines, roles = _lines("topup11/sparkrun-176-ring-topology-wrong-ip-ssh-timeout.yaml")  # none: SSH timeout
    assert not tp_hang(lines, roles)
    no_tp = ["Two DGX Sparks running DDP across nodes over ConnectX-7", "Training hangs after step 10"]
    assert not tp_hang(no_tp, line_roles(no_tp))  # nothing states TP > 1
    denied = ["TP=2 across two Sparks", "It did not hang this time, throughput 40 tok/s"]
    assert not tp_hang(denied, line_roles(denied))
    shape = ["TP=2 across two Sparks", "The server never finishes starting: rank 1 stops after NCCL init"]
    assert tp_hang(shape, line_roles(shape))
