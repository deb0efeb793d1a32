"""The suffix index's readable definition: what build, longest_match and continuation must return,
by brute force over the corpus (small inputs only; the tests hold the compiled search to it)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from ..formats.lkc_suffix import SEPARATOR


def suffix_array(text: np.ndarray) -> np.ndarray:
    """Positions sorted by their suffix (Python list order: a suffix that is a prefix of another is smaller)."""
    t = [int(x) for x in text]
    return np.array(sorted(range(len(t)), key=lambda i: t[i:]), np.int64)


def occurrences(text: np.ndarray, pattern: Sequence[int]) -> list[int]:
    """Every start position of `pattern` (no SEPARATOR in it) in the text."""
    t, p = [int(x) for x in text], [int(x) for x in pattern]
    return [i for i in range(len(t) - len(p) + 1) if t[i:i + len(p)] == p]


def longest_match(text: np.ndarray, sa: np.ndarray, context: Sequence[int], max_len: int = 64) -> tuple[int, int, int]:
    """(length, lo, hi): the longest suffix of the last max_len context tokens that occurs, and the rows of sa
    holding its occurrences (which are consecutive); (0, 0, len(text)) if none."""
    ctx = [int(x) for x in context]
    rank = {int(p): r for r, p in enumerate(sa)}
    for m in range(min(len(ctx), max_len), 0, -1):
        occ = occurrences(text, ctx[len(ctx) - m:])
        if occ:
            rows = sorted(rank[p] for p in occ)
            assert rows == list(range(rows[0], rows[0] + len(rows))), "occurrences are one SA range"
            return m, rows[0], rows[-1] + 1
    return 0, 0, len(text)


def continuation(text: np.ndarray, sa: np.ndarray, length: int, lo: int, hi: int, max_tokens: int = 16,
                 min_share: float = 0.5) -> tuple[list[int], list[int], list[int]]:
    """(tokens, counts, totals): while the most frequent next token of the occurrences (ties: smaller id) has
    count >= min_share * total and is not SEPARATOR, take it and keep the occurrences it followed."""
    starts = [int(p) for p in sa[lo:hi]]
    tokens, counts, totals = [], [], []
    m = length
    while len(tokens) < max_tokens and starts:
        nxt = Counter(int(text[p + m]) for p in starts)
        tok, cnt = min(nxt.items(), key=lambda kv: (-kv[1], kv[0]))
        if cnt < min_share * len(starts) or tok == SEPARATOR:
            break
        tokens.append(tok)
        counts.append(cnt)
        totals.append(len(starts))
        starts = [p for p in starts if text[p + m] == tok]
        m += 1
    return tokens, counts, totals
