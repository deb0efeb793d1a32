"""The static cache's higher orders (n >= 3) as the compiled policy reads them: one uint64 view of the
buffer every order's map lies in, and per order the map's hash parameters and word offsets.

One view, not one pair of arrays per order: the number of orders varies and numba's loops index one
parameter table; the maps stay where they are (in the file's mapping), nothing is copied.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

High = namedtuple("High", "words params fbits")
High.__doc__ = """words: a uint64 array holding every order's VMAP0001 data and checks; params (n_orders, 6)
uint64 rows order, seed, segment_length, segment_count_length, data offset, checks offset (in words);
fbits: the follower bits of their keys (counts.high_orders). No higher orders: zero rows."""


def no_high() -> High:
    return High(np.zeros(1, np.uint64), np.zeros((0, 6), np.uint64), np.int64(0))


def high_of(maps: dict, buf, meta: dict | None) -> High:
    """High over `maps` ({n: ConstMapView}, each viewing `buf`); `meta` is the header's `orders` object."""
    if not maps:
        return no_high()
    words = np.frombuffer(buf, dtype=np.uint64, count=len(buf) // 8)
    base = words.__array_interface__["data"][0]
    rows = []
    for n, cmap in sorted(maps.items()):
        if cmap.n_keys == 0:
            continue  # an empty map never hits (and its arrays lie outside buf)
        at = (cmap.data.__array_interface__["data"][0] - base) // 8, (cmap.checks.__array_interface__["data"][0] - base) // 8
        rows.append([n, *(int(x) for x in cmap.hash_args), *at])
    return High(words, np.array(rows, np.uint64).reshape(-1, 6), np.int64(64 - int(meta["key_bits"])))
