"""The static cache's suffix index as a source of lookupkit's policy: one lookup per draft call, a run of tokens.

At the first step of a call the source finds the longest suffix of the real sequence (at most MAX_LEN
tokens) that occurs in the corpus (lookupkit.suffix.search) and the run of next tokens its occurrences
agree on (each step's most frequent next token while its share is at least MIN_SHARE). Run token k is the
source's candidate at chain step k as long as the chain drafted so far is the run's prefix; its evidence
for the confidence table is the length of the context it extends (match length + k, in LENGTH_EDGES
bins), the count of occurrences it followed (the table's total bins) and whether those were unanimous
(one table row each: on code a long unique match is almost always accepted, on prose a count of 1 seldom).

A match grows by at most one token per token appended to the sequence, so the lookup after the previous
one is bounded by that (the search's first probe then mostly succeeds, suffix.search); `reset` forgets
the previous lookup when a sequence starts over. A table may leave the source's shortest length bins
unlearnt (zero: `replay.tuning` does so where short matches do not pay on held-out text): the source then
proposes only after matches of at least min_match tokens, and a call whose bound is below min_match skips
the search, keeping the bound itself as the upper bound the next call grows from.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..kernels import kernel
from ..suffix.search import DEFAULT_MAX_LEN, continuation_kernel, longest_match_kernel

MAX_LEN = DEFAULT_MAX_LEN  # the longest suffix searched (tokens)
MIN_SHARE = 0.5  # a run step needs this share of the occurrences (and, with it, a majority)
# A match of length L (the run's k-th token: L + k) falls in the last bin whose edge is <= it.
LENGTH_EDGES = np.array([1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64], np.int64)
PREV_N, PREV_LEN, RUN_LEN, ALIVE, MATCH_LEN = range(5)  # state slots

Suffix = namedtuple("Suffix", "text sa starts second max_len min_match state run")
Suffix.__doc__ = """A suffix index as the compiled policy reads it: text, sa, starts, second
(lookupkit.suffix.SuffixIndex's arrays); max_len (int64) the longest suffix searched; min_match (int64)
the shortest match the source drafts after; state int64
[n_seq of the previous lookup (0: none), its match length, the run's length, whether the chain still
follows the run, the match length of this call]; run (3, cap) int64 rows tokens, counts, totals of the
current call's run. No index: an empty text (every lookup misses)."""


def no_suffix() -> Suffix:
    empty = np.zeros(0, np.int32)
    return Suffix(empty, empty, np.zeros(2, np.int32), empty, np.int64(MAX_LEN), np.int64(1), np.zeros(5, np.int64),
                  np.zeros((3, 1), np.int64))


def suffix_arrays(index, cap: int, max_len: int = MAX_LEN, min_match: int = 1) -> Suffix:
    """A Suffix over `index` (a SuffixIndex, or None: the empty stand-in) for runs of up to cap tokens after
    matches of min_match..max_len tokens."""
    if index is None:
        return no_suffix()
    return Suffix(index.text, index.sa, index.starts, index.second, np.int64(max_len), np.int64(max(1, min_match)),
                  np.zeros(5, np.int64), np.zeros((3, max(1, cap)), np.int64))


def min_match_of(rows: np.ndarray) -> int:
    """The shortest match a table's suffix rows (2, length bins, total bins) draft after: the edge of their
    first length bin holding a probability (MAX_LEN + 1 if none: never)."""
    learnt = np.flatnonzero(np.any(np.asarray(rows) > 0, axis=(0, 2)))
    return int(LENGTH_EDGES[learnt[0]]) if len(learnt) else MAX_LEN + 1


def fresh(sx: Suffix) -> Suffix:
    """The same index with state of its own (a replay or a Drafter must not share a previous lookup)."""
    return sx._replace(state=np.zeros(5, np.int64), run=np.zeros_like(sx.run))


def reset(sx: Suffix) -> None:
    """Forget the previous lookup: the next sequence is not an extension of the last one."""
    sx.state[:] = 0


@kernel
def length_bin(length):
    b = 0
    while b + 1 < LENGTH_EDGES.shape[0] and LENGTH_EDGES[b + 1] <= length:
        b += 1
    return b


@kernel
def look_up(sx, seq, n_seq, n_run):
    """The call's lookup after seq[:n_seq]: the match and its run (at most n_run tokens) into sx.state / sx.run."""
    st = sx.state
    bound = sx.max_len
    if st[PREV_N] > 0 and n_seq >= st[PREV_N]:
        bound = min(bound, st[PREV_LEN] + n_seq - st[PREV_N])
    st[RUN_LEN] = 0
    st[ALIVE] = 0
    if bound < sx.min_match:  # no match reaches min_match: no search, and `bound` stays an upper bound
        st[PREV_N], st[PREV_LEN], st[MATCH_LEN] = n_seq, bound, 0
        return
    m, lo, hi = longest_match_kernel(sx.text, sx.sa, sx.starts, sx.second, seq, n_seq, bound)
    st[PREV_N], st[PREV_LEN], st[MATCH_LEN] = n_seq, m, m
    if m >= sx.min_match:
        st[RUN_LEN] = continuation_kernel(sx.text, sx.sa, m, lo, hi, min(n_run, sx.run.shape[1]), MIN_SHARE, sx.run[0],
                                          sx.run[1], sx.run[2])
    st[ALIVE] = 1 if st[RUN_LEN] > 0 else 0


@kernel
def suffix_candidate(sx, seq, n_seq, drafted, d0, k, n_run):
    """(token, length of the context it extends, count, total) of run token k after seq[:n_seq] +
    drafted[d0:d0+k] if the chain so far is the run's prefix, else token -1; k == 0 looks up (a run of
    at most n_run tokens: the call's n_draft)."""
    st = sx.state
    if sx.text.shape[0] == 0:
        return np.int64(-1), np.int64(0), np.int64(0), np.int64(0)
    if k == 0:
        look_up(sx, seq, n_seq, n_run)
    elif st[ALIVE] and (k - 1 >= st[RUN_LEN] or drafted[d0 + k - 1] != sx.run[0, k - 1]):
        st[ALIVE] = 0
    if not st[ALIVE] or k >= st[RUN_LEN]:
        return np.int64(-1), np.int64(0), np.int64(0), np.int64(0)
    return sx.run[0, k], st[MATCH_LEN] + k, sx.run[1, k], sx.run[2, k]
