"""Where the sequence last held each of its m-grams, m in a set of lengths: the longest earlier match of its end.

The one in-sequence longest-match index: the policy's longest-match source (lengths MATCH_LENGTHS) and
`lookup-stats --source ngram` (replay.longest_match, every length from --ngram-max-match down to
--ngram-min-match) both draft from it. (counts.history_index is its twin over earlier sequences; the longest
match in a static cache's corpus is a suffix-array search, suffix.search.)

llama.cpp's context cache stops at 4-grams, and its 4-gram drafts are its worst (the least accepted on
WikiText-103): a 4-gram seen once says little. A long earlier match of the current suffix says much
more, and its length is the evidence the confidence table bins. The index maps (m, hash of an m-gram)
to the most recent end position of that m-gram whose follower is known (the index lags the sequence
by one token, so the current suffix never finds itself); a hit is verified token by token, so hash
collisions never propose a wrong follower. Open addressing in one int64 table (slot = position + 1,
0 empty), grown by Python between kernel calls, cleared per replay chunk. The longest length is probed
first and the first verified hit wins: the longest, then most recent, earlier match.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..kernels import GOLDEN, kernel, mix, same_run, token_at

MATCH_LENGTHS = np.array([32, 24, 16, 12, 8, 6, 5], np.int64)  # longest first: the first verified hit wins
# (32 and 24 tell a model that repeats itself, which greedy decoding of a small model does, from prose)

Index = namedtuple("Index", "slots n hashes lengths")
Index.__doc__ = """slots: int64 open-addressing table of (position + 1) << 8 | m (0 = empty); n: [entries];
hashes: uint64 scratch, one per length; lengths: int64, the m indexed, longest first (each below 256)."""


def new_index(cap: int = 1 << 12, lengths: np.ndarray = MATCH_LENGTHS) -> Index:
    """An empty index of the given lengths (strictly decreasing) with room for `cap` positions at a load of at most
    1/2."""
    lengths = np.ascontiguousarray(lengths, np.int64)
    return Index(np.full(1 << max(4, (2 * cap * len(lengths) - 1).bit_length()), 0, np.int64),
                 np.zeros(1, np.int64), np.zeros(len(lengths), np.uint64), lengths)


def ensure_room(index: Index, seq: np.ndarray, n_indexed: int, more: int) -> Index:
    """The index, or a larger one holding the same positions (re-indexed from `seq`, whose first n_indexed
    positions it holds), with room for `more` positions at a load of at most 1/2."""
    if 2 * (index.n[0] + more * len(index.lengths)) < len(index.slots):
        return index
    grown = new_index(2 * (n_indexed + more), index.lengths)
    index_positions(grown, seq, 1, n_indexed)
    return grown


@kernel
def _suffix_hashes(seq, n_seq, drafted, d0, length, lengths, out):
    """out[i] = hash of the last lengths[i] tokens before `length` (0 if there are fewer; lengths strictly
    decreasing): one backward pass over the longest suffix, each length's hash taken on the way (32 token reads
    for MATCH_LENGTHS, not 32 + 24 + 16 + ...)."""
    h = GOLDEN
    n_lengths = lengths.shape[0]
    for i in range(n_lengths):
        out[i] = np.uint64(0)
    i = n_lengths - 1  # the next length to reach: the shortest first
    for c in range(1, lengths[0] + 1):
        if length - c < 0:
            break
        h = mix(h ^ np.uint64(np.uint32(token_at(seq, n_seq, drafted, d0, length - c))) * GOLDEN)
        if lengths[i] == c:
            out[i] = mix(h + np.uint64(c))
            i -= 1


@kernel
def index_position(index, seq, i):
    """Record the m-grams ending at position i - 1 (their follower seq[i] is known now)."""
    end = i - 1
    mask = np.uint64(len(index.slots) - 1)
    _suffix_hashes(seq, seq.shape[0], seq, 0, end + 1, index.lengths, index.hashes)
    for r in range(index.lengths.shape[0]):
        m = index.lengths[r]
        if end + 1 < m:
            continue
        h = index.hashes[r]
        s = (h >> np.uint64(32)) & mask
        while True:
            v = index.slots[s]
            if v == 0:
                index.n[0] += 1
                break
            e, vm = (v >> 8) - 1, v & 255
            if vm == m and same_run(seq, e, end, m):
                break  # the same m-gram: keep the most recent end
            s = (s + np.uint64(1)) & mask
        index.slots[s] = ((end + 1) << 8) | m


@kernel
def index_positions(index, seq, start, stop):
    for i in range(start, stop):
        index_position(index, seq, i)


@kernel
def longest_match(index, seq, n_seq, drafted, d0, length):
    """(follower, m) of the longest indexed earlier match of the sequence's last m tokens (the real
    sequence seq[:n_seq] then drafted[d0:]), or (-1, 0). Matches end in the real sequence."""
    e, m = match_end(index, seq, n_seq, drafted, d0, length)
    if e < 0:
        return e, m
    return np.int64(token_at(seq, n_seq, drafted, d0, e + 1)), m


@kernel
def match_end(index, seq, n_seq, drafted, d0, length):
    """(end position, m) of the longest, then most recent, indexed earlier match of the sequence's last m tokens
    (as longest_match), or (-1, 0)."""
    if index.n[0] == 0:
        return np.int64(-1), np.int64(0)
    mask = np.uint64(len(index.slots) - 1)
    _suffix_hashes(seq, n_seq, drafted, d0, length, index.lengths, index.hashes)
    for r in range(index.lengths.shape[0]):
        m = index.lengths[r]
        if length < m:
            continue
        h = index.hashes[r]
        s = (h >> np.uint64(32)) & mask
        while index.slots[s] != 0:
            v = index.slots[s]
            e, vm = (v >> 8) - 1, v & 255
            if vm == m and e < length - 1:
                ok = True
                for j in range(m):
                    if seq[e - j] != token_at(seq, n_seq, drafted, d0, length - 1 - j):
                        ok = False
                        break
                if ok:
                    return np.int64(e), np.int64(m)
            s = (s + np.uint64(1)) & mask
    return np.int64(-1), np.int64(0)


@kernel
def clear_index(index):
    for s in range(index.slots.shape[0]):
        index.slots[s] = 0
    index.n[0] = 0
