"""The lookupkit policy written plainly: the spec the compiled policy.chain is tested against, draft for draft.

Caches are the readable ones (counts.dict_cache.NgramCache for context and dynamic, anything with
`.find(t0, t1)` for the static 2-grams) and the higher orders a dict {n: {n-gram tuple: (top follower,
total, share)}} as counts.high_orders keeps them (total saturated at TOTAL_MAX, share in 1/SHARE_ONE units:
formats.lkc_orders). The suffix index is a lookupkit.suffix.SuffixIndex, searched by brute force
(lookupkit.suffix.reference). A history is its log (History.tokens(): sequences led by -1), searched by
brute force too.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..formats.lkc_orders import SHARE_ONE
from ..rules import HISTORY_MIN_MATCH, LONG_MATCH, NGRAM_MAX, SHORT_DRAFT
from ..counts.match_index import MATCH_LENGTHS
from ..suffix import reference as brute
from .chain import (AGREE_MAX, FAMILY, P_BINS, SHARE_BINS, SRC_DYNAMIC, SRC_HISTORY, SRC_MATCH, SRC_STATIC,
                     SRC_SUFFIX, TOTAL_BINS, history_rows)
from .trust import CHAIN, N_ROWS
from .suffix_source import LENGTH_EDGES, MAX_LEN, MIN_SHARE, min_match_of


def _bins(count: int, total: int) -> tuple[int, int]:
    return min(SHARE_BINS - 1, count * SHARE_BINS // total), min(TOTAL_BINS - 1, max(total, 1).bit_length() - 1)


def _top(part: dict[int, int]) -> tuple[int, int, int]:
    """(token, count, total) of a follower dict: the largest count, smallest id on ties."""
    tok = min(part, key=lambda t: (-part[t], t))
    return tok, part[tok], sum(part.values())


def candidates(s: list[int], ctx, dyn, static, high: dict, n_real: int | None = None) -> dict[int, tuple[int, int, int]]:
    """{table source: (token, share bin, total bin)} for the next token after `s`, whose first n_real
    tokens are the real sequence (the rest drafted); the longest-match source's adds its match length."""
    n_real = len(s) if n_real is None else n_real
    out = {}
    for n in range(1, NGRAM_MAX + 1):
        if len(s) >= n:
            for base, cache in ((0, ctx), (SRC_DYNAMIC, dyn)):
                part = cache.get(tuple(s[len(s) - n:])) if cache is not None else None
                if part:
                    tok, cnt, total = _top(part)
                    out[base + n - 1] = (tok, *_bins(cnt, total))
    if static is not None and len(s) >= 2:
        toks, counts = static.find(s[-2], s[-1])
        if len(toks):
            tok, cnt, total = _top(dict(zip(map(int, toks), map(int, counts))))
            out[SRC_STATIC] = (tok, *_bins(cnt, total))
    for n, kept in sorted(high.items()):  # shortest first, stopping at the first order without the n-gram
        if len(s) < n or tuple(s[len(s) - n:]) not in kept:
            break
        tok, total, share = kept[tuple(s[len(s) - n:])]
        out[SRC_STATIC + n - 2] = (tok, min(SHARE_BINS - 1, share * SHARE_BINS // SHARE_ONE), _bins(1, total)[1])
    for m in MATCH_LENGTHS.tolist():  # longest first; matches end in the real sequence, followed by a real token
        hit = next((e for e in range(n_real - 2, m - 2, -1) if len(s) >= m and s[e - m + 1:e + 1] == s[len(s) - m:]), None)
        if hit is not None:
            out[SRC_MATCH] = (s[hit + 1], min(SHARE_BINS - 1, m), 0, m)
            break
    return out


def history_candidate(log: list[int] | None, s: list[int]) -> dict[int, tuple[int, int, int, int]]:
    """{SRC_HISTORY: (follower, share bin = m, 0, m)} of the longest m (MATCH_LENGTHS, >= HISTORY_MIN_MATCH) whose
    last m tokens of s the log holds followed by a token, at the latest such place; {} if none."""
    for m in MATCH_LENGTHS.tolist() if log else []:
        if m < HISTORY_MIN_MATCH or len(s) < m:
            continue
        hit = next((e for e in range(len(log) - 2, m - 2, -1) if log[e + 1] >= 0 and log[e - m + 1:e + 1] == s[-m:]),
                   None)
        if hit is not None:
            return {SRC_HISTORY: (log[hit + 1], min(SHARE_BINS - 1, m), 0, m)}
    return {}


def suffix_run(index, s: list[int], n: int, max_len: int = MAX_LEN) -> tuple[int, list[int], list[int], list[int]]:
    """(match length, run tokens, counts, totals) of at most n tokens after the longest suffix of s (at most
    max_len tokens) occurring in the index's corpus; no match: (0, [], [], [])."""
    m, lo, hi = brute.longest_match(index.text, index.sa, s, max_len)
    if m == 0:
        return 0, [], [], []
    return (m, *brute.continuation(index.text, index.sa, m, lo, hi, n, MIN_SHARE))


def suffix_candidate(run: tuple, chain: list[int]) -> dict[int, tuple[int, int, int]]:
    """{table row: (token, length bin, count bin, length m + k)} of the run's next token, if the chain is the run's
    prefix."""
    m, tokens, counts, totals = run
    k = len(chain)
    if k >= len(tokens) or tokens[:k] != chain:
        return {}
    length_bin = max(b for b, edge in enumerate(LENGTH_EDGES.tolist()) if edge <= m + k)
    row = SRC_SUFFIX + (counts[k] < totals[k])
    return {row: (tokens[k], length_bin, _bins(1, counts[k])[1], m + k)}


def choose(cands: dict, table: np.ndarray, factors=None) -> tuple[int, int, int]:
    """(token, probability bin, agreement bin) of the most probable candidate, each table probability times its
    family's trust factor (policy.trust; none: 1), capped at 1 (smallest id on ties)."""
    f = np.ones(N_ROWS) if factors is None else factors
    prob = {src: min(1.0, table[src, c[1], c[2]] * f[FAMILY[src]]) for src, c in cands.items()}
    p, neg_tok, neg_src = max((prob[src], -c[0], -src) for src, c in cands.items())
    src = -neg_src
    others = [prob[o] for o, c in cands.items() if o != src and c[0] == -neg_tok]
    agree = 0 if not others else 1 + min(AGREE_MAX - 1, int(max(others) * AGREE_MAX))
    return -neg_tok, min(P_BINS - 1, int(p * P_BINS)), agree


def proposals(cands: dict, table: np.ndarray) -> dict[int, tuple[int, float]]:
    """{family: (token, table probability)} of each family's most probable candidate (first row on ties)."""
    out = {}
    for src, (tok, sb, tb, *_) in sorted(cands.items()):
        g, p = int(FAMILY[src]), float(table[src, sb, tb])
        if p > out.get(g, (-1, 0.0))[1]:
            out[g] = (tok, p)
    return out


def learn_trust(evidence: np.ndarray, params, record: list, truth: list[int]) -> None:
    """policy.trust.learn_outcome written plainly: `record` the last call's [(chain token, proposals)] per
    computed position, `truth` the tokens that followed; evidence (N_ROWS, 2) updated in place."""
    decay = params[1]
    for (chained, props), t in zip(record, truth):
        for g, (tok, p) in sorted(props.items()):
            evidence[g] = decay * evidence[g] + (p, 1.0 if tok == t else 0.0)
        if chained != t:
            break


def draft_policy_reference(seq: Sequence[int], n_draft: int, ctx, dyn, static, high: dict, tables: tuple,
                           cost: Sequence[float], suffix=None, max_len: int = MAX_LEN, history=None, factors=None,
                           record: list | None = None, others: float = 0.0) -> list[int]:
    """The prefix of the candidate chain after `seq` with the largest (others + E_k) / cost[k] (policy.chain's
    docstring; others: what the other slots of a shared step are expected to yield, 0 for one sequence;
    the shortest of equally good ones), the chain grown only while a longer prefix could still win. `suffix`:
    a suffix index, drafted from if the table has learnt it (any of its rows non-zero), after matches of at
    least the edge of the first length bin its rows have learnt. `history`: a History's log (or None), drafted
    from with the table's history row (chain.history_rows). `factors`: the trust factor per family (policy.trust);
    `record`, if a list, gets (chain token or None, proposals and the chain's (token, probability) at CHAIN) per
    position whose candidates were looked up."""
    table, agree = tables
    table = history_rows(table)
    log = [int(t) for t in history] if history is not None else None
    n_draft = min(n_draft, len(cost) - 1)
    s, chain = [int(t) for t in seq], []
    on = suffix is not None and np.any(table[SRC_SUFFIX:SRC_SUFFIX + 2]) and s
    run = suffix_run(suffix, s, n_draft, max_len) if on else (0, [], [], [])
    if run[0] < min_match_of(table[SRC_SUFFIX:SRC_SUFFIX + 2]):
        run = (run[0], [], [], [])
    expected, p_all = 1.0 + others, 1.0
    best, best_k = expected / cost[0], 0
    while s and len(chain) < n_draft:
        k = len(chain)
        if not any(expected + p_all * (j - k) > best * cost[j] for j in range(k + 1, n_draft + 1)):
            break  # no longer prefix could win, even if every further token were as likely as this one
        cands = {**candidates(s + chain, ctx, dyn, static, high, len(s)), **suffix_candidate(run, chain),
                 **history_candidate(log, s + chain)}
        if record is not None:
            record.append((None, proposals(cands, table)))
        if not cands:
            break
        tok, p_bin, n_agree = choose(cands, table, factors)
        if k >= SHORT_DRAFT and max([c[3] for c in cands.values() if c[0] == tok and len(c) > 3], default=0) < LONG_MATCH:
            break  # past a short draft, only a token that follows a long match (text being copied)
        q = agree[p_bin, n_agree]
        if record is not None:
            record[-1] = (tok, {**record[-1][1], **({CHAIN: (tok, float(q))} if q > 0 else {})})
        p_all *= min(1.0, q * (1.0 if factors is None else factors[CHAIN]))
        expected += p_all
        chain.append(tok)
        if expected > best * cost[k + 1]:
            best, best_k = expected / cost[k + 1], k + 1
    return chain[:best_k]
