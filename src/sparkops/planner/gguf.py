"""A bounded reader for the header of a GGUF file (llama.cpp / Ollama weights).

What it gives the serving planner: the architecture's shape keys (layers, KV heads, head sizes,
sliding window, training context) and every tensor's ggml type and shape, from which the exact
bytes the weights take follow. Only the header is read, never the tensor data: a 40 GB file
costs a few megabytes of reading.

Bounded: at most ``max_bytes`` are read (the vocabulary arrays of a 150k-token tokenizer are a
few MB; 64 MiB is far above any real header), counts and string lengths are checked against the
bytes that are actually there before anything is allocated, and long arrays are kept as their
length only. A malformed or truncated header raises :class:`GGUFError` (an ``InputError``) with
what was wrong; no other exception escapes (the property tests feed it arbitrary bytes).

Layout (gguf v2/v3, little-endian): magic ``GGUF``, version u32, tensor count u64, metadata count
u64; each metadata entry is a string key, a u32 value type and the value; then per tensor its
name, dimension count u32, dimensions u64 each, ggml type u32 and data offset u64. Version 1
used u32 counts and lengths. Type sizes: ggml's ``ggml_type_traits`` (block size, bytes per block).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.core.errors import InputError

MAGIC = b"GGUF"
MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_TENSORS = 1_000_000
MAX_KV = 100_000
ARRAY_KEEP = 64  # arrays longer than this keep only their length (tokenizer vocabularies)

# gguf metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}

# ggml_type id -> (name, elements per block, bytes per block); ggml/src/ggml.c type traits.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}


class GGUFError(InputError):
    """The file is not a GGUF file, or its header is malformed or truncated."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.ggml_type, (f"type{self.ggml_type}", 0, 0))[0]

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int | None:
        """Bytes of the tensor's data; None for a ggml type this reader does not know."""
        t = GGML_TYPES.get(self.ggml_type)
        if t is None:
            return None
        _, block, size = t
        return -(-self.elements // block) * size


@dataclass
class GGUFHeader:
    version: int
    metadata: dict[str, Any]
    tensors: list[GGUFTensor] = field(default_factory=list)
    array_lengths: dict[str, int] = field(default_factory=dict)  # long arrays: key -> length
    header_bytes: int = 0

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_key(self, suffix: str, default: Any = None) -> Any:
        """``{arch}.{suffix}``, e.g. ``block_count`` or ``attention.head_count_kv``."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    def tensor_bytes(self, *, skip: tuple[str, ...] = ()) -> int:
        """Bytes of all tensors whose name does not start with one of ``skip``; unknown types raise."""
        total = 0
        for t in self.tensors:
            if t.name.startswith(skip):
                continue
            b = t.nbytes
            if b is None:
                raise GGUFError(f"tensor {t.name!r} has ggml type {t.ggml_type}, unknown to this reader")
            total += b
        return total

    def type_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.type_name] = out.get(t.type_name, 0) + 1
        return out


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise GGUFError(f"truncated GGUF header: {what} needs {n} bytes at offset {self.pos}, "
                            f"{len(self.data) - self.pos} left")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]


def _count(cur: _Cursor, v1: bool, what: str) -> int:
    return cur.unpack("<I" if v1 else "<Q", what)


def _string(cur: _Cursor, v1: bool, what: str) -> str:
    n = _count(cur, v1, f"{what} length")
    raw = cur.take(n, what)
    return raw.decode("utf-8", errors="replace")


def _value(cur: _Cursor, vtype: int, v1: bool, key: str, depth: int = 0) -> tuple[Any, int | None]:
    """One metadata value; long arrays come back as (None, length)."""
    if vtype in _SCALAR:
        return cur.unpack(_SCALAR[vtype], f"value of {key!r}"), None
    if vtype == STRING:
        return _string(cur, v1, f"string value of {key!r}"), None
    if vtype == ARRAY:
        if depth > 2:
            raise GGUFError(f"array nesting too deep in {key!r}")
        itype = cur.unpack("<I", f"array type of {key!r}")
        n = _count(cur, v1, f"array length of {key!r}")
        if itype in _SCALAR:
            size = struct.calcsize(_SCALAR[itype])
            if n * size > len(cur.data) - cur.pos:
                raise GGUFError(f"truncated GGUF header: array {key!r} of {n} items runs past the data")
            if n > ARRAY_KEEP:
                cur.take(n * size, f"array {key!r}")
                return None, n
            return [cur.unpack(_SCALAR[itype], f"item of {key!r}") for _ in range(n)], None
        if itype not in (STRING, ARRAY):
            raise GGUFError(f"unknown array item type {itype} in {key!r}")
        if n > len(cur.data) - cur.pos:  # every item takes at least one byte
            raise GGUFError(f"truncated GGUF header: array {key!r} of {n} items runs past the data")
        items = []
        for _ in range(n):
            v, _len = _value(cur, itype, v1, key, depth + 1)
            if n <= ARRAY_KEEP:
                items.append(v)
        return (items, None) if n <= ARRAY_KEEP else (None, n)
    raise GGUFError(f"unknown metadata value type {vtype} for {key!r}")


def parse_header(data: bytes) -> GGUFHeader:
    """Parse a GGUF header from the first bytes of a file (pure; raises GGUFError only)."""
    cur = _Cursor(data)
    if cur.take(4, "magic") != MAGIC:
        raise GGUFError("not a GGUF file (the first four bytes are not 'GGUF')")
    version = cur.unpack("<I", "version")
    if version not in (1, 2, 3):
        raise GGUFError(f"GGUF version {version} is not supported (1-3)")
    v1 = version == 1
    n_tensors = _count(cur, v1, "tensor count")
    n_kv = _count(cur, v1, "metadata count")
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise GGUFError(f"implausible GGUF header: {n_tensors} tensors, {n_kv} metadata entries")
    meta: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for _ in range(n_kv):
        key = _string(cur, v1, "metadata key")
        vtype = cur.unpack("<I", f"type of {key!r}")
        value, length = _value(cur, vtype, v1, key)
        if length is not None:
            lengths[key] = length
        else:
            meta[key] = value
    tensors: list[GGUFTensor] = []
    for _ in range(n_tensors):
        name = _string(cur, v1, "tensor name")
        n_dims = cur.unpack("<I", f"dimension count of {name!r}")
        if n_dims > 8:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions (at most 8)")
        dims = tuple(_count(cur, v1, f"dimension of {name!r}") for _ in range(n_dims))
        gtype = cur.unpack("<I", f"type of {name!r}")
        offset = cur.unpack("<Q", f"offset of {name!r}")
        tensors.append(GGUFTensor(name=name, shape=dims, ggml_type=gtype, offset=offset))
    return GGUFHeader(version=version, metadata=meta, tensors=tensors, array_lengths=lengths,
                      header_bytes=cur.pos)


def read_header(path: Path, *, max_bytes: int = MAX_HEADER_BYTES) -> GGUFHeader:
    """Read and parse the header of ``path``, never more than ``max_bytes`` of it."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes)
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return parse_header(data)
    except GGUFError as exc:
        if len(data) >= max_bytes and "truncated" in str(exc):
            raise GGUFError(f"{path}: the GGUF header is larger than {max_bytes} bytes; not read") from exc
        raise GGUFError(f"{path}: {exc}") from exc


SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<n>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)


