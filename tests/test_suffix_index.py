"""The suffix index (lookupkit.suffix): both builders against a sorted list of suffixes, the compiled search
against the brute-force reference, document boundaries, empty corpus, long contexts, ids near 2^18."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit.errors import InputError
from lookupkit.suffix import SEPARATOR, build_index, continuation, corpus_text, longest_match
from lookupkit.suffix import reference as ref
from lookupkit.suffix.build import MAX_ID, divsufsort_sa, doubling_sa

# The search tests build with the in-package doubling_sa, which test_both_builders_are_the_sorted_suffixes
# holds equal to pydivsufsort's array (the default builder).
BIG = 2**18 - 3  # ids near Gemma 3's vocabulary size (262,144)


def _index(text):
    return build_index(text, builder=doubling_sa)


def docs_strategy(alphabet):
    return st.lists(st.lists(st.sampled_from(alphabet), max_size=40), max_size=4)


small = [0, 1, 2, 3]
near_big = [BIG - 1, BIG, BIG + 1, BIG + 2, 7]


@settings(max_examples=150, deadline=None)
@given(docs=st.one_of(docs_strategy(small), docs_strategy(near_big), docs_strategy([5])))
def test_both_builders_are_the_sorted_suffixes(docs):
    text = corpus_text([np.array(d, np.int64) for d in docs])
    expect = ref.suffix_array(text)
    assert np.array_equal(divsufsort_sa(text), expect)
    assert np.array_equal(doubling_sa(text), expect)


@settings(max_examples=200, deadline=None)
@given(docs=st.one_of(docs_strategy(small), docs_strategy(near_big)),
       context=st.lists(st.sampled_from(small + near_big[:2]), max_size=30),
       max_len=st.integers(1, 12), share=st.sampled_from([0.2, 0.5, 0.51, 1.0]), max_tokens=st.integers(1, 8))
def test_search_equals_brute_force(docs, context, max_len, share, max_tokens):
    index = _index(corpus_text([np.array(d, np.int64) for d in docs]))
    want = ref.longest_match(index.text, index.sa, context, max_len)
    got = longest_match(index, context, max_len)
    assert got == want
    run = continuation(index, *got, max_tokens=max_tokens, min_share=share)
    assert (run.tokens.tolist(), run.counts.tolist(), run.totals.tolist()) == \
        ref.continuation(index.text, index.sa, *want, max_tokens=max_tokens, min_share=share)


def test_no_match_crosses_a_document_end():
    index = _index(corpus_text([np.array([1, 2, 3]), np.array([4, 5])]))
    assert longest_match(index, [2, 3, 4, 5])[0] == 2  # "4 5", not "2 3 4 5"
    m, lo, hi = longest_match(index, [1, 2])
    assert continuation(index, m, lo, hi, max_tokens=5).tokens.tolist() == [3]  # stops at the document end


def test_the_run_follows_the_majority_and_reports_its_evidence():
    index = _index(corpus_text([np.array([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 9])]))
    m, lo, hi = longest_match(index, [7, 1, 2])
    assert (m, hi - lo) == (2, 3)
    run = continuation(index, m, lo, hi, max_tokens=4, min_share=0.5)  # after 1 2 3 4: 1 or 9, a tie to the smaller
    assert run.tokens.tolist() == [3, 4, 1, 2] and run.counts.tolist() == [3, 2, 1, 1]
    assert run.totals.tolist() == [3, 3, 2, 1]
    assert continuation(index, m, lo, hi, max_tokens=4, min_share=0.51).tokens.tolist() == [3, 4]
    assert continuation(index, m, lo, hi, max_tokens=4, min_share=0.7).tokens.tolist() == [3]  # 2/3 < 0.7


def test_a_long_context_is_cut_to_max_len():
    corpus = np.arange(100) % 50
    index = _index(corpus_text([corpus]))
    assert longest_match(index, corpus[:80], max_len=64)[0] == 64
    assert longest_match(index, corpus[:80], max_len=7)[0] == 7


def test_empty_corpus_and_empty_context():
    empty = _index(corpus_text([]))
    assert empty.n == 0 and longest_match(empty, [1, 2]) == (0, 0, 0)
    assert continuation(empty, 0, 0, 0).tokens.size == 0
    index = _index(corpus_text([np.array([3, 3])]))
    assert longest_match(index, []) == (0, 0, 3)
    assert longest_match(index, [MAX_ID + 5]) == (0, 0, 3)  # an id the corpus never saw


def test_bad_input_is_one_clear_error():
    index = _index(corpus_text([np.array([1, 2])]))
    with pytest.raises(InputError, match="ids >= 0"):
        longest_match(index, [1, -1])
    with pytest.raises(InputError, match="min_share"):
        continuation(index, 0, 0, 1, min_share=0.0)
    with pytest.raises(InputError, match="not what longest_match returns"):
        continuation(index, 2, 0, 3)  # rows 0..2 do not share 2 tokens (row 0 is the SEPARATOR)
    with pytest.raises(InputError, match="not what longest_match returns"):
        continuation(index, 1, 0, 1)  # row 0's first token is the SEPARATOR
    with pytest.raises(InputError, match="0..16777214"):
        corpus_text([np.array([MAX_ID + 1])])
    with pytest.raises(InputError, match="corpus_text"):
        _index(np.array([1, 2], np.int32))  # no SEPARATOR at the end
    assert SEPARATOR == -1


def test_a_wide_range_counts_the_majority_exactly():
    rng = np.random.default_rng(5)
    corpus = np.where(rng.random(20000) < 0.6, 8, rng.integers(0, 300, 20000))  # 8 holds ~60 %
    index = _index(corpus_text([corpus]))
    run = continuation(index, 0, 0, index.n, max_tokens=1, min_share=0.5)
    assert run.tokens.tolist() == [8] and run.counts[0] == int(np.sum(index.text == 8)) and run.totals[0] == index.n


@settings(max_examples=60, deadline=None)
@given(docs=docs_strategy(small), context=st.lists(st.sampled_from(small), min_size=1, max_size=30))
def test_the_previous_length_plus_one_bounds_the_next_match(docs, context):
    index = _index(corpus_text([np.array(d, np.int64) for d in docs]))
    prev = 64
    for end in range(1, len(context) + 1):
        bounded = longest_match(index, context[:end], max_len=min(64, prev + 1))
        assert bounded == longest_match(index, context[:end], max_len=64)
        prev = bounded[0]


def test_the_sampled_second_token_search_on_wide_ranges():
    rng = np.random.default_rng(11)
    corpus = rng.choice(6, 6000, p=[0.5, 0.2, 0.1, 0.1, 0.05, 0.05])  # first-token ranges of many samples
    index = _index(corpus_text([corpus[:4000], corpus[4000:]]))
    for _ in range(150):
        ctx = rng.choice(6, int(rng.integers(1, 12))).tolist()
        assert longest_match(index, ctx, 10) == ref.longest_match(index.text, index.sa, ctx, 10)
