"""A static cache's 2-gram map value, the same in .lkc and ggngcmap (SPEC.md): `offset << SPAN_BITS |
n_followers`, the run of a 2-gram's followers in the pairs section (offset counted in pairs).

Named once here: the writers pack with `pack_spans` (StaticTable.spans, the streamed writer), the lookups and
key recovery (lookupkit.static) unpack with SPAN_BITS.
"""

from __future__ import annotations

import numpy as np

from lookupkit.errors import FormatError

SPAN_BITS = 24  # value = offset << 24 | n_followers
MAX_FOLLOWERS = (1 << SPAN_BITS) - 1
MAX_OFFSET = 1 << 40


def pack_spans(starts: np.ndarray, lengths: np.ndarray, n_pairs: int) -> np.ndarray:
    """The map values of runs starting at `starts` with `lengths` followers, checked against the format's
    bounds (`n_pairs`: all the pairs the runs lie in)."""
    if len(lengths) and int(lengths.max()) > MAX_FOLLOWERS:
        raise FormatError(f"a 2-gram has {int(lengths.max())} followers; the format allows {MAX_FOLLOWERS}")
    if n_pairs >= MAX_OFFSET:
        raise FormatError(f"{n_pairs} pairs exceed the format's 2^40 positions")
    return (starts.astype(np.uint64) << np.uint64(SPAN_BITS)) | lengths.astype(np.uint64)


def span_lengths(values: np.ndarray) -> np.ndarray:
    """The follower counts (run lengths) of map values, as int64."""
    return (values & np.uint64(MAX_FOLLOWERS)).astype(np.int64)
