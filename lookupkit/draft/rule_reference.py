"""llama.cpp's drafting rule (common_ngram_cache_draft), written plainly: the spec in code.

This is the readable reference the fast engine is tested against, draft for draft. It follows
llama.cpp's common/ngram-cache.cpp with lookupkit's two determinism rules: among equal scores the
smallest token id wins (also for the share test), and an n-gram window that starts before position 0
is a miss. Python integers make every product and sum exact (llama.cpp's int32 ones can wrap).
"""

from __future__ import annotations

from typing import Protocol, Sequence

from ..rules import (CONTEXT_MIN_N, CONTEXT_MIN_P, DYNAMIC_MIN_N, DYNAMIC_MIN_P, NGRAM_MAX, NGRAM_MIN, STATIC, STATIC_MIN_N,
                     STATIC_MIN_P, STATIC_WEIGHT, context_code, dynamic_code)


class Followers(Protocol):
    def get(self, ngram: tuple[int, ...]) -> dict[int, int] | None: ...


class StaticSource(Protocol):
    def find(self, t0: int, t1: int) -> tuple[Sequence[int], Sequence[int]]: ...


def draft_reference(seq: Sequence[int], n_draft: int, ctx: Followers | None, dyn: Followers | None,
                    static: StaticSource | None = None, precheck: bool = True) -> tuple[list[int], list[int]]:
    """Draft up to `n_draft` tokens after `seq`; returns (tokens, source codes of lookupkit.rules).

    `seq` is the output so far (its last token is the one just sampled). The caches are not updated.
    `precheck` skips scoring an n-gram whose total or top-follower share already fails; it never
    changes the result, only the work done.
    """
    seq = [int(t) for t in seq]
    tokens: list[int] = []
    codes: list[int] = []
    if len(seq) < 2:
        return tokens, codes
    while len(tokens) < n_draft:
        s = seq + tokens
        weights = _static_part(static, s[-2], s[-1])
        keys = {n: tuple(s[len(s) - n:]) for n in range(NGRAM_MIN, NGRAM_MAX + 1) if len(s) - n >= 0}
        hit = _try_primary(ctx, keys, weights, CONTEXT_MIN_N, CONTEXT_MIN_P, precheck)
        if hit is not None:
            tok, code = hit[0], context_code(hit[1])
        else:
            hit = _try_primary(dyn, keys, weights, DYNAMIC_MIN_N, DYNAMIC_MIN_P, precheck)
            if hit is not None:
                tok, code = hit[0], dynamic_code(hit[1])
            else:
                tok, code = _try_static(weights), STATIC
        if tok is None:
            break
        tokens.append(tok)
        codes.append(code)
    return tokens, codes


def _static_part(static: StaticSource | None, t0: int, t1: int) -> dict[int, int]:
    """Followers of the 2-gram ending at the draft head in the static cache ({} if none)."""
    if static is None:
        return {}
    found = static.find(t0, t1)
    if found is None:
        return {}
    toks, counts = found
    return {int(t): int(c) for t, c in zip(toks, counts)}


def _try_primary(cache: Followers | None, keys: dict[int, tuple[int, ...]], weights: dict[int, int],
                 min_n: tuple[int, ...], min_p: tuple[int, ...], precheck: bool) -> tuple[int, int] | None:
    """The first n (NGRAM_MAX..NGRAM_MIN) whose weighted-argmax follower passes the thresholds: (token, n), or None."""
    if cache is None:
        return None
    for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
        part = cache.get(keys[n]) if n in keys else None
        if not part:
            continue
        total = sum(part.values())
        if precheck and (total < min_n[n - 1] or 100 * max(part.values()) < min_p[n - 1] * total):
            continue  # no follower can pass: the chosen one's count is at most the maximum
        best_tok, best_cp, best_score = -1, 0, 0
        for tok in sorted(part):  # ascending ids with strict '>' -> the smallest id wins ties
            cp = part[tok]
            cs = STATIC_WEIGHT * weights[tok] if tok in weights else 1
            if cp * cs > best_score:
                best_tok, best_cp, best_score = tok, cp, cp * cs
        if total < min_n[n - 1] or 100 * best_cp < min_p[n - 1] * total:
            continue
        return best_tok, n
    return None


def _try_static(weights: dict[int, int]) -> int | None:
    """The static cache alone: its most frequent follower (smallest id on ties) if it passes."""
    if not weights:
        return None
    total = sum(weights.values())
    best_tok = min(weights, key=lambda t: (-weights[t], t))
    if total < STATIC_MIN_N or 100 * weights[best_tok] < STATIC_MIN_P * total:
        return None
    return best_tok
