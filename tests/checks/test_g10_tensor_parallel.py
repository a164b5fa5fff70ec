"""G10 — tensor parallelism never across Sparks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.checks import g10_tensor_parallel as g10
from sparkops.checks import judge
from sparkops.core.findings import Status
from sparkops.core.verdict import verdict
from sparkops.facts.workload import Workload
from sparkops.knowledge import load
from sparkops.probes.configs import scan_paths

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


# --------------------------------------------------------------------------- issue 15: parse, pair by job, serve vs train
ISSUE15 = Path(__file__).parents[1] / "fixtures" / "raw" / "configs" / "issue15"
REPO = Path(__file__).parents[2]


def _scanned(paths, fixture="gb10_ngc_2509_healthy", default_scope=False, **changes):
    scan = scan_paths(paths, default_scope=default_scope)
    return patch(load_facts_fixture(fixture), {"configs": scan.model_dump(), **changes})


def test_the_checkout_itself_holds_no_launch_config_and_the_readme_example_stays_ready():
    """Issue 15 case 1: judged from inside this repository (the README's first command's default
    scope), the healthy GB10 snapshot stays READY; nothing the tool wrote or documents is a config."""
    facts = _scanned([REPO], default_scope=True)
    findings = judge(facts, load(), Workload(text="lora 8b bf16 trl peft", method="lora", params_b=8.0,
                                             precision="bf16", components=["trl", "peft"],
                                             estimated_peak_gb=32.0)).findings
    g10 = next(f for f in findings if f.gotcha == "G10")
    assert g10.status is Status.passed and g10.code == "G10.no-tp", g10.summary
    assert verdict(findings) == "ready"


def test_a_commented_out_tp_line_does_not_block_a_pipeline_parallel_job():
    f = run_check("G10", _scanned([ISSUE15 / "megatron_pp_two_sparks.yaml"]))
    assert f.status is Status.passed and f.code == "G10.ddp-across-nodes"
    assert "num_nodes: 2" in f.summary


def test_training_tp_across_two_sparks_fails_with_the_job_and_the_fix():
    path = ISSUE15 / "train_tp_two_sparks.sh"
    f = run_check("G10", _scanned([path]))
    assert f.status is Status.fail and f.code == "G10.train-tp-across-nodes"
    assert f"{path}:4" in f.summary and "nnodes: 2" in f.summary and "launched by torchrun" in f.summary
    assert "DDP or FSDP" in f.fix and f"{path}:4" in f.fix


def test_serving_tp2_across_two_sparks_warns_with_the_trade_off():
    path = ISSUE15 / "serve_two_sparks.sh"
    f = run_check("G10", _scanned([path]))
    assert f.status is Status.warn and f.code == "G10.serve-tp-across-nodes"
    assert f.values["tp"] == 2 and "launched by vllm" in f.summary  # TP=2 resolved from the script
    assert "23 GB/s" in f.fix and "pipeline" in f.fix


def test_inference_workload_with_tp2_on_two_nodes_warns_not_blocks():
    """Issue 15 case 4: `--method inference --component vllm`, TP 2 on two Sparks."""
    wl = Workload(method="inference", components=["vllm"], tensor_parallel=2, nodes=2)
    f = run_check("G10", load_facts_fixture("gb10_ngc_2509_healthy"), wl)
    assert f.status is Status.warn and f.code == "G10.serve-tp-across-nodes"
    assert "the workload is inference" in f.summary
    g = run_check("G10", load_facts_fixture("gb10_ngc_2509_healthy"), wl.model_copy(update={"method": "lora"}))
    assert g.status is Status.fail and g.code == "G10.train-tp-across-nodes"


def test_tp_and_nodes_from_different_jobs_are_never_paired(tmp_path):
    """A node count in one file and a TP value in another: two jobs, no blocker."""
    (tmp_path / "serve.sh").write_text("vllm serve m --tensor-parallel-size 1\n")
    (tmp_path / "train.sh").write_text("torchrun --nnodes 2 train.py\n")
    (tmp_path / "engine.yaml").write_text("tensor_parallel_size: 2\ngpu_memory_utilization: 0.5\n")
    h200 = load_facts_fixture("h200_generic")
    devs = [h200.gpu.devices[0].model_copy(update={"index": i}).model_dump() for i in range(2)]
    f = run_check("G10", patch(h200, {"gpu.devices": devs, "configs": scan_paths([tmp_path]).model_dump()}))
    assert f.status is Status.passed and f.code == "G10.tp-within-node", f.summary


@pytest.mark.parametrize(("name", "content", "why"), [
    ("big.yaml", "tensor_parallel_size: 2\n" + "# pad\n" * 200_000, "over 1048576 bytes"),
    ("blob.yaml", "\x00\x01\x02tensor_parallel_size: 2", "binary"),
    ("notes.md", "vllm serve m -tp 2\n", "Markdown"),
    ("chart.yaml", "args:\n{{- if .Values.multi }}\n  tp: 2\n{{- end }}\n", "did not parse as YAML"),
])
def test_a_config_that_was_not_read_is_never_a_pass(tmp_path, name, content, why):
    """Issue 15 case 3: G10 said PASS for configs it did not read."""
    path = tmp_path / name
    path.write_text(content)
    f = run_check("G10", _scanned([path]))
    assert f.status is Status.unknown and f.code == "G10.unread-config", f.summary
    assert str(path) in f.summary and why in f.summary
    assert "--config" in f.fix


def test_utf16_and_notebook_configs_are_read(tmp_path):
    (tmp_path / "win.yaml").write_bytes("tensor_parallel_size: 2\nnum_nodes: 2\ntrainer: {}\n".encode("utf-16"))
    f = run_check("G10", _scanned([tmp_path / "win.yaml"]))
    assert f.status is Status.fail and f.code == "G10.train-tp-across-nodes"


def test_an_old_snapshot_without_jobs_pairs_within_each_file():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"configs.hits": [
        {**HIT, "file": "/srv/a.yaml", "value": "2"},
        {"file": "/srv/b.yaml", "line": 1, "key": "nnodes", "value": "2", "kind": "nodes"}]})
    f = run_check("G10", facts)
    assert f.code == "G10.train-tp-exceeds-node" and "/srv/a.yaml" in f.summary and "/srv/b.yaml" not in f.summary
