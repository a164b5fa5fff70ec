"""Byte units, named once. GB is 10^9 bytes (what the report's ``*_gb`` fields and vendors'
"128 GB" mean); GiB is 2^30 bytes (what the kernel, NVML and PyTorch's allocator count in)."""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9


def gib_to_gb(gib: float) -> float:
    return gib * GIB / GB


def gb_to_gib(gb: float) -> float:
    return gb * GB / GIB
