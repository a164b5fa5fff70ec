"""The bounded GGUF header reader: round trips, exact tensor bytes, and no exception but GGUFError."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkops.core.errors import InputError
from sparkops.planner import gguf
from sparkops.planner.gguf import GGML_TYPES, GGUFError, parse_header, read_header, write_header

keys = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=24)
scalars = st.one_of(st.integers(-2**31, 2**31 - 1), st.booleans(), st.text(max_size=40),
                    st.floats(allow_nan=False, allow_infinity=False, width=64))
arrays = st.one_of(st.lists(st.text(max_size=8), max_size=80), st.lists(st.integers(-1000, 1000), max_size=80))
tensor = st.tuples(st.text(alphabet="abcdefghij._0123456789", min_size=1, max_size=20),
                   st.lists(st.integers(1, 4096), min_size=1, max_size=4).map(tuple),
                   st.sampled_from(sorted(GGML_TYPES)))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, st.one_of(scalars, arrays), max_size=12), st.lists(tensor, max_size=10))
def test_round_trip_keeps_metadata_tensors_and_bytes(meta, tensors):
    h = parse_header(write_header(meta, tensors))
    assert h.version == 3
    for k, v in meta.items():
        if isinstance(v, list) and len(v) > gguf.ARRAY_KEEP:
            assert h.array_lengths[k] == len(v) and k not in h.metadata
        else:
            assert h.metadata[k] == v
    assert [(t.name, t.shape, t.ggml_type) for t in h.tensors] == list(tensors)
    for t, (_, shape, gtype) in zip(h.tensors, tensors, strict=False):
        name, block, size = GGML_TYPES[gtype]
        n = 1
        for d in shape:
            n *= d
        assert t.nbytes == -(-n // block) * size and t.type_name == name


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_gguf_error(data):
    with contextlib.suppress(GGUFError):
        parse_header(data)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, scalars, min_size=1, max_size=6), st.lists(tensor, min_size=1, max_size=4), st.data())
def test_every_truncation_is_reported_as_truncated(meta, tensors, data):
    blob = write_header(meta, tensors)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(GGUFError):
        parse_header(blob[:cut])


def test_not_gguf_and_bad_version_say_so():
    with pytest.raises(GGUFError, match="not a GGUF file"):
        parse_header(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(GGUFError, match="version 9"):
        parse_header(b"GGUF" + struct.pack("<IQQ", 9, 0, 0))
    assert issubclass(GGUFError, InputError)


def test_huge_counts_are_refused_before_allocating():
    blob = b"GGUF" + struct.pack("<IQQ", 3, 2**40, 1)
    with pytest.raises(GGUFError, match="implausible"):
        parse_header(blob)
    # an array claiming more items than bytes left is refused, not allocated
    blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, 2**50)
    with pytest.raises(GGUFError, match="runs past"):
        parse_header(blob)


def test_read_header_reads_at_most_max_bytes(tmp_path):
    p = tmp_path / "big.gguf"
    blob = write_header({"general.architecture": "llama", "tokens": [f"t{i}" for i in range(5000)]}, [])
    p.write_bytes(blob + b"\0" * 1000)
    assert read_header(p).array_lengths["tokens"] == 5000
    with pytest.raises(GGUFError, match="larger than 100 bytes"):
        read_header(p, max_bytes=100)
    with pytest.raises(GGUFError, match="cannot read"):
        read_header(tmp_path / "missing.gguf")


def test_version_1_headers_use_32_bit_counts():
    # v1: u32 counts and string lengths (the first GGUF files); one string key, no tensors
    blob = b"GGUF" + struct.pack("<III", 1, 0, 1) + struct.pack("<I", 4) + b"name" + struct.pack("<I", 8) \
        + struct.pack("<I", 3) + b"abc"
    h = parse_header(blob)
    assert h.version == 1 and h.metadata == {"name": "abc"}
