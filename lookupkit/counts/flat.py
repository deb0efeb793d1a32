"""Mutable 1..4-gram follower counts in flat arrays: the fast engine's context and dynamic caches.

The same counts as the dict-based `NgramCache` (llama.cpp's update and merge), held where numba code
can read and change them without Python objects: an open-addressing table of n-gram keys (padded with
-1 to 4 slots, as llama.cpp's `common_ngram`), each key with its followers in a linked list of pairs,
and a second open-addressing table from (key, follower) to its pair, so an update or merge costs O(1)
however many followers a key has. Each key also keeps its total, its largest count and the smallest
follower id holding that count: counts only grow, so these stay exact incrementally, and they let the
drafter reject or answer many n-grams without scanning their followers.

Counts are int64 in memory (exact far beyond any corpus) and saturate at 2^31-1 when exported.
Capacity is fixed inside numba code; Python grows the arrays (`reserve`) before work that could
exceed it. A byte per slot-table bucket counts the n-grams there that pass the drafting precheck
(`passes_precheck`), so the drafter skips most absent or hopeless n-grams without touching the table.

The kernels compile with `lookupkit.kernels.kernel` (no reference counting: see there why).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import rules
from ..errors import InputError
from ..kernels import GOLDEN as _M1, M2 as _M2, M3 as _M3, M4 as _M4, kernel, mix
from ..rules import COUNT_MAX
from .tables import NgramTable

# Columns of Cache.ent (one row per n-gram key) and of Cache.pairs (one row per (key, follower)).
TOTAL, MAXC, BEST, HEAD = 4, 5, 6, 7  # columns 0..3: the n-gram
TOK, CNT, NEXT, OWNER = 0, 1, 2, 3
EMPTY = -1

Cache = namedtuple("Cache", "slots ent pslots pairs n thr filt")
Cache.__doc__ = """Arrays of one cache. slots/pslots: hash tables of (tag << 32 | row), -1 = empty;
ent: (cap, 8) int64 rows k0 k1 k2 k3 total maxc best head; pairs: (pcap, 4) int64 rows token count
next owner; n: [n_keys, n_pairs]; thr: (2, 4) int64 drafting thresholds MIN_N, MIN_P by n-1;
filt: per slot-table bucket, how many n-grams there pass the precheck (uint8, sticky at 255)."""

# llama.cpp's drafting thresholds as the kernels read them: rows MIN_N, MIN_P; columns n = 1..4.
LAX = np.array([rules.CONTEXT_MIN_N, rules.CONTEXT_MIN_P], dtype=np.int64)  # context cache
STRICT = np.array([rules.DYNAMIC_MIN_N, rules.DYNAMIC_MIN_P], dtype=np.int64)  # dynamic cache

_TAG = np.uint64(0x7FFFFFFF)
_LOW = np.int64(0xFFFFFFFF)

def new_cache(key_cap: int, pair_cap: int, thr: np.ndarray = LAX) -> Cache:
    """An empty cache holding up to key_cap n-grams and pair_cap (n-gram, follower) pairs."""
    key_cap, pair_cap = max(int(key_cap), 16), max(int(pair_cap), 16)
    size = _table_size(key_cap)
    # np.full, never np.zeros/np.empty: every page is touched here, so no kernel (timed) takes first-touch faults
    return Cache(np.full(size, EMPTY, np.int64), np.full((key_cap, 8), 0, np.int64),
                 np.full(_table_size(pair_cap), EMPTY, np.int64), np.full((pair_cap, 4), 0, np.int64),
                 np.zeros(2, np.int64), check_thresholds(thr), np.full(size, 0, np.uint8))


def check_thresholds(thr, shape=(2, 4)) -> np.ndarray:
    """A validated int64 copy of thresholds: row MIN_N >= 1, row MIN_P in 0..100 (a column per n)."""
    try:
        arr = np.array(thr, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        arr = None
    if arr is None or arr.shape != shape or (arr[0] < 1).any() or (arr[1] < 0).any() or (arr[1] > 100).any():
        raise InputError(f"thresholds must be MIN_N (>= 1) and MIN_P (0..100) of shape {shape}, got {thr!r}")
    return arr


def _table_size(cap: int) -> int:
    """A power of two at least twice the capacity: the load factor stays <= 1/2."""
    return 1 << max(4, (2 * cap - 1).bit_length())


@kernel
def hash_key(k0, k1, k2, k3):
    return mix(np.uint64(np.uint32(k0)) * _M1 ^ np.uint64(np.uint32(k1)) * _M2
               ^ np.uint64(np.uint32(k2)) * _M3 ^ np.uint64(np.uint32(k3)) * _M4 + _M1)


@kernel
def _hash_pair(row, tok):
    return mix(np.uint64(row) * _M2 ^ np.uint64(np.uint32(tok)) * _M3 + _M1)


@kernel
def _home(table, h):
    return (h >> np.uint64(32)) & np.uint64(len(table) - 1)


@kernel
def _probe(c, h, k0, k1, k2, k3):
    """(slot, row) of the n-gram with hash h; row -1 and the empty slot where it belongs if absent."""
    tag = np.int64(h & _TAG)
    mask = np.uint64(len(c.slots) - 1)
    i = _home(c.slots, h)
    while True:
        s = c.slots[i]
        if s == EMPTY:
            return i, np.int64(-1)
        if (s >> 32) == tag:
            e = s & _LOW
            if c.ent[e, 0] == k0 and c.ent[e, 1] == k1 and c.ent[e, 2] == k2 and c.ent[e, 3] == k3:
                return i, e
        i = (i + np.uint64(1)) & mask


@kernel
def find_hashed(c, h, k0, k1, k2, k3):
    """Row of the n-gram (k0, k1, k2, k3) (padded with -1) whose hash_key is h, or -1 when absent."""
    return _probe(c, h, k0, k1, k2, k3)[1]


@kernel
def find(c, k0, k1, k2, k3):
    return find_hashed(c, hash_key(k0, k1, k2, k3), k0, k1, k2, k3)


@kernel
def may_pass(c, h):
    """False when no n-gram with hash h passes the precheck (absent, too few samples or no majority)."""
    return c.filt[_home(c.slots, h)] != 0


@kernel
def find_or_add(c, k0, k1, k2, k3):
    """Row of the n-gram, inserting an empty one if absent (the caller guarantees capacity)."""
    h = hash_key(k0, k1, k2, k3)
    i, e = _probe(c, h, k0, k1, k2, k3)
    if e >= 0:
        return e
    e = c.n[0]
    c.n[0] = e + 1
    c.ent[e, 0], c.ent[e, 1], c.ent[e, 2], c.ent[e, 3] = k0, k1, k2, k3
    c.ent[e, TOTAL], c.ent[e, MAXC], c.ent[e, BEST], c.ent[e, HEAD] = 0, 0, -1, -1
    c.slots[i] = (np.int64(h & _TAG) << 32) | e
    return e


@kernel
def passes_precheck(c, e):
    """Could row e draft at all: total >= MIN_N and its largest count's share >= MIN_P?"""
    n = 4 if c.ent[e, 3] != -1 else 3 if c.ent[e, 2] != -1 else 2 if c.ent[e, 1] != -1 else 1
    total = c.ent[e, TOTAL]
    return total >= c.thr[0, n - 1] and 100 * c.ent[e, MAXC] >= c.thr[1, n - 1] * total


