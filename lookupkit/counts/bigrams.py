"""Exact 2-gram → follower counts over a token stream, as llama.cpp's lookup-create counts them.

For every document and every position i >= 2, follower inp[i] of the 2-gram (inp[i-2], inp[i-1]) is
counted once; 2-grams never span documents. The stream is cut into chunks (2 tokens of overlap
inside a document); each chunk's triples (t0, t1, t2) are packed into one uint64 when ids < 2^21
(a lexicographic (t0<<32|t1, t2) pair of uint64 otherwise), sorted and counted with numpy, and the
sorted runs are merged like a binary counter, so memory stays near the size of the distinct triples
and never holds the stream. Counts are summed in int64 and saturate at COUNT_MAX when stored.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
from numba import njit

from ..errors import InputError
from ..rules import COUNT_MAX
from .tables import StaticTable

CHUNK_TOKENS = 16 * 2**20
PACK_BITS = 21  # three ids < 2^21 fit one uint64 (qwen2: 151,936 ids)


class FollowerCounter:
    """Accumulates counts document by document; `table()` returns the canonical StaticTable."""

    def __init__(self, n_vocab: int, chunk_tokens: int = CHUNK_TOKENS, packed: bool | None = None,
                 vocab_name: str = "the vocabulary", id_bound: int | None = None):
        """n_vocab: ids must lie in 0..n_vocab-1 (ids of no known vocabulary: ID_MAX + 1). id_bound: the
        ids are known to be below it (decides packing when smaller than n_vocab). vocab_name: for errors."""
        if n_vocab <= 0:
            raise InputError(f"vocabulary size must be positive, got {n_vocab}")
        if chunk_tokens < 3:
            raise InputError(f"chunk size must be at least 3 tokens, got {chunk_tokens}")
        self.id_bound = min(n_vocab, id_bound or n_vocab)
        fits = self.id_bound <= 1 << PACK_BITS
        if packed and not fits:
            raise InputError(f"ids of a {n_vocab}-token vocabulary do not fit the packed {PACK_BITS}-bit path")
        self.n_vocab, self.vocab_name = n_vocab, vocab_name
        self.packed = fits if packed is None else packed
        self.n_tokens = 0
        self.n_documents = 0
        self._buf = np.empty(chunk_tokens, dtype=np.int32)
        self._runs: list[tuple[int, np.ndarray, np.ndarray]] = []  # (level, keys (n, k) uint64, counts int64)

    def add_document(self, arrays: Iterable[np.ndarray] | np.ndarray) -> int:
        """Count one document given as int32 arrays in order; returns its number of tokens."""
        if isinstance(arrays, np.ndarray):
            arrays = (arrays,)
        buf, fill, doc_tokens = self._buf, 0, 0
        for arr in arrays:
            arr = np.asarray(arr)
            self._check_ids(arr, doc_tokens)
            doc_tokens += len(arr)
            pos = 0
            while pos < len(arr):
                take = min(len(arr) - pos, len(buf) - fill)
                buf[fill:fill + take] = arr[pos:pos + take]
                fill += take
                pos += take
                if fill == len(buf):
                    self._add_chunk(buf)
                    buf[:2] = buf[-2:]  # the next chunk's first triple ends here: 2 tokens of overlap
                    fill = 2
        if fill >= 3:
            self._add_chunk(buf[:fill])
        self.n_tokens += doc_tokens
        self.n_documents += 1
        return doc_tokens

    def table(self) -> StaticTable:
        """All counts so far as a canonical StaticTable (counts saturated at COUNT_MAX).

        The runs are merged down to two, and the last merge writes the table's arrays directly, so
        the fully merged triples never exist next to the table."""
        width = 1 if self.packed else 2
        empty = (0, np.empty((0, width), np.uint64), np.empty(0, np.int64))
        runs = list(self._runs) or [empty]
        while len(runs) > 2:  # smallest (most recent) runs first
            _, kb, cb = runs.pop()
            level, ka, ca = runs.pop()
            runs.append((level, *_merge(ka, ca, kb, cb)))
        (_, ka, ca), (_, kb, cb) = runs if len(runs) == 2 else (runs[0], empty)
        shift = np.uint64(PACK_BITS if self.packed else 32)
        n_pairs, n_keys = _merge2(ka, ca, kb, cb, shift, _COUNT, *_NO_OUTPUT)
        table = StaticTable(np.empty((n_keys, 2), np.int32), np.empty(n_keys + 1, np.int64),
                            np.empty((n_pairs, 2), np.int32))
        _merge2(ka, ca, kb, cb, shift, _TABLE, _NO_OUTPUT[0], _NO_OUTPUT[1], table.keys, table.offsets, table.pairs)
        return table

    def merged_run(self) -> tuple[np.ndarray, np.ndarray]:
        """All runs merged into one sorted run (keys (n, 1|2) uint64, int64 counts); the counter is emptied."""
        runs = self._runs
        if not runs:
            return np.empty((0, 1 if self.packed else 2), np.uint64), np.empty(0, np.int64)
        while len(runs) > 1:
            _, kb, cb = runs.pop()
            level, ka, ca = runs.pop()
            runs.append((level, *_merge(ka, ca, kb, cb)))
        _, keys, counts = runs.pop()
        return keys, counts

    def _check_ids(self, arr: np.ndarray, offset: int) -> None:
        if arr.dtype.kind not in "iu":
            raise InputError(f"token ids must be integers, got {arr.dtype}")
        if len(arr) and (int(arr.min()) < 0 or int(arr.max()) >= self.id_bound):
            i = int(np.flatnonzero((arr < 0) | (arr >= self.id_bound))[0])
            raise InputError(f"token id {int(arr[i])} at position {offset + i} of document {self.n_documents + 1} "
                             f"is outside {self.vocab_name} (0..{self.n_vocab - 1})")

    def _add_chunk(self, tokens: np.ndarray) -> None:
        keys, counts = _sorted_unique(_triples(tokens, self.packed))
        level = 0
        while self._runs and self._runs[-1][0] == level:  # binary counter: merge equal levels
            _, k0, c0 = self._runs.pop()
            keys, counts = _merge(k0, c0, keys, counts)
            level += 1
        self._runs.append((level, keys, counts))


def count_static(documents: Iterable[Iterable[np.ndarray] | np.ndarray], n_vocab: int,
                 chunk_tokens: int = CHUNK_TOKENS, packed: bool | None = None) -> StaticTable:
    """Count several documents (each an int32 array or an iterable of them) into one StaticTable."""
    counter = FollowerCounter(n_vocab, chunk_tokens, packed)
    for doc in documents:
        counter.add_document(doc)
    return counter.table()


def _triples(tokens: np.ndarray, packed: bool) -> np.ndarray:
    """(n-2, k) uint64 sort keys of the triples (t[i-2], t[i-1], t[i]); k = 1 packed, 2 otherwise."""
    t = tokens.astype(np.uint64)
    if packed:
        keys = t[:-2] << np.uint64(2 * PACK_BITS)
        keys |= t[1:-1] << np.uint64(PACK_BITS)
        keys |= t[2:]
        return keys.reshape(-1, 1)
    keys = np.empty((len(t) - 2, 2), dtype=np.uint64)
    keys[:, 0] = (t[:-2] << np.uint64(32)) | t[1:-1]
    keys[:, 1] = t[2:]
    return keys


def _sorted_unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort (n, k) keys lexicographically by row; return the distinct rows and their int64 counts."""
    if keys.shape[1] == 1:
        flat = keys[:, 0]
        flat.sort()
        keys = flat.reshape(-1, 1)
    else:
        keys = keys[np.lexsort(keys.T[::-1])]
    n = len(keys)
    change = np.ones(n + 1, dtype=bool)
    if n > 1:
        change[1:n] = np.any(keys[1:] != keys[:-1], axis=1)
    starts = np.flatnonzero(change)
    return np.ascontiguousarray(keys[starts[:-1]]), np.diff(starts).astype(np.int64)


