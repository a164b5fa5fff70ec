"""Snapshots: atomic writes, round trips, and honest refusals of unusable files."""

import json
import os

import pytest

from sparkops.facts.model import Facts, GpuDevice, GpuFacts
from sparkops.facts.reading import Unavailable, Why, missing
from sparkops.facts.snapshot import SnapshotError, load_facts, save_facts, write_atomic


def _facts() -> Facts:
    dev = GpuDevice(index=0, name="NVIDIA GB10", capability=(12, 1),
                    memory_total_bytes=missing(Why.not_supported, "nvmlDeviceGetMemoryInfo"))
    return Facts(gpu=GpuFacts(source="nvml", devices=[dev]))


def test_round_trip_keeps_unavailable_reasons(tmp_path):
    p = tmp_path / "facts.json"
    save_facts(_facts(), p)
    back = load_facts(p)
    mem = back.gpu.devices[0].memory_total_bytes
    assert isinstance(mem, Unavailable) and mem.unavailable is Why.not_supported
    assert back.gpu.devices[0].capability == (12, 1)
    assert back.model_dump() == _facts().model_dump()


def test_unavailable_refuses_numeric_comparison():
    with pytest.raises(TypeError):
        _ = missing(Why.not_supported) > 5
    assert not missing(Why.timeout)


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    write_atomic(p, "old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(p, "new")
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize("content,msg", [
    ("not json", "is not JSON"),
    ("[1, 2]", "not a facts snapshot"),
    (json.dumps({"schema_version": 99}), "not supported"),
    (json.dumps({"schema_version": 1, "gpu": {"source": "telepathy"}}), "gpu.source"),
])
def test_bad_snapshots_are_refused_with_a_reason(tmp_path, content, msg):
    p = tmp_path / "f.json"
    p.write_text(content)
    with pytest.raises(SnapshotError, match=msg):
        load_facts(p)


def test_missing_snapshot(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read"):
        load_facts(tmp_path / "nope.json")


@pytest.mark.parametrize("path", ["host.dev_nvidia", "memory.meminfo_bytes", "cuda_libs.ldconfig",
                                  "target.distributions"])
def test_unavailable_mapping_readings_survive_a_replay(tmp_path, path):
    """A missing mapping reading must not come back as a two-key mapping (pydantic's smart union)."""
    section, field = path.split(".")
    facts = Facts()
    setattr(getattr(facts, section), field, missing(Why.error, "permission denied"))
    p = tmp_path / "f.json"
    save_facts(facts, p)
    back = getattr(getattr(load_facts(p), section), field)
    assert isinstance(back, Unavailable) and back.unavailable is Why.error


def test_real_mapping_readings_survive_a_replay(tmp_path):
    facts = Facts()
    facts.target.distributions = {"torch": "2.11.0+cu130", "unavailable": "1.0"}
    p = tmp_path / "f.json"
    save_facts(facts, p)
    assert load_facts(p).target.distributions == {"torch": "2.11.0+cu130", "unavailable": "1.0"}


def test_written_files_follow_the_umask_not_mkstemp(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "env-report.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "env-report.json").stat().st_mode & 0o777 == 0o644
