"""Exact 2-gram follower counting: llama.cpp's own results, a naive count, chunking, saturation, bad ids."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit.counts import bigrams as count
from lookupkit.counts.bigrams import FollowerCounter, count_static
from lookupkit.errors import InputError
from lookupkit.formats import llama
from lookupkit.counts.tables import StaticTable
from lookupkit.rules import COUNT_MAX
import needs

REFERENCE = needs.SHARED / "reference"


def same_table(a: StaticTable, b: StaticTable) -> bool:
    return all(np.array_equal(x, y) for x, y in [(a.keys, b.keys), (a.offsets, b.offsets), (a.pairs, b.pairs)])


def naive(docs) -> dict:
    """llama.cpp's loop, written plainly: for i >= 2, follower doc[i] of (doc[i-2], doc[i-1])."""
    counts = Counter()
    for doc in docs:
        for i in range(2, len(doc)):
            counts[(doc[i - 2], doc[i - 1], doc[i])] += 1
    out: dict = {}
    for (a, b, c), n in counts.items():
        out.setdefault((a, b), {})[c] = n
    return out


@pytest.mark.parametrize("name,n_vocab", [("synth", 60), ("zipf", 5000)])
@pytest.mark.parametrize("packed", [True, False])
def test_equals_llamacpp_reference(name, n_vocab, packed):
    needs.shared("reference")
    ref = StaticTable.from_ngrams(llama.read((REFERENCE / f"{name}.static.lcs").read_bytes()))
    corpus = np.fromfile(REFERENCE / f"{name}.corpus.i32", dtype="<i4")
    for chunk in (1000, 1 << 20):
        got = count_static([np.array_split(corpus, 7)], n_vocab, chunk_tokens=chunk, packed=packed)
        assert same_table(got, ref)


docs_strategy = st.lists(st.lists(st.integers(0, 6), max_size=60), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(docs=docs_strategy, chunk=st.integers(3, 20), packed=st.booleans(), pieces=st.integers(1, 5))
def test_equals_naive_count_for_any_chunking(docs, chunk, packed, pieces):
    arrays = [np.array_split(np.array(d, dtype=np.int32), pieces) for d in docs]
    table = count_static(arrays, 7, chunk_tokens=chunk, packed=packed)
    assert table.to_dict() == naive(docs)
    canonical = StaticTable.canonical(table.keys, table.offsets, table.pairs)
    assert same_table(table, canonical)  # already in canonical order: keys sorted, followers by id


def test_two_grams_never_span_documents():
    table = count_static([np.array([1, 2], np.int32), np.array([3, 4, 5], np.int32)], 10)
    assert table.to_dict() == {(3, 4): {5: 1}}


def test_large_ids_use_the_unpacked_path_and_agree():
    rng = np.random.default_rng(1)
    n_vocab = 3_000_000  # beyond the 21-bit packing
    doc = rng.choice(np.array([5, 2_100_000, 2_999_999, 17], dtype=np.int32), size=500)
    counter = FollowerCounter(n_vocab, chunk_tokens=64)
    assert not counter.packed
    counter.add_document(doc)
    assert counter.table().to_dict() == naive([doc.tolist()])


@pytest.mark.parametrize("packed", [True, False])
def test_counts_saturate_at_count_max_instead_of_wrapping(packed):
    # 2^31 real tokens would take minutes: inject two counted runs of the same triple (1, 2) -> 3
    key = np.array([[(1 << 42) | (2 << 21) | 3]] if packed else [[(1 << 32) | 2, 3]], dtype=np.uint64)
    keys, counts = count._merge(key, np.array([COUNT_MAX - 5], np.int64), key, np.array([100], np.int64))
    assert counts.tolist() == [COUNT_MAX + 95]  # summed in int64, no wrap
    counter = FollowerCounter(10, packed=packed)
    counter._runs = [(1, keys, counts), (0, key, np.array([7], np.int64))]
    assert counter.table().to_dict() == {(1, 2): {3: COUNT_MAX}}


@pytest.mark.parametrize("bad,where", [(-1, 3), (10, 5)])
def test_ids_outside_the_vocabulary_name_the_first_bad_id_and_position(bad, where):
    doc = np.arange(8, dtype=np.int32) % 5
    doc[where] = bad
    doc[7] = 99
    with pytest.raises(InputError, match=rf"token id {bad} at position {where} of document 1 .*0\.\.9"):
        count_static([doc], 10)


def test_position_counts_across_the_arrays_of_a_document():
    with pytest.raises(InputError, match="token id 50 at position 6 of document 2"):
        count_static([np.zeros(5, np.int32), [np.zeros(4, np.int32), np.array([1, 2, 50], np.int32)]], 50)


def test_non_integer_ids_are_refused():
    with pytest.raises(InputError, match="integers"):
        count_static([np.zeros(5, np.float32)], 10)


def test_int64_ids_are_range_checked_before_narrowing():
    with pytest.raises(InputError, match=f"token id {2**32 + 1}"):
        count_static([np.array([1, 2, 2**32 + 1], np.int64)], 10)
    assert count_static([np.array([1, 2, 3], np.int64)], 10).to_dict() == {(1, 2): {3: 1}}


def test_empty_input_gives_an_empty_table():
    table = count_static([np.zeros(0, np.int32), np.array([1, 2], np.int32)], 10)
    assert table.n_keys == 0 and table.n_pairs == 0 and table.offsets.tolist() == [0]
