"""Reader and builder of fastconstmap's serialized VerifiedConstMap (`VMAP0001`).

fastconstmap's own `from_buffer` runs an FNV-1a pass over the whole map on every open, an O(n) read
that touches every page. This module reads the documented layout directly from a memory-mapped
buffer instead, so opening is O(1), and looks keys up from numba-compiled code (single and batched).
The checksum is checked only by `checksum_ok`, the explicit verify step. Building is `vmap_build`'s,
byte-identical to fastconstmap (and so to the C/Go/Rust implementations; tests/test_vmap_build.py).

Keys are 2-grams: two int32 token ids, little-endian, t0 then t1 (`struct.pack('<ii', t0, t1)`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from numba import njit

from lookupkit.errors import FormatError
from lookupkit.formats import vmap_build
from lookupkit.formats.vmap_build import _fnv1a  # (the builder writes the checksum this verifies)

MAGIC = b"VMAP0001"
HEADER_SIZE = 32
NOT_FOUND = np.uint64(0xFFFFFFFFFFFFFFFF)
_HEADER = struct.Struct("<8sQIIII")

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_U32 = np.uint64(0xFFFFFFFF)


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
    if length < HEADER_SIZE + 8 or offset + length > len(raw):
        raise FormatError(f"constmap section too short ({length} bytes)")
    magic, seed, seg_len, seg_count, data_len, n_keys = _HEADER.unpack_from(raw[offset:offset + HEADER_SIZE].tobytes())
    if magic != MAGIC:
        raise FormatError(f"constmap has magic {magic!r}, expected {MAGIC!r} (a VerifiedConstMap with xxh64 keys)")
    if length == HEADER_SIZE + 8 and seg_len == seg_count == data_len == n_keys == 0:
        # fastconstmap's empty map (no arrays): a view whose three probes XOR to NOT_FOUND, so every key misses
        never = np.full(3, NOT_FOUND, dtype=np.uint64)
        return ConstMapView(0, 1, 1, 0, never, never, length)
    if seg_count == 0:
        raise FormatError("constmap segment_count is 0: its third probe would fall past the arrays (corrupted)")
    if seg_len == 0 or seg_len & (seg_len - 1) or seg_len > 1 << 18:
        raise FormatError(f"constmap segment_length {seg_len} is not a power of two <= 2^18")
    if data_len != (seg_count + 2) * seg_len:
        raise FormatError("constmap data_len does not match its segment geometry")
    if length != HEADER_SIZE + 16 * data_len + 8:
        raise FormatError(f"constmap section is {length} bytes, its header implies {HEADER_SIZE + 16 * data_len + 8}")
    start = offset + HEADER_SIZE
    words = raw[start:start + 16 * data_len].view("<u8")
    return ConstMapView(seed, seg_len, seg_count, n_keys, words[:data_len], words[data_len:], length)


def checksum_ok(buf: memoryview | np.ndarray, offset: int, length: int) -> bool:
    """FNV-1a 64 over the map's bytes equals its trailing checksum (the O(n) verify step)."""
    raw = np.frombuffer(buf, dtype=np.uint8)[offset:offset + length]
    stored = int(raw[-8:].view("<u8")[0])
    return int(_fnv1a(raw[:-8])) == stored


def build(keys: np.ndarray, values: np.ndarray) -> bytes:
    """Serialize a VerifiedConstMap from (n, 2) int32 keys to uint64 values: the bytes fastconstmap
    writes, from a numba builder (`vmap_build`; no Python dict of keys)."""
    return vmap_build.build(keys, values)


@njit(cache=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, inline="always")
def _xxh64_8(word):
    """XXH64 (seed 0) of one 8-byte little-endian word."""
    h = _P5 + np.uint64(8)
    k = word * _P2
    k = _rotl(k, 31) * _P1
    h ^= k
    h = _rotl(h, 27) * _P1 + _P4
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@njit(cache=True, inline="always")
def probes(t0, t1, seed, seg_len, seg_count_len):
    """The 2-gram's fingerprint hash x and its three slot positions h0, h1, h2 (formats.md §2)."""
    word = (np.uint64(np.uint32(t0))) | (np.uint64(np.uint32(t1)) << np.uint64(32))
    x = _xxh64_8(word) + seed
    x ^= x >> np.uint64(33)
    x *= _M1
    x ^= x >> np.uint64(33)
    x *= _M2
    x ^= x >> np.uint64(33)
    # hi64(x * seg_count_len) with seg_count_len < 2^32, without 128-bit integers
    h0 = ((x >> np.uint64(32)) * seg_count_len + (((x & _U32) * seg_count_len) >> np.uint64(32))) >> np.uint64(32)
    mask = seg_len - np.uint64(1)
    return x, h0, (h0 + seg_len) ^ ((x >> np.uint64(18)) & mask), (h0 + seg_len + seg_len) ^ (x & mask)


@njit(cache=True, inline="always")
def lookup(t0, t1, seed, seg_len, seg_count_len, data, checks):
    x, h0, h1, h2 = probes(t0, t1, seed, seg_len, seg_count_len)
    if (checks[h0] ^ checks[h1] ^ checks[h2]) != (x ^ (x >> np.uint64(32))):
        return NOT_FOUND
    return data[h0] ^ data[h1] ^ data[h2]


@njit(cache=True, inline="always")
def lookup_in(t0, t1, seed, seg_len, seg_count_len, words, data_at, checks_at):
    """`lookup` for a map whose data and checks lie at word offsets data_at, checks_at of `words` (several
    maps of one file share one view of it)."""
    x, h0, h1, h2 = probes(t0, t1, seed, seg_len, seg_count_len)
    if (words[checks_at + h0] ^ words[checks_at + h1] ^ words[checks_at + h2]) != (x ^ (x >> np.uint64(32))):
        return NOT_FOUND
    return words[data_at + h0] ^ words[data_at + h1] ^ words[data_at + h2]