@kernel
def _refilter(c, e, before):
    """Keep the filter's count of passing n-grams right after row e changed (a full count sticks)."""
    after = passes_precheck(c, e)
    if after != before:
        b = _home(c.slots, hash_key(c.ent[e, 0], c.ent[e, 1], c.ent[e, 2], c.ent[e, 3]))
        f = c.filt[b]
        if f != 255:
            c.filt[b] = f + 1 if after else f - 1


@kernel
def add_count(c, e, tok, cnt):
    """Add `cnt` to follower `tok` of row `e` (inserting it), keeping total, max and best exact."""
    h = _hash_pair(e, tok)
    tag = np.int64(h & _TAG)
    mask = np.uint64(len(c.pslots) - 1)
    i = _home(c.pslots, h)
    p = -1
    while True:
        s = c.pslots[i]
        if s == EMPTY:
            break
        if (s >> 32) == tag:
            q = s & _LOW
            if c.pairs[q, OWNER] == e and c.pairs[q, TOK] == tok:
                p = q
                break
        i = (i + np.uint64(1)) & mask
    if p < 0:
        p = c.n[1]
        c.n[1] = p + 1
        c.pairs[p, TOK], c.pairs[p, CNT], c.pairs[p, NEXT], c.pairs[p, OWNER] = tok, 0, c.ent[e, HEAD], e
        c.ent[e, HEAD] = p
        c.pslots[i] = (tag << 32) | p
    before = passes_precheck(c, e)  # a new n-gram (total 0) never passes: MIN_N >= 1
    count = c.pairs[p, CNT] + cnt
    c.pairs[p, CNT] = count
    c.ent[e, TOTAL] += cnt
    if count > c.ent[e, MAXC] or (count == c.ent[e, MAXC] and tok < c.ent[e, BEST]):
        c.ent[e, MAXC] = count
        c.ent[e, BEST] = tok
    _refilter(c, e, before)


@kernel
def count_position(c, seq, i):
    """llama.cpp's update for one target position i: seq[i] follows each n-gram seq[i-n:i], n = 1..4."""
    t = seq[i]
    if i >= 1:
        add_count(c, find_or_add(c, seq[i - 1], -1, -1, -1), t, 1)
    if i >= 2:
        add_count(c, find_or_add(c, seq[i - 2], seq[i - 1], -1, -1), t, 1)
    if i >= 3:
        add_count(c, find_or_add(c, seq[i - 3], seq[i - 2], seq[i - 1], -1), t, 1)
    if i >= 4:
        add_count(c, find_or_add(c, seq[i - 4], seq[i - 3], seq[i - 2], seq[i - 1]), t, 1)


@kernel
def count_positions(c, seq, start, stop):
    """llama.cpp's common_ngram_cache_update(cache, 1, 4, seq[:stop], nnew = stop - start)."""
    for i in range(start, stop):
        count_position(c, seq, i)