def merge(headers: list[GGUFHeader]) -> GGUFHeader:
    """One model's header from the headers of its split files (llama.cpp's gguf-split, first file first): the first
    file's metadata, every file's tensors."""
    first = headers[0]
    return GGUFHeader(version=first.version, metadata=first.metadata, tensors=[t for h in headers for t in h.tensors],
                      array_lengths=first.array_lengths, header_bytes=first.header_bytes)


def read_model_header(path: Path, *, max_bytes: int = MAX_HEADER_BYTES) -> tuple[GGUFHeader, int]:
    """The header of the model ``path`` belongs to, and how many files it spans. A split file
    (``NAME-00001-of-00003.gguf``, as llama.cpp writes and loads them, any of the parts named) is read with
    all of its parts: llama.cpp loads them all, so the weights are all of theirs. A missing part is an error."""
    path = Path(path)
    m = SPLIT_NAME.match(path.name)
    if m is None or int(m["total"]) <= 1:
        return read_header(path, max_bytes=max_bytes), 1
    total = int(m["total"])
    if total > 1000:
        raise GGUFError(f"{path}: a split into {total} files is not plausible")
    files = [path.with_name(f"{m['prefix']}-{i:05d}-of-{m['total']}.gguf") for i in range(1, total + 1)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise GGUFError(f"{path.name} is one of {total} parts, but {missing[0]} is not beside it"
                        + (f" ({len(missing)} missing)" if len(missing) > 1 else "")
                        + ": llama.cpp needs every part, and so does the plan")
    merged = merge([read_header(f, max_bytes=max_bytes) for f in files])
    declared = merged.metadata.get("split.tensors.count")
    if isinstance(declared, int) and declared != len(merged.tensors):
        raise GGUFError(f"{files[0].name}: the parts hold {len(merged.tensors)} tensors, the first says "
                        f"split.tensors.count = {declared}")
    return merged, total


# ------------------------------------------------------------------ writer (tests, fixtures)

def _w_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _w_value(v: Any) -> tuple[int, bytes]:
    if isinstance(v, bool):
        return BOOL, struct.pack("<?", v)
    if isinstance(v, int):
        if -2**31 <= v < 2**31:
            return I32, struct.pack("<i", v)
        return (U64, struct.pack("<Q", v)) if v >= 0 else (I64, struct.pack("<q", v))
    if isinstance(v, float):
        return F64, struct.pack("<d", v)
    if isinstance(v, str):
        return STRING, _w_string(v)
    if isinstance(v, list):
        if all(isinstance(x, str) for x in v):
            return ARRAY, struct.pack("<IQ", STRING, len(v)) + b"".join(_w_string(x) for x in v)
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return ARRAY, struct.pack("<IQ", I32, len(v)) + b"".join(struct.pack("<i", x) for x in v)
        if all(isinstance(x, float) for x in v):
            return ARRAY, struct.pack("<IQ", F32, len(v)) + b"".join(struct.pack("<f", x) for x in v)
    raise TypeError(f"cannot write {type(v).__name__} as GGUF metadata")


def write_header(metadata: dict[str, Any], tensors: list[tuple[str, tuple[int, ...], int]], *,
                 version: int = 3) -> bytes:
    """A GGUF v2/v3 header (no tensor data) with these metadata and tensors: test fixtures."""
    out = [MAGIC, struct.pack("<IQQ", version, len(tensors), len(metadata))]
    for k, v in metadata.items():
        vt, payload = _w_value(v)
        out += [_w_string(k), struct.pack("<I", vt), payload]
    offset = 0
    for name, shape, gtype in tensors:
        out += [_w_string(name), struct.pack("<I", len(shape)), b"".join(struct.pack("<Q", d) for d in shape),
                struct.pack("<IQ", gtype, offset)]
        t = GGML_TYPES.get(gtype, ("", 1, 1))
        n = 1
        for d in shape:
            n *= d
        offset += -(-n // t[1]) * t[2]
    return b"".join(out)
