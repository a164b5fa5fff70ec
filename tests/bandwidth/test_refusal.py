"""The refusal rules: other GPU jobs, short memory (unified-aware), what could not be listed."""

from __future__ import annotations

import pytest

from build_fixtures import patch
from conftest import load_facts_fixture
from sparkops.bandwidth import refusal
from sparkops.facts.model import GpuProcess
from sparkops.facts.reading import Why, missing
from sparkops.knowledge import load
from sparkops.knowledge.bandwidth import BandwidthSettings

KB = load()
S = KB.thresholds.bandwidth
GIB = 1024**3


def assess(facts, **kw):
    kw.setdefault("alive", lambda pid: True)
    return refusal.assess(facts, KB, S, **kw)


def test_a_quiet_gb10_is_safe_and_its_free_memory_is_memavailable():
    a = assess(load_facts_fixture("gb10_ngc_2509_healthy"))
    assert a.reasons == () and not a.refused(False)
    assert a.free_bytes == 123315515392 and a.free_source.startswith("MemAvailable")
    assert a.neighbours == ()  # Xorg and gnome-shell are graphics clients, not compute jobs


def test_vllm_on_the_gpu_refuses_naming_it_and_force_overrides():
    a = assess(load_facts_fixture("gb10_vllm_default"))
    assert a.refused(False) and not a.refused(True)
    names = {(n.pid, n.seen_as) for n in a.neighbours}
    assert (400721, "GPU compute process") in names and (400650, "vllm process") in names
    assert "2 other GPU job(s) running" in a.summary() and "VLLM::EngineCore (pid 400721, GPU compute process, 94.3 GiB)" in a.summary()


def test_dead_and_own_processes_do_not_count():
    facts = load_facts_fixture("gb10_vllm_default")
    assert assess(facts, alive=lambda pid: pid != 400721, own_pids={400650}).reasons == ()


def test_a_trainer_seen_only_in_the_process_table_counts():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"processes.processes": [
        {"pid": 4242, "name": "python", "cmdline": "python train.py", "argv": ["python", "train.py"]}]})
    a = assess(facts)
    assert a.refused(False) and a.neighbours[0].label() == "python (pid 4242, trainer process)"


def test_short_memory_on_unified_memory_reads_memavailable_not_nvml():
    facts = patch(load_facts_fixture("gb10_ngc_2509_healthy"), {"memory.meminfo_bytes.MemAvailable": 5 * GIB})
    a = assess(facts)
    assert a.refused(False) and a.free_bytes == 5 * GIB
    assert "memory is short: 5.0 GiB free (MemAvailable" in a.summary()


def test_discrete_gpu_free_memory_is_nvmls():
    facts = load_facts_fixture("h200_generic")
    a = assess(facts)
    assert a.free_bytes == 150165520384 and a.free_source == "NVML free of GPU0" and a.reasons == ()
    short = assess(patch(facts, {"gpu.devices.0.memory_free_bytes": 2 * GIB}))
    assert short.refused(False) and "2.0 GiB free (NVML free of GPU0)" in short.summary()


def test_no_gpu_in_the_facts_leaves_free_memory_to_the_child():
    a = assess(load_facts_fixture("no_gpu"))
    assert a.free_bytes is None and a.free_source.startswith("unknown") and a.reasons == ()


def test_gpu_processes_that_could_not_be_listed_refuse_unless_forced():
    facts = load_facts_fixture("gb10_ngc_2509_healthy")
    dev = facts.gpu.devices[0].model_copy(update={"processes": missing(Why.error, "nvml: Unknown Error")})
    facts = facts.model_copy(update={"gpu": facts.gpu.model_copy(update={"devices": [dev]})})
    a = assess(facts)
    assert a.refused(False) and "GPU0 processes could not be listed" in a.summary()
    assert "cannot tell whether another job runs" in a.summary()


@pytest.mark.parametrize("kind, counted", [("compute", True), ("unknown", True), ("graphics", False)])
def test_only_compute_processes_load_the_bus(kind, counted):
    facts = load_facts_fixture("gb10_ngc_2509_healthy")
    dev = facts.gpu.devices[0].model_copy(update={"processes": [GpuProcess(pid=77, name="x", kind=kind)]})
    facts = facts.model_copy(update={"gpu": facts.gpu.model_copy(update={"devices": [dev]})})
    assert bool(assess(facts).neighbours) is counted


def test_the_settings_block_is_validated():
    bad = dict(KB.thresholds.bandwidth.model_dump(), far_below_fraction=0.9, below_fraction=0.5)
    with pytest.raises(ValueError):
        BandwidthSettings.model_validate(bad)
    with pytest.raises(ValueError):
        BandwidthSettings.model_validate(dict(KB.thresholds.bandwidth.model_dump(), expected_gbs={"gb10": {"teleport": [1, 2]}}))
    with pytest.raises(ValueError):
        BandwidthSettings.model_validate(dict(KB.thresholds.bandwidth.model_dump(), surprise=1))


# ---------------------------------------------------------------- no GPU comes before "other GPU jobs" (issue 17)
TRAINER = {"processes.processes": [{"pid": 4242, "name": "python", "cmdline": "python train.py",
                                   "argv": ["python", "train.py"]}]}


def test_a_box_without_a_gpu_is_said_to_have_none_not_to_be_busy():
    a = assess(patch(load_facts_fixture("no_gpu"), TRAINER))
    assert a.reasons == () and not a.refused(False) and a.neighbours == ()
    assert a.no_gpu.startswith("no NVIDIA GPU visible") and "libnvidia-ml.so.1" in a.no_gpu
    assert "other GPU job" not in a.summary()


def test_a_gpu_probe_that_did_not_finish_is_not_evidence_of_no_gpu():
    facts = patch(load_facts_fixture("no_gpu"), {**TRAINER, "probes.gpu.ok": False, "probes.gpu.reason": "timeout"})
    a = assess(facts)
    assert a.no_gpu == "" and a.refused(False) and "1 other GPU job(s) running" in a.summary()


def test_a_gpu_in_the_facts_still_refuses_for_the_same_trainer():
    a = assess(patch(load_facts_fixture("gb10_ngc_2509_healthy"), TRAINER))
    assert a.no_gpu == "" and a.refused(False)
