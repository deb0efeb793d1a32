"""Summary statistics of a static cache: how many followers each 2-gram has, as a CDF.

`stats_from_hist` computes them from running totals (a histogram of followers per 2-gram and the count
totals), which is all a streamed merge keeps; `follower_stats` from whole arrays, through it.

Computed once, from run lengths and follower counts, both by the `.lkc` writer (stored in the header, so
`inspect` can show them for files without keys) and by `StaticCache.stats()`/`verify()` (which checks
the header's copy against the data).
"""

from __future__ import annotations

import numpy as np

PERCENTILES = (50, 90, 99, 99.9)


def _thresholds(max_len: int) -> list[int]:
    """1, 2, 3, 4, then powers of two, up to and including the largest run."""
    out = [1, 2, 3, 4]
    k = 8
    while k < max_len:
        out.append(k)
        k *= 2
    return [t for t in out if t < max_len] + [max_len] if max_len > 0 else []


def follower_stats(lengths: np.ndarray, counts: np.ndarray) -> dict:
    """Statistics of runs with `lengths` followers each, and of all follower `counts`.

    followers_cdf[i] = {followers: k, keys: share of 2-grams with <= k followers, pairs: share of all
    (token, count) pairs that sit in such runs}.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    counts = np.asarray(counts)
    hist = np.bincount(lengths) if len(lengths) else np.zeros(1, np.int64)
    return stats_from_hist(hist, int(counts.sum(dtype=np.int64)), int(counts.max()) if len(counts) else 0,
                           int(np.count_nonzero(counts == 1)))


def stats_from_hist(hist: np.ndarray, count_sum: int, count_max: int, count_ones: int) -> dict:
    """follower_stats(lengths, counts) given hist = bincount(lengths) and sum/max/#ones of counts."""
    hist = np.trim_zeros(np.asarray(hist, dtype=np.int64), "b")
    n_keys = int(hist.sum())
    if n_keys == 0:
        hist = np.zeros(1, np.int64)
    max_len = len(hist) - 1 if n_keys else 0
    keys_le = np.cumsum(hist)
    pairs_le = np.cumsum(hist * np.arange(len(hist)))
    n_pairs = int(pairs_le[-1])
    cdf = [{"followers": k, "keys": round(float(keys_le[k]) / n_keys, 6),
            "pairs": round(float(pairs_le[k]) / max(n_pairs, 1), 6)} for k in _thresholds(max_len)]
    pct = {f"p{p:g}": (int(np.searchsorted(keys_le, np.ceil(p / 100 * n_keys))) if n_keys else 0)
           for p in PERCENTILES}
    return {
        "n_keys": n_keys,
        "n_pairs": n_pairs,
        "n_tokens": int(count_sum),
        "max_followers": max_len,
        "mean_followers": round(n_pairs / n_keys, 6) if n_keys else 0.0,
        "followers_percentiles": pct,
        "followers_cdf": cdf,
        "max_count": int(count_max) if n_pairs else 0,
        "count_one_pairs": round(float(count_ones) / max(n_pairs, 1), 6),
    }
