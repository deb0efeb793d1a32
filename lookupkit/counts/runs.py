"""Sorted runs of (triple, count) on disk and their k-way merge into the canonical table's parts.

A run is what `FollowerCounter` holds in memory (distinct triples in sort order, int64 counts),
spilled to a directory as raw little-endian files: `<stem>.k0` (uint64: the packed triple, or
t0 << 32 | t1 when ids do not fit 21 bits), `<stem>.k1` (uint64 t2, wide runs only) and `<stem>.c`
(int64 counts). `merge_range` merges any number of runs restricted to the 2-grams whose first token
lies in [lo, hi), block by block with bounded memory, and writes the range's part of the table:
`.pairs` (int32 token, count saturated at COUNT_MAX), `.keys` (int32 t0, t1) and `.lens` (uint32
followers per 2-gram), plus the numbers the file header's statistics need. Ranges of one merge are
disjoint and ordered, so their parts concatenated are the table's arrays, byte for byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit

from ..rules import COUNT_MAX
from .bigrams import PACK_BITS

BLOCK = 1 << 20  # entries read from each run at a time (at most)
MERGE_BYTES = 192 << 20  # what one merge's buffers may hold, whatever the number of runs
BYTES_PER_MERGE_ENTRY = 96  # buffered entry (24) + its concatenated copy (24) + outputs (20) + slack
RUN_BYTES_PER_ENTRY = {True: 16, False: 24}  # packed / wide: key words + int64 count


def _write(path: Path, a: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(a).data)


def write_run(stem: str | os.PathLike, keys: np.ndarray, counts: np.ndarray) -> "Run":
    """Spill one sorted run (keys (n, 1|2) uint64, counts int64) to `<stem>.*`; returns its handle."""
    stem = Path(stem)
    _write(stem.with_suffix(".k0"), keys[:, 0].astype("<u8"))
    if keys.shape[1] == 2:
        _write(stem.with_suffix(".k1"), keys[:, 1].astype("<u8"))
    _write(stem.with_suffix(".c"), counts.astype("<i8"))
    return Run(str(stem), len(counts), keys.shape[1] == 1)


@dataclass(frozen=True)
class Run:
    stem: str
    n: int
    packed: bool

    def read(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Entries [start, start + count): (k0, k1 (empty when packed), counts)."""
        count = max(0, min(count, self.n - start))
        k0 = np.fromfile(self.stem + ".k0", "<u8", count, offset=8 * start)
        k1 = np.fromfile(self.stem + ".k1", "<u8", count, offset=8 * start) if not self.packed else _EMPTY
        return k0, k1, np.fromfile(self.stem + ".c", "<i8", count, offset=8 * start)

    def first_at_least(self, t0: int) -> int:
        """Index of the first entry whose 2-gram's first token is >= t0 (binary search on a map of k0)."""
        if self.n == 0:
            return 0
        k0 = np.memmap(self.stem + ".k0", "<u8", mode="r", shape=(self.n,))
        shift = 2 * PACK_BITS if self.packed else 32
        i = int(np.searchsorted(k0, np.uint64(min(t0, (1 << (64 - shift)) - 1)) << np.uint64(shift)))
        if t0 >= 1 << (64 - shift):
            i = self.n
        del k0
        return i

    def sample_t0(self, every: int) -> np.ndarray:
        """First tokens of every `every`-th entry (to choose balanced key ranges)."""
        if self.n == 0:
            return np.empty(0, np.int64)
        k0 = np.memmap(self.stem + ".k0", "<u8", mode="r", shape=(self.n,))
        shift = np.uint64(2 * PACK_BITS if self.packed else 32)
        out = (np.asarray(k0[::every]) >> shift).astype(np.int64)
        del k0
        return out

    def nbytes(self) -> int:
        return self.n * RUN_BYTES_PER_ENTRY[self.packed]

    def remove(self) -> None:
        for ext in (".k0", ".k1", ".c"):
            try:
                os.unlink(self.stem + ext)
            except OSError:
                pass


