"""Free memory by block size (G3.fragmented): /proc/buddyinfo, /proc/pagetypeinfo, the page size.

After long uptime the free pages of a Spark's one memory pool can be scattered in small blocks:
``MemAvailable`` looks fine while the driver cannot get the large contiguous blocks it asks for.
The buddy allocator's own counters say how much is free at each block size. Parsers are pure and
never raise; reads go through ``root`` so tests can point them at recorded files. pagetypeinfo is
root-only on most kernels: unreadable, it is an Unavailable with the reason, never a guess.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sparkops.facts.model import BuddyZone, FragmentationFacts, PagetypeZone
from sparkops.facts.reading import Unavailable, Why, missing
from sparkops.probes.host import read_small, under_root

# "Node 0, zone   Normal    570    168 ..." ; zone names are one word
_BUDDY = re.compile(r"^\s*Node\s+(\d+)\s*,\s*zone\s+(\S+)((?:\s+\d+)+)\s*$")
# "Node    0, zone   Normal, type    Unmovable     18     39 ..."
_PT_FREE = re.compile(r"^\s*Node\s+(\d+)\s*,\s*zone\s+([^,\s]+)\s*,\s*type\s+(\S+)((?:\s+\d+)+)\s*$")
# "Node 0, zone   Normal           42          860 ..." (the "Number of blocks type" table)
_PT_BLOCKS = re.compile(r"^\s*Node\s+(\d+)\s*,\s*zone\s+([^,\s]+)((?:\s+\d+)+)\s*$")
_KPS = re.compile(r"^KernelPageSize:\s*(\d+)\s*kB\s*$", re.M)
_MAX_ORDERS = 32  # a line with more columns than any kernel has is not a buddyinfo line


def parse_buddyinfo(text: str) -> list[BuddyZone]:
    """/proc/buddyinfo lines as zones; lines that do not parse are skipped."""
    out: list[BuddyZone] = []
    for line in text.splitlines():
        m = _BUDDY.match(line)
        if not m:
            continue
        counts = [int(x) for x in m.group(3).split()]
        if 0 < len(counts) <= _MAX_ORDERS:
            out.append(BuddyZone(node=int(m.group(1)), zone=m.group(2), free_blocks=counts))
    return out


def parse_pagetypeinfo(text: str) -> tuple[int | None, list[PagetypeZone]]:
    """/proc/pagetypeinfo: the pageblock order and, per zone, free blocks per migrate type and the
    number of pageblocks of each type."""
    order: int | None = None
    zones: dict[tuple[int, str], PagetypeZone] = {}
    block_types: list[str] = []
    for line in text.splitlines():
        if line.startswith("Page block order:"):
            value = line.split(":", 1)[1].strip()
            order = int(value) if value.isascii() and value.isdigit() else None
            continue
        if line.startswith("Number of blocks type"):
            block_types = line[len("Number of blocks type"):].split()
            continue
        m = _PT_FREE.match(line)
        if m:
            counts = [int(x) for x in m.group(4).split()]
            if len(counts) <= _MAX_ORDERS:
                key = (int(m.group(1)), m.group(2))
                z = zones.setdefault(key, PagetypeZone(node=key[0], zone=key[1]))
                z.free_blocks[m.group(3)] = counts
            continue
        m = _PT_BLOCKS.match(line)
        if m and block_types:
            counts = [int(x) for x in m.group(3).split()]
            key = (int(m.group(1)), m.group(2))
            z = zones.setdefault(key, PagetypeZone(node=key[0], zone=key[1]))
            z.pageblocks.update(dict(zip(block_types, counts, strict=False)))
    return order, list(zones.values())


def page_size(root: Path) -> int | Unavailable:
    """The kernel's base page size (4 KiB, or 64 KiB on arm64 -64k kernels): sysconf on the live
    machine, the first KernelPageSize line of a recorded root's /proc/self/smaps otherwise."""
    if root == Path("/"):
        try:
            return int(os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            pass
    text = read_small(under_root(root, "/proc/self/smaps"), limit=1 << 16)
    if isinstance(text, str):
        m = _KPS.search(text)
        if m and int(m.group(1)) > 0:
            return int(m.group(1)) * 1024
    return text if isinstance(text, Unavailable) else missing(Why.error, "no KernelPageSize in smaps")


def gather(root: Path = Path("/")) -> FragmentationFacts:
    """buddyinfo, pagetypeinfo (when readable) and the page size from ``root``."""
    text = read_small(under_root(root, "/proc/buddyinfo"))
    if isinstance(text, str):
        zones = parse_buddyinfo(text)
        buddy: list[BuddyZone] | Unavailable = zones or missing(Why.error, "no buddyinfo lines parsed")
    else:
        buddy = text
    pt_text = read_small(under_root(root, "/proc/pagetypeinfo"))
    order: int | None = None
    if isinstance(pt_text, str):
        order, pt_zones = parse_pagetypeinfo(pt_text)
        pt: list[PagetypeZone] | Unavailable = pt_zones or missing(Why.error, "no pagetypeinfo lines parsed")
    else:
        pt = pt_text
    return FragmentationFacts(page_size_bytes=page_size(root), buddyinfo=buddy, pageblock_order=order,
                              pagetypeinfo=pt)
