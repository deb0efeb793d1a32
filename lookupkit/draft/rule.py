"""llama.cpp's drafting rule compiled with numba: the hot path of replays and of the Drafter.

Same rule as the readable `draft.rule_reference` (llama.cpp's common_ngram_cache_draft with
lookupkit's rules: smallest id wins ties, windows starting before position 0 miss, 64-bit arithmetic),
over flat caches (`counts.flat`) and the static cache's arrays (its pairs and its constmap, looked up in
place: static.source).

The precheck skips work without changing any draft. Before scoring an n-gram's followers:
* total < MIN_N, or 100 * (largest count) < MIN_P * total: the chosen token's count is at most the
  largest, so its share test must fail -> try the next n at once;
* only one follower (largest == total): the weighted argmax is that follower and its share is 100 %;
* the static cache holds no follower of the draft head's 2-gram: every weight is 1, so the weighted
  argmax is the largest count with the smallest id, which the cache keeps per n-gram, and it passes
  because the first test did not reject it.
Otherwise every follower is scored. `precheck=False` always scores (tests compare the two), and also
skips the caches' filter of n-grams that pass the first test (`counts.flat.may_pass`).
What the drafter learns about the static cache's 2-grams is memoised (static.source).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..counts.flat import BEST, CNT, HEAD, LAX, MAXC, NEXT, STRICT, TOK, TOTAL, find_hashed, hash_key, may_pass
from ..kernels import kernel, ngram_before
from ..rules import NGRAM_MAX, NGRAM_MIN, STATIC, STATIC_WEIGHT
from ..static.lookup import count_in
from ..static.source import STATIC_THR, Memo, Static, head_part, static_top

Thresholds = namedtuple("Thresholds", "context dynamic static", defaults=(LAX, STRICT, STATIC_THR))
Thresholds.__doc__ = """Drafting thresholds: context and dynamic (2, 4) rows MIN_N, MIN_P by n-1; static
(MIN_N, MIN_P). The defaults are llama.cpp's; other values exist for sweeps."""


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
def _try_primary(c, seq, n_seq, drafted, d0, k, st, memo, part, precheck):
    """First n (NGRAM_MAX..NGRAM_MIN) whose chosen follower passes: (token, n), or (-1, 0).

    part = (memo row, lo, hi) of the static 2-gram ending at the draft head; lo < 0 until looked up.
    Returns it too, so the caller looks it up at most once per position.
    """
    length = n_seq + k
    for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
        if length - n < 0:
            continue  # the window starts before position 0: a miss (lookupkit's rule)
        k0, k1, k2, k3 = ngram_before(seq, n_seq, drafted, d0, length, n)
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
            part = head_part(st, memo, seq, n_seq, drafted, d0, length)
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
    tok, best, total = static_top(st, memo, part)
    if tok < 0 or total < st.thr[0] or 100 * best < st.thr[1] * total:
        return np.int64(-1)
    return tok


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
                part = head_part(st, memo, seq, n_seq, drafted, d0, n_seq + k)
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

    ctx and dyn are counts.flat.Cache arrays (context thresholds lax, dynamic strict).
    """
    drafted = np.empty(n_draft, np.int32)
    sources = np.empty(n_draft, np.int8)
    k = draft(seq, len(seq), n_draft, ctx, dyn, st, memo, precheck, drafted, sources, 0)
    return drafted[:k], sources[:k]
