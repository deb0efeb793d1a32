"""llama.cpp's drafting constants, pinned by hand-worked cases on any machine (no ../shared needed).

The fast engine and the readable reference share lookupkit.rules, so their property tests cannot see a
constant that changed in both. Each case below is worked out by hand from llama.cpp's rule as
../shared/docs/llama-lookup.md section 4 states it, with the expected draft written in the test; each
sits on the edge of one constant (the static weight 100, the lax thresholds 2,2,1,1 / 66,50,50,50 of the
context cache, the strict thresholds 4,3,2,2 / 75,66,66,66 of the dynamic cache, the static cache's own
2 / 50, the smallest-id tie rule, n-grams of 1..4), so changing that constant changes the answer: every
element of the four threshold arrays has a case at its edge.
"""

from __future__ import annotations

import numpy as np
import pytest

from lookupkit import Drafter, StaticCache
from lookupkit.counts.bigrams import count_static
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.draft.rule_reference import draft_reference

N_VOCAB = 64


def static_of(*docs) -> StaticCache:
    return StaticCache.from_table(count_static([np.array(d, np.int32) for d in docs], N_VOCAB))


def both(seq, n_draft=1, earlier=None, static=None) -> tuple[list[int], list[int]]:
    """(fast engine's draft, reference's draft) after `seq`; `earlier`: a sequence learnt into the dynamic cache."""
    fast = Drafter(static=static)
    ctx, dyn = NgramCache(), None
    if earlier is not None:
        fast.accept(earlier)
        fast.reset(learn=True)
        dyn = NgramCache()
        dyn.update(earlier)
    ctx.update(seq)
    got = fast.draft(seq, n_draft)
    ref, _ = draft_reference(seq, n_draft, ctx, dyn, static)
    return got, ref


