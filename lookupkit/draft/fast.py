"""llama.cpp's drafting rule compiled with numba: the hot path of replays and of the Drafter.

Same rule as the readable `draft_ref` (docs/llama-lookup.md section 4 with lookupkit's rules: smallest
id wins ties, windows starting before position 0 miss, 64-bit arithmetic), over flat caches
(`flatcache`) and the static cache's arrays (its pairs and its constmap, looked up in place).

The precheck skips work without changing any draft. Before scoring an n-gram's followers:
* total < MIN_N, or 100 * (largest count) < MIN_P * total: the chosen token's count is at most the
  largest, so its share test must fail -> try the next n at once;
* only one follower (largest == total): the weighted argmax is that follower and its share is 100 %;
* the static cache holds no follower of the draft head's 2-gram: every weight is 1, so the weighted
  argmax is the largest count with the smallest id, which the cache keeps per n-gram, and it passes
  because the first test did not reject it.
Otherwise every follower is scored. `precheck=False` always scores (tests compare the two), and also
skips the caches' filter of n-grams that pass the first test (`flatcache.may_pass`).

The static cache never changes, so what the drafter learns about a 2-gram (where its followers are,
and what the static cache alone would draft) is kept in a `Memo` for the rest of the replay or of the
Drafter's life: a common 2-gram's constmap lookup and its scan of thousands of followers happen once.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..counts.flat import (BEST, CNT, HEAD, LAX, MAXC, NEXT, STRICT, TOK, TOTAL, check_thresholds, find_hashed, hash_key,
                        kernel, may_pass, mix)
from ..kernels import GOLDEN
from ..rules import STATIC, STATIC_MIN_N, STATIC_MIN_P, STATIC_WEIGHT
from ..static.lookup import count_in, span_of

STATIC_THR = (STATIC_MIN_N, STATIC_MIN_P)

Thresholds = namedtuple("Thresholds", "context dynamic static", defaults=(LAX, STRICT, STATIC_THR))
Thresholds.__doc__ = """Drafting thresholds: context and dynamic (2, 4) rows MIN_N, MIN_P by n-1; static
(MIN_N, MIN_P). The defaults are llama.cpp's; other values exist for sweeps."""

Static = namedtuple("Static", "pairs data checks params thr")
Static.__doc__ = """A static cache as numba sees it: pairs (m, 2) int32, the constmap's data and checks
(uint64), params = [seed, segment_length, segment_count * segment_length, m] (uint64), thr = [MIN_N,
MIN_P] when drafting from it alone (int64). No cache = empty data."""

Memo = namedtuple("Memo", "table n")
Memo.__doc__ = """What the drafter learnt about static 2-grams so far (the static cache never changes): an
open-addressing table of rows (packed 2-gram + 1, 0 = empty; lo; hi; the static cache's own choice:
-1 none, UNKNOWN not computed yet), the followers being pairs[lo:hi]; n = [rows used]."""
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
    return Memo(np.full((1 << max(4, (2 * cap - 1).bit_length()), 4), 0, np.int64), np.zeros(1, np.int64))  # touched


def grow_memo(memo: Memo) -> Memo:
    """The same memo with twice the room, once it is half full (call between kernel calls)."""
    if 4 * memo.n[0] < len(memo.table):
        return memo
    grown = new_memo(len(memo.table))
    _rehash_memo(grown, memo)
    return grown


@kernel
def memo_slot(memo, key):
    """Slot of `key` (packed 2-gram + 1) in the memo, or of the empty slot where it belongs."""
    mask = np.uint64(len(memo.table) - 1)
    i = (mix(np.uint64(key) * GOLDEN) >> np.uint64(32)) & mask
    while memo.table[i, 0] != 0 and memo.table[i, 0] != key:
        i = (i + np.uint64(1)) & mask
    return i


