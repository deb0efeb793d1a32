"""A synthetic corpus of token ids with a realistic growth of distinct 2-grams, and that growth measured.

The generator is a Zipf-Markov chain over a vocabulary of `vocab` ids. Token frequencies follow a
Zipf law (exponent `unigram_s`, ids shuffled): a table U of 2^22 slots holds each id in proportion to
its probability. The follower of token a is U[h(a, r)], where r, the follower's *rank*, is drawn from
a truncated Zipf law of exponent `rank_s` over `ranks` ranks and h is a 64-bit mix: every token has
its own ordered list of likely followers (the first ranks dominate), drawn from the unigram law. With
probability `reset` the chain forgets its context and draws the next id from U directly (a topic or
sentence break). A 2-gram (a, b) is new when rank r of a is drawn for the first time, so distinct
2-grams grow sub-linearly in the number of tokens N (Heaps' law, about N^(1/rank_s) per token a), as
in real text; `growth` measures the curve (distinct 2-grams and (2-gram, follower) pairs at
prefixes) of any id file, real or synthetic, so the two can be compared and fitted.

Output: raw little-endian int32 ids, written in blocks (bounded memory), deterministic for a seed.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from numba import njit

from lookupkit.files import atomic_writer
from lookupkit.kernels import GOLDEN

TABLE_BITS = 22
BLOCK = 1 << 24  # ids generated and written at a time


@dataclass(frozen=True)
class ZipfMarkov:
    vocab: int = 151_646  # qwen2's regular tokens
    unigram_s: float = 1.05
    rank_s: float = 1.35
    ranks: int = 1 << 16
    reset: float = 0.02
    seed: int = 0

    def params(self) -> dict:
        return asdict(self)


def _unigram_table(g: ZipfMarkov) -> np.ndarray:
    rng = np.random.default_rng(g.seed)
    p = 1.0 / np.arange(1, g.vocab + 1, dtype=np.float64) ** g.unigram_s
    p /= p.sum()
    slots = 1 << TABLE_BITS
    counts = np.floor(p * slots).astype(np.int64)
    counts[: slots - int(counts.sum())] += 1  # the remainder to the most frequent ids
    ids = rng.permutation(g.vocab).astype(np.int32)
    table = np.repeat(ids, counts)
    rng.shuffle(table)
    return table


def _rank_cdf(g: ZipfMarkov) -> np.ndarray:
    w = 1.0 / np.arange(1, g.ranks + 1, dtype=np.float64) ** g.rank_s
    return np.cumsum(w / w.sum())


@njit(cache=True)
def _mix(x):
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return x


@njit(cache=True)
def _fill(out, prev, table, cdf, reset, seed, block_no):
    """Fill `out` continuing the chain from `prev`; returns the last id."""
    np.random.seed((seed * 1000003 + block_no) & 0x7FFFFFFF)
    mask = np.uint64(table.shape[0] - 1)
    for i in range(out.shape[0]):
        u = np.random.random()
        if prev < 0 or u < reset:
            prev = table[np.int64(_mix(np.uint64(np.random.randint(0, 1 << 30)) + np.uint64(7)) & mask)]
        else:
            r = np.searchsorted(cdf, np.random.random())
            h = _mix((np.uint64(prev) << np.uint64(20)) ^ np.uint64(r) ^ GOLDEN)
            prev = table[np.int64(h & mask)]
        out[i] = prev
    return prev


def generate(path: str | os.PathLike, n_tokens: int, g: ZipfMarkov = ZipfMarkov()) -> Path:
    """Write `n_tokens` ids of the chain `g` to `path` (int32 LE), atomically; the first n ids of a larger
    run are the same as a smaller run's (blocks are seeded by their index), so sizes are prefixes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table, cdf = _unigram_table(g), _rank_cdf(g)
    prev, buf = -1, np.empty(BLOCK, np.int32)
    with atomic_writer(path) as f:
        for b, start in enumerate(range(0, n_tokens, BLOCK)):
            out = buf[: min(BLOCK, n_tokens - start)]
            prev = _fill(out, prev, table, cdf, g.reset, g.seed, b)
            f.write(out.astype("<i4").data)
    return path


def growth(ids: np.ndarray, points: list[int]) -> list[dict]:
    """Distinct 2-grams that have a follower, and distinct (2-gram, follower) triples, in ids[:n] for each
    n in `points` (one document: a 2-gram counts when a third token follows it)."""
    out = []
    bits = max(1, int(ids.max()).bit_length()) if len(ids) else 1
    if 3 * bits > 64:
        raise ValueError(f"ids need {bits} bits; 3 x {bits} does not fit 64")
    for n in sorted(points):
        n = min(n, len(ids))
        a = ids[: n - 2].astype(np.uint64)
        b = ids[1 : n - 1].astype(np.uint64)
        grams = (a << np.uint64(bits)) | b
        del a
        n_keys = len(np.unique(grams))
        tri = (grams << np.uint64(bits)) | ids[2:n].astype(np.uint64)
        del grams, b
        n_pairs = len(np.unique(tri))
        del tri
        out.append({"tokens": n, "keys": n_keys, "pairs": n_pairs})
    return out


def fit_power(rows: list[dict], what: str) -> tuple[float, float]:
    """(a, b) of what = a * tokens^b, least squares in log-log."""
    x = np.log([r["tokens"] for r in rows])
    y = np.log([r[what] for r in rows])
    b, la = np.polyfit(x, y, 1)
    return float(math.exp(la)), float(b)

