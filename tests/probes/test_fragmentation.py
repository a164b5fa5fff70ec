"""/proc/buddyinfo and /proc/pagetypeinfo readers (recorded + built fixtures, generated text)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sparkops.facts.model import Facts
from sparkops.facts.reading import Unavailable, Why
from sparkops.probes import fragmentation, memory

RAW = Path(__file__).parents[1] / "fixtures" / "raw" / "buddyinfo"


def _bytes_by_hand(text: str, page: int) -> int:
    """Independent sum: every number after the zone name is a count of 2**column pages."""
    total = 0
    for line in text.splitlines():
        words = line.replace(",", " ").split()
        if len(words) < 5 or words[0] != "Node":
            continue
        for order, word in enumerate(words[4:]):
            total += int(word) * page * 2**order
    return total


def test_recorded_dev_vm_buddyinfo():
    text = (RAW / "dev-vm-x86_64.buddyinfo").read_text()
    zones = fragmentation.parse_buddyinfo(text)
    assert [z.zone for z in zones] == ["DMA", "DMA32", "Normal"]
    assert all(len(z.free_blocks) == 11 for z in zones)
    assert sum(c * 4096 << o for z in zones for o, c in enumerate(z.free_blocks)) == _bytes_by_hand(text, 4096)


def test_recorded_dev_vm_pagetypeinfo_adds_up_to_buddyinfo():
    order, zones = fragmentation.parse_pagetypeinfo((RAW / "dev-vm-x86_64.pagetypeinfo").read_text())
    assert order == 9
    normal = next(z for z in zones if z.zone == "Normal")
    assert {"Unmovable", "Movable", "Reclaimable"} <= set(normal.free_blocks)
    assert normal.pageblocks["Movable"] > 0 and "Unmovable" in normal.pageblocks


def test_built_gb10_pagetypeinfo_matches_its_buddyinfo():
    buddy = fragmentation.parse_buddyinfo((RAW / "gb10-built-fragmented.buddyinfo").read_text())
    _, zones = fragmentation.parse_pagetypeinfo((RAW / "gb10-built-fragmented-movable.pagetypeinfo").read_text())
    normal_pt = next(z for z in zones if z.zone == "Normal")
    per_order = [sum(col) for col in zip(*normal_pt.free_blocks.values(), strict=True)]
    assert per_order == next(z for z in buddy if z.zone == "Normal").free_blocks


def _root(tmp_path: Path, buddy: str | None, pagetype: str | None, smaps: str | None) -> Path:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    for name, text in (("buddyinfo", buddy), ("pagetypeinfo", pagetype), ("self/smaps", smaps)):
        if text is not None:
            (tmp_path / "proc" / name).write_text(text)
    return tmp_path


def test_gather_from_a_recorded_root(tmp_path):
    root = _root(tmp_path, (RAW / "gb10-built-fresh.buddyinfo").read_text(), None,
                 "aaaa-bbbb r-xp 0 0:0 0 /x\nKernelPageSize:       64 kB\n")
    f = fragmentation.gather(root)
    assert f.page_size_bytes == 65536
    assert isinstance(f.buddyinfo, list) and len(f.buddyinfo) == 2
    assert isinstance(f.pagetypeinfo, Unavailable) and f.pagetypeinfo.unavailable == Why.not_found
    assert f.pageblock_order is None


def test_gather_says_why_when_nothing_is_readable(tmp_path):
    root = _root(tmp_path, "garbage\n", None, None)
    f = fragmentation.gather(root)
    assert isinstance(f.buddyinfo, Unavailable) and f.buddyinfo.unavailable == Why.error
    assert isinstance(f.page_size_bytes, Unavailable)  # a recorded root without smaps: no guess


def test_memory_section_carries_fragmentation_and_replays(tmp_path):
    root = _root(tmp_path, (RAW / "dev-vm-x86_64.buddyinfo").read_text(),
                 (RAW / "dev-vm-x86_64.pagetypeinfo").read_text(), "KernelPageSize:        4 kB\n")
    (tmp_path / "proc" / "meminfo").write_text((RAW / "dev-vm-x86_64.meminfo").read_text())
    mem = memory.gather(root)
    assert mem.fragmentation is not None and mem.fragmentation.pageblock_order == 9
    facts = Facts(memory=mem)
    again = Facts.model_validate_json(facts.model_dump_json())
    assert again.memory.fragmentation == mem.fragmentation


def test_old_snapshot_without_the_field_still_loads():
    assert Facts.model_validate({"memory": {"meminfo_bytes": {"MemTotal": 1}}}).memory.fragmentation is None


def test_live_machine_never_raises():
    f = fragmentation.gather()
    assert isinstance(f.buddyinfo, (list, Unavailable))
    assert isinstance(f.page_size_bytes, (int, Unavailable))


zone_st = st.tuples(st.integers(0, 7), st.sampled_from(["DMA", "DMA32", "Normal", "Movable"]),
                    st.lists(st.integers(0, 10**7), min_size=1, max_size=14))


@given(st.lists(zone_st, max_size=6))
def test_buddyinfo_roundtrip(zones):
    text = "".join(f"Node {n}, zone {z:>8} " + " ".join(f"{c:6d}" for c in counts) + " \n" for n, z, counts in zones)
    parsed = fragmentation.parse_buddyinfo(text)
    assert [(p.node, p.zone, p.free_blocks) for p in parsed] == [(n, z, c) for n, z, c in zones]


@given(st.text(max_size=400))
def test_parsers_never_raise(text):
    fragmentation.parse_buddyinfo(text)
    fragmentation.parse_pagetypeinfo(text)


def test_recorded_device_buddyinfo():
    text = (RAW / "h200-device.buddyinfo").read_text()
    zones = fragmentation.parse_buddyinfo(text)
    assert [z.zone for z in zones] == ["DMA", "DMA32", "Normal"]
    order, pt = fragmentation.parse_pagetypeinfo((RAW / "h200-device.pagetypeinfo").read_text())
    assert order == 9
    for z in pt:  # the same zones, with the same number of orders
        buddy = next(b for b in zones if b.zone == z.zone)
        assert len(buddy.free_blocks) == len(next(iter(z.free_blocks.values())))
