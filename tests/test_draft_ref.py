"""The reference drafter: each rule of ../shared/docs/llama-lookup.md section 4/5 pinned by a hand-made case."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit.draft.rule_reference import draft_reference
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.rules import STATIC


def cache(parts: dict) -> NgramCache:
    c = NgramCache()
    c.parts = {k: dict(v) for k, v in parts.items()}
    return c


EMPTY = cache({})


def draft(seq, ctx=EMPTY, dyn=EMPTY, static=None, n=1, precheck=True):
    return draft_reference(seq, n, ctx, dyn, static, precheck=precheck)


def test_nothing_drafted_from_fewer_than_two_tokens():
    ctx = cache({(1,): {2: 5}})
    assert draft([1], ctx) == ([], [])
    assert draft([], ctx) == ([], [])


def test_ties_go_to_the_smallest_token_id():
    ctx = cache({(0, 7): {5: 1, 3: 1}})  # 5 inserted first: llama.cpp's iteration order may pick 5
    assert draft([0, 7], ctx) == ([3], [2])
    static = cache({(4, 8): {9: 2, 6: 2}})
    assert draft([4, 8], static=static) == ([6], [STATIC])


def test_static_weighting_beats_a_larger_primary_count():
    static = cache({(0, 7): {5: 2}})
    # score of 5 = 1 * 100 * 2 = 200 > 50 * 1: 5 wins the weighted argmax, but its share 1/51 fails the
    # 50 % test, so the context fails; the static cache alone then drafts its only follower
    assert draft([0, 7], cache({(0, 7): {3: 50, 5: 1}}), static=static) == ([5], [STATIC])
    # 201 > 200: the primary count wins again
    assert draft([0, 7], cache({(0, 7): {3: 201, 5: 1}}), static=static) == ([3], [2])


def test_share_test_uses_the_weighted_winner_not_the_next_best():
    # 2-gram: 3 wins by weight with share 1/4 < 50 % -> n = 2 fails (5, share 3/4, is not tried);
    # the 1-gram then drafts.
    ctx = cache({(0, 7): {3: 1, 5: 3}, (7,): {9: 2}})
    static = cache({(0, 7): {3: 1, 9: 1}})
    assert draft([0, 7], ctx, static=static) == ([9], [1])


def test_longest_ngram_first_and_source_codes():
    ctx = cache({(1, 2, 3, 4): {8: 1}, (4,): {9: 5}})
    assert draft([1, 2, 3, 4], ctx) == ([8], [4])
    dyn = cache({(2, 3, 4): {6: 3}})
    assert draft([1, 2, 3, 4], EMPTY, dyn) == ([6], [4 + 3])


def test_lax_and_strict_thresholds_at_their_boundaries():
    # context n=1: total >= 2 and share >= 66 % (2 of 3 = 66.7 % passes)
    assert draft([0, 4], cache({(4,): {8: 2, 9: 1}})) == ([8], [1])
    assert draft([0, 4], cache({(4,): {8: 1}})) == ([], [])
    assert draft([0, 4], cache({(4,): {8: 1, 9: 1}})) == ([], [])
    # context n=2: total >= 2 and 50 % (a 50/50 split passes)
    assert draft([3, 4], cache({(3, 4): {8: 1}})) == ([], [])
    assert draft([3, 4], cache({(3, 4): {8: 1, 9: 1}})) == ([8], [2])
    # context n=4: total >= 1 and 50 %
    assert draft([1, 2, 3, 4], cache({(1, 2, 3, 4): {8: 1}})) == ([8], [4])
    assert draft([1, 2, 3, 4], cache({(1, 2, 3, 4): {7: 1, 8: 1, 9: 1}})) == ([], [])
    # dynamic n=1: total >= 4 and 75 %
    assert draft([0, 4], EMPTY, cache({(4,): {8: 3, 9: 1}})) == ([8], [5])
    assert draft([0, 4], EMPTY, cache({(4,): {8: 3}})) == ([], [])
    assert draft([0, 4], EMPTY, cache({(4,): {8: 5, 9: 2}})) == ([], [])
    # dynamic n=4: total >= 2 and 66 %
    assert draft([1, 2, 3, 4], EMPTY, cache({(1, 2, 3, 4): {8: 2, 9: 1}})) == ([8], [8])
    assert draft([1, 2, 3, 4], EMPTY, cache({(1, 2, 3, 4): {8: 1}})) == ([], [])
    assert draft([1, 2, 3, 4], EMPTY, cache({(1, 2, 3, 4): {8: 1, 9: 1}})) == ([], [])
    # static alone: total >= 2 and 50 %
    assert draft([3, 4], static=cache({(3, 4): {8: 1}})) == ([], [])
    assert draft([3, 4], static=cache({(3, 4): {8: 1, 9: 1}})) == ([8], [STATIC])
    assert draft([3, 4], static=cache({(3, 4): {7: 1, 8: 1, 9: 1}})) == ([], [])


def test_order_of_sources_context_then_dynamic_then_static():
    ctx = cache({(4,): {1: 2}})
    dyn = cache({(3, 4): {2: 5}})
    static = cache({(3, 4): {3: 5}})
    assert draft([3, 4], ctx, dyn, static) == ([1], [1])
    assert draft([3, 4], EMPTY, dyn, static) == ([2], [6])
    assert draft([3, 4], EMPTY, EMPTY, static) == ([3], [STATIC])


def test_windows_before_position_zero_are_misses():
    # llama.cpp would read heap memory in front of the draft (often 33) for these windows
    ctx = cache({(33, 1, 2): {7: 9}, (2, 1, 2): {7: 9}, (33, 33, 1, 2): {7: 9}})
    assert draft([1, 2], ctx) == ([], [])
    # with one drafted token the 4-gram window still starts before 0, the 3-gram does not
    ctx = cache({(1, 2): {5: 2}, (1, 2, 5): {6: 2}, (2, 1, 2, 5): {9: 9}})
    assert draft([1, 2], ctx, n=2) == ([5, 6], [2, 3])


def test_drafted_tokens_feed_the_next_keys_and_drafting_stops_at_the_first_miss():
    ctx = cache({(1,): {2: 2}, (2,): {3: 2}, (3,): {1: 2}})
    assert draft([0, 1], ctx, n=5) == ([2, 3, 1, 2, 3], [1] * 5)
    ctx = cache({(1,): {2: 2}, (2,): {3: 2}})
    assert draft([0, 1], ctx, n=5) == ([2, 3], [1, 1])


def test_arithmetic_does_not_wrap_at_32_bits():
    # 100 * 30,000,000 overflows int32 (llama.cpp wraps it negative and would pick 5)
    ctx = cache({(0, 7): {3: 1, 5: 1}})
    static = cache({(0, 7): {3: 30_000_000, 5: 1}})
    assert draft([0, 7], ctx, static=static) == ([3], [2])
    ctx = cache({(0, 7): {3: 1, 5: 2}})  # 5 wins without static support on 3 ...
    assert draft([0, 7], ctx) == ([5], [2])
    # ... 3 wins with it and fails the share test (1/3); the static cache alone then drafts 3
    assert draft([0, 7], ctx, static=static) == ([3], [STATIC])


@st.composite
def drafting_states(draw):
    """A sequence whose context cache is its own n-grams (as in lookup-stats), random dynamic/static caches."""
    vocab = draw(st.integers(2, 8))
    toks = st.lists(st.integers(0, vocab - 1), max_size=60)
    seq = draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=60))
    ctx, dyn, sta = NgramCache(), NgramCache(), NgramCache()
    ctx.update(seq)
    for _ in range(draw(st.integers(0, 3))):
        dyn.update(draw(toks))
    sta.update(draw(toks), 2, 2)
    for part in sta.parts.values():  # occasionally huge static counts
        for tok in part:
            part[tok] *= draw(st.sampled_from([1, 1, 1, 1000, 10**7]))
    return seq, ctx, dyn, sta, draw(st.integers(1, 8))


@given(drafting_states())
@settings(max_examples=300, deadline=None)
def test_precheck_never_changes_a_draft(state):
    seq, ctx, dyn, sta, n = state
    with_static = draft_reference(seq, n, ctx, dyn, sta, precheck=True)
    assert with_static == draft_reference(seq, n, ctx, dyn, sta, precheck=False)
    assert draft_reference(seq, n, ctx, dyn, None, precheck=True) == draft_reference(seq, n, ctx, dyn, None,
                                                                                      precheck=False)
