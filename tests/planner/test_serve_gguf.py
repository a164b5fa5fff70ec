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


# ------------------------------------------------------------------ split files (llama.cpp's gguf-split)


def _split_model(folder, parts: int, name: str = "Qwen3-235B-A22B-Q4_K_M") -> tuple[list, int]:
    """A llama GGUF split into ``parts`` files as gguf-split writes them (split.* keys, metadata in the first)."""
    meta = {"general.architecture": "llama", "general.name": "tiny", "general.file_type": 15, "llama.block_count": 2,
            "llama.embedding_length": 256, "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
            "llama.context_length": 4096}
    tensors = [("token_embd.weight", (256, 1000), 12), ("output.weight", (256, 1000), 14)]
    for i in range(2):
        tensors += [(f"blk.{i}.attn_q.weight", (256, 256), 12), (f"blk.{i}.ffn_up.weight", (256, 512), 12)]
    per = -(-len(tensors) // parts)
    paths = []
    for k in range(parts):
        part = tensors[k * per:(k + 1) * per]
        m = {"split.no": k, "split.count": parts, "split.tensors.count": len(tensors)}
        p = folder / f"{name}-{k + 1:05d}-of-{parts:05d}.gguf"
        p.write_bytes(write_header({**meta, **m} if k == 0 else m, part))
        paths.append(p)
    total = sum(-(-(a * b) // GGML_TYPES[t][1]) * GGML_TYPES[t][2] for _, (a, b), t in tensors)
    return paths, total


@pytest.mark.parametrize("named", [0, 2])
def test_a_split_gguf_is_read_with_all_its_parts(tmp_path, named):
    from sparkops.planner import serve

    paths, total = _split_model(tmp_path, 3)
    header, n = gguf.read_model_header(paths[named])  # llama.cpp -m takes any part and loads them all
    assert n == 3 and header.tensor_bytes() == total and header.arch_key("block_count") == 2
    shape = serve.resolve_shape(None, gguf=str(paths[named]))
    assert shape.gguf_bytes == total and shape.gguf_type == "Q4_K_M"
    assert read_header(paths[0]).tensor_bytes() < total  # the first part alone is not the model


def test_a_missing_part_of_a_split_gguf_is_named(tmp_path):
    paths, _ = _split_model(tmp_path, 3)
    paths[1].unlink()
    with pytest.raises(GGUFError, match=r"is one of 3 parts, but Qwen3-235B-A22B-Q4_K_M-00002-of-00003.gguf is not beside it"):
        gguf.read_model_header(paths[0])


def test_an_unsplit_file_is_one_part(tmp_path):
    paths, total = _split_model(tmp_path, 1, name="tiny")
    header, n = gguf.read_model_header(paths[0])
    assert n == 1 and header.tensor_bytes() == total


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(tensor, min_size=1, max_size=12), st.integers(1, 6), st.data())
def test_any_split_reads_back_every_tensor_once(tmp_path_factory, tensors, parts, data):
    folder = tmp_path_factory.mktemp("split")
    parts = min(parts, len(tensors))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(tensors) - 1), min_size=parts - 1, max_size=parts - 1))) \
        if parts > 1 else []
    bounds = [0, *cuts, len(tensors)]
    for k in range(parts):
        meta = {"split.no": k, "split.count": parts, "split.tensors.count": len(tensors)}
        if k == 0:
            meta["general.architecture"] = "llama"
        name = f"m-{k + 1:05d}-of-{parts:05d}.gguf" if parts > 1 else "m.gguf"
        (folder / name).write_bytes(write_header(meta, tensors[bounds[k]:bounds[k + 1]]))
    pick = data.draw(st.integers(1, parts))
    path = folder / (f"m-{pick:05d}-of-{parts:05d}.gguf" if parts > 1 else "m.gguf")
    header, n = gguf.read_model_header(path)
    assert n == parts and [(t.name, t.shape, t.ggml_type) for t in header.tensors] == list(tensors)
