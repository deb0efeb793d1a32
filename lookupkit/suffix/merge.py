"""The suffix index's out-of-core sort (lookup-create --suffix-index when the text's sort exceeds
--memory-budget): the text is cut into parts of at most `part_positions` positions, each part is sorted in
memory by libdivsufsort (build.sort_packed, 15 bytes per position of the part) and its rows are written to
one rows file of the work directory; the parts are then merged into the suffix array by comparing whole
suffixes over the text, mapped from the build's raw file. The result is the suffix array of the whole text
(the order is unique): the same bytes as the in-memory sort, whatever the parts.

Why a part's rows are in the whole text's order: two suffixes of a part compare as in the whole text unless
one is a proper prefix of the other inside the part (the comparison ran into the part's end). Such
suffixes are the part's last m positions (if the one at i is such a prefix, so is the one at i + 1), and m
is found by a binary search on i over the part's inverse SA: the suffix at i is a proper prefix of another
exactly when it is one of the next SA row's. These tails leave their parts and are sorted by whole-text
comparisons, as one more part. The last part ends where the text does: it has no tail.

Cost: the merge is a heap of the parts' heads; it compares suffixes token by token, so a passage repeated
in two parts is compared with its twin once per position (quadratic in the passage's length). The merge
stops with a one-line error past WORK_PER_LEVEL compared tokens per position and heap level; its remedy is a budget
that sorts the whole text in one part.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..errors import InputError
from ..formats.lkc_suffix import SAMPLE, SEPARATOR
from ..kernels import kernel
from .build import drop_mapped, pack_text, sort_packed

WORK_PER_LEVEL = 32  # compared tokens per position and heap level before the merge gives up (SPEC.md)
_ROWS_BLOCK = 1 << 20  # SA rows merged (and written) at a time


@kernel
def compare(text, p, q):
    """(-1 if the suffix at p sorts before the one at q, else 1; tokens compared), p != q: by token, the
    end of the text lowest (SEPARATOR is below every id)."""
    n = text.shape[0]
    k = 0
    while True:
        if p + k >= n:
            return -1, k + 1
        if q + k >= n:
            return 1, k + 1
        a = text[p + k]
        b = text[q + k]
        if a != b:
            return (-1 if a < b else 1), k + 1
        k += 1


@kernel
def _invert(sa, rank):
    for r in range(sa.shape[0]):
        rank[sa[r]] = r


@kernel
def _prefix_of_next(part, sa, rank, i):
    """Whether the part's suffix at i is a proper prefix of the next SA row's (so of some other suffix)."""
    n = part.shape[0]
    r = rank[i] + 1
    if r >= n:
        return False
    j = sa[r]
    if j > i:  # (shorter than i's: cannot hold it)
        return False
    for k in range(n - i):
        if part[j + k] != part[i + k]:
            return False
    return True


def tail_length(part: np.ndarray, sa: np.ndarray) -> int:
    """m: the part's suffixes at its last m positions (and only those) are proper prefixes of other suffixes
    of the part. Exponential then binary search on m (the property holds for a range ending at the end)."""
    n = len(part)
    if n == 0:
        return 0
    rank = np.empty(n, sa.dtype)
    _invert(sa, rank)

    def held(k):
        return _prefix_of_next(part, sa, rank, n - k)

    if not held(1):
        return 0
    lo = 1  # held(lo), and held(hi) is false (or hi is beyond n)
    hi = 2
    while hi <= n and held(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, n + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if held(mid) else (lo, mid)
    return lo


@kernel
def _keep_below(sa, limit, offset):
    """Compact sa in place to its entries below `limit`, each plus `offset`; returns how many."""
    k = 0
    for r in range(sa.shape[0]):
        p = sa[r]
        if p < limit:
            sa[k] = p + offset
            k += 1
    return k


@kernel
def _less(text, rows, cur, a, b, work):
    c, k = compare(text, rows[cur[a]], rows[cur[b]])
    work[0] += k
    return c < 0


@kernel
def _sift_down(text, rows, cur, heap, size, i, work):
    while True:
        c = 2 * i + 1
        if c >= size:
            return
        if c + 1 < size and _less(text, rows, cur, heap[c + 1], heap[c], work):
            c += 1
        if not _less(text, rows, cur, heap[c], heap[i], work):
            return
        heap[i], heap[c] = heap[c], heap[i]
        i = c


@kernel
def _heapify(text, rows, cur, heap, size, work):
    for i in range(size // 2 - 1, -1, -1):
        _sift_down(text, rows, cur, heap, size, i, work)


@kernel
def _merge_block(text, rows, cur, end, heap, state, out, second, row0, work, limit):
    """Pop up to len(out) rows in order into out (state[0]: the heap's size; row0: the SA row of out[0]);
    second[k] gets the second token of every SAMPLE-th row. Returns rows written, -1 past `limit` work."""
    m = 0
    size = state[0]
    while m < out.shape[0] and size > 0:
        s = heap[0]
        p = rows[cur[s]]
        out[m] = p
        if (row0 + m) % SAMPLE == 0:
            second[(row0 + m) // SAMPLE] = SEPARATOR if text[p] == SEPARATOR else text[p + 1]
        m += 1
        cur[s] += 1
        if cur[s] == end[s]:
            size -= 1
            heap[0] = heap[size]
        _sift_down(text, rows, cur, heap, size, 0, work)
        if work[0] > limit:
            state[0] = size
            return -1
    state[0] = size
    return m


@kernel
def _merge_sort(text, a, tmp, work):
    """Sort positions a (in place) by their suffixes: bottom-up merge sort, tmp as long as a."""
    n = a.shape[0]
    width = 1
    src, dst = a, tmp
    flips = 0
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                c, w = compare(text, src[j], src[i])
                work[0] += w
                if c < 0:
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        flips += 1
        width *= 2
    if flips % 2 == 1:
        for i in range(n):
            a[i] = tmp[i]


def sort_parts(text: np.ndarray, part_positions: int, work: str, block: int = 1 << 22):
    """Sort each part of `text` (a read-only mapping of the whole text) into the rows file `work`/suffix.rows,
    every part's rows without its tail, then all the tails sorted; returns (path, segment bounds)."""
    n = len(text)
    path = os.path.join(work, "suffix.rows")
    bounds, tails, done = [0], [], 0
    with open(path, "wb") as f:
        for a in range(0, n, part_positions):
            b = min(a + part_positions, n)
            sa = sort_packed(pack_text(text, a, b, block))
            m = 0 if b == n else tail_length(text[a:b], sa)
            k = _keep_below(sa, b - a - m, a)
            f.write(sa[:k].data)
            tails.append(np.arange(b - m, b, dtype=sa.dtype))
            done += k
            bounds.append(done)
            del sa
        tail = np.concatenate(tails) if tails else np.zeros(0, np.int32)
        work_done = np.zeros(1, np.int64)
        _merge_sort(text, tail, np.empty_like(tail), work_done)
        f.write(tail.data)
        bounds.append(done + len(tail))
    return path, np.array(bounds, np.int64), int(work_done[0])


def merge_rows(text: np.ndarray, rows_path: str, bounds: np.ndarray, dtype, write, tail_work: int = 0,
               remedy: str = "pass a --memory-budget that sorts it in one part"):
    """Merge the sorted segments [bounds[k], bounds[k + 1]) of the rows file into the suffix array, handed to
    write() block by block; returns (the second tokens of every SAMPLE-th row, suffix_second; the tokens
    compared, with the tails' sort's `tail_work`)."""
    n = len(text)
    limit = WORK_PER_LEVEL * n * (1 + math.ceil(math.log2(len(bounds) - 1))) + (1 << 20)
    second = np.empty(-(-n // SAMPLE), np.int32)
    if n == 0:
        return second, tail_work
    rows = np.memmap(rows_path, dtype, "r", shape=(n,))
    cur = bounds[:-1].copy()
    end = bounds[1:].copy()
    heap = np.array([s for s in range(len(cur)) if cur[s] < end[s]], np.int64)
    state = np.array([len(heap)], np.int64)
    work = np.array([tail_work], np.int64)
    out = np.empty(min(_ROWS_BLOCK, n), dtype)
    _heapify(text, rows, cur, heap, len(heap), work)
    row0 = 0
    while row0 < n:
        m = _merge_block(text, rows, cur, end, heap, state, out, second, row0, work, limit)
        if m < 0 or work[0] > limit:
            raise InputError(
                f"the suffix index's out-of-core merge compared more than {limit // n:,} tokens per "
                f"position: the corpus repeats long passages in several of its parts; {remedy}")
        write(out[:m])
        row0 += m
        for seg in range(len(cur)):  # (rows merged are read once: their pages leave this process's RSS)
            drop_mapped(rows[bounds[seg]:cur[seg]])
    return second, int(work[0])