CASES = {
    # context 1-gram (5) -> {7: 2, 8: 1}: 7's share 2/3 passes the lax 66 % (200 >= 198; 67 % would fail);
    # no 2..4-gram of the end was seen before
    "lax n=1 share 66 %": ([5, 7, 1, 5, 7, 2, 5, 8, 3, 5], 1, None, None, [7]),
    # (5) -> {7: 2, 8: 1, 9: 1}: 50 % < 66 %: nothing
    "lax n=1 share below": ([5, 7, 1, 5, 7, 2, 5, 8, 3, 5, 9, 4, 5], 1, None, None, []),
    # (5) -> {7: 2}: exactly lax MIN_N 2 samples for n = 1 (the 2-gram (2, 5) was never seen)
    "lax n=1 2 samples": ([5, 7, 1, 5, 7, 2, 5], 1, None, None, [7]),
    # (5) -> {7: 1}: one sample < lax MIN_N 2 for n = 1: nothing
    "lax n=1 needs 2 samples": ([5, 7, 1, 5], 1, None, None, []),
    # then (5, 7) -> {1: 1, 2: 1}: lax n=2 needs 2 samples at 50 %: passes, the tie goes to the smallest id 1;
    # then (5, 7, 1) -> {5: 1}: lax n=3 takes one sample
    "lax n=2 50 % and the tie rule": ([5, 7, 1, 5, 7, 2, 5, 8, 3, 5], 3, None, None, [7, 1, 5]),
    # 4-gram (1,2,3,4) -> {6: 1, 7: 2} gives 7; the 3-gram (2,3,4) -> {6: 1, 7: 2, 8: 3} would give 8 and the
    # 5-gram (9,1,2,3,4) -> {6: 1} would give 6: llama.cpp's n-grams stop at 4
    "n-grams of at most 4": ([9, 1, 2, 3, 4, 6, 0, 1, 2, 3, 4, 7, 0, 1, 2, 3, 4, 7,
                              5, 2, 3, 4, 8, 5, 2, 3, 4, 8, 5, 2, 3, 4, 8, 9, 1, 2, 3, 4], 1, None, None, [7]),
    # 4-gram (1,2,3,4) -> {9: 1}: lax n=4 takes one sample (with 2 the 3-gram (2,3,4) -> {9: 1, 8: 2} gives 8)
    "lax n=4 one sample": ([1, 2, 3, 4, 9, 0, 2, 3, 4, 8, 0, 2, 3, 4, 8, 1, 2, 3, 4], 1, None, None, [9]),
    # 4-gram (1,2,3,4) -> {6: 1, 7: 1}: 50 % passes lax n=4, the tie goes to 6 (at 51 % the 3-gram
    # (2,3,4) -> {6: 1, 7: 1, 8: 3} would give 8)
    "lax n=4 share 50 %": ([1, 2, 3, 4, 6, 1, 2, 3, 4, 7, 0, 2, 3, 4, 8, 0, 2, 3, 4, 8, 0, 2, 3, 4, 8,
                            1, 2, 3, 4], 1, None, None, [6]),
    # no 4-gram; 3-gram (2,3,4) -> {6: 1, 7: 1}: 50 % passes lax n=3 (at 51 % the 2-gram (3,4) -> {6: 1, 7: 1,
    # 5: 3} would give 5)
    "lax n=3 share 50 %": ([9, 2, 3, 4, 6, 8, 2, 3, 4, 7, 0, 3, 4, 5, 0, 3, 4, 5, 0, 3, 4, 5,
                            1, 2, 3, 4], 1, None, None, [6]),
    # dynamic (3, 5) -> {7: 2}: 2 samples < strict n=2's 3, and (5) -> {7: 2} < 4: nothing
    "strict n=2 needs 3 samples": ([3, 5], 1, [3, 5, 7, 0, 3, 5, 7, 0], None, []),
    # dynamic (2, 3, 5) -> {7: 2}: strict n=3 needs 2 samples (with 3, (3, 5) and (5) have too few: nothing)
    "strict n=3 2 samples": ([1, 2, 3, 5], 1, [2, 3, 5, 7, 0, 2, 3, 5, 7, 0], None, [7]),
    # dynamic (2, 3, 5) -> {7: 2, 8: 1}: 66.7 % passes strict n=3's 66 %; (3, 5) and (5) -> {7: 2, 8: 1, 9: 2}
    # fail at 40 %, so at 67 % nothing is drafted
    "strict n=3 share 66 %": ([1, 2, 3, 5], 1, [2, 3, 5, 7, 0, 2, 3, 5, 7, 0, 2, 3, 5, 8, 0,
                                               4, 3, 5, 9, 0, 4, 3, 5, 9, 0], None, [7]),
    # dynamic (1, 2, 3, 5) -> {7: 2}: strict n=4 needs 2 samples; (2, 3, 5), (3, 5), (5) -> {7: 2, 9: 3} fail
    "strict n=4 2 samples": ([1, 2, 3, 5], 1, [1, 2, 3, 5, 7, 0, 1, 2, 3, 5, 7, 0, 6, 2, 3, 5, 9, 0,
                                               6, 2, 3, 5, 9, 0, 6, 2, 3, 5, 9, 0], None, [7]),
    # dynamic (1, 2, 3, 5) -> {7: 2, 8: 1}: 66.7 % passes strict n=4's 66 %; the shorter n-grams add 9: 2 and fail
    "strict n=4 share 66 %": ([1, 2, 3, 5], 1, [1, 2, 3, 5, 7, 0, 1, 2, 3, 5, 7, 0, 1, 2, 3, 5, 8, 0,
                                                6, 2, 3, 5, 9, 0, 6, 2, 3, 5, 9, 0], None, [7]),
    # dynamic (5) -> {7: 3, 8: 1}: strict n=1 needs 4 samples at 75 %: exactly met
    "strict n=1 4 samples 75 %": ([1, 5], 1, [5, 7, 0, 5, 7, 0, 5, 7, 0, 5, 8, 0], None, [7]),
    # dynamic (5) -> {7: 3}: 3 samples < 4
    "strict n=1 needs 4 samples": ([1, 5], 1, [5, 7, 0, 5, 7, 0, 5, 7, 0], None, []),
    # dynamic (5) -> {7: 5, 8: 2}: 71 % < 75 %
    "strict n=1 share below": ([1, 5], 1, [5, 7, 0, 5, 7, 0, 5, 7, 0, 5, 7, 0, 5, 7, 0, 5, 8, 0, 5, 8, 0], None, []),
    # dynamic (3, 5) -> {7: 2, 8: 1}: strict n=2 needs 3 samples at 66 %: 200 >= 198, passes
    "strict n=2 3 samples 66 %": ([3, 5], 1, [3, 5, 7, 0, 3, 5, 7, 0, 3, 5, 8, 0], None, [7]),
    # static alone: (1, 5) -> {7: 1, 8: 1}: 2 samples at 50 % pass, the tie goes to 7
    "static alone 2 samples 50 %": ([1, 5], 1, None, static_of([1, 5, 7], [1, 5, 8]), [7]),
    "static alone needs 2 samples": ([1, 5], 1, None, static_of([1, 5, 7]), []),
    # context (5) -> {7: 99, 8: 1}; static (2, 5) -> {8: 1}: 8 scores 1 * 100 * 1 = 100 > 99, wins, and its
    # share 1/100 fails: nothing (with a weight below 100, 7 would win at 99 %)
    "static weight 100 beats 99": ([2, 5, 7] + [5, 7] * 98 + [5, 8, 2, 5], 1, None, static_of([2, 5, 8]), []),
    # (5) -> {7: 100, 8: 1}: 100 = 100, a tie, and the smallest id 7 wins at 99 % (with a weight above 100, 8
    # would win and fail)
    "static weight 100 ties 100": ([2, 5, 7] + [5, 7] * 99 + [5, 8, 2, 5], 1, None, static_of([2, 5, 8]), [7]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hand_worked_case(name):
    seq, n_draft, earlier, static, want = CASES[name]
    got, ref = both(seq, n_draft, earlier, static)
    assert got == want, f"fast engine: {got}, hand-worked: {want}"
    assert ref == want, f"reference: {ref}, hand-worked: {want}"
