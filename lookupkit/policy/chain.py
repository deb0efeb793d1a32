"""The lookupkit policy, compiled: draft a token only while its expected acceptance pays for verifying it.

llama.cpp's rule drafts whatever passes fixed thresholds, n-gram size first; on WikiText-103 its context
4-gram drafts the most tokens and is its least accepted source, and a badly drafted token costs a verified
position. Here every source proposes its candidate for the next token — the context and dynamic caches
for n = 1..4 (top follower, share, total), the static 2-gram, the static cache's higher orders
(counts.high_orders), the longest earlier match in the sequence, the run of tokens that follows the
longest match in the static cache's corpus (its suffix index: policy.suffix_source), and the longest match
in earlier sequences (a History: draft.history) — and a confidence
table (policy.confidence, learnt on held-out data) turns each candidate's evidence (source and order,
share bin, total bin) into P(accepted), corrected online by how often each family of sources has been right
on the text at hand (policy.trust: a source the table over-rates here is declined, and costs nothing). The most probable candidate is drafted, token after token, into a
chain, and the call drafts the prefix of that chain whose expected yield per unit of verify cost is largest:

    k* = argmax_k  E_k / cost[k],   E_k = 1 + P_1 + ... + P_k,

where P_j is the probability that tokens 1..j are all accepted (the product of their confidences, each
estimated given the ones before were right, as the sequence then equals the truth) and cost[k] the cost
of verifying 1 + k tokens (1 + C k, or a curve measured by `lookupkit calibrate`). The chain stops as soon
as no longer prefix could beat the best one even if every further token were as likely as the chain so
far, and past rules.SHORT_DRAFT tokens it goes on only with tokens that follow a match of rules.LONG_MATCH tokens or
more, its drafted tokens included (text being copied: a long earlier run in the sequence, the history or the static
corpus); short evidence drafts stay short, whatever a long curve would allow. Choosing over the whole chain rather than stopping at the first token that does not pay matters for
measured curves, which are not convex (a longer batch can cost less than a shorter one:
bench/RESULTS.md: Figures the code's comments rely on), so a rule
that stops at the first dearer step never reaches the cheap long batches that long copies need. A call that drafts
nothing costs 1 step and yields 1 token, exactly plain decoding: declining is free.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..counts.flat import BEST, MAXC, TOTAL, find_hashed, hash_key
from ..errors import InputError
from ..kernels import kernel, ngram_before, token_at
from ..counts.match_index import longest_match, new_index
from ..counts.history_index import history_match, no_history
from ..counts.high_orders import hash_final, hash_start, hash_step
from ..formats.lkc_orders import SHARE_ONE, TOTAL_MAX, VALUE_TOKEN_SHIFT, VALUE_TOTAL_SHIFT
from ..formats.constmap import NOT_FOUND
from ..formats.constmap_probe import lookup_in
from ..rules import (HISTORY, HISTORY_MIN_MATCH, LONG_MATCH, LONGEST_MATCH, MAX_STATIC_ORDER, NGRAM_MAX, SHORT_DRAFT,
                     STATIC, SUFFIX, TRUST_PRIOR, TRUST_WINDOW)
from ..static.high_orders import High, no_high
from ..static.source import head_part, static_top
from .suffix_source import fresh, length_bin, min_match_of, no_suffix, suffix_arrays, suffix_candidate
from . import trust as tr

# Sources in the confidence table: context n = 1..4, dynamic n = 1..4, static n = 2..MAX_STATIC_ORDER,
# the longest earlier match in the sequence (its length m in the share-bin axis), and the suffix index's
# run tokens in two rows, unanimous then majority (match length bin in the share-bin axis, count bin in
# the total-bin axis). Tables learnt before the suffix source have SRC_SUFFIX rows (confidence.load pads
# them with zeros, and a table whose suffix rows are all zero never drafts from it).
SRC_DYNAMIC = NGRAM_MAX
SRC_STATIC = 2 * NGRAM_MAX  # the static 2-gram; order n at SRC_STATIC + n - 2
SRC_MATCH = SRC_STATIC + MAX_STATIC_ORDER - 1
SRC_SUFFIX = SRC_MATCH + 1
N_SOURCES = SRC_SUFFIX + 2
# The history's candidate (draft.history) is one row past the stored table: its evidence is the sequence's
# own longest-match source's (the match length m, from rules.HISTORY_MIN_MATCH on), and make_policy gives it
# that source's learnt rows (history_rows says why), so table files keep N_SOURCES rows and the compiled
# policy has N_CANDIDATES.
SRC_HISTORY = N_SOURCES
N_CANDIDATES = N_SOURCES + 1
# The trust family (policy.trust) of each candidate row.
FAMILY = np.array([0] * NGRAM_MAX + [1] * NGRAM_MAX + [2] * (MAX_STATIC_ORDER - 1) + [3, 4, 4, 5], np.int64)
assert len(FAMILY) == N_CANDIDATES and tr.FAMILIES[FAMILY[SRC_HISTORY]] == "history"
SHARE_BINS = 20
TOTAL_BINS = 12  # total 1, 2-3, 4-7, ..., >= 2^11
POLICIES = ("llama.cpp", "lookupkit")
P_BINS = 40  # the best candidate's table probability, in bins of 2.5 %
AGREE_MAX = 8  # the best other source proposing the same token: 0 = none, else 1 + its probability in 8 bins

Policy = namedtuple("Policy", "on table agree cost high cand index suffix history trust step")
Policy.__doc__ = """What a compiled loop needs to draft with the policy: on (1, or 0 for llama.cpp's rule);
table (N_CANDIDATES, SHARE_BINS, TOTAL_BINS) float64 P(accepted) per evidence bin; agree (P_BINS, AGREE_MAX
+ 1) float64: P(accepted) of the most probable candidate by its table bin and by the table probability
of the best other source proposing the same token (bin 0: none does); cost float64,
cost[k] = cost of verifying 1 + k tokens relative to 1 (k = 0..n_draft, inf past a measured curve);
high: the static cache's higher orders; cand: (N_CANDIDATES, 4) int64 scratch (candidates()); index: the sequence's
counts.match_index (state, like the context cache: the owner keeps it in step and grows it); suffix: the
static cache's suffix index (policy.suffix_source.Suffix; its state is reset by the owner when a sequence
starts over); history: a History's arrays (counts.history_index.Hist; read under the History's lock); trust:
the online correction of each family's table probabilities (policy.trust.Trust: state, like the index; the
owner calls learn(pol, ...) once the truth after a call is known); step float64 (4 + n_draft,): in, step[0] the
tokens the other slots of a shared step are expected to yield (0 for one sequence: cost is then this call's alone);
out, step[1] the tokens the call is expected to yield, its accepted drafts and the one sampled after them, step[2]
the length L of the chain it computed (drafted[d0:d0+L], a prefix drafted) and step[3 + j] the tokens its first j
tokens would be expected to yield, j = 0..L (a shared step's plan chooses among them: verify_cost.StepPricer.plan)."""


def check_policy(name: str) -> str:
    if name not in POLICIES:
        raise InputError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    return name


def make_policy(tables: tuple, cost_of, n_draft: int, high: High | None, suffix=None, history=None,
                trust: tuple = (TRUST_PRIOR, TRUST_WINDOW)) -> Policy:
    """A Policy for drafts of at most n_draft tokens from (table, agree) (policy.confidence); cost_of(k) =
    cost of verifying 1 + k tokens; suffix: a lookupkit.suffix.SuffixIndex (a static cache's) or None,
    used only if the table has learnt the suffix source (`suffix_on`), after matches as long as the first
    length bin its rows have learnt (suffix_source.min_match_of); history: a History's view() or None;
    trust: (prior, window) of the online correction (policy.trust; prior 0: off)."""
    cost = np.array([cost_of(k) for k in range(n_draft + 1)], np.float64)
    table, agree = tables
    pol = Policy(np.int64(1), history_rows(table), np.ascontiguousarray(agree, np.float64), cost, no_high(),
                 np.zeros((N_CANDIDATES, 4), np.int64), new_index(), no_suffix(),
                 history if history is not None else no_history(), tr.new_trust(n_draft, *trust), np.zeros(4 + n_draft))
    return with_static(pol, high, suffix)


def with_static(pol: Policy, high: High | None, suffix=None) -> Policy:
    """pol drafting from another static cache's higher orders and suffix index (the rest of its state kept)."""
    table = pol.table
    sx = suffix_arrays(suffix if suffix_on(table) else None, len(pol.cost) - 1,
                       min_match=min_match_of(table[SRC_SUFFIX:SRC_SUFFIX + 2]))
    return pol._replace(high=high if high is not None else no_high(), suffix=sx)


def history_rows(table) -> np.ndarray:
    """The table with the history's row (N_CANDIDATES rows): the one given (a table learnt with a history) or,
    for a stored table of N_SOURCES rows, a copy of the longest-match source's. Why a copy: both are the
    follower of an exact earlier match of the same lengths, the shipped tables (learnt on a model's own
    generations) have no served sessions to learn the history's own rows from, and from 8 tokens on (the
    history drafts after no shorter match: rules.HISTORY_MIN_MATCH, where the measurement is) matches in
    earlier independent texts were right about as often as matches earlier in the same text; a retried or
    re-sent request, the case the history is for, is right more often."""
    table = np.asarray(table, np.float64)
    if table.shape[0] == N_SOURCES:
        table = np.concatenate([table, table[SRC_MATCH:SRC_MATCH + 1]])
    return np.ascontiguousarray(table)


def suffix_on(table) -> bool:
    """Whether a table has learnt the suffix source (rows never learnt are zero: it never drafts from them)."""
    return bool(np.any(np.asarray(table)[SRC_SUFFIX:SRC_SUFFIX + 2]))


def own_state(pol: Policy, index) -> Policy:
    """pol with a fresh match index, suffix state and trust of its own (each replay starts from nothing)."""
    return pol._replace(index=index, suffix=fresh(pol.suffix), trust=tr.fresh(pol.trust), step=np.zeros_like(pol.step))


@kernel
def learn(pol, truth, base, n_known, chain, c0):
    """Tell the policy what followed its last call (policy.trust.learn_outcome; nothing for llama.cpp's rule)."""
    if pol.on:
        tr.learn_outcome(pol.trust, truth, base, n_known, chain, c0)


def llama_rule() -> Policy:
    """The stand-in that makes the compiled loops draft with llama.cpp's rule instead."""
    return Policy(np.int64(0), np.zeros((N_CANDIDATES, SHARE_BINS, TOTAL_BINS)), np.zeros((P_BINS, AGREE_MAX + 1)),
                  np.ones(1), no_high(), np.zeros((N_CANDIDATES, 4), np.int64), new_index(1), no_suffix(), no_history(),
                  tr.new_trust(0, 0.0, 0.0), np.zeros(4))


@kernel
def share_bin(count, total):
    return min(SHARE_BINS - 1, (count * SHARE_BINS) // total)


@kernel
def total_bin(total):
    b = 0
    while total > 1 and b < TOTAL_BINS - 1:
        total >>= 1
        b += 1
    return b


@kernel
def _flat(c, seq, n_seq, drafted, d0, length, n, out, src):
    """The cache's candidate for the n-gram ending at `length`: out[src] = token, share bin, total bin."""
    out[src, 0] = -1
    if length - n < 0:
        return
    k0, k1, k2, k3 = ngram_before(seq, n_seq, drafted, d0, length, n)
    e = find_hashed(c, hash_key(k0, k1, k2, k3), k0, k1, k2, k3)
    if e >= 0 and c.ent[e, TOTAL] > 0:
        out[src, 0] = c.ent[e, BEST]
        out[src, 1] = share_bin(c.ent[e, MAXC], c.ent[e, TOTAL])
        out[src, 2] = total_bin(c.ent[e, TOTAL])


@kernel
def _static2(st, memo, seq, n_seq, drafted, d0, length, out):
    """The static 2-gram ending at `length`: out[SRC_STATIC] = its top follower, share bin, total bin."""
    out[SRC_STATIC, 0] = -1
    if length < 2:
        return
    tok, best, total = static_top(st, memo, head_part(st, memo, seq, n_seq, drafted, d0, length))
    if total > 0:
        out[SRC_STATIC, 0], out[SRC_STATIC, 1], out[SRC_STATIC, 2] = tok, share_bin(best, total), total_bin(total)


@kernel
def _high(high, seq, n_seq, drafted, d0, length, out):
    """The stored higher orders' candidates for the n-grams ending at `length`, shortest order first,
    stopping at the first order that has none: an n-gram seen fewer than min_total times cannot have a
    longer context seen more often, so the lookups left would mostly miss (hit rates fall fast with n, and
    the stop saves a large share of the lookups: bench/RESULTS.md: Figures the code's comments rely on)."""
    for r in range(high.params.shape[0]):
        out[SRC_STATIC + np.int64(high.params[r, 0]) - 2, 0] = -1
    for r in range(high.params.shape[0]):
        n = np.int64(high.params[r, 0])
        if length - n < 0:
            return
        h = hash_start(n)
        for j in range(length - n, length):
            h = hash_step(h, token_at(seq, n_seq, drafted, d0, j))
        key = hash_final(h) >> np.uint64(high.fbits)
        v = lookup_in(np.int32(np.uint32(key & np.uint64(0xFFFFFFFF))), np.int32(np.uint32(key >> np.uint64(32))),
                      high.params[r, 1], high.params[r, 2], high.params[r, 3], high.words, high.params[r, 4],
                      high.params[r, 5])
        if v == NOT_FOUND:
            return
        src = SRC_STATIC + n - 2
        out[src, 0] = np.int64(v >> np.uint64(VALUE_TOKEN_SHIFT))
        total = np.int64((v >> np.uint64(VALUE_TOTAL_SHIFT)) & np.uint64(TOTAL_MAX))
        share = np.int64(v & np.uint64(SHARE_ONE))
        out[src, 1] = min(SHARE_BINS - 1, (share * SHARE_BINS) // SHARE_ONE)
        out[src, 2] = total_bin(total)


@kernel
def candidates(seq, n_seq, drafted, d0, k, ctx, dyn, st, memo, high, index, sx, hist, n_run, out):
    """Every source's candidate after seq[:n_seq] + drafted[d0:d0+k] (called for k = 0, 1, ... in turn:
    the suffix source looks up at k = 0, a run of at most n_run tokens): out (N_CANDIDATES, 4) rows of token
    (-1 = none), share bin (the match length's bin for the match sources), total bin (the suffix's count), and the
    match length itself for the match sources (0 for the others)."""
    length = n_seq + k
    out[:, 3] = 0
    for n in range(1, NGRAM_MAX + 1):
        _flat(ctx, seq, n_seq, drafted, d0, length, n, out, n - 1)
        _flat(dyn, seq, n_seq, drafted, d0, length, n, out, SRC_DYNAMIC + n - 1)
    _static2(st, memo, seq, n_seq, drafted, d0, length, out)
    for src in range(SRC_STATIC + 1, N_CANDIDATES):
        out[src, 0] = -1
    _high(high, seq, n_seq, drafted, d0, length, out)
    tok, m = longest_match(index, seq, n_seq, drafted, d0, length)
    if tok >= 0:
        out[SRC_MATCH, 0], out[SRC_MATCH, 1], out[SRC_MATCH, 2], out[SRC_MATCH, 3] = tok, min(SHARE_BINS - 1, m), 0, m
    tok, m, count, total = suffix_candidate(sx, seq, n_seq, drafted, d0, k, n_run)
    if tok >= 0:
        row = SRC_SUFFIX + (1 if count < total else 0)
        out[row, 0], out[row, 1], out[row, 2], out[row, 3] = tok, length_bin(m), total_bin(count), m
    tok, m = history_match(hist, seq, n_seq, drafted, d0, length, HISTORY_MIN_MATCH)
    if tok >= 0:
        out[SRC_HISTORY, 0], out[SRC_HISTORY, 1], out[SRC_HISTORY, 2], out[SRC_HISTORY, 3] = tok, min(SHARE_BINS - 1, m), 0, m


@kernel
def source_code(src):
    """The trace's source code (rules.SOURCE_NAMES) of a table source: context n and dynamic n are
    rules.context_code(n) = n and rules.dynamic_code(n) = 4 + n, i.e. src + 1; static n is STATIC for
    n = 2, else 20 + n (tests/test_policy.py checks these against rules)."""
    if src < SRC_STATIC:
        return src + 1
    if src == SRC_HISTORY:
        return HISTORY
    if src == SRC_MATCH:
        return LONGEST_MATCH
    if src >= SRC_SUFFIX:
        return SUFFIX
    return STATIC if src == SRC_STATIC else 20 + src - SRC_STATIC + 2


@kernel
def choose(pol, cand, j):
    """The most probable candidate, each table probability scaled by its family's trust (smallest id on ties):
    (token, table source, its probability bin, the agreement bin: 0 if no other source proposes that token,
    else 1 + the best such source's probability in AGREE_MAX bins); token -1 if no source has one. Notes every
    family's candidate at chain position j for policy.trust."""
    best_p, best_tok, best_src = -1.0, np.int64(-1), 0
    tr.clear_position(pol.trust, j)
    for src in range(N_CANDIDATES):
        tok = cand[src, 0]
        if tok >= 0:
            raw = pol.table[src, cand[src, 1], cand[src, 2]]
            tr.note(pol.trust, j, FAMILY[src], tok, raw)
            p = min(1.0, raw * tr.factor(pol.trust, FAMILY[src]))
            if p > best_p or (p == best_p and tok < best_tok):
                best_p, best_tok, best_src = p, tok, src
    second = -1.0
    for src in range(N_CANDIDATES):
        if src != best_src and cand[src, 0] == best_tok:
            p = min(1.0, pol.table[src, cand[src, 1], cand[src, 2]] * tr.factor(pol.trust, FAMILY[src]))
            second = max(second, p)
    agree = 0 if second < 0 else 1 + min(AGREE_MAX - 1, np.int64(second * AGREE_MAX))
    return best_tok, best_src, min(P_BINS - 1, np.int64(best_p * P_BINS)), agree


@kernel
def _match_behind(cand, tok):
    """The longest match (in the sequence, the history or the static corpus) whose follower is tok (0: none)."""
    m = 0
    for src in range(N_CANDIDATES):
        if cand[src, 0] == tok and cand[src, 3] > m:
            m = cand[src, 3]
    return m


@kernel
def _could_beat(cost, k, n_draft, expected, p_all, best):
    """Whether some prefix longer than k could beat ratio `best` if each further token had probability p_all."""
    for j in range(k + 1, n_draft + 1):
        if (expected + p_all * (j - k)) > best * cost[j]:
            return True
    return False


@kernel
def policy_draft(seq, n_seq, n_draft, ctx, dyn, st, memo, pol, drafted, sources, d0):
    """Draft after seq[:n_seq] into drafted[d0:], sources[d0:] the chain prefix that pays best (module
    docstring; in a shared step, the best (others + E_k) / cost[k]: pol.step); returns its length."""
    others = pol.step[0]
    pol.step[1], pol.step[2], pol.step[3] = 1.0, 0.0, 1.0
    if n_seq < 1:
        return 0
    n_draft = min(n_draft, pol.cost.shape[0] - 1, pol.step.shape[0] - 4)
    k, best_k = 0, 0
    pol.trust.n[0] = 0
    p_all, expected = 1.0, 1.0 + others
    best = expected / pol.cost[0]
    cand = pol.cand
    while k < n_draft and _could_beat(pol.cost, k, n_draft, expected, p_all, best):
        candidates(seq, n_seq, drafted, d0, k, ctx, dyn, st, memo, pol.high, pol.index, pol.suffix, pol.history,
                   n_draft, cand)
        best_tok, best_src, p_bin, agree = choose(pol, cand, k)
        pol.trust.n[0] = k + 1
        if best_tok < 0 or (k >= SHORT_DRAFT and _match_behind(cand, best_tok) < LONG_MATCH):
            break
        q = pol.agree[p_bin, agree]
        tr.note(pol.trust, k, tr.CHAIN, best_tok, q)
        p_next = p_all * min(1.0, q * tr.factor(pol.trust, tr.CHAIN))
        drafted[d0 + k] = best_tok
        sources[d0 + k] = source_code(best_src)
        p_all, expected = p_next, expected + p_next
        k += 1
        pol.step[2], pol.step[3 + k] = k, expected - others
        if expected > best * pol.cost[k]:
            best, best_k = expected / pol.cost[k], k
            pol.step[1] = expected - others
    return best_k
