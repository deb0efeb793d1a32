"""The compiled side of a VMAP0001 map (fastconstmap's VerifiedConstMap): a key's hash, its three slots,
the lookups, and the FNV-1a checksum. The builder (`constmap_build`) places keys with these same
kernels and the reader (`constmap`, the static cache's kernels) finds them with them: if the two ever
hashed differently, every lookup would miss.

A key is a 2-gram's 8 bytes `struct.pack('<ii', t0, t1)`, read as one little-endian uint64 word.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from lookupkit.formats.constmap import NOT_FOUND
from lookupkit.kernels import M2 as _P2, M3 as _P3

# XXH64's primes (PRIME64_1..5; 2 and 3 are lookupkit.kernels' M2 and M3) and murmur3's fmix64 multipliers
_P1 = np.uint64(0x9E3779B185EBCA87)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_LO32 = np.uint64(0xFFFFFFFF)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, inline="always")
def key_word(t0, t1):
    """The 2-gram's 8 key bytes as one little-endian word: t0 | t1 << 32."""
    return np.uint64(np.uint32(t0)) | (np.uint64(np.uint32(t1)) << np.uint64(32))


@njit(cache=True, inline="always")
def key_hash(word, seed):
    """fmix64(XXH64(word as 8 little-endian bytes, seed 0) + seed): the key's mixed 64-bit hash."""
    k = _rotl(word * _P2, 31) * _P1
    h = (_P5 + np.uint64(8)) ^ k
    h = _rotl(h, 27) * _P1 + _P4
    h = (h ^ (h >> np.uint64(33))) * _P2
    h = (h ^ (h >> np.uint64(29))) * _P3
    h ^= h >> np.uint64(32)
    h += seed
    h = (h ^ (h >> np.uint64(33))) * _F1
    h = (h ^ (h >> np.uint64(33))) * _F2
    return h ^ (h >> np.uint64(33))


@njit(cache=True, inline="always")
def slots(x, seg_len, seg_count_len):
    """The three slot positions (uint64) of a mixed hash x; seg_count_len = segment_count * segment_length."""
    # hi64(x * seg_count_len) with seg_count_len < 2^32, without 128-bit integers
    h0 = ((x >> np.uint64(32)) * seg_count_len + (((x & _LO32) * seg_count_len) >> np.uint64(32))) >> np.uint64(32)
    mask = seg_len - np.uint64(1)
    return h0, (h0 + seg_len) ^ ((x >> np.uint64(18)) & mask), (h0 + seg_len + seg_len) ^ (x & mask)


@njit(cache=True, inline="always")
def check_of(x):
    """What the `checks` array XORs to at a key's three slots."""
    return x ^ (x >> np.uint64(32))


@njit(cache=True, inline="always")
def probes(t0, t1, seed, seg_len, seg_count_len):
    """The 2-gram's mixed hash x and its three slot positions h0, h1, h2."""
    x = key_hash(key_word(t0, t1), seed)
    h0, h1, h2 = slots(x, seg_len, seg_count_len)
    return x, h0, h1, h2


@njit(cache=True, inline="always")
def lookup(t0, t1, seed, seg_len, seg_count_len, data, checks):
    """The value of 2-gram (t0, t1), or NOT_FOUND."""
    x, h0, h1, h2 = probes(t0, t1, seed, seg_len, seg_count_len)
    if (checks[h0] ^ checks[h1] ^ checks[h2]) != check_of(x):
        return NOT_FOUND
    return data[h0] ^ data[h1] ^ data[h2]


@njit(cache=True, inline="always")
def lookup_in(t0, t1, seed, seg_len, seg_count_len, words, data_at, checks_at):
    """`lookup` for a map whose data and checks lie at word offsets data_at, checks_at of `words` (several
    maps of one file share one view of it)."""
    x, h0, h1, h2 = probes(t0, t1, seed, seg_len, seg_count_len)
    if (words[checks_at + h0] ^ words[checks_at + h1] ^ words[checks_at + h2]) != check_of(x):
        return NOT_FOUND
    return words[data_at + h0] ^ words[data_at + h1] ^ words[data_at + h2]


@njit(cache=True)
def fnv1a(raw):
    """FNV-1a 64 of a uint8 array: the map's trailing checksum (over every byte before it)."""
    h = _FNV_OFFSET
    for i in range(raw.shape[0]):
        h = (h ^ np.uint64(raw[i])) * _FNV_PRIME
    return h


def checksum_ok(buf, offset: int, length: int) -> bool:
    """FNV-1a 64 over the map's bytes equals its trailing checksum (the O(n) verify step)."""
    raw = np.frombuffer(buf, dtype=np.uint8)[offset:offset + length]
    stored = int(raw[-8:].view("<u8")[0])
    return int(fnv1a(raw[:-8])) == stored