_EMPTY = np.empty(0, np.uint64)


@dataclass
class Part:
    """One key range's share of the table, on disk, and its statistics."""

    stem: str
    n_keys: int = 0
    n_pairs: int = 0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # 2-grams by number of followers
    count_sum: int = 0
    count_max: int = 0
    count_ones: int = 0
    max_id: int = -1

    def arrays(self, what: str, dtype: str, width: int, block: int = 1 << 22):
        """The part's `.pairs`/`.keys` (width 2) or `.lens` (width 1) in blocks of rows."""
        n = self.n_pairs if what == "pairs" else self.n_keys
        for start in range(0, n, block):
            rows = min(block, n - start)
            a = np.fromfile(f"{self.stem}.{what}", dtype, rows * width, offset=start * width * np.dtype(dtype).itemsize)
            yield a.reshape(rows, width) if width > 1 else a

    def remove(self) -> None:
        for ext in (".pairs", ".keys", ".lens"):
            try:
                os.unlink(f"{self.stem}{ext}")
            except OSError:
                pass


def key_ranges(runs: list[Run], n_ranges: int, id_bound: int) -> list[tuple[int, int]]:
    """[lo, hi) first-token ranges covering 0..id_bound, with about equal numbers of run entries."""
    total = sum(r.n for r in runs)
    if n_ranges <= 1 or total == 0:
        return [(0, id_bound)]
    every = max(1, total // (64 * n_ranges))
    sample = np.sort(np.concatenate([r.sample_t0(every) for r in runs]))
    cuts = sorted({int(sample[int(len(sample) * i / n_ranges)]) for i in range(1, n_ranges)} - {0})
    bounds = [0, *cuts, id_bound]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]]


