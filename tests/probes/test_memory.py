"""Memory probe: /proc/meminfo (GB10 recordings), PSI, cgroup v1/v2 limits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from sparkops.facts.model import MemoryFacts, PsiFacts
from sparkops.facts.reading import Unavailable, Why, known
from sparkops.probes import CollectOptions, memory
from sparkops.probes.memory import gather, parse_limit, parse_meminfo, parse_proc_cgroup, parse_psi

RAW = FIXTURES / "raw"
KIB = 1024


def _write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


# --------------------------------------------------------------------------- meminfo
def test_meminfo_verbatim_gb10_partial():
    m = parse_meminfo((RAW / "meminfo" / "gb10_partial_verbatim.txt").read_text())
    assert m["MemTotal"] == 127600816 * KIB
    assert m["MemAvailable"] == 40174336 * KIB
    assert m["Cached"] == 37694160 * KIB
    assert m["CmaTotal"] == 131072 * KIB
    assert m["Hugetlb"] == 0
    # a unitless line is a page count, stored under a name that says so
    assert m["HugePages_Total_count"] == 0 and "HugePages_Total" not in m
    assert len(m) == 18


def test_meminfo_full_gb10_file():
    m = parse_meminfo((RAW / "meminfo" / "gb10_full.txt").read_text())
    assert m["MemTotal"] == 125483396 * KIB
    assert 119.6 < m["MemTotal"] / 2**30 < 119.7  # "119.6 GiB" cluster of gotchas.md
    assert m["SwapTotal"] - m["SwapFree"] == (16777212 - 13096264) * KIB
    assert m["Active(anon)"] == 22187492 * KIB  # parentheses in the kernel's names survive
    assert m["VmallocTotal"] == 135290159040 * KIB
    assert {k for k in m if k.endswith("_count")} == {"HugePages_Total_count", "HugePages_Free_count",
                                                      "HugePages_Rsvd_count", "HugePages_Surp_count"}
    assert m["Hugepagesize"] == 2 * 2**20


def test_meminfo_matches_free_b_recording():
    """gb10-readings §4.2: `free -b` on the same box; free's total/free/available are meminfo x 1024."""
    m = parse_meminfo((RAW / "meminfo" / "gb10_from_free_b.txt").read_text())
    assert m["MemTotal"] == 128452014080  # also torch's total_memory on that box (§5.1)
    assert m["MemFree"] == 90918678528
    assert m["MemAvailable"] == 124061757440
    assert m["Shmem"] == 8867840
    assert m["Buffers"] + m["Cached"] + m["SReclaimable"] == 34739458048  # free's buff/cache
    assert m["MemTotal"] - m["MemAvailable"] == 4390256640  # free's "used" (procps-ng 4)
    assert m["SwapTotal"] - m["SwapFree"] == 340000768


def test_meminfo_skips_garbage_lines():
    assert parse_meminfo("MemTotal: lots kB\nMemFree:   12 kB\n\nnonsense\nX: 3 parsecs\n") == {"MemFree": 12 * KIB}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_meminfo_parser_never_crashes(text):
    out = parse_meminfo(text)
    assert all(isinstance(v, int) and v >= 0 for v in out.values())


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), st.integers(0, 2**48),
                       max_size=30))
def test_meminfo_round_trips_any_kernel_shaped_file(values):
    text = "".join(f"{k}:{' ' * 8}{v} kB\n" for k, v in values.items())
    assert parse_meminfo(text) == {k: v * KIB for k, v in values.items()}


# --------------------------------------------------------------------------- PSI
def test_psi_idle_and_thrashing():
    idle = parse_psi((RAW / "psi" / "idle.txt").read_text())
    assert idle == PsiFacts(some_avg10=0.0, some_avg60=0.0, full_avg10=0.0, full_avg60=0.0)
    hot = parse_psi((RAW / "psi" / "thrashing.txt").read_text())
    assert isinstance(hot, PsiFacts)
    assert (hot.some_avg10, hot.some_avg60, hot.full_avg10, hot.full_avg60) == (41.87, 22.05, 18.52, 9.64)


def test_psi_without_full_line_is_unavailable_not_zero():
    r = parse_psi((RAW / "psi" / "some_only.txt").read_text())
    assert isinstance(r, Unavailable) and r.unavailable == Why.error
    assert "full" in r.detail


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_psi_parser_never_crashes(text):
    assert isinstance(parse_psi(text), (PsiFacts, Unavailable))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 100, allow_nan=False).map(lambda f: round(f, 2)), min_size=4, max_size=4))
def test_psi_reads_any_well_formed_file(v):
    text = (f"some avg10={v[0]:.2f} avg60={v[1]:.2f} avg300=0.00 total=1\n"
            f"full avg10={v[2]:.2f} avg60={v[3]:.2f} avg300=0.00 total=1\n")
    p = parse_psi(text)
    assert isinstance(p, PsiFacts)
    assert [p.some_avg10, p.some_avg60, p.full_avg10, p.full_avg60] == pytest.approx(v)


# --------------------------------------------------------------------------- cgroup parsers
def test_proc_cgroup_parse():
    rows = parse_proc_cgroup((RAW / "cgroup" / "v1_docker_self.txt").read_text())
    assert ("11", ["memory"], "/docker/3f1c2d8e9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d") in rows
    assert ("4", ["cpu", "cpuacct"], rows[8][2]) == rows[8]
    assert parse_proc_cgroup("0::/\n") == [("0", [], "/")]


