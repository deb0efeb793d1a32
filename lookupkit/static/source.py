"""The static cache as both compiled drafting rules read it: its arrays, and a memo of its 2-grams.

llama.cpp's rule (draft.rule) weights followers by the static counts of the draft head's 2-gram and
drafts from the static cache alone when nothing else passes; lookupkit's policy (policy.chain) takes
the 2-gram's top follower, share and total as one candidate. Both look a 2-gram up the same way: the
static cache never changes, so what a drafter learns about a 2-gram (where its followers are, its top
follower and total) is kept in a `Memo` for the rest of the replay or of the Drafter's life, and a
common 2-gram's constmap lookup and its scan of thousands of followers happen once.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..counts.flat import check_thresholds
from ..kernels import GOLDEN, kernel, mix, token_at
from ..rules import STATIC_MIN_N, STATIC_MIN_P
from .lookup import span_of

STATIC_THR = (STATIC_MIN_N, STATIC_MIN_P)

Static = namedtuple("Static", "pairs data checks params thr")
Static.__doc__ = """A static cache as numba sees it: pairs (m, 2) int32, the constmap's data and checks
(uint64), params = [seed, segment_length, segment_count * segment_length, m] (uint64), thr = [MIN_N,
MIN_P] when drafting from it alone (int64). No cache = empty data."""

Memo = namedtuple("Memo", "table n")
Memo.__doc__ = """What the drafter learnt about static 2-grams so far: an open-addressing table of rows
(KEY: pair_key of the 2-gram, 0 = empty; LO, HI: its followers are pairs[LO:HI]; TOP: its most frequent
follower, -1 none, UNKNOWN not computed yet; TOP_COUNT; TOTAL); n = [rows used]."""
KEY, LO, HI, TOP, TOP_COUNT, TOTAL = range(6)
UNKNOWN = -2


def static_arrays(static, thr=STATIC_THR) -> Static:
    """The arrays of a StaticCache (anything with `.pairs` and `.cmap`), or an empty stand-in for None."""
    thr = check_thresholds(thr, (2,))
    if static is None:
        empty = np.zeros(0, np.uint64)
        return Static(np.zeros((0, 2), np.int32), empty, empty, np.zeros(4, np.uint64), thr)
    cmap = static.cmap
    params = np.array([*cmap.hash_args, len(static.pairs)], np.uint64)
    return Static(static.pairs, cmap.data, cmap.checks, params, thr)


def new_memo(cap: int = 1 << 16) -> Memo:
    """Room for cap 2-grams (the table is twice as large: the load factor stays <= 1/2)."""
    return Memo(np.full((1 << max(4, (2 * cap - 1).bit_length()), 6), 0, np.int64), np.zeros(1, np.int64))  # touched


def grow_memo(memo: Memo) -> Memo:
    """The same memo with twice the room, once it is half full (call between kernel calls)."""
    if 4 * memo.n[0] < len(memo.table):
        return memo
    grown = new_memo(len(memo.table))
    _rehash_memo(grown, memo)
    return grown


@kernel
def pair_key(t0, t1):
    """A 2-gram packed into one non-zero int64: the memo's key (0 marks an empty row)."""
    return ((np.int64(np.uint32(t0)) << 32) | np.int64(np.uint32(t1))) + 1


@kernel
def memo_slot(memo, key):
    """Slot of `key` (pair_key) in the memo, or of the empty slot where it belongs."""
    mask = np.uint64(len(memo.table) - 1)
    i = (mix(np.uint64(key) * GOLDEN) >> np.uint64(32)) & mask
    while memo.table[i, KEY] != 0 and memo.table[i, KEY] != key:
        i = (i + np.uint64(1)) & mask
    return i


@kernel
def _rehash_memo(dst, src):
    for r in range(len(src.table)):
        if src.table[r, KEY] != 0:
            i = memo_slot(dst, src.table[r, KEY])
            for j in range(src.table.shape[1]):
                dst.table[i, j] = src.table[r, j]
    dst.n[0] = src.n[0]


@kernel
def static_part(st, memo, t0, t1):
    """(memo slot, lo, hi): the static followers of (t0, t1) are pairs[lo:hi] (lo == hi: none).

    A span the constmap gives outside the pairs (a corrupted file) is a miss, never read. The slot is
    -1 when the memo is full (Python grows it between kernel calls).
    """
    if st.data.shape[0] == 0:
        return np.int64(-1), np.int64(0), np.int64(0)
    key = pair_key(t0, t1)
    i = memo_slot(memo, key)
    if memo.table[i, KEY] == key:
        return np.int64(i), memo.table[i, LO], memo.table[i, HI]
    off, n = span_of(t0, t1, st.params[0], st.params[1], st.params[2], st.data, st.checks, st.params[3])
    lo, hi = (off, off + n) if n > 0 else (np.int64(0), np.int64(0))
    if 2 * memo.n[0] >= len(memo.table):
        return np.int64(-1), lo, hi
    memo.table[i, KEY], memo.table[i, LO], memo.table[i, HI], memo.table[i, TOP] = key, lo, hi, UNKNOWN
    memo.n[0] += 1
    return np.int64(i), lo, hi


@kernel
def head_part(st, memo, seq, n_seq, drafted, d0, length):
    """static_part of the 2-gram ending at the draft head (the lookup sequence's tokens length-2, length-1)."""
    return static_part(st, memo, token_at(seq, n_seq, drafted, d0, length - 2),
                       token_at(seq, n_seq, drafted, d0, length - 1))


@kernel
def static_top(st, memo, part):
    """(token, its count, total) of the most frequent follower of part's 2-gram, smallest id on ties;
    (-1, 0, 0) if it has none. Memoised in part's memo row (part = static_part's answer)."""
    row, lo, hi = part
    if row >= 0 and memo.table[row, TOP] != UNKNOWN:
        return memo.table[row, TOP], memo.table[row, TOP_COUNT], memo.table[row, TOTAL]
    best_tok, best, total = np.int64(-1), np.int64(0), np.int64(0)
    for j in range(lo, hi):
        cnt = np.int64(st.pairs[j, 1])
        tok = np.int64(st.pairs[j, 0])
        if cnt > best or (cnt == best and tok < best_tok):
            best_tok, best = tok, cnt
        total += cnt
    if row >= 0:
        memo.table[row, TOP], memo.table[row, TOP_COUNT], memo.table[row, TOTAL] = best_tok, best, total
    return best_tok, best, total
