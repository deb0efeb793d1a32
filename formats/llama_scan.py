"""The compiled pass over a llama.cpp legacy cache file (`formats.llama`): index its records, then split
them into n-grams and (token, count) runs. Apart from `llama`, so that reading any other format's header
needs no compiled code.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def scan(words):
    """Index the records of a legacy file given as int32 words; returns (n_records, error_code, where)."""
    n = words.shape[0]
    i = 0
    count = 0
    while i < n:
        if i + 5 > n:
            return count, 1, i
        k = words[i + 4]
        if k <= 0:
            return count, 2, i
        if i + 5 + 2 * k > n:
            return count, 1, i
        for j in range(k):
            if words[i + 5 + 2 * j + 1] <= 0:
                return count, 3, i
        i += 5 + 2 * k
        count += 1
    return count, 0, i


@njit(cache=True)
def split(words, n_records, ngrams, offsets, pairs):
    """Copy the n_records records into ngrams (n, 4), offsets (n + 1) and pairs (n_pairs, 2)."""
    i = 0
    p = 0
    for r in range(n_records):
        for j in range(4):
            ngrams[r, j] = words[i + j]
        k = words[i + 4]
        offsets[r] = p
        for j in range(k):
            pairs[p, 0] = words[i + 5 + 2 * j]
            pairs[p, 1] = words[i + 6 + 2 * j]
            p += 1
        i += 5 + 2 * k
    offsets[n_records] = p
