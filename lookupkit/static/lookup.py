"""The static cache's lookups, compiled: a 2-gram's span in the pairs, and one follower's count in a run.

Shared by `StaticCache` (single and batched lookups) and the compiled drafting (draft.rule and policy.chain,
through static.source), which call them from their own kernels. A corrupted constmap can map a 2-gram to a span outside the pairs: `span_of` reports it as
length -1 and never reads it; callers decide (StaticCache raises, the drafter treats it as a miss).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..formats.constmap import NOT_FOUND
from ..formats.constmap_probe import lookup
from ..formats.spans import MAX_FOLLOWERS, SPAN_BITS

_MASK = np.uint64(MAX_FOLLOWERS)


@njit(cache=True)
def span_of(t0, t1, seed, seg_len, seg_count_len, data, checks, n_pairs):
    """(offset, length) of the 2-gram's followers; (0, 0) if absent, (0, -1) if the span leaves the pairs."""
    v = lookup(t0, t1, seed, seg_len, seg_count_len, data, checks)
    if v == NOT_FOUND:
        return np.int64(0), np.int64(0)
    off = v >> np.uint64(SPAN_BITS)
    n = v & _MASK
    if n == 0 or off + n > n_pairs:
        return np.int64(0), np.int64(-1)
    return np.int64(off), np.int64(n)


@njit(cache=True)
def count_in(pairs, off, n, token):
    """Count of `token` in the run pairs[off:off+n] (sorted by token): fixed-length binary search, 0 if absent."""
    if n <= 0:
        return np.int64(0)
    base = off
    while n > 1:
        half = n >> 1
        base += half * np.int64(pairs[base + half, 0] <= token)
        n -= half
    return np.int64(pairs[base, 1]) if pairs[base, 0] == token else np.int64(0)


@njit(cache=True)
def spans_many(keys, seed, seg_len, scl, data, checks, n_pairs, offs, lens):
    bad = 0
    for i in range(keys.shape[0]):
        offs[i], lens[i] = span_of(keys[i, 0], keys[i, 1], seed, seg_len, scl, data, checks, n_pairs)
        bad += lens[i] < 0
    return bad


@njit(cache=True)
def counts_many(keys, tokens, pairs, seed, seg_len, scl, data, checks, n_pairs, out):
    bad = 0
    for i in range(keys.shape[0]):
        off, n = span_of(keys[i, 0], keys[i, 1], seed, seg_len, scl, data, checks, n_pairs)
        bad += n < 0
        out[i] = count_in(pairs, off, n, tokens[i])
    return bad


@njit(cache=True)
def first_unsorted_run(pairs, offsets):
    """Index of the first run whose tokens are not strictly ascending, or -1."""
    for r in range(offsets.shape[0] - 1):
        for j in range(offsets[r] + 1, offsets[r + 1]):
            if pairs[j, 0] <= pairs[j - 1, 0]:
                return r
    return -1


@njit(cache=True)
def gather_runs(pairs, offsets, order, out):
    """Copy the runs of `pairs` in `order` into `out` (to_table's canonical order)."""
    p = 0
    for r in order:
        for j in range(offsets[r], offsets[r + 1]):
            out[p, 0] = pairs[j, 0]
            out[p, 1] = pairs[j, 1]
            p += 1
