"""G9 — container-first, hard blockers, the dated matrix, Triton and HF variables."""

from __future__ import annotations

from datetime import datetime, timezone

from build_fixtures import patch, run_check
from conftest import load_facts_fixture
from sparkops.core.findings import Status
from sparkops.facts.reading import Why, missing

HEALTHY = "gb10_ngc_2509_healthy"


def test_ngc_container_with_the_matrix_passes_naming_the_image():
    f = run_check("G9", load_facts_fixture(HEALTHY))
    assert f.status is Status.passed and "NVIDIA_PYTORCH_VERSION=25.09" in f.summary


def test_old_torchao_beside_peft_fails_even_in_the_container():
    f = run_check("G9", load_facts_fixture("gb10_torchao_013"))
    assert f.status is Status.fail
    assert "torchao 0.13.0+git < 0.16.0" in f.summary and "peft 0.19.1" in f.summary
    assert 'torchao==0.17.0' in f.fix


def test_old_torchao_without_peft_is_not_a_blocker():
    base = load_facts_fixture("gb10_torchao_013")
    dists = {k: v for k, v in base.target.distributions.items() if k != "peft"}
    f = run_check("G9", patch(base, {"target.distributions": dists}))
    assert f.status is Status.passed and any("torchao 0.13.0+git" in n for n in f.notes)


def test_bare_venv_with_off_matrix_packages_warns_listing_them():
    f = run_check("G9", load_facts_fixture("gb10_bare_pip_cu128"))
    assert f.status is Status.warn
    assert "transformers 4.57.1 (matrix 5.13.1)" in f.summary and "peft 0.17.1" in f.summary
    assert "TRITON_PTXAS_PATH" in f.detail


def test_no_marker_and_on_matrix_is_unknown_never_bare():
    base = load_facts_fixture("gb10_vllm_default")
    f = run_check("G9", patch(base, {"host.os_release": {"NAME": "Ubuntu", "VERSION_ID": "24.04"}}))
    assert f.status is Status.unknown and f.code == "G9.no-marker" and "does not prove a bare host" in f.summary


def test_a_venv_on_the_dgx_os_host_is_bare_pip():
    """Issue 15: a venv target with DGX OS's host-only os-release keys and no container marker is
    positive evidence of bare pip: a warning, not unknown."""
    f = run_check("G9", load_facts_fixture("gb10_vllm_default"))
    assert f.status is Status.warn and f.code == "G9.bare-pip", f.summary
    assert "DGX_OTA_VERSION" in f.summary and "/home/jethac/.venv" in f.summary
    assert "nvcr.io/nvidia/pytorch" in f.fix and f.fix_where == "host"


def test_unavailable_marker_match_with_system_python_is_unknown_even_off_matrix():
    base = load_facts_fixture("gb10_bare_pip_cu128")
    dists = {k: v for k, v in base.target.distributions.items() if k != "triton"}
    facts = patch(base, {"host.container.v1_class.image_kind": missing(Why.error, "could not read /proc/1/cgroup"),
                         "target.env.kind": "system", "target.distributions": dists})
    f = run_check("G9", facts)
    assert f.status is Status.unknown and "does not prove a bare host" in f.summary
    assert any("transformers 4.57.1" in n for n in f.notes)


def test_matrix_past_its_horizon_alone_is_a_dated_note_not_a_warning():
    """Issue 15: a stale matrix on its own must not make every live run warn (exit 0 unreachable)."""
    facts = patch(load_facts_fixture(HEALTHY), {"collected_at": datetime(2027, 1, 20, tzinfo=timezone.utc)})  # noqa: UP017
    f = run_check("G9", facts)
    assert f.status is Status.passed and any("refresh horizon" in n and "2026-" in n for n in f.notes)


def test_matrix_past_its_horizon_with_off_matrix_packages_warns():
    base = load_facts_fixture(HEALTHY)
    dists = {**base.target.distributions, "transformers": "4.58.0"}
    facts = patch(base, {"collected_at": datetime(2027, 1, 20, tzinfo=timezone.utc),  # noqa: UP017
                         "target.distributions": dists, "host.container.v1_class.image_kind": "other"})
    f = run_check("G9", facts)
    assert f.status is Status.warn and f.code == "G9.stale-matrix-off-matrix" and "--matrix" in f.fix


def test_newer_major_than_verified_warns():
    base = load_facts_fixture(HEALTHY)
    facts = patch(base, {"target.distributions": {**base.target.distributions, "transformers": "6.0.0"}})
    f = run_check("G9", facts)
    assert f.status is Status.warn and "transformers 6.0.0" in f.summary


def test_triton_on_sm121_without_ptxas_path_warns():
    base = load_facts_fixture(HEALTHY)
    env = {k: v for k, v in base.host.env.items() if k != "TRITON_PTXAS_PATH"}
    f = run_check("G9", patch(base, {"host.env": env}))
    assert f.status is Status.warn and "TRITON_PTXAS_PATH" in f.summary
    assert "/usr/local/cuda/bin/ptxas" in f.fix


def test_triton_without_ptxas_path_on_other_gpus_is_fine():
    base = load_facts_fixture("h200_generic")
    assert "TRITON_PTXAS_PATH" not in base.host.env
    f = run_check("G9", base)
    assert "TRITON_PTXAS_PATH" not in f.summary


def test_hf_transfer_variable_on_new_hub_is_a_note():
    base = load_facts_fixture(HEALTHY)
    f = run_check("G9", patch(base, {"host.env": {**base.host.env, "HF_HUB_ENABLE_HF_TRANSFER": "1"}}))
    assert f.status is Status.passed
    assert any("HF_XET_HIGH_PERFORMANCE=1" in n for n in f.notes)


def test_hf_transfer_variable_on_old_hub_is_not_noted():
    base = load_facts_fixture(HEALTHY)
    dists = {**base.target.distributions, "huggingface-hub": "0.36.0"}
    f = run_check("G9", patch(base, {"host.env": {**base.host.env, "HF_HUB_ENABLE_HF_TRANSFER": "1"},
                                     "target.distributions": dists}))
    assert not any("HF_XET" in n for n in f.notes)


def test_other_container_is_info():
    f = run_check("G9", load_facts_fixture("gb10_two_node_tp2"))
    assert f.status is Status.info and "not one of the blessed images" in f.summary


def test_unsloth_by_moving_tag_is_noted():
    facts = patch(load_facts_fixture(HEALTHY), {"host.container.v1_class.image_kind": "unsloth",
                                                "host.container.v1_class.image_hint": "unsloth/unsloth:dgxspark-latest"})
    f = run_check("G9", facts)
    assert f.status is Status.passed and any("digest" in n for n in f.notes)