@kernel
def merge_into(dst, src):
    """llama.cpp's common_ngram_cache_merge: add every count of `src` to `dst` (capacity checked by caller)."""
    for e in range(src.n[0]):
        d = find_or_add(dst, src.ent[e, 0], src.ent[e, 1], src.ent[e, 2], src.ent[e, 3])
        p = src.ent[e, HEAD]
        while p >= 0:
            add_count(dst, d, src.pairs[p, TOK], src.pairs[p, CNT])
            p = src.pairs[p, NEXT]


@kernel
def clear(c):
    c.slots[:] = EMPTY
    c.pslots[:] = EMPTY
    c.filt[:] = 0
    c.n[:] = 0


@kernel
def _load(c, ngrams, offsets, pairs):
    for r in range(ngrams.shape[0]):
        e = find_or_add(c, ngrams[r, 0], ngrams[r, 1], ngrams[r, 2], ngrams[r, 3])
        for j in range(offsets[r], offsets[r + 1]):
            add_count(c, e, pairs[j, 0], pairs[j, 1])


@kernel
def _export(c, ngrams, offsets, pairs, count_max):
    j = 0
    for e in range(c.n[0]):
        for k in range(4):
            ngrams[e, k] = c.ent[e, k]
        offsets[e] = j
        p = c.ent[e, HEAD]
        while p >= 0:
            pairs[j, 0] = c.pairs[p, TOK]
            pairs[j, 1] = min(c.pairs[p, CNT], count_max)
            j += 1
            p = c.pairs[p, NEXT]
    offsets[c.n[0]] = j


class FlatCache:
    """A growable context or dynamic cache; `.c` holds the arrays that jitted code works on."""

    def __init__(self, key_cap: int = 1024, pair_cap: int = 1024, thresholds=LAX):
        self.c = new_cache(key_cap, pair_cap, thresholds)

    @property
    def n_keys(self) -> int:
        return int(self.c.n[0])

    @property
    def n_pairs(self) -> int:
        return int(self.c.n[1])

    def __len__(self) -> int:
        return self.n_keys

    def reserve(self, keys: int, pairs: int) -> None:
        """Make room for `keys` more n-grams and `pairs` more followers (at least doubling when it grows)."""
        c = self.c
        need_k, need_p = self.n_keys + keys, self.n_pairs + pairs
        if need_k <= len(c.ent) and need_p <= len(c.pairs):
            return
        grown = new_cache(max(need_k, 2 * len(c.ent) if need_k > len(c.ent) else len(c.ent)),
                          max(need_p, 2 * len(c.pairs) if need_p > len(c.pairs) else len(c.pairs)), c.thr)
        merge_into(grown, c)
        self.c = grown

    def update(self, seq: np.ndarray, nnew: int | None = None) -> None:
        """Count the last `nnew` positions of the append-only sequence `seq` (all of it by default)."""
        seq = np.ascontiguousarray(seq, dtype=np.int32)
        nnew = len(seq) if nnew is None else min(int(nnew), len(seq))
        self.reserve(4 * nnew, 4 * nnew)
        count_positions(self.c, seq, len(seq) - nnew, len(seq))

    def merge(self, other: "FlatCache") -> None:
        """Add all of `other`'s counts (llama.cpp's merge)."""
        self.reserve(other.n_keys, other.n_pairs)
        merge_into(self.c, other.c)

    def clear(self) -> None:
        clear(self.c)

    @classmethod
    def from_table(cls, table: NgramTable | None, spare_keys: int = 0, spare_pairs: int = 0,
                   thresholds=STRICT) -> "FlatCache":
        """A cache holding a table's counts (e.g. an -lcd file), with room for more."""
        if table is None:
            return cls(spare_keys, spare_pairs, thresholds)
        cache = cls(len(table.ngrams) + spare_keys, len(table.pairs) + spare_pairs, thresholds)
        _load(cache.c, np.ascontiguousarray(table.ngrams, np.int32), np.ascontiguousarray(table.offsets, np.int64),
              np.ascontiguousarray(table.pairs, np.int32))
        return cache

    def to_table(self) -> NgramTable:
        """Canonical table of the counts, saturated at 2^31-1 (for --save-dynamic and tests)."""
        ngrams = np.empty((self.n_keys, 4), np.int32)
        offsets = np.empty(self.n_keys + 1, np.int64)
        pairs = np.empty((self.n_pairs, 2), np.int32)
        _export(self.c, ngrams, offsets, pairs, COUNT_MAX)
        return NgramTable.canonical(ngrams, offsets, pairs)

    def get(self, ngram: tuple[int, ...]) -> dict[int, int] | None:
        """{follower: count} of one n-gram (1..4 tokens), or None: the NgramCache interface, for tests."""
        key = tuple(ngram) + (-1,) * (4 - len(ngram))
        e = find(self.c, *key)
        if e < 0:
            return None
        out, p = {}, int(self.c.ent[e, HEAD])
        while p >= 0:
            out[int(self.c.pairs[p, TOK])] = int(self.c.pairs[p, CNT])
            p = int(self.c.pairs[p, NEXT])
        return out
