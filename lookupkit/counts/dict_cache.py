"""Mutable n-gram caches (context and dynamic): llama.cpp's update and merge, written plainly.

`NgramCache` is the readable, dict-based reference of llama.cpp's `common_ngram_cache`: a map from
n-grams of 1..4 tokens (unpadded tuples, so sizes never collide) to {follower token: count}. Counts are
exact Python integers while in memory (llama.cpp's int32 sums can wrap) and saturate at 2^31-1 when
written out. `merge_tables` is the same merge for whole tables, vectorised, for files of any size.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ..rules import COUNT_MAX, NGRAM_MAX, NGRAM_MIN
from .tables import NgramTable


class NgramCache:
    """n-gram (tuple of 1..4 token ids) -> {follower token: count}, as llama.cpp's unordered maps."""

    def __init__(self) -> None:
        self.parts: dict[tuple[int, ...], dict[int, int]] = {}

    def __len__(self) -> int:
        return len(self.parts)

    def get(self, ngram: tuple[int, ...]) -> dict[int, int] | None:
        """The followers of one n-gram, or None."""
        return self.parts.get(ngram)

    def find(self, t0: int, t1: int) -> tuple[list[int], list[int]]:
        """Followers of a 2-gram as (tokens, counts) sorted by token: the static-cache interface."""
        part = self.parts.get((t0, t1), {})
        toks = sorted(part)
        return toks, [part[t] for t in toks]

    def update(self, inp: Sequence[int], nmin: int = NGRAM_MIN, nmax: int = NGRAM_MAX, nnew: int | None = None) -> None:
        """llama.cpp's common_ngram_cache_update: count the targets among the last `nnew` positions.

        Each position i >= n is the target of the n-gram inp[i-n:i]. Valid incrementally only when
        `inp` grows append-only (nnew = 1 after each append equals one call with nnew = len(inp)).
        """
        if not NGRAM_MIN <= nmin <= nmax <= NGRAM_MAX:
            raise ValueError(f"n-gram sizes must satisfy 1 <= nmin <= nmax <= 4, got {nmin}..{nmax}")
        length = len(inp)
        nnew = length if nnew is None else nnew
        for n in range(nmin, nmax + 1):
            for i in range(max(length - nnew, n), length):
                part = self.parts.setdefault(tuple(inp[i - n:i]), {})
                part[inp[i]] = part.get(inp[i], 0) + 1

    def merge(self, other: "NgramCache") -> None:
        """llama.cpp's common_ngram_cache_merge: add `other`'s counts into this cache."""
        for ngram, add in other.parts.items():
            part = self.parts.setdefault(ngram, {})
            for tok, count in add.items():
                part[tok] = part.get(tok, 0) + count

    def clear(self) -> None:
        self.parts.clear()

    @classmethod
    def from_table(cls, table: NgramTable) -> "NgramCache":
        cache = cls()
        cache.parts = table.to_dict()
        return cache

    def to_table(self) -> NgramTable:
        """Canonical table (n-grams and followers sorted); counts saturate at 2^31-1."""
        ngrams, offsets, pairs = [], [0], []
        for ngram, part in self.parts.items():
            ngrams.append(tuple(ngram) + (-1,) * (NGRAM_MAX - len(ngram)))
            pairs.extend((tok, min(count, COUNT_MAX)) for tok, count in part.items())
            offsets.append(len(pairs))
        return NgramTable.canonical(np.array(ngrams, dtype=np.int32).reshape(-1, 4),
                                    np.array(offsets, dtype=np.int64), np.array(pairs, dtype=np.int32).reshape(-1, 2))


def merge_tables(tables: Iterable[NgramTable]) -> NgramTable:
    """Counts of the same (n-gram, follower) added across tables, saturating at 2^31-1; canonical result."""
    tables = list(tables)
    ngrams = np.concatenate([t.ngrams for t in tables]).reshape(-1, 4)
    lengths = np.concatenate([np.diff(t.offsets) for t in tables]).astype(np.int64)
    pairs = np.concatenate([t.pairs for t in tables]).reshape(-1, 2)
    if len(ngrams) == 0:
        return NgramTable(np.empty((0, 4), np.int32), np.zeros(1, np.int64), np.empty((0, 2), np.int32))
    order = np.lexsort(ngrams.T[::-1])
    sorted_ngrams = ngrams[order]
    new_key = np.ones(len(order), dtype=bool)
    new_key[1:] = np.any(sorted_ngrams[1:] != sorted_ngrams[:-1], axis=1)
    group = np.empty(len(order), dtype=np.int64)
    group[order] = np.cumsum(new_key) - 1  # group id of each input n-gram
    pair_group = np.repeat(group, lengths)
    combined = (pair_group << 32) | (pairs[:, 0].astype(np.int64) + 2**31)  # sorts by (group, signed token)
    porder = np.argsort(combined, kind="stable")
    combined = combined[porder]
    starts = np.flatnonzero(np.r_[True, combined[1:] != combined[:-1]])
    counts = np.add.reduceat(pairs[porder, 1].astype(np.int64), starts) if len(starts) else np.empty(0, np.int64)
    out_pairs = np.empty((len(starts), 2), dtype=np.int32)
    out_pairs[:, 0] = (combined[starts] & 0xFFFFFFFF) - 2**31
    out_pairs[:, 1] = np.minimum(counts, COUNT_MAX)
    n_groups = int(new_key.sum())
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(combined[starts] >> 32, minlength=n_groups), out=offsets[1:])
    return NgramTable(np.ascontiguousarray(sorted_ngrams[new_key]), offsets, out_pairs)