_COUNT, _RUN, _TABLE = 0, 1, 2
_NO_OUTPUT = (np.empty((0, 1), np.uint64), np.empty(0, np.int64), np.empty((0, 2), np.int32),
              np.empty(1, np.int64), np.empty((0, 2), np.int32))


def _merge(ka, ca, kb, cb) -> tuple[np.ndarray, np.ndarray]:
    """Merge two sorted runs of distinct triples into one (counts of equal triples summed)."""
    n, _ = _merge2(ka, ca, kb, cb, np.uint64(0), _COUNT, *_NO_OUTPUT)
    keys = np.empty((n, ka.shape[1]), dtype=np.uint64)
    counts = np.empty(n, dtype=np.int64)
    _merge2(ka, ca, kb, cb, np.uint64(0), _RUN, keys, counts, *_NO_OUTPUT[2:])
    return keys, counts


@njit(cache=True, inline="always")
def _cmp(ka, i, kb, j):
    for c in range(ka.shape[1]):
        if ka[i, c] < kb[j, c]:
            return -1
        if ka[i, c] > kb[j, c]:
            return 1
    return 0


@njit(cache=True)
def _merge2(ka, ca, kb, cb, shift, mode, run_keys, run_counts, table_keys, offsets, pairs):
    """Two-pointer merge of two sorted runs of distinct triples, summing the counts of equal ones.

    mode _COUNT: only count; _RUN: write the merged run; _TABLE: write a StaticTable's keys, offsets
    and pairs (counts saturated at COUNT_MAX). Returns (n_triples, n_2grams); n_2grams is counted
    for _COUNT and _TABLE. A triple is one packed uint64 (t0, t1, t2 by PACK_BITS) or a row
    (t0 << 32 | t1, t2); `shift` splits the 2-gram's t0 and t1.
    """
    wide = ka.shape[1] == 2
    mask = (np.uint64(1) << shift) - np.uint64(1)
    low = np.uint64((1 << PACK_BITS) - 1)
    na, nb = ka.shape[0], kb.shape[0]
    i = j = n = n_keys = 0
    prev = np.uint64(0)
    while i < na or j < nb:
        c = -1 if j == nb else (1 if i == na else _cmp(ka, i, kb, j))
        if c <= 0:
            k0, k1, total = ka[i, 0], ka[i, 1] if wide else np.uint64(0), ca[i]
            if c == 0:
                total += cb[j]
                j += 1
            i += 1
        else:
            k0, k1, total = kb[j, 0], kb[j, 1] if wide else np.uint64(0), cb[j]
            j += 1
        if mode == _RUN:
            run_keys[n, 0] = k0
            if wide:
                run_keys[n, 1] = k1
            run_counts[n] = total
        else:
            gram = k0 if wide else k0 >> np.uint64(PACK_BITS)
            if n == 0 or gram != prev:
                if mode == _TABLE:
                    table_keys[n_keys, 0] = gram >> shift
                    table_keys[n_keys, 1] = gram & mask
                    offsets[n_keys] = n
                n_keys += 1
                prev = gram
            if mode == _TABLE:
                pairs[n, 0] = k1 if wide else k0 & low
                pairs[n, 1] = min(total, COUNT_MAX)
        n += 1
    if mode == _TABLE:
        offsets[n_keys] = n
    return n, n_keys
