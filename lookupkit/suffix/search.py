"""Search the suffix index: the longest suffix of a context that occurs in the corpus, and the run of
tokens its occurrences agree on, with each step's evidence (compiled; the readable definition is in
reference.py, and tests hold the two equal). The longest match anywhere in a corpus, through its suffix
array; the longest earlier match within the sequence is counts.match_index's hashed index.

longest_match: the occurrence of a pattern is monotone in its length (a suffix of an occurring suffix
occurs), so the longest occurring suffix of the last max_len tokens is found by probing the whole window
first (where text is being rewritten it occurs: one probe), then galloping (1, 2, 4, ...) and bisecting on
the length. Each probe narrows the SA range one token at a time: the first token from the first-token
table, the second from the sample of second tokens (a contiguous array), each further one by a binary
search for its block's start and a gallop to the block's end (blocks are small); a probe that fails stops
where its pattern stops occurring, which on prose is after a few tokens.

continuation: the rows of a range are sorted by the token after the match, so each next token's
occurrences are one block. A token with share >= min_share of the N rows fills a block of at least
ceil(min_share * N) rows, so it holds one of the rows lo, lo + step, ... (step = that block size): only
those ~1/min_share tokens are counted (galloping out from the sampled row both ways), exactly, whatever N.

Damage: StaticCache.open checks the sections' shapes, not their content (verify does). So that a damaged
file cannot make the kernels read outside the arrays (numba checks no bounds), every text read goes through
`token_at` (a position outside the text reads as SEPARATOR: no pattern token matches it, and a run stops
there) and the first-token table's rows are clamped to [0, n]: garbage answers, never a stray read.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import InputError
from ..formats.lkc_suffix import SAMPLE, SEPARATOR
from ..kernels import kernel
from .build import SuffixIndex

DEFAULT_MAX_LEN = 64


class Run(NamedTuple):
    """The continuation: tokens[i] followed the match + tokens[:i] in counts[i] of its totals[i] occurrences."""

    tokens: np.ndarray
    counts: np.ndarray
    totals: np.ndarray


@kernel
def token_at(text, sa, row, off):
    """The token `off` after the suffix of SA row `row` (0 <= row < n); SEPARATOR if a damaged SA entry puts it
    outside the text (an intact index never does: a pattern holds no SEPARATOR, so its reads stop at one)."""
    p = np.uint64(np.int64(sa[row]) + off)  # (unsigned: p < 0 or p >= n is one comparison)
    if p >= np.uint64(text.shape[0]):
        return np.int32(SEPARATOR)
    return text[p]  # (an unsigned index: numba adds no negative-index wraparound to the read)


@kernel
def bound(text, sa, lo, hi, off, c, upper):
    """First row j in [lo, hi) whose token at offset `off` is >= c (> c if upper); rows sorted there."""
    while lo < hi:
        mid = (lo + hi) >> 1
        v = token_at(text, sa, mid, off)
        if v < c or (upper and v == c):
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel
def block_end(text, sa, j, hi, off, c):
    """End of the block of rows from j (whose token at `off` is c) holding c, searched outward from j
    (galloping: a block is usually far smaller than its range); rows [j, hi) sorted at off."""
    step = np.int64(1)
    a = j  # text at row a is c
    while a + step < hi and token_at(text, sa, a + step, off) == c:
        a += step
        step *= 2
    return bound(text, sa, a + 1, min(a + step, hi), off, c, True)


@kernel
def block_start(text, sa, lo, j, off, c):
    """Start of the block of rows ending at j (whose token at `off` is c) holding c, galloping down to lo."""
    step = np.int64(1)
    b = j
    while b - step >= lo and token_at(text, sa, b - step, off) == c:
        b -= step
        step *= 2
    return bound(text, sa, max(b - step + 1, lo), b, off, c, False)


@kernel
def second_bound(text, sa, second, lo, hi, c):
    """First row in [lo, hi) (rows sharing their first token) whose second token is >= c: a binary search on
    the contiguous sample second[k] = second token of row k * SAMPLE, then on the <= SAMPLE rows left."""
    k0 = (lo + SAMPLE - 1) // SAMPLE
    a, b = k0, (hi - 1) // SAMPLE + 1  # sampled rows k0 .. b - 1 lie in [lo, hi)
    while a < b:
        mid = (a + b) >> 1
        if second[mid] < c:
            a = mid + 1
        else:
            b = mid
    start = lo if a == k0 else (a - 1) * SAMPLE + 1
    stop = min(hi, a * SAMPLE)
    return bound(text, sa, start, max(start, stop), 1, c, False)


@kernel
def find(text, sa, starts, second, ctx, s, e):
    """SA rows [lo, hi) of the occurrences of ctx[s:e] (e > s, ids >= 0); lo == hi when it does not occur."""
    t = ctx[s]
    if t + 2 >= starts.shape[0]:
        return np.int64(0), np.int64(0)
    n = np.int64(sa.shape[0])
    lo, hi = min(max(np.int64(starts[t + 1]), 0), n), min(max(np.int64(starts[t + 2]), 0), n)  # (damage: in [0, n])
    if e - s > 1 and lo < hi:  # the second token from the sample: the widest range, the most misses saved
        c = ctx[s + 1]
        lo, hi = second_bound(text, sa, second, lo, hi, c), second_bound(text, sa, second, lo, hi, c + 1)
    for j in range(2, e - s):
        if lo >= hi:
            break
        c = ctx[s + j]
        lo = bound(text, sa, lo, hi, j, c, False)
        if lo < hi and token_at(text, sa, lo, j) == c:
            hi = block_end(text, sa, lo, hi, j, c)
        else:
            hi = lo
    return lo, hi


@kernel
def longest_match_kernel(text, sa, starts, second, ctx, n_ctx, max_len):
    """(length, lo, hi) of the longest occurring suffix of ctx[:n_ctx], at most max_len long. A drafter that
    called it one token earlier passes max_len = min(limit, previous length + 1): a match grows by at most
    one token per token appended, and the first probe (the whole window) then mostly succeeds."""
    n = text.shape[0]
    top = min(n_ctx, max_len)
    good, glo, ghi = 0, np.int64(0), np.int64(n)
    if n == 0 or top <= 0:
        return good, glo, ghi
    lo, hi = find(text, sa, starts, second, ctx, n_ctx - top, n_ctx)
    if hi > lo:  # the whole window occurs (code being rewritten): one probe
        return top, lo, hi
    bad = top
    m = 1
    while m < top:  # gallop: 1, 2, 4, ... below top
        lo, hi = find(text, sa, starts, second, ctx, n_ctx - m, n_ctx)
        if hi <= lo:
            bad = m
            break
        good, glo, ghi = m, lo, hi
        m *= 2
    while bad - good > 1:
        m = (good + bad) // 2
        lo, hi = find(text, sa, starts, second, ctx, n_ctx - m, n_ctx)
        if hi > lo:
            good, glo, ghi = m, lo, hi
        else:
            bad = m
    return good, glo, ghi


@kernel
def continuation_kernel(text, sa, m, lo, hi, max_tokens, min_share, tokens, counts, totals):
    """Fill tokens/counts/totals with the agreed run after a match of length m at rows [lo, hi); its length."""
    k = 0
    while k < max_tokens and hi > lo:
        total = hi - lo
        need = min_share * total
        step = max(np.int64(1), np.int64(math.ceil(need)))
        best_t, best_c, best_lo = SEPARATOR, np.int64(0), lo
        prev = SEPARATOR - 1
        j = lo
        while j < hi:
            t = token_at(text, sa, j, m)
            if t != prev:
                a = block_start(text, sa, lo, j, m, t)
                b = block_end(text, sa, j, hi, m, t)
                if b - a > best_c:  # sampled in increasing id order: a tie keeps the smaller id
                    best_t, best_c, best_lo = t, b - a, a
                prev = t
            j += step
        if best_c == 0 or best_c < need or best_t == SEPARATOR:
            break
        tokens[k], counts[k], totals[k] = best_t, best_c, total
        k += 1
        lo, hi = best_lo, best_lo + best_c
        m += 1
    return k


def _context(context: Sequence[int]) -> np.ndarray:
    ctx = np.asarray(context, dtype=np.int64).reshape(-1)
    if ctx.size and ctx.min() < 0:
        raise InputError(f"a context holds token ids >= 0, got {int(ctx.min())}")
    return ctx


def _is_match(index: SuffixIndex, length: int, lo: int, hi: int) -> bool:
    """Whether rows [lo, hi) share their first `length` tokens, none a SEPARATOR: checking the first and the
    last row suffices, the rows between being sorted."""
    if hi == lo or length == 0:
        return True
    a, b = int(index.sa[lo]), int(index.sa[hi - 1])
    if min(a, b) < 0 or max(a, b) + length >= index.n:
        return False
    first = index.text[a:a + length]
    return bool(np.array_equal(first, index.text[b:b + length]) and first.min() >= 0)


def longest_match(index: SuffixIndex, context: Sequence[int], max_len: int = DEFAULT_MAX_LEN) -> tuple[int, int, int]:
    """(length, lo, hi): the longest suffix of `context` (at most max_len tokens) that occurs in the corpus,
    and the SA rows [lo, hi) of its occurrences; (0, 0, n) when not even its last token occurs."""
    if max_len < 1:
        raise InputError(f"max_len must be at least 1, got {max_len}")
    ctx = _context(context)
    m, lo, hi = longest_match_kernel(index.text, index.sa, index.starts, index.second, ctx, len(ctx), int(max_len))
    return int(m), int(lo), int(hi)


def continuation(index: SuffixIndex, length: int, lo: int, hi: int, max_tokens: int = 16,
                 min_share: float = 0.5) -> Run:
    """The run of next tokens the occurrences (rows [lo, hi) of a match of `length` tokens) agree on: at each
    step the most frequent next token (ties: the smaller id) while its share >= min_share, not at a document
    end; with its count and the step's total as evidence."""
    if not 0.0 < min_share <= 1.0:
        raise InputError(f"min_share must be in (0, 1], got {min_share}")
    if max_tokens < 0 or not (0 <= lo <= hi <= index.n and length >= 0 and _is_match(index, length, lo, hi)):
        raise InputError(f"rows [{lo}, {hi}) of a match of length {length} are not what longest_match returns "
                         f"on this index (or max_tokens {max_tokens} < 0)")
    out = (np.empty(max_tokens, np.int32), np.empty(max_tokens, np.int64), np.empty(max_tokens, np.int64))
    k = continuation_kernel(index.text, index.sa, int(length), int(lo), int(hi), int(max_tokens), float(min_share), *out)
    return Run(*(a[:k].copy() for a in out))
