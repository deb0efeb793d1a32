"""NgramCache: llama.cpp's update/merge semantics, legacy files, saturation, safe saves."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit.errors import FormatError, InputError
from lookupkit.formats import llama
from lookupkit.counts.dict_cache import NgramCache, merge_tables
from lookupkit.formats import read_ngrams
from lookupkit.rules import COUNT_MAX
import needs

REF = needs.SHARED / "reference"

token_lists = st.lists(st.integers(0, 6), max_size=40)


def cache_of(tokens, nmin=1, nmax=4) -> NgramCache:
    cache = NgramCache()
    cache.update(tokens, nmin, nmax)
    return cache


def test_update_counts_every_target_once():
    cache = cache_of([1, 2, 1, 2, 3])
    assert cache.parts == {
        (1,): {2: 2}, (2,): {1: 1, 3: 1},
        (1, 2): {1: 1, 3: 1}, (2, 1): {2: 1},
        (1, 2, 1): {2: 1}, (2, 1, 2): {3: 1},
        (1, 2, 1, 2): {3: 1},
    }


def test_update_respects_nmin_nmax_and_nnew():
    cache = NgramCache()
    cache.update([4, 5, 4, 5, 6], 2, 2, nnew=2)  # targets at positions 3 and 4 only
    assert cache.parts == {(5, 4): {5: 1}, (4, 5): {6: 1}}
    with pytest.raises(ValueError):
        cache.update([1, 2], 0, 4)


@given(token_lists)
def test_incremental_update_equals_bulk(tokens):
    inc = NgramCache()
    for i in range(1, len(tokens) + 1):
        inc.update(tokens[:i], nnew=1)
    bulk = cache_of(tokens)
    # same counts, and the same insertion order of followers inside each part
    assert {k: list(v.items()) for k, v in inc.parts.items()} == {k: list(v.items()) for k, v in bulk.parts.items()}


@given(token_lists, token_lists, token_lists)
def test_merge_is_associative_on_counts(a, b, c):
    left = cache_of(a)
    left.merge(cache_of(b))
    left.merge(cache_of(c))
    bc = cache_of(b)
    bc.merge(cache_of(c))
    right = cache_of(a)
    right.merge(bc)
    assert left.parts == right.parts


@given(token_lists, token_lists)
def test_merge_adds_counts_like_updating_both(a, b):
    merged = cache_of(a)
    merged.merge(cache_of(b))
    expected = {}
    for cache in (cache_of(a), cache_of(b)):
        for key, part in cache.parts.items():
            for tok, n in part.items():
                expected.setdefault(key, {}).setdefault(tok, 0)
                expected[key][tok] += n
    assert merged.parts == expected


@given(st.lists(token_lists, min_size=1, max_size=4))
@settings(deadline=None)
def test_merge_tables_equals_cache_merge(lists):
    caches = [cache_of(t) for t in lists]
    total = NgramCache()
    for c in caches:
        total.merge(c)
    merged = merge_tables(c.to_table() for c in caches)
    assert merged.to_dict() == total.parts
    canon = total.to_table()
    assert np.array_equal(merged.ngrams, canon.ngrams) and np.array_equal(merged.offsets, canon.offsets)
    assert np.array_equal(merged.pairs, canon.pairs)


def test_counts_saturate_on_save(tmp_path):
    cache = cache_of([1, 2])
    big = cache_of([1, 2])
    big.parts[(1,)][2] = COUNT_MAX
    cache.merge(big)
    assert cache.parts[(1,)][2] == COUNT_MAX + 1  # exact in memory
    llama.save(cache.to_table(), tmp_path / "c.lcd")
    assert NgramCache.from_table(read_ngrams(tmp_path / "c.lcd")).parts[(1,)][2] == COUNT_MAX
    merged = merge_tables([cache.to_table(), cache.to_table()])
    assert merged.to_dict()[(1,)][2] == COUNT_MAX


@given(token_lists)
def test_legacy_round_trip(tokens):
    cache = cache_of(tokens)
    table = cache.to_table()
    again = NgramCache.from_table(llama.read(llama.encode(table).tobytes()))
    assert again.parts == cache.parts


def test_save_load_file(tmp_path):
    cache = cache_of([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 9, 1, 4])
    llama.save(cache.to_table(), tmp_path / "d.lcd")
    assert NgramCache.from_table(read_ngrams(tmp_path / "d.lcd")).parts == cache.parts
    assert (tmp_path / "d.lcd").read_bytes() == llama.encode(cache.to_table()).tobytes()


def test_empty_cache_round_trip(tmp_path):
    llama.save(NgramCache().to_table(), tmp_path / "e.lcd")
    assert (tmp_path / "e.lcd").stat().st_size == 0
    assert len(NgramCache.from_table(read_ngrams(tmp_path / "e.lcd"))) == 0


@pytest.mark.parametrize("mutate, what", [
    (lambda b: b[:-4], "truncated"),
    (lambda b: b + b"\x01", "truncated"),  # a fragment llama.cpp would silently ignore
    (lambda b: b + b"\x01\0\0\0" * 3, "truncated"),
    (lambda b: b"abcde", "truncated"),  # not an empty cache
    (lambda b: b[:16] + (0).to_bytes(4, "little") + b[20:], "ntokens"),
    (lambda b: b[:24] + (0).to_bytes(4, "little") + b[28:], "count"),
    (lambda b: (-5).to_bytes(4, "little", signed=True) + b[4:], "padded"),
])
def test_corrupt_lcd_is_a_format_error(tmp_path, mutate, what):
    good = llama.encode(cache_of([1, 2, 3, 1, 2]).to_table()).tobytes()
    path = tmp_path / "bad.lcd"
    path.write_bytes(mutate(good))
    with pytest.raises(FormatError, match=what):
        NgramCache.from_table(read_ngrams(path))


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_ngrams(tmp_path / "nope.lcd")
    with pytest.raises(InputError, match="directory"):
        read_ngrams(tmp_path)
    with pytest.raises(InputError, match="not a regular file"):  # not silently an empty cache
        read_ngrams("/dev/null")


def test_failed_save_leaves_the_original_intact(tmp_path, monkeypatch):
    path = tmp_path / "dyn.lcd"
    original = cache_of([1, 2, 3])
    llama.save(original.to_table(), path)
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(InputError, match="no space left"):
        llama.save(cache_of([7, 8, 9, 7, 8]).to_table(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dyn.lcd"]  # no temp file left behind


def test_save_into_missing_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        llama.save(cache_of([1, 2]).to_table(), tmp_path / "no" / "such.lcd")


def need_reference():
    needs.shared("reference")


@pytest.mark.parametrize("corpus, lcs", [("synth.corpus.i32", "synth.static.lcs"),
                                         ("zipf.corpus.i32", "zipf.static.lcs")])
def test_our_build_of_each_reference_corpus_equals_its_lcs(corpus, lcs):
    """lookup-create = UPDATE(cache, 2, 2, whole corpus); llama.cpp's file must hold exactly those counts."""
    need_reference()
    tokens = np.fromfile(REF / corpus, dtype="<i4").tolist()
    ours = cache_of(tokens, 2, 2).to_table()
    theirs = read_ngrams(REF / lcs)
    for a, b in ((ours.ngrams, theirs.ngrams), (ours.offsets, theirs.offsets), (ours.pairs, theirs.pairs)):
        assert np.array_equal(a, b)


def test_reference_dynamic_equals_merged_chunk_caches():
    """synth.dynamic.lcd = merge of the context caches of every full 512-token chunk of synth.corpus."""
    need_reference()
    tokens = np.fromfile(REF / "synth.corpus.i32", dtype="<i4").tolist()
    n_ctx = 512
    dyn = NgramCache()
    for start in range(0, len(tokens) - n_ctx, n_ctx):
        dyn.merge(cache_of(tokens[start:start + n_ctx]))
    assert dyn.parts == NgramCache.from_table(read_ngrams(REF / "synth.dynamic.lcd")).parts
