"""Recover the 2-gram keys of a cache file that stores only pairs + constmap (ggngcmap, .lkc without keys).

A constmap answers "which span belongs to (t0, t1)?" but cannot list its keys. The keys follow from the
token stream's structure: if (a, b) is followed by c, then (b, c) is itself a 2-gram (unless c ended
the corpus). So from a few seed keys (found among the most frequent follower tokens), looking up
(b, c) for every follower c of every found key reaches every 2-gram that occurs after a seed, in one
lookup per pair. The keys before that (the start of the corpus, or of each document when 2-grams do
not span documents) are found backwards, as unfound predecessors (x, a) of found keys (a, b): only
keys whose b still occurs among the uncovered pairs can have one, and keys whose total count exceeds
what their found predecessors send them are tried first; x is searched among the follower tokens, then
among every id below 2^18 (the first tokens of a document never follow anything). Recovery succeeds
only if the spans of the found keys tile the pairs exactly: the result is exact or refused.

Cost: n_pairs + 256^2 lookups (always paid, like reading the file), plus about |followers| lookups per
place where the chain of 2-grams starts (corpus or document starts), which is estimated after the
forward pass and refused beyond `search_budget` lookups. Measured numbers are in SPEC.md.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..formats.constmap import NOT_FOUND, ConstMapView
from ..formats.constmap_probe import lookup
from ..errors import FormatError
from ..formats.spans import MAX_FOLLOWERS, SPAN_BITS

SEARCH_BUDGET = 3 * 10**8  # lookups beyond the forward pass: a bounded wait (what it costs: bench/RESULTS.md)
SEED_TOKENS = 256
FULL_RANGE = 1 << 18  # first tokens of documents are searched below max(this, largest follower + 1)
MAX_RANGE = 1 << 20  # ... but never above this (a corrupted token id must not size an array)
_MASK = np.uint64(MAX_FOLLOWERS)
_CORRUPT, _TOO_MANY, _BUDGET = -1, -2, -3
# counters: found keys, stack depth, covered pairs, lookups done, budget
_FOUND, _SP, _COVERED, _LOOKUPS, _LIMIT = range(5)


@njit(cache=True)
def _visit(t0, t1, v, pairs, keys, off, ln, total, owner, stack, ctr):
    """Record key (t0, t1) with constmap value v; returns its id, or an error code (< 0).

    owner[j] is the id of the key whose run holds pair j (-1 while unknown).
    """
    o = v >> np.uint64(SPAN_BITS)
    n = v & _MASK
    if n == 0 or o + n > np.uint64(pairs.shape[0]):
        return _CORRUPT
    k = owner[o]
    if k >= 0:
        if off[k] != o or keys[k, 0] != t0 or keys[k, 1] != t1 or ln[k] != n:
            return _CORRUPT  # two keys claim overlapping spans
        return k
    k = ctr[_FOUND]
    if k == keys.shape[0]:
        return _TOO_MANY
    s = np.int64(0)
    for j in range(o, o + n):
        if owner[j] >= 0:
            return _CORRUPT
        owner[j] = k
        s += pairs[j, 1]
    ctr[_FOUND] += 1
    keys[k, 0] = t0
    keys[k, 1] = t1
    off[k] = o
    ln[k] = n
    total[k] = s
    ctr[_COVERED] += n
    stack[ctr[_SP]] = k
    ctr[_SP] += 1
    return k


@njit(cache=True)
def _close(pairs, seed, seg_len, scl, data, checks, keys, off, ln, total, inflow, owner, stack, ctr):
    """Forward closure: for every found (a, b) and follower c, (b, c) is a key if the map has it."""
    while ctr[_SP] > 0:
        ctr[_SP] -= 1
        k = stack[ctr[_SP]]
        b = keys[k, 1]
        for j in range(off[k], off[k] + ln[k]):
            c = pairs[j, 0]
            v = lookup(b, c, seed, seg_len, scl, data, checks)
            if v == NOT_FOUND:
                continue
            kk = _visit(b, c, v, pairs, keys, off, ln, total, owner, stack, ctr)
            if kk < 0:
                return kk
            inflow[kk] += pairs[j, 1]
        ctr[_LOOKUPS] += ln[k]
        if ctr[_LOOKUPS] > ctr[_LIMIT]:
            return _BUDGET
    return 0


@njit(cache=True)
def _search(firsts, seconds, swap, pairs, seed, seg_len, scl, data, checks, keys, off, ln, total, owner, stack, ctr):
    """Look up every (f, s) (or (s, f) when swap) for f in firsts, s in seconds; record what is found."""
    for i in range(firsts.shape[0]):
        if ctr[_LOOKUPS] + seconds.shape[0] > ctr[_LIMIT]:
            return _BUDGET
        ctr[_LOOKUPS] += seconds.shape[0]
        for j in range(seconds.shape[0]):
            t0, t1 = (seconds[j], firsts[i]) if swap else (firsts[i], seconds[j])
            v = lookup(t0, t1, seed, seg_len, scl, data, checks)
            if v != NOT_FOUND:
                kk = _visit(t0, t1, v, pairs, keys, off, ln, total, owner, stack, ctr)
                if kk < 0:
                    return kk
    return 0


class _Recovery:
    """State of one recovery: the keys found so far and the arrays the jitted steps share."""

    def __init__(self, pairs: np.ndarray, cmap: ConstMapView, budget: int, name: str):
        self.pairs, self.name = pairs, name
        cap = min(cmap.n_keys or len(pairs), len(pairs))  # every 2-gram has a follower: more is corruption
        self.keys = np.empty((cap, 2), np.int32)
        self.off = np.empty(cap, np.int64)
        self.ln = np.empty(cap, np.int64)
        self.total = np.empty(cap, np.int64)
        self.inflow = np.zeros(cap, np.int64)
        self.owner = np.full(len(pairs), -1, np.int32)
        self.stack = np.empty(cap, np.int32)
        self.ctr = np.array([0, 0, 0, 0, budget], np.int64)
        self.map = cmap.args
        self.budget = budget

    @property
    def found(self) -> int:
        return int(self.ctr[_FOUND])

    @property
    def uncovered(self) -> int:
        return len(self.pairs) - int(self.ctr[_COVERED])

    def _check(self, code: int) -> None:
        if code == _CORRUPT:
            raise FormatError(f"{self.name}: corrupted cache: its constmap maps 2-grams to spans that overlap or "
                              f"lie outside the {len(self.pairs)} pairs")
        if code == _TOO_MANY:
            raise FormatError(f"{self.name}: corrupted cache: more 2-grams than its constmap header declares")
        if code == _BUDGET:
            raise self.too_costly(f"more than {self.budget:,} lookups ({self.found:,} 2-grams found, "
                                  f"{self.uncovered:,} pairs left)")

    def too_costly(self, what: str) -> FormatError:
        return FormatError(f"{self.name}: recovering the 2-gram keys this file does not store would take {what}; "
                           f"rebuild the cache from the corpus as .lkc instead (lookup-create)")

    def search(self, firsts: np.ndarray, seconds: np.ndarray, swap: bool = False) -> None:
        """Grid search, then the forward closure from whatever it found."""
        args = (self.pairs, *self.map, self.keys, self.off, self.ln, self.total)
        self._check(_search(np.asarray(firsts, np.int32), np.asarray(seconds, np.int32), swap, *args,
                            self.owner, self.stack, self.ctr))
        self._check(_close(*args, self.inflow, self.owner, self.stack, self.ctr))

    def deficit(self) -> np.ndarray:
        """Per found key: occurrences not explained by found predecessors (> 0: search backwards)."""
        n = self.found
        return self.total[:n] - self.inflow[:n]


def recover_layout(pairs: np.ndarray, cmap: ConstMapView, name: str,
                   search_budget: int = SEARCH_BUDGET) -> tuple[np.ndarray, np.ndarray]:
    """(keys, offsets) of a pairs array + constmap whose keys are not stored: the run of keys[i] is
    pairs[offsets[i]:offsets[i+1]], in the file's run order. FormatError if not every pair is accounted for."""
    n_pairs = len(pairs)
    if n_pairs == 0:
        if cmap.n_keys:
            raise FormatError(f"{name}: corrupted cache: {cmap.n_keys} 2-grams but no pairs")
        return np.empty((0, 2), np.int32), np.zeros(1, np.int64)
    tokens = pairs[:, 0]
    if int(tokens.min()) < 0:
        raise FormatError(f"{name}: corrupted cache: a follower token id is negative")
    follow, freq = _frequencies(tokens)
    rec = _Recovery(pairs, cmap, n_pairs + SEED_TOKENS**2 + search_budget, name)
    top = follow[np.argsort(-freq, kind="stable")[:SEED_TOKENS]]
    rec.search(top, top)
    if rec.found == 0:
        if len(follow) ** 2 > search_budget:
            raise rec.too_costly(f"{len(follow) ** 2:,} lookups (no 2-gram of frequent tokens found to start from)")
        rec.search(follow, follow)
    if rec.uncovered:
        starts = len(np.unique(rec.keys[:rec.found][rec.deficit() > 0, 0]))
        if starts * len(follow) > search_budget:
            raise rec.too_costly(f"about {starts * len(follow):,} lookups ({starts:,} places where the chain of "
                                 f"2-grams restarts, e.g. document starts, x {len(follow):,} follower tokens)")
        _search_backwards(rec, follow)
    if rec.uncovered:
        raise FormatError(f"{name}: could not recover the 2-gram keys of {rec.uncovered:,} of {n_pairs:,} pairs "
                          f"(the file is corrupted, was built from many separate documents, or starts with ids "
                          f">= {FULL_RANGE}); rebuild the cache from the corpus as .lkc instead")
    return _layout(rec, name)