@kernel
def _rehash_memo(dst, src):
    for r in range(len(src.table)):
        if src.table[r, 0] != 0:
            i = memo_slot(dst, src.table[r, 0])
            for j in range(4):
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
    key = ((np.int64(np.uint32(t0)) << 32) | np.int64(np.uint32(t1))) + 1
    i = memo_slot(memo, key)
    if memo.table[i, 0] == key:
        return np.int64(i), memo.table[i, 1], memo.table[i, 2]
    off, n = span_of(t0, t1, st.params[0], st.params[1], st.params[2], st.data, st.checks, st.params[3])
    lo, hi = (off, off + n) if n > 0 else (np.int64(0), np.int64(0))
    if 2 * memo.n[0] >= len(memo.table):
        return np.int64(-1), lo, hi
    memo.table[i, 0], memo.table[i, 1], memo.table[i, 2], memo.table[i, 3] = key, lo, hi, UNKNOWN
    memo.n[0] += 1
    return np.int64(i), lo, hi


@kernel
def _greater(a_cp, a_cs, b_cp, b_cs):
    """a_cp * a_cs > b_cp * b_cs for non-negative int64 factors, exact even past 2^63."""
    if a_cp < 2147483648 and b_cp < 2147483648 and a_cs < 2147483648 and b_cs < 2147483648:
        return a_cp * a_cs > b_cp * b_cs
    return _mul128(a_cp, a_cs) > _mul128(b_cp, b_cs)


@kernel
def _mul128(a, b):
    """(high, low) 64-bit words of a * b for non-negative int64 a, b (tuples compare high first)."""
    a, b = np.uint64(a), np.uint64(b)
    m = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    lo_lo = (a & m) * (b & m)
    hi_lo = (a >> s32) * (b & m)
    lo_hi = (a & m) * (b >> s32)
    hi_hi = (a >> s32) * (b >> s32)
    cross = (lo_lo >> s32) + (hi_lo & m) + lo_hi
    return hi_hi + (hi_lo >> s32) + (cross >> s32), (cross << s32) | (lo_lo & m)


@kernel
def _score(c, e, sp, lo, hi):
    """Weighted argmax over row e's followers: (token, its count); smallest id on equal scores."""
    best_tok, best_cp, best_cs = -1, np.int64(0), np.int64(0)
    p = c.ent[e, HEAD]
    while p >= 0:
        tok = c.pairs[p, TOK]
        cp = c.pairs[p, CNT]
        s = count_in(sp, lo, hi - lo, tok) if hi > lo else np.int64(0)
        cs = STATIC_WEIGHT * s if s > 0 else np.int64(1)
        if _greater(cp, cs, best_cp, best_cs) or (tok < best_tok and not _greater(best_cp, best_cs, cp, cs)):
            best_tok, best_cp, best_cs = tok, cp, cs
        p = c.pairs[p, NEXT]
    return best_tok, best_cp


@kernel
def _get(seq, n_seq, drafted, d0, j):
    """Token j of the lookup sequence: the sequence itself, then what was drafted so far."""
    return seq[j] if j < n_seq else drafted[d0 + j - n_seq]


@kernel
def _head_part(st, memo, seq, n_seq, drafted, d0, length):
    """static_part of the 2-gram ending at the draft head (the last two tokens of the lookup sequence)."""
    return static_part(st, memo, _get(seq, n_seq, drafted, d0, length - 2), _get(seq, n_seq, drafted, d0, length - 1))