@pytest.mark.parametrize(("text", "expected"), [
    ("max\n", None), ("9223372036854771712\n", None), ("34359738368\n", 34359738368), ("0\n", 0),
])
def test_parse_limit(text, expected):
    assert parse_limit(text) == expected


def test_parse_limit_garbage_is_unavailable():
    assert isinstance(parse_limit("-1"), Unavailable)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_cgroup_parsers_never_crash(text):
    assert isinstance(parse_proc_cgroup(text), list)
    r = parse_limit(text)
    assert r is None or isinstance(r, (int, Unavailable))


# --------------------------------------------------------------------------- cgroup on fake trees
def test_cgroup_v2_session_takes_the_smallest_ancestor_limit(tmp_path):
    shutil.copy(RAW / "cgroup" / "v2_host_session.txt", _write(tmp_path, "proc/self/cgroup", ""))
    fs = tmp_path / "sys/fs/cgroup"
    _write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    _write(tmp_path, "sys/fs/cgroup/user.slice/memory.max", "68719476736\n")  # 64 GiB on the slice
    _write(tmp_path, "sys/fs/cgroup/user.slice/user-1000.slice/memory.max", "max\n")
    scope = fs / "user.slice/user-1000.slice/session-3.scope"
    _write(tmp_path, str(scope.relative_to(tmp_path) / "memory.max"), "max\n")
    _write(tmp_path, str(scope.relative_to(tmp_path) / "memory.current"), "2147483648\n")
    cg = gather(tmp_path).cgroup
    assert cg.version == 2
    assert cg.limit_bytes == 68719476736
    assert cg.usage_bytes == 2147483648
    assert cg.path == "/user.slice/user-1000.slice/session-3.scope"


def test_cgroup_v2_container_without_limit(tmp_path):
    shutil.copy(RAW / "cgroup" / "v2_container_self.txt", _write(tmp_path, "proc/self/cgroup", ""))
    _write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "memory pids\n")
    _write(tmp_path, "sys/fs/cgroup/memory.max", "max\n")
    _write(tmp_path, "sys/fs/cgroup/memory.current", "734003200\n")
    cg = gather(tmp_path).cgroup
    assert cg.version == 2 and cg.limit_bytes is None and cg.usage_bytes == 734003200


def test_cgroup_v2_container_with_docker_memory_flag(tmp_path):
    shutil.copy(RAW / "cgroup" / "v2_container_self.txt", _write(tmp_path, "proc/self/cgroup", ""))
    _write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "memory pids\n")
    _write(tmp_path, "sys/fs/cgroup/memory.max", "107374182400\n")  # docker run --memory=100g
    cg = gather(tmp_path).cgroup
    assert cg.limit_bytes == 107374182400
    assert isinstance(cg.usage_bytes, Unavailable) and cg.usage_bytes.unavailable == Why.not_found


def test_cgroup_v1_docker_prefers_the_hierarchical_limit(tmp_path):
    shutil.copy(RAW / "cgroup" / "v1_docker_self.txt", _write(tmp_path, "proc/self/cgroup", ""))
    # inside the container the memory controller is mounted at its own cgroup (host path not visible)
    shutil.copy(RAW / "cgroup" / "v1_hierarchical_memory_stat.txt",
                _write(tmp_path, "sys/fs/cgroup/memory/memory.stat", ""))
    _write(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    _write(tmp_path, "sys/fs/cgroup/memory/memory.usage_in_bytes", "5185536\n")
    cg = gather(tmp_path).cgroup
    assert cg.version == 1
    assert cg.limit_bytes == 34359738368
    assert cg.usage_bytes == 5185536


def test_cgroup_v1_unlimited_is_none(tmp_path):
    shutil.copy(RAW / "cgroup" / "v1_docker_self.txt", _write(tmp_path, "proc/self/cgroup", ""))
    _write(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    _write(tmp_path, "sys/fs/cgroup/memory/memory.usage_in_bytes", "5185536\n")
    cg = gather(tmp_path).cgroup
    assert cg.version == 1 and cg.limit_bytes is None


def test_empty_root_is_unavailable_everywhere(tmp_path):
    m = gather(tmp_path)
    for reading in (m.meminfo_bytes, m.psi, m.cgroup.version, m.cgroup.limit_bytes):
        assert isinstance(reading, Unavailable) and reading.unavailable == Why.not_found


def test_collect_on_a_fake_gb10(tmp_path):
    shutil.copy(RAW / "meminfo" / "gb10_full.txt", _write(tmp_path, "proc/meminfo", ""))
    shutil.copy(RAW / "psi" / "idle.txt", _write(tmp_path, "proc/pressure/memory", ""))
    m = memory.collect(CollectOptions(env={"SPARKOPS_ROOT": str(tmp_path)}))
    assert m.meminfo_bytes["MemAvailable"] == 94849180 * KIB
    assert isinstance(m.psi, PsiFacts)
    MemoryFacts.model_validate(m.model_dump(mode="json"))


def test_live_collect_does_not_raise():
    m = memory.collect(CollectOptions(env={}))
    assert known(m.meminfo_bytes) and m.meminfo_bytes["MemTotal"] > 0
    MemoryFacts.model_validate(m.model_dump(mode="json"))


def test_unavailable_section():
    m = memory.unavailable(Why.error, "boom")
    assert isinstance(m.meminfo_bytes, Unavailable) and isinstance(m.cgroup.limit_bytes, Unavailable)
