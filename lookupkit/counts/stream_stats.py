"""`follower_stats` from running totals instead of whole arrays, for tables that never sit in memory.

The same numbers, computed the same way (the histogram of followers per 2-gram is what
follower_stats builds first), from a histogram and the count totals a streamed merge keeps.
"""

from __future__ import annotations

import numpy as np

from .follower_stats import PERCENTILES, _thresholds


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
