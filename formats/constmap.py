"""fastconstmap's serialized VerifiedConstMap (`VMAP0001`), the map every lookupkit format holds: its
layout, named once, and its reader.

fastconstmap's own `from_buffer` runs an FNV-1a pass over the whole map on every open, an O(n) read
that touches every page. This module reads the documented layout directly from a memory-mapped
buffer instead, so opening is O(1) and needs no compiled code; the lookups and the checksum (checked
only by the explicit verify step) are `constmap_probe`'s kernels. Building is `constmap_build`'s,
byte-identical to fastconstmap (and so to the C/Go/Rust implementations; tests/test_constmap_build.py).

Layout: a 32-byte header (magic, u64 seed, u32 segment_length, u32 segment_count = total segments - 2,
u32 data_len = array length, u32 n_keys), data_len u64 values, data_len u64 checks, u64 FNV-1a 64 of
everything before it. Keys are 2-grams: two int32 token ids, little-endian, t0 then t1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from lookupkit.errors import FormatError

MAGIC = b"VMAP0001"
HEADER = struct.Struct("<8sQIIII")  # magic, seed, segment_length, segment_count, data_len, n_keys
HEADER_SIZE = HEADER.size  # 32
TRAILER_SIZE = 8  # the FNV-1a checksum
MAX_SEGMENT_LENGTH = 1 << 18
NOT_FOUND = np.uint64(0xFFFFFFFFFFFFFFFF)
# Memory the builder (constmap_build) holds per key while it writes a map: keys, values, its output + stack.
CONSTMAP_BYTES_PER_KEY = 8 + 8 + 22


@dataclass(frozen=True)
class ConstMapView:
    """Zero-copy view of a VMAP0001 map: header fields plus the `data` and `checks` arrays."""

    seed: int
    segment_length: int
    segment_count: int  # as stored: total segments minus 2
    n_keys: int
    data: np.ndarray  # uint64, len data_len
    checks: np.ndarray  # uint64, len data_len
    nbytes: int

    @property
    def segment_count_length(self) -> int:
        return self.segment_count * self.segment_length

    @property
    def hash_args(self) -> tuple:
        """(seed, segment_length, segment_count_length) as the kernels' `probes` take them."""
        return np.uint64(self.seed), np.uint64(self.segment_length), np.uint64(self.segment_count_length)

    @property
    def args(self) -> tuple:
        """hash_args + (data, checks): everything `lookup` takes after the key."""
        return (*self.hash_args, self.data, self.checks)


def parse_in(buf, offset: int, length: int, name: str) -> ConstMapView:
    """`parse`, its errors naming the file the map is in."""
    try:
        return parse(buf, offset, length)
    except FormatError as exc:
        raise FormatError(f"{name}: {exc}") from None


def parse(buf: memoryview | np.ndarray, offset: int = 0, length: int | None = None) -> ConstMapView:
    """Validate the header of a serialized map in `buf[offset:offset+length]` and return views (O(1))."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    if length is None:
        length = len(raw) - offset
    if offset % 8:
        raise FormatError("constmap section is not 8-byte aligned")
    if length < HEADER_SIZE + TRAILER_SIZE or offset + length > len(raw):
        raise FormatError(f"constmap section too short ({length} bytes)")
    magic, seed, seg_len, seg_count, data_len, n_keys = HEADER.unpack_from(raw[offset:offset + HEADER_SIZE].tobytes())
    if magic != MAGIC:
        raise FormatError(f"constmap has magic {magic!r}, expected {MAGIC!r} (a VerifiedConstMap with xxh64 keys)")
    if length == HEADER_SIZE + TRAILER_SIZE and seg_len == seg_count == data_len == n_keys == 0:
        # fastconstmap's empty map (no arrays): a view whose three probes XOR to NOT_FOUND, so every key misses
        never = np.full(3, NOT_FOUND, dtype=np.uint64)
        return ConstMapView(0, 1, 1, 0, never, never, length)
    if seg_count == 0:
        raise FormatError("constmap segment_count is 0: its third probe would fall past the arrays (corrupted)")
    if seg_len == 0 or seg_len & (seg_len - 1) or seg_len > MAX_SEGMENT_LENGTH:
        raise FormatError(f"constmap segment_length {seg_len} is not a power of two <= 2^18")
    if data_len != (seg_count + 2) * seg_len:
        raise FormatError("constmap data_len does not match its segment geometry")
    if length != HEADER_SIZE + 16 * data_len + TRAILER_SIZE:
        raise FormatError(f"constmap section is {length} bytes, its header implies "
                          f"{HEADER_SIZE + 16 * data_len + TRAILER_SIZE}")
    start = offset + HEADER_SIZE
    words = raw[start:start + 16 * data_len].view("<u8")
    return ConstMapView(seed, seg_len, seg_count, n_keys, words[:data_len], words[data_len:], length)
