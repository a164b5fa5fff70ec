"""G3.fragmented, judged on recorded (dev VM) and built (GB10-like) buddyinfo, and generated ones."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sparkops.checks import g03_fragmentation as jf
from sparkops.facts.model import BuddyZone, FragmentationFacts
from sparkops.facts.reading import Why, missing
from sparkops.knowledge import load
from sparkops.probes import fragmentation

RAW = Path(__file__).parents[1] / "fixtures" / "raw" / "buddyinfo"
GIB = 1024**3


def _facts(buddy: str, pagetype: str | None = None, page: int = 4096) -> FragmentationFacts:
    order, pt = fragmentation.parse_pagetypeinfo((RAW / pagetype).read_text()) if pagetype else (None, None)
    return FragmentationFacts(page_size_bytes=page, buddyinfo=fragmentation.parse_buddyinfo((RAW / buddy).read_text()),
                              pageblock_order=order, pagetypeinfo=pt if pt is not None else missing(Why.no_permission))


def test_packaged_thresholds_are_the_defaults():
    assert jf.thresholds(load()) == jf.DEFAULTS


def test_fresh_gb10_passes_even_for_a_100_gb_plan():
    f = _facts("gb10-built-fresh.buddyinfo")
    d = jf.judge(f, th=jf.thresholds(load()))
    assert d.status == "pass" and d.code is None
    assert d.values["large_share"] > 0.95
    assert jf.judge(f, need_bytes=100 * 10**9).status == "pass"


def test_fragmented_gb10_fires_with_values_and_compaction_fix():
    d = jf.judge(_facts("gb10-built-fragmented.buddyinfo", "gb10-built-fragmented-movable.pagetypeinfo"))
    assert d.status == "warn" and d.code == "G3.fragmented"
    assert 60 * GIB < d.values["free_bytes"] < 61 * GIB
    assert d.values["free_large_bytes"] == 1 * 2 * 1024**2  # the single order-9 block
    assert d.values["largest_free_block_bytes"] == 2 * 1024**2
    assert d.values["unmovable_pageblock_share"] < 0.2
    assert "/proc/sys/vm/compact_memory" in d.fix and "Unmovable" not in d.fix


def test_unmovable_pageblocks_make_the_fix_name_a_reboot():
    d = jf.judge(_facts("gb10-built-fragmented.buddyinfo", "gb10-built-fragmented-unmovable.pagetypeinfo"))
    assert d.code == "G3.fragmented"
    assert d.values["unmovable_pageblock_share"] >= 0.5
    assert "Unmovable" in d.fix and "reboot" in d.fix


def test_planned_job_against_large_blocks():
    f = _facts("gb10-built-fragmented.buddyinfo")
    fired = jf.judge(f, need_bytes=20 * 10**9)
    assert fired.code == "G3.fragmented" and fired.values["need_bytes"] == 20 * 10**9
    short = jf.judge(f, need_bytes=200 * 10**9)  # more than is free at all: G3's budget question
    assert short.status == "pass" and "not a fragmentation question" in short.message


def test_recorded_dev_vm_is_not_fragmented():
    d = jf.judge(_facts("dev-vm-x86_64.buddyinfo", "dev-vm-x86_64.pagetypeinfo"))
    assert d.code is None
    by_hand = sum(int(w) * 4096 * 2**o for line in (RAW / "dev-vm-x86_64.buddyinfo").read_text().splitlines()
                  for o, w in enumerate(line.replace(",", " ").split()[4:]))
    assert d.values["free_bytes"] == by_hand


def test_64k_pages_move_the_large_order():
    f = FragmentationFacts(page_size_bytes=65536,
                           buddyinfo=[BuddyZone(node=0, zone="Normal", free_blocks=[0, 0, 0, 0, 0, 3])])
    s = jf.summary(f)
    assert s["large_order"] == 5 and s["free_large_bytes"] == 3 * 2 * 1024**2


def test_skips_say_why():
    assert jf.judge(None).status == "skip"
    d = jf.judge(FragmentationFacts(page_size_bytes=4096, buddyinfo=missing(Why.no_permission, "/proc/buddyinfo")))
    assert d.status == "skip" and "no_permission" in d.message


def test_small_free_memory_is_not_judged():
    f = FragmentationFacts(page_size_bytes=4096, buddyinfo=[BuddyZone(node=0, zone="Normal", free_blocks=[1000])])
    assert jf.judge(f).status == "pass"


@given(st.lists(st.lists(st.integers(0, 3_000_000), min_size=1, max_size=14), min_size=1, max_size=4),
       st.sampled_from([4096, 16384, 65536]), st.one_of(st.none(), st.integers(1, 300 * 10**9)))
def test_judgment_invariants(zones, page, need):
    f = FragmentationFacts(page_size_bytes=page,
                           buddyinfo=[BuddyZone(node=0, zone=f"Z{i}", free_blocks=z) for i, z in enumerate(zones)])
    d = jf.judge(f, need_bytes=need)
    v = d.values
    assert 0 <= v["free_large_bytes"] <= v["free_bytes"]
    assert (d.code == jf.SUBCODE) == (d.status == "warn")
    if d.code and need:
        assert v["free_large_bytes"] < need <= v["free_bytes"]
    elif d.code:
        assert v["free_bytes"] >= jf.DEFAULTS["min_free_gb"] * 1e9
        assert v["free_large_bytes"] < jf.DEFAULTS["large_fraction_warn"] * v["free_bytes"]
    # moving every free page into the largest order can only help
    merged = FragmentationFacts(page_size_bytes=page, buddyinfo=[BuddyZone(
        node=0, zone="Normal", free_blocks=[0] * 13 + [v["free_bytes"] // (page << 13)])])
    if v["free_bytes"] % (page << 13) == 0:
        assert jf.judge(merged, need_bytes=need).code is None


def test_the_samplers_text_reading_equals_the_owners_summary():
    """watch/thermal log free large blocks through free_large_from_text (no models, every sample); it must
    agree with the G3 owner's summary on every recorded buddyinfo."""
    for path in sorted(RAW.glob("*.buddyinfo")):
        text = path.read_text()
        for page in (4096, 65536):
            facts = FragmentationFacts(page_size_bytes=page, buddyinfo=fragmentation.parse_buddyinfo(text))
            assert jf.free_large_from_text(text, page) == jf.summary(facts)["free_large_bytes"], (path.name, page)
