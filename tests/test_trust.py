"""The policy's online trust (policy.trust): a source the table over-rates on this text is declined, a declined
source that becomes right again is drafted from again, and the update is the hand-worked rule. The compiled
trust is checked against the reference draft for draft in test_policy.py."""

from __future__ import annotations

import numpy as np
import pytest

from lookupkit.policy.chain import (AGREE_MAX, FAMILY, N_SOURCES, P_BINS, SHARE_BINS, SRC_DYNAMIC, SRC_STATIC,
                                    TOTAL_BINS, make_policy)
from lookupkit.policy.trust import FAMILIES, N_ROWS, learn_outcome, new_trust, note
from lookupkit.replay.loop import replay_fast
from lookupkit.rules import SOURCE_NAMES, STATIC
from test_policy import phrase_stream, with_orders

NO_TRUST = (0.0, 0.0)
COST = 0.3  # verifying 1 + k tokens costs 1 + COST k


def over_rated_static() -> tuple:
    """A table that believes the static 2-gram (0.9) over the context (0.5), and an agreement table that passes
    the winner's probability through."""
    table = np.full((N_SOURCES, SHARE_BINS, TOTAL_BINS), 0.0)
    table[:SRC_DYNAMIC] = 0.5
    table[SRC_STATIC] = 0.9
    agree = np.repeat(((np.arange(P_BINS) + 0.5) / P_BINS)[:, None], AGREE_MAX + 1, axis=1)
    return table, agree


def speed(trace) -> float:
    """Tokens per verify step, as the cost model prices them."""
    return float((trace.n_accepted + 1).sum() / (1 + COST * trace.n_drafted).sum())


def static_tokens(trace, start: int = 0) -> tuple[int, int]:
    """(drafted, accepted) tokens from the static 2-gram in calls at positions >= start."""
    drafted = accepted = 0
    at = 0
    for pos, k, a in zip(trace.pos, trace.n_drafted, trace.n_accepted):
        src = trace.sources[at:at + k]
        if pos >= start:
            drafted += int((src == STATIC).sum())
            accepted += int((src[:a] == STATIC).sum())
        at += k
    return drafted, accepted


def replay(seq, cache, trust):
    pol = make_policy(over_rated_static(), lambda k: 1 + COST * k, 8, cache.high if cache else None, trust=trust)
    return replay_fast(seq, len(seq) - 1, 8, static=cache, policy=pol)[0]


def test_a_source_the_table_over_rates_is_declined_and_costs_nothing():
    seq = phrase_stream(5, n=6000)
    backwards = phrase_stream(5, n=20_000)[::-1].copy()  # the same phrases read backwards: every follower is wrong
    cache, _ = with_orders([backwards], orders=(3,))
    blind, trusting, alone = replay(seq, cache, NO_TRUST), replay(seq, cache, (8.0, 8.0)), replay(seq, None, (8.0, 8.0))
    d_blind, a_blind = static_tokens(blind)
    d_trust, _ = static_tokens(trusting)
    assert d_blind > 1000 and a_blind < 0.05 * d_blind  # believed and wrong: without the trust it costs
    assert speed(blind) < 0.93 * speed(alone)
    assert d_trust < 0.05 * d_blind  # with it, the source is declined after a few wrong drafts
    assert speed(trusting) >= 0.99 * speed(alone)  # and the policy is as fast as without the cache


def test_a_declined_source_is_drafted_from_again_once_it_is_right():
    wrong, right = phrase_stream(5, n=3000), phrase_stream(77, n=3000)
    cache, _ = with_orders([phrase_stream(77, n=20_000)], orders=(3,))
    seq = np.concatenate([wrong, right])
    trace = replay(seq, cache, (8.0, 8.0))
    first, _ = static_tokens(trace)
    late, late_ok = static_tokens(trace, start=len(wrong) + 200)
    assert late > 0.3 * (len(right) - 200) / 8 and late_ok > 0.5 * late  # watched while declined, then trusted


def test_the_update_by_hand():
    """Two positions scored: at 0 the context (p .5) is right and the static (p .8) wrong, the chain's token is
    right; at 1 the static (p .6) is right, the chain's token wrong: scoring stops after it."""
    t = new_trust(4, 8.0, 4.0)  # decay 0.75
    ctx, st = FAMILIES.index("context"), FAMILIES.index("static")
    assert FAMILY[0] == ctx and FAMILY[SRC_STATIC] == st
    note(t, 0, ctx, 10, 0.5)
    note(t, 0, st, 11, 0.8)
    note(t, 0, st, 12, 0.3)  # a less probable row of the same family is not its candidate
    note(t, 1, st, 20, 0.6)
    note(t, 2, ctx, 30, 0.9)
    t.n[0] = 3
    truth = np.array([0, 10, 20, 30], np.int32)
    chain = np.array([10, 21, 30], np.int32)
    learn_outcome(t, truth, 1, 4, chain, 0)
    want = np.zeros((N_ROWS, 2))
    want[ctx] = (0.5, 1.0)
    want[st] = (0.75 * 0.8 + 0.6, 0.75 * 0.0 + 1.0)
    np.testing.assert_allclose(t.evidence, want)
    assert t.n[0] == 0  # scored once
    learn_outcome(t, truth, 1, 4, chain, 0)
    np.testing.assert_allclose(t.evidence, want)


def test_a_bad_trust_is_one_error():
    from lookupkit import Drafter
    from lookupkit.errors import InputError

    for bad in ("yes", (1.0,), (-1.0, 8.0), (float("nan"), 8.0), None):
        with pytest.raises(InputError, match="trust must be True, False or"):
            Drafter(policy="lookupkit", trust=bad)
    assert Drafter(policy="lookupkit", trust=(4, 16))._pol.trust.params.tolist() == [4.0, 1 - 1 / 16]


def test_every_source_has_a_family():
    names = {FAMILIES[g] for g in FAMILY}
    assert names == set(FAMILIES) and len(FAMILY) == N_SOURCES + 1
    assert SOURCE_NAMES[STATIC] == "s2"
