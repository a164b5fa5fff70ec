"""G10 — tensor parallelism never across Sparks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import g10_tensor_parallel as g10
from sparkops.checks.base import Status
from sparkops.workload import Workload

TP2 = "gb10_two_node_tp2"
HIT = {"file": "/srv/serve.yaml", "line": 3, "key": "tensor_parallel_size", "value": "2", "kind": "tensor_parallel"}


def test_tp_across_two_sparks_fails_with_file_and_line():
    f = run_check("G10", load_facts_fixture(TP2))
    assert f.status is Status.fail
    assert "qwen3-235b.yaml:7" in f.summary and "WORLD_SIZE=2 > LOCAL_WORLD_SIZE=1" in f.summary


def test_tp2_on_one_spark_fails_one_gpu_per_node():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"configs.hits": [HIT]})
    f = run_check("G10", facts)
    assert f.status is Status.fail and "1 GPU" in f.summary and "/srv/serve.yaml:3" in f.summary


def test_tp_within_a_multi_gpu_node_passes():
    base = load_facts_fixture("h200_generic")
    devs = [base.gpu.devices[0].model_copy(update={"index": i}).model_dump() for i in range(8)]
    facts = patch(base, {"gpu.devices": devs, "configs.scanned": True, "configs.roots": ["/srv"],
                         "configs.files_read": 3, "configs.hits": [{**HIT, "value": "4"}]})
    f = run_check("G10", facts)
    assert f.status is Status.passed and "within the 8 GPUs" in f.summary


def test_tp_with_unknown_topology_warns_with_file_and_line():
    base = load_facts_fixture("h200_generic")
    facts = patch(base, {"gpu.devices": [], "configs.scanned": True, "configs.hits": [HIT]})
    f = run_check("G10", facts)
    assert f.status is Status.warn and "/srv/serve.yaml:3" in f.summary


def test_templated_tp_value_warns():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"configs.hits": [{**HIT, "value": "${TP}"}]})
    f = run_check("G10", facts)
    assert f.status is Status.warn and "${TP}" in f.summary


def test_nothing_found_passes_with_count_and_roots():
    f = run_check("G10", load_facts_fixture("gb10_ngc_2509_healthy"))
    assert f.status is Status.passed and "9 files read under /workspace/finetuning" in f.summary


def test_unreadable_paths_are_never_a_pass():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"configs.unreadable": ["/workspace/finetuning/private"]})
    f = run_check("G10", facts)
    assert f.status is Status.unknown and "/workspace/finetuning/private" in f.summary


def test_truncated_scan_is_never_a_pass():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"configs.truncated": True})
    assert run_check("G10", facts).status is Status.unknown


def test_not_scanned_skips():
    f = run_check("G10", load_facts_fixture("h200_generic"))
    assert f.status is Status.skip and "not scanned" in f.summary


def test_workload_tp_across_nodes_fails_without_configs():
    f = run_check("G10", load_facts_fixture("h200_generic"), Workload(tensor_parallel=2, nodes=2))
    assert f.status is Status.fail and "workload" in f.summary


def test_ddp_across_nodes_without_tp_passes():
    facts = patch(load_facts_fixture(TP2), {"configs.hits": []})
    f = run_check("G10", facts)
    assert f.status is Status.passed and "DDP/FSDP" in f.summary


def test_tp1_is_not_tensor_parallel():
    facts = patch(load_facts_fixture(TP2), {"configs.hits": [{**HIT, "value": "1"}]})
    assert run_check("G10", facts).status is Status.passed


@given(st.text(max_size=12))
def test_value_parser_never_crashes(text):
    v = g10._int(text)
    assert v is None or v >= 0


def test_tp_within_a_node_but_node_count_from_a_variable_warns():
    base = load_facts_fixture("h200_generic")
    hits = [{"file": "/w/launch.sh", "line": 3, "key": "--tensor-parallel-size", "value": "1",
             "kind": "tensor_parallel"},
            {"file": "/w/launch.sh", "line": 2, "key": "--nnodes", "value": "$NNODES", "kind": "nodes"}]
    gpus = [load_facts_fixture("h200_generic").gpu.devices[0].model_dump()] * 2
    for i, g in enumerate(gpus):
        gpus[i] = {**g, "index": i}
    f = patch(base, {"configs.scanned": True, "configs.hits": hits, "gpu.devices": gpus})
    assert run_check("G10", f).status is Status.passed  # TP 1: nothing to span
    hits[0]["value"] = "2"
    f = patch(base, {"configs.scanned": True, "configs.hits": hits, "gpu.devices": gpus})
    r = run_check("G10", f)
    assert r.status is Status.warn and "$NNODES" in r.summary
