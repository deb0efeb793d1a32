"""Build the suffix index: the corpus as one int32 text (documents ended by SEPARATOR), its suffix array,
and the first-token table that answers a search's first step without a binary search.

Order: the standard suffix order of the text, where SEPARATOR (-1) is smaller than every token id and the
end of the text smaller still. A search pattern never holds SEPARATOR, so no match crosses a document
end; all suffixes are distinct, so the array is unique (deterministic whatever the builder).

Builder: libdivsufsort (pydivsufsort), fed the text packed as 3 big-endian bytes per token (id + 1, so
SEPARATOR is 0): the byte order of suffixes starting at multiples of 3 is their token order. The SA of
the 3n bytes (int32 while 3n < 2^31) is compacted in place to the n aligned positions; peak memory is
about 15 bytes per token. `doubling_sa` (numba prefix doubling with counting sorts) is the slower,
hungrier in-package builder, kept as the second opinion the tests compare against, and the builder that
needs no pydivsufsort (formats/SPEC.md has both timed).
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import InputError
from ..formats.lkc_suffix import MAX_ID, MAX_TEXT, SAMPLE, SEPARATOR, index_dtype
from ..kernels import kernel


@dataclass(frozen=True)
class SuffixIndex:
    """text: int32 ids with SEPARATOR after each document; sa: the suffix array (int32 below 2^31 positions);
    starts: len = max id + 3, the SA's dtype: SA rows of first token t are [starts[t + 1], starts[t + 2]);
    second: int32, the second token of every SAMPLE-th row (SEPARATOR where the row's first token is one)."""

    text: np.ndarray
    sa: np.ndarray
    starts: np.ndarray
    second: np.ndarray

    @property
    def n(self) -> int:
        return len(self.text)


def corpus_text(docs: Iterable[np.ndarray]) -> np.ndarray:
    """The index's text: each document's ids (0 <= id <= MAX_ID), each followed by SEPARATOR."""
    parts = []
    for d in docs:
        d = np.asarray(d)
        if d.size and (d.min() < 0 or d.max() > MAX_ID):
            raise InputError(f"token ids must be in 0..{MAX_ID} for a suffix index, got {int(d.min())}..{int(d.max())}")
        parts += [d.astype(np.int32, copy=False), np.array([SEPARATOR], np.int32)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def check_text(text: np.ndarray) -> np.ndarray:
    text = np.ascontiguousarray(text, dtype=np.int32)
    if len(text) and (text[-1] != SEPARATOR or text.min() < SEPARATOR or text.max() > MAX_ID):
        raise InputError("a suffix index text is document ids each ended by SEPARATOR: build it with corpus_text")
    if len(text) > MAX_TEXT:
        raise InputError(f"a suffix index holds at most {MAX_TEXT} tokens (+ 1 per document), got {len(text)}")
    return text


@kernel
def pack3(text, out):
    """out[3i : 3i + 3] = text[i] + 1, big-endian."""
    for i in range(text.shape[0]):
        v = text[i] + 1
        out[3 * i] = (v >> 16) & 255
        out[3 * i + 1] = (v >> 8) & 255
        out[3 * i + 2] = v & 255


@kernel
def _keep_aligned(sa3):
    """Compact the byte SA in place to its positions p % 3 == 0, as token positions p // 3; returns how many."""
    k = 0
    for i in range(sa3.shape[0]):
        p = sa3[i]
        if p % 3 == 0:
            sa3[k] = p // 3
            k += 1
    return k


def divsufsort_sa(text: np.ndarray) -> np.ndarray:
    """The suffix array of `text` (see the module docstring) by libdivsufsort on 3 bytes per token."""
    text = check_text(text)
    if len(text) == 0:
        return np.zeros(0, np.int32)
    packed = np.empty(3 * len(text), np.uint8)
    pack3(text, packed)
    return sort_packed(packed)


def sort_packed(packed: np.ndarray) -> np.ndarray:
    """The token SA from the 3-byte packed text (consumed: the caller drops its reference). A view into
    libdivsufsort's 3n-entry buffer, which it keeps alive: copy it out or write it and drop it."""
    from pydivsufsort import divsufsort

    n = len(packed) // 3
    sa3 = divsufsort(packed)  # int32, 3n entries, over bytes
    k = _keep_aligned(sa3)
    assert k == n
    _release(sa3[k:])
    return sa3[:k]


def pack_text(text: np.ndarray, a: int, b: int, block: int) -> np.ndarray:
    """text[a:b] packed (3 bytes per id), `block` ids at a time; a mapped text's pages are dropped after use."""
    packed = np.empty(3 * (b - a), np.uint8)
    for i in range(a, b, block):
        j = min(i + block, b)
        view = text[i:j]
        pack3(view, packed[3 * (i - a):3 * (j - a)])
        drop_mapped(view)
    return packed


def drop_mapped(a: np.ndarray) -> None:
    """Let this process's RSS drop the pages behind `a` if it is a view of a read-only file mapping (re-read
    from the page cache if touched again), so that they do not sit beside a sort's 15 bytes per token.
    Anything else (arrays in memory) is left alone; Linux only."""
    base = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None or not hasattr(mmap, "MADV_DONTNEED") or not sys.platform.startswith("linux"):
        return
    try:
        if not memoryview(base).readonly:
            return
        at = a.ctypes.data - np.frombuffer(base, np.uint8).ctypes.data
    except (ValueError, TypeError):  # (a closed mapping)
        return
    start = at // mmap.PAGESIZE * mmap.PAGESIZE
    stop = min(at + a.nbytes, len(base))
    if stop > start:
        base.madvise(mmap.MADV_DONTNEED, start, stop - start)


def _release(tail: np.ndarray) -> None:
    """Give the pages of an array's unused tail back to the OS (its 8 bytes per token are not needed after
    the compaction; RSS then stays at the sort's peak while the caller finishes). Linux; a no-op elsewhere."""
    page = mmap.PAGESIZE
    start = -(-tail.ctypes.data // page) * page
    stop = (tail.ctypes.data + tail.nbytes) // page * page
    if stop > start and sys.platform.startswith("linux"):
        ctypes.CDLL(None).madvise(ctypes.c_void_p(start), ctypes.c_size_t(stop - start), 4)  # MADV_DONTNEED


@kernel
def _counting_sort(keys, order_in, order_out, counts):
    """Stable sort of order_in by keys[order_in[j]] (0 <= key < len(counts)) into order_out."""
    counts[:] = 0
    for j in range(order_in.shape[0]):
        counts[keys[order_in[j]]] += 1
    total = 0
    for c in range(counts.shape[0]):
        t = counts[c]
        counts[c] = total
        total += t
    for j in range(order_in.shape[0]):
        i = order_in[j]
        k = keys[i]
        order_out[counts[k]] = i
        counts[k] += 1


@kernel
def _doubling(text, sa, rank, tmp, counts, sa2):
    n = text.shape[0]
    for i in range(n):
        rank[i] = text[i] + 1
        tmp[i] = i
    _counting_sort(rank, tmp, sa, counts)
    k = 1
    while True:
        # rank[i] := dense rank of the first k tokens of suffix i (equal prefixes share it)
        r = 0
        tmp[sa[0]] = 0
        for j in range(1, n):
            a, b = sa[j - 1], sa[j]
            same = rank[a] == rank[b]
            if same and k > 1:
                h = k // 2
                ra = rank[a + h] if a + h < n else -1
                rb = rank[b + h] if b + h < n else -1
                same = ra == rb
            if not same:
                r += 1
            tmp[b] = r
        for i in range(n):
            rank[i] = tmp[i]
        if r == n - 1:
            return
        # order by (rank[i], rank[i + k]): suffixes without a second half first, then by second half
        m = 0
        for i in range(n - k, n):
            sa2[m] = i
            m += 1
        for j in range(n):
            if sa[j] >= k:
                sa2[m] = sa[j] - k
                m += 1
        _counting_sort(rank, sa2, sa, counts)
        k *= 2


def doubling_sa(text: np.ndarray) -> np.ndarray:
    """The same suffix array by prefix doubling (Manber-Myers, counting sorts): O(n log L), ~24 bytes/token."""
    text = check_text(text)
    n = len(text)
    if n == 0:
        return np.zeros(0, np.int32)
    sa, rank, tmp, sa2 = (np.empty(n, np.int32) for _ in range(4))
    counts = np.empty(max(n, int(text.max()) + 2), np.int32)
    _doubling(text, sa, rank, tmp, counts, sa2)
    return sa


def first_token_starts(text: np.ndarray) -> np.ndarray:
    """starts[t + 1] = number of suffixes whose first token is below t (t = -1 .. max id + 1)."""
    text = np.asarray(text, np.int32)
    return starts_from_counts(np.bincount(text + 1) if len(text) else np.zeros(0, np.int64))


def starts_from_counts(counts: np.ndarray) -> np.ndarray:
    """first_token_starts from counts[t + 1] = occurrences of t (SEPARATOR first)."""
    if len(counts) == 0:
        return np.zeros(2, np.int32)
    return np.concatenate([[0], np.cumsum(counts)]).astype(index_dtype(int(counts.sum())))


@kernel
def sample_second(packed, sa, out):
    """out[k] = second token of SA row k * SAMPLE, read from the 3-byte packed text (SEPARATOR if none)."""
    n = packed.shape[0] // 3
    for k in range(out.shape[0]):
        p = sa[k * SAMPLE]
        v = np.int32(-1)
        if packed[3 * p] | packed[3 * p + 1] | packed[3 * p + 2] != 0 and p + 1 < n:
            q = 3 * (p + 1)
            v = np.int32((np.int32(packed[q]) << 16) | (np.int32(packed[q + 1]) << 8) | np.int32(packed[q + 2])) - 1
        out[k] = v


def second_tokens(packed: np.ndarray, sa: np.ndarray) -> np.ndarray:
    out = np.empty(-(-len(sa) // SAMPLE), np.int32)
    sample_second(packed, sa, out)
    return out


def build_index(text: np.ndarray, builder=divsufsort_sa) -> SuffixIndex:
    """The suffix index of a corpus_text (the suffix array copied out of the builder's larger buffer)."""
    text = check_text(text)
    sa = np.array(builder(text), index_dtype(len(text)))
    packed = np.empty(3 * len(text), np.uint8)
    pack3(text, packed)
    return SuffixIndex(text=text, sa=sa, starts=first_token_starts(text), second=second_tokens(packed, sa))