def _frequencies(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct follower tokens (sorted) and how many runs each appears in."""
    if int(tokens.max()) < max(FULL_RANGE, 4 * len(tokens)):  # a bincount no bigger than the pairs
        freq = np.bincount(tokens)
        follow = np.flatnonzero(freq).astype(np.int32)
        return follow, freq[follow]
    follow, freq = np.unique(tokens, return_counts=True)
    return follow.astype(np.int32), freq


def _search_backwards(rec: _Recovery, follow: np.ndarray) -> None:
    """Find the unfound predecessors (x, a) of found keys (a, b).

    Only keys whose b still occurs among the uncovered pairs can have one (the predecessor's run holds
    b); keys with a deficit come first. x is tried among document-start ids found so far, then among
    the follower tokens, then among all ids below max(2^18, largest follower + 1).
    """
    extras = np.empty(0, np.int32)  # ids that start documents and never follow anything, found so far
    searched = {name: np.zeros(len(rec.keys), np.int64) for name in ("extras", "follow", "range")}
    everything = np.arange(min(max(FULL_RANGE, int(follow[-1]) + 1), MAX_RANGE), dtype=np.int32)
    while rec.uncovered:
        n = rec.found
        can = np.isin(rec.keys[:n, 1], np.unique(rec.pairs[rec.owner < 0, 0]))
        short = can & (rec.deficit() > 0)
        pool = {"extras": extras, "follow": follow, "range": None}
        for mask, name in ((short, "extras"), (short, "follow"), (short, "range"), (can, "follow"), (can, "range")):
            size = len(extras) if name == "extras" else 1  # extras grow: search again the keys done with fewer
            todo = np.flatnonzero(mask & (searched[name][:n] < size))
            if not len(todo):
                continue
            firsts = np.unique(rec.keys[todo, 0])
            candidates = pool[name] if name != "range" else np.setdiff1d(everything, np.concatenate([follow, extras]))
            if len(firsts) * len(candidates) > rec.ctr[_LIMIT] - rec.ctr[_LOOKUPS]:
                raise rec.too_costly(f"more than {rec.budget:,} lookups ({rec.found:,} 2-grams found, "
                                     f"{rec.uncovered:,} pairs left)")
            searched[name][todo] = size
            before = rec.found
            rec.search(firsts, candidates, swap=True)
            extras = np.union1d(extras, np.setdiff1d(rec.keys[before:rec.found, 0], follow)).astype(np.int32)
            break
        else:
            return


def _layout(rec: _Recovery, name: str) -> tuple[np.ndarray, np.ndarray]:
    n = rec.found
    order = np.argsort(rec.off[:n], kind="stable")
    off, ln = rec.off[:n][order], rec.ln[:n][order]
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(ln, out=offsets[1:])
    if not np.array_equal(off, offsets[:-1]) or offsets[-1] != len(rec.pairs):
        raise FormatError(f"{name}: corrupted cache: the spans of its 2-grams do not tile the pairs")
    return rec.keys[:n][order], offsets
