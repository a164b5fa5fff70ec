"""The GPU-visibility triage: the first hypothesis that fires, in the spec's order, from facts."""

import pytest

from build_fixtures import patch
from conftest import load_facts_fixture
from sparkops.checks.gpu_visibility import triage
from sparkops.facts.model import Facts
from sparkops.knowledge import load

KB = load()

NODES = {"/dev/nvidia0": "rw", "/dev/nvidiactl": "rw", "/dev/nvidia-uvm": "rw"}


def bare_host(**changes) -> Facts:
    """The no-GPU fixture moved out of its container onto a host with healthy device nodes."""
    base = patch(load_facts_fixture("no_gpu"), {"host.container.markers": [], "host.dev_nvidia": NODES,
                                                "host.env": {}})
    return patch(base, changes) if changes else base


def test_container_without_the_nvidia_runtime_fires_first():
    t = triage(load_facts_fixture("no_gpu"), KB)  # NGC container started without --gpus: no device nodes
    assert t.fired == 1 and "--runtime=nvidia --gpus all" in t.fix(KB)


def test_container_with_nvidia_visible_devices_void():
    f = patch(load_facts_fixture("no_gpu"), {"host.dev_nvidia": NODES,
                                             "host.env": {"NVIDIA_VISIBLE_DEVICES": "void"}})
    assert triage(f, KB).fired == 1


@pytest.mark.parametrize("value", ["", "-1", "none", "1", "3,4"])
def test_cuda_visible_devices_that_hides_the_gpu(value):
    t = triage(bare_host(**{"host.env": {"CUDA_VISIBLE_DEVICES": value}}), KB)
    assert t.fired == 2, t
    assert t.ruled_out == [1]


def test_cuda_visible_devices_that_names_an_existing_gpu_is_fine():
    t = triage(bare_host(**{"host.env": {"CUDA_VISIBLE_DEVICES": "0"}}), KB)
    assert t.fired != 2


def test_unusable_device_node_fires_permissions():
    t = triage(bare_host(**{"host.dev_nvidia": {**NODES, "/dev/nvidia0": "r"}}), KB)
    assert t.fired == 3 and "/dev/nvidia0 (r)" in t.reason


def test_missing_device_nodes_fire_permissions():
    t = triage(bare_host(**{"host.dev_nvidia": {"unavailable": "not_found", "detail": "no /dev/nvidia* nodes"}}), KB)
    assert t.fired == 3


def test_wedged_context_when_the_driver_answers():
    gb10 = load_facts_fixture("gb10_ngc_2509_healthy")
    f = patch(gb10, {"host.container.markers": [], "host.dev_nvidia": NODES,
                     "target.live.cuda_available": False,
                     "target.live.cuda_error": "CUDA unknown error - this may be due to an incorrectly set up "
                                               "environment"})
    t = triage(f, KB)
    assert t.fired == 4 and t.ruled_out == [1, 2, 3]


def test_abi_mismatch_is_last():
    gb10 = load_facts_fixture("gb10_bare_pip_cu128")
    f = patch(gb10, {"host.dev_nvidia": NODES, "target.live.cuda_available": False, "target.live.cuda_error": ""})
    t = triage(f, KB)
    assert t.fired == 5 and "12.8" in t.reason and "cu130" in t.fix(KB)
    assert t.ruled_out == [1, 2, 3, 4]


def test_identity_names_the_hypothesis_that_fired():
    from sparkops import api

    rep = api.build_report(load_facts_fixture("no_gpu"))
    ident = rep.findings[0]
    assert ident.status.value == "fail" and "triage #1" in ident.summary
    assert rep.blocking[0].fix.startswith("Restart the container")


def test_a_gpu_probe_that_did_not_finish_is_not_read_as_no_gpu():
    from sparkops import api
    from sparkops.facts.model import ProbeRecord

    f = load_facts_fixture("no_gpu")
    f.probes["gpu"] = ProbeRecord(name="gpu", ok=False, reason="timeout: abandoned at the collection deadline")
    rep = api.build_report(f)
    ident = rep.findings[0]
    assert ident.status.value == "unknown" and "did not finish" in ident.summary