def merge_block(n_runs: int, budget: int = MERGE_BYTES) -> int:
    """Entries buffered per run so that a k-way merge of `n_runs` runs holds about `budget` bytes."""
    return int(max(1 << 12, min(BLOCK, budget // (BYTES_PER_MERGE_ENTRY * max(1, n_runs)))))


def merge_range(runs: list[Run], lo: int, hi: int, stem: str, block: int | None = None) -> Part:
    """k-way merge of `runs` over the 2-grams with lo <= t0 < hi, written to `<stem>.pairs/.keys/.lens`;
    `block` entries are buffered per run (default: merge_block, so memory does not grow with the runs)."""
    block = merge_block(len(runs)) if block is None else block
    part = Part(stem)
    packed = all(r.packed for r in runs) if runs else True
    shift = np.uint64(PACK_BITS if packed else 32)
    pos = [r.first_at_least(lo) for r in runs]
    end = [r.first_at_least(hi) for r in runs]
    bufs = [(_EMPTY, _EMPTY, np.empty(0, np.int64))] * len(runs)
    state = np.zeros(4, np.uint64)  # previous 2-gram, has one, its followers so far, -
    hist = np.zeros(1, np.int64)
    with open(stem + ".pairs", "wb") as fp, open(stem + ".keys", "wb") as fk, open(stem + ".lens", "wb") as fl:
        while True:
            for i, r in enumerate(runs):  # top up every buffer to `block` entries
                k0, k1, c = bufs[i]
                if len(c) < block and pos[i] < end[i]:
                    n0, n1, nc = r.read(pos[i], min(block - len(c), end[i] - pos[i]))
                    pos[i] += len(nc)
                    bufs[i] = (np.concatenate([k0, n0]), np.concatenate([k1, n1]) if not packed else _EMPTY,
                               np.concatenate([c, nc]))
            live = [i for i in range(len(runs)) if len(bufs[i][2])]
            if not live:
                break
            more = [i for i in live if pos[i] < end[i]]  # runs with entries beyond their buffer
            if more:  # merge only up to the smallest last-buffered key of those runs
                j = min(more, key=lambda i: (bufs[i][0][-1], bufs[i][1][-1] if not packed else 0))
                b0, b1 = bufs[j][0][-1], (bufs[j][1][-1] if not packed else np.uint64(0))
            else:
                b0 = b1 = np.uint64(0xFFFFFFFFFFFFFFFF)
            takes = np.array([_upper(bufs[i][0], bufs[i][1], b0, b1) if i in live else 0
                              for i in range(len(runs))], np.int64)
            cat0 = np.concatenate([bufs[i][0][:takes[i]] for i in range(len(runs))])
            cat1 = np.concatenate([bufs[i][1][:takes[i]] for i in range(len(runs))]) if not packed else _EMPTY
            catc = np.concatenate([bufs[i][2][:takes[i]] for i in range(len(runs))])
            starts = np.zeros(len(runs) + 1, np.int64)
            np.cumsum(takes, out=starts[1:])
            n = int(starts[-1])
            pairs = np.empty((n, 2), np.int32)
            keys = np.empty((n, 2), np.int32)
            lens = np.empty(n + 1, np.uint32)
            n_pairs, n_keys, n_lens = _kmerge(cat0, cat1, catc, starts, shift, state, pairs, keys, lens)
            _emit(part, fp, fk, fl, pairs[:n_pairs], keys[:n_keys], lens[:n_lens])
            hist = _add_hist(hist, lens[:n_lens])
            bufs = [tuple(a[takes[i]:] for a in bufs[i]) for i in range(len(runs))]
        if state[1]:  # the last 2-gram's follower count
            last = np.array([state[2]], np.uint32)
            fl.write(last.astype("<u4").data)
            hist = _add_hist(hist, last)
    part.hist = hist
    return part


def _emit(part: Part, fp, fk, fl, pairs, keys, lens) -> None:
    fp.write(pairs.data)
    fk.write(keys.data)
    fl.write(lens.astype("<u4").data)
    part.n_pairs += len(pairs)
    part.n_keys += len(keys)
    if len(pairs):
        c = pairs[:, 1]
        part.count_sum += int(c.sum(dtype=np.int64))
        part.count_max = max(part.count_max, int(c.max()))
        part.count_ones += int(np.count_nonzero(c == 1))
        part.max_id = max(part.max_id, int(pairs[:, 0].max()))
    if len(keys):
        part.max_id = max(part.max_id, int(keys.max()))


def _add_hist(hist: np.ndarray, lens: np.ndarray) -> np.ndarray:
    if not len(lens):
        return hist
    h = np.bincount(lens.astype(np.int64))
    if len(h) > len(hist):
        h[:len(hist)] += hist
        return h
    hist[:len(h)] += h
    return hist


@njit(cache=True)
def _upper(k0, k1, b0, b1):
    """Number of leading entries <= (b0, b1) in a sorted buffer (k1 empty: packed, b1 ignored)."""
    lo, hi = 0, k0.shape[0]
    wide = k1.shape[0] > 0
    while lo < hi:
        mid = (lo + hi) // 2
        if k0[mid] < b0 or (k0[mid] == b0 and (not wide or k1[mid] <= b1)):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _kmerge(k0, k1, c, starts, shift, state, pairs, keys, lens):
    """Merge the k sorted segments [starts[i], starts[i+1]) of (k0, k1, c), summing equal triples.

    Writes pairs (t2, count saturated), the keys of 2-grams that start here and the follower counts
    of 2-grams that end here (the last one stays open in `state` for the next call)."""
    k = starts.shape[0] - 1
    wide = k1.shape[0] > 0
    mask = (np.uint64(1) << shift) - np.uint64(1)
    low = np.uint64((1 << PACK_BITS) - 1)
    pos = starts[:-1].copy()
    n_pairs = n_keys = n_lens = 0
    while True:
        best = -1
        for i in range(k):  # linear scan: k is small
            if pos[i] < starts[i + 1]:
                if best < 0:
                    best = i
                else:
                    a, b = pos[i], pos[best]
                    if k0[a] < k0[b] or (wide and k0[a] == k0[b] and k1[a] < k1[b]):
                        best = i
        if best < 0:
            break
        p = pos[best]
        key0 = k0[p]
        key1 = k1[p] if wide else np.uint64(0)
        total = np.int64(0)
        for i in range(k):  # sum the equal triple in every segment
            q = pos[i]
            if q < starts[i + 1] and k0[q] == key0 and (not wide or k1[q] == key1):
                total += c[q]
                pos[i] = q + 1
        gram = key0 if wide else key0 >> np.uint64(PACK_BITS)
        if state[1] == 0 or gram != state[0]:
            if state[1] != 0:
                lens[n_lens] = np.uint32(state[2])
                n_lens += 1
            keys[n_keys, 0] = np.int32(gram >> shift)
            keys[n_keys, 1] = np.int32(gram & mask)
            n_keys += 1
            state[0] = gram
            state[1] = 1
            state[2] = 0
        state[2] += np.uint64(1)
        pairs[n_pairs, 0] = np.int32(key1 if wide else key0 & low)
        pairs[n_pairs, 1] = np.int32(min(total, COUNT_MAX))
        n_pairs += 1
    return n_pairs, n_keys, n_lens


def split_by_t0(keys: np.ndarray, counts: np.ndarray, bounds: list[int]) -> list[tuple]:
    """A sorted run cut at the first tokens `bounds` (ascending, without 0): one (k0, k1, c) per range."""
    packed = keys.shape[1] == 1
    shift = np.uint64(2 * PACK_BITS if packed else 32)
    cuts = np.searchsorted(keys[:, 0], np.array(bounds, np.uint64) << shift) if bounds else np.empty(0, np.int64)
    edges = [0, *cuts.tolist(), len(counts)]
    return [(np.ascontiguousarray(keys[a:b, 0]), np.ascontiguousarray(keys[a:b, 1]) if not packed else _EMPTY,
             counts[a:b]) for a, b in zip(edges[:-1], edges[1:])]


def merge_arrays(runs: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k-way merge of in-memory runs (k0, k1, c) of one key range: (pairs, keys, lens) of its table part."""
    runs = [r for r in runs if len(r[2])]
    if not runs:
        return np.empty((0, 2), np.int32), np.empty((0, 2), np.int32), np.empty(0, np.uint32)
    packed = len(runs[0][1]) == 0
    k0 = np.concatenate([r[0] for r in runs])
    k1 = np.concatenate([r[1] for r in runs]) if not packed else _EMPTY
    c = np.concatenate([r[2] for r in runs])
    starts = np.zeros(len(runs) + 1, np.int64)
    np.cumsum([len(r[2]) for r in runs], out=starts[1:])
    n = len(c)
    pairs, keys, lens = np.empty((n, 2), np.int32), np.empty((n, 2), np.int32), np.empty(n + 1, np.uint32)
    state = np.zeros(4, np.uint64)
    n_pairs, n_keys, n_lens = _kmerge(k0, k1, c, starts, np.uint64(PACK_BITS if packed else 32), state, pairs, keys, lens)
    lens[n_lens] = np.uint32(state[2])
    return pairs[:n_pairs].copy(), keys[:n_keys].copy(), lens[:n_lens + 1].copy()


def part_from_arrays(stem: str, pairs: np.ndarray, keys: np.ndarray, lens: np.ndarray) -> Part:
    """Write one range's (pairs, keys, lens) as a Part at `stem` (with its statistics)."""
    part = Part(stem)
    with open(stem + ".pairs", "wb") as fp, open(stem + ".keys", "wb") as fk, open(stem + ".lens", "wb") as fl:
        _emit(part, fp, fk, fl, pairs, keys, lens)
    part.hist = _add_hist(part.hist, lens)
    return part
