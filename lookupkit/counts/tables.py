"""The one in-memory form of n-gram follower counts that every format reads into and writes from.

`NgramTable` holds n-grams of any size 1..4 (llama.cpp's legacy files, dynamic caches); `StaticTable`
holds 2-grams only (static caches). Both are canonical: n-grams sorted, each n-gram's followers in one
contiguous run of (token, count) pairs sorted by token id, the order binary search needs and the
order that makes files built from the same counts byte-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from ..formats.spans import pack_spans


def _canonical_runs(keys: np.ndarray, offsets: np.ndarray, pairs: np.ndarray):
    """Sort keys (rows, lexicographically) and the pairs inside each run by token; keep first duplicates.

    Duplicate keys or duplicate tokens inside one key keep their first occurrence, as llama.cpp's
    loader does (`emplace` does not overwrite).
    """
    n = len(keys)
    lengths = np.diff(offsets)
    order = np.lexsort(keys.T[::-1])  # stable: the first of equal keys stays first
    sk = keys[order]
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = np.any(sk[1:] != sk[:-1], axis=1)
    order = order[first]
    run_of_pair = np.repeat(np.arange(n, dtype=np.int64), lengths)
    rank = np.empty(n, dtype=np.int64)
    rank[:] = -1
    rank[order] = np.arange(len(order))
    keep = rank[run_of_pair] >= 0
    pr = rank[run_of_pair][keep]
    pp = pairs[keep]
    pos = np.arange(len(pairs), dtype=np.int64)[keep]
    po = np.lexsort((pos, pp[:, 0], pr))
    pr, pp = pr[po], pp[po]
    dup = np.zeros(len(pp), dtype=bool)
    if len(pp) > 1:
        dup[1:] = (pr[1:] == pr[:-1]) & (pp[1:, 0] == pp[:-1, 0])
    pr, pp = pr[~dup], pp[~dup]
    new_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(np.bincount(pr, minlength=len(order)), out=new_offsets[1:])
    return keys[order], new_offsets, np.ascontiguousarray(pp, dtype=np.int32)


class _Runs:
    """What both tables are: KEY_WIDTH-token keys, offsets (n + 1,) int64 and the pairs (m, 2) int32
    (token, count) of each key's run."""

    KEY_WIDTH = 0

    @classmethod
    def canonical(cls, keys, offsets, pairs):
        """The table of these runs in canonical order (duplicates keep their first occurrence)."""
        return cls(*_canonical_runs(np.asarray(keys, np.int32).reshape(-1, cls.KEY_WIDTH),
                                    np.asarray(offsets, np.int64), np.asarray(pairs, np.int32).reshape(-1, 2)))


@dataclass
class NgramTable(_Runs):
    """n-grams of size 1..4, padded with -1 to 4 slots as in llama.cpp, with their follower runs."""

    KEY_WIDTH = 4
    ngrams: np.ndarray  # (n, 4) int32
    offsets: np.ndarray  # (n + 1,) int64
    pairs: np.ndarray  # (m, 2) int32: token, count

    @property
    def sizes(self) -> np.ndarray:
        return np.count_nonzero(self.ngrams != -1, axis=1)

    def to_dict(self) -> dict:
        """{ngram tuple (unpadded): {token: count}} — for tests and small tables."""
        out = {}
        for i, g in enumerate(self.ngrams.tolist()):
            a, b = self.offsets[i], self.offsets[i + 1]
            out[tuple(t for t in g if t != -1)] = dict(map(tuple, self.pairs[a:b].tolist()))
        return out


@dataclass
class StaticTable(_Runs):
    """2-gram → followers: the content of a static cache in canonical order."""

    KEY_WIDTH = 2
    keys: np.ndarray  # (n, 2) int32 (t0, t1), sorted, unique
    offsets: np.ndarray  # (n + 1,) int64
    pairs: np.ndarray  # (m, 2) int32: token, count

    @classmethod
    def from_ngrams(cls, table: NgramTable) -> "StaticTable":
        sizes = table.sizes
        if len(sizes) and not np.all(sizes == 2):
            bad = sorted(set(np.unique(sizes).tolist()) - {2})
            raise FormatError(f"not a static cache: it holds n-grams of size {bad}, a static cache holds 2-grams only")
        return cls(np.ascontiguousarray(table.ngrams[:, :2]), table.offsets, table.pairs)

    def to_ngrams(self) -> NgramTable:
        pad = np.full((len(self.keys), 2), -1, dtype=np.int32)
        return NgramTable(np.hstack([self.keys, pad]), self.offsets, self.pairs)

    @property
    def n_keys(self) -> int:
        return len(self.keys)

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)

    def spans(self) -> np.ndarray:
        """Constmap values (formats.spans: offset << SPAN_BITS | n_followers), checked against its bounds."""
        return pack_spans(self.offsets[:-1], np.diff(self.offsets), self.n_pairs)

    def to_dict(self) -> dict:
        return self.to_ngrams().to_dict()