@kernel
def _try_primary(c, seq, n_seq, drafted, d0, k, st, memo, part, precheck):
    """First n (4..1) whose chosen follower passes: (token, n), or (-1, 0).

    part = (memo row, lo, hi) of the static 2-gram ending at the draft head; lo < 0 until looked up.
    Returns it too, so the caller looks it up at most once per position.
    """
    length = n_seq + k
    for n in range(4, 0, -1):
        if length - n < 0:
            continue  # the window starts before position 0: a miss (lookupkit's rule)
        b = length - n
        k0 = _get(seq, n_seq, drafted, d0, b)
        k1 = _get(seq, n_seq, drafted, d0, b + 1) if n >= 2 else -1
        k2 = _get(seq, n_seq, drafted, d0, b + 2) if n >= 3 else -1
        k3 = _get(seq, n_seq, drafted, d0, b + 3) if n >= 4 else -1
        h = hash_key(k0, k1, k2, k3)
        if precheck and not may_pass(c, h):
            continue  # absent, or no follower can pass (the filter of the precheck below)
        e = find_hashed(c, h, k0, k1, k2, k3)
        if e < 0:
            continue
        total = c.ent[e, TOTAL]
        min_n, min_p = c.thr[0, n - 1], c.thr[1, n - 1]
        if precheck:
            if total < min_n or 100 * c.ent[e, MAXC] < min_p * total:
                continue
            if c.ent[e, MAXC] == total:
                return c.ent[e, BEST], n, part
        if part[1] < 0:
            part = _head_part(st, memo, seq, n_seq, drafted, d0, length)
        if precheck and part[2] == part[1]:
            return c.ent[e, BEST], n, part
        tok, cp = _score(c, e, st.pairs, part[1], part[2])
        if total < min_n or 100 * cp < min_p * total:
            continue
        return tok, n, part
    return -1, 0, part


@kernel
def _try_static(st, memo, part):
    """The static cache alone: its most frequent follower (smallest id on ties) if it passes, else -1."""
    row, lo, hi = part
    if row >= 0 and memo.table[row, 3] != UNKNOWN:
        return memo.table[row, 3]
    best_tok, best, total = -1, np.int64(0), np.int64(0)
    for j in range(lo, hi):
        cnt = np.int64(st.pairs[j, 1])
        tok = st.pairs[j, 0]
        if cnt > best or (cnt == best and tok < best_tok):
            best_tok, best = tok, cnt
        total += cnt
    if hi == lo or total < st.thr[0] or 100 * best < st.thr[1] * total:
        best_tok = -1
    if row >= 0:
        memo.table[row, 3] = best_tok
    return best_tok


@kernel
def draft(seq, n_seq, n_draft, ctx, dyn, st, memo, precheck, drafted, sources, d0):
    """Draft up to n_draft tokens after seq[:n_seq] into drafted[d0:], sources[d0:]; returns how many.

    seq[n_seq-1] is the token just sampled. Context (lax thresholds), then dynamic (strict), then the
    static cache alone, per position; stops at the first position where all three fail.
    """
    if n_seq < 2:
        return 0
    k = 0
    while k < n_draft:
        part = (np.int64(-1), np.int64(-1), np.int64(-1))
        tok, n, part = _try_primary(ctx, seq, n_seq, drafted, d0, k, st, memo, part, precheck)
        code = n  # trace codes: context n-gram of size n
        if tok < 0:
            tok, n, part = _try_primary(dyn, seq, n_seq, drafted, d0, k, st, memo, part, precheck)
            code = 4 + n  # dynamic n-gram of size n
        if tok < 0:
            if part[1] < 0:
                part = _head_part(st, memo, seq, n_seq, drafted, d0, n_seq + k)
            tok = _try_static(st, memo, part)
            code = STATIC
        if tok < 0:
            break
        drafted[d0 + k] = tok
        sources[d0 + k] = code
        k += 1
    return k


def draft_tokens(seq: np.ndarray, n_draft: int, ctx, dyn, st: Static, memo: Memo,
                 precheck: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One draft from Python: (tokens int32, source codes int8) after `seq` (int32), caches untouched.

    ctx and dyn are flatcache.Cache arrays (context thresholds lax, dynamic strict).
    """
    drafted = np.empty(n_draft, np.int32)
    sources = np.empty(n_draft, np.int8)
    k = draft(seq, len(seq), n_draft, ctx, dyn, st, memo, precheck, drafted, sources, 0)
    return drafted[:k], sources[:k]
