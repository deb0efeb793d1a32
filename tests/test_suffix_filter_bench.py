"""bench/suffix/filter.py end to end on a tiny corpus: its compiled fuse lookup answers as pyfusefilter's
own, every "no match longer than b" it draws from the filter is true of the corpus (a filter may let a
non-occurring n-gram through, never stop an occurring one), and its replay's matches are the index's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lookupkit import StaticCache
from lookupkit.counts.bigrams import count_static
from lookupkit.files import atomic_writer
from lookupkit.formats import lkc
from lookupkit.suffix import build_index, corpus_text, longest_match

import needs

pyfusefilter = needs.module("pyfusefilter", "pip install pyfusefilter (the bench extra)")

from lookupkit.bench.suffix import filter as sf  # noqa: E402  (after the skip: it needs pyfusefilter)
from lookupkit.bench.suffix import filter_build as sfb  # noqa: E402
from lookupkit.bench.suffix import filter_kernels as K  # noqa: E402

ORDERS = [2, 3, 5]


def corpus(seed=3):
    """Repetitive small-alphabet documents (long matches) and a text that partly copies them."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 30, 800)
    docs = [np.concatenate([base[:400], rng.integers(0, 60, 600)]), rng.integers(0, 12, 1500), base[200:]]
    ev = np.concatenate([base[100:300], rng.integers(0, 60, 300), base[500:700], rng.integers(0, 12, 200)])
    return docs, ev.astype(np.int32)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sf")
    docs, ev = corpus()
    with atomic_writer(d / "c.lkc") as f:
        lkc.write_file(f, count_static([x.astype(np.int32) for x in docs], 64), {},
                       suffix=build_index(corpus_text(docs)))
    ev.astype("<i4").tofile(d / "ev.i32")
    return d, docs, ev


def test_the_compiled_lookup_is_pyfusefilters():
    from pyfusefilter._xorfilter import lib

    rng = np.random.default_rng(1)
    keys = np.unique(rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64))
    f = sfb.fuse8(keys)
    row, fp = sfb.fuse_row(f, 2, 0)
    params = np.array([row], np.uint64)
    probe = np.concatenate([keys, rng.integers(0, 2**64 - 1, 20000, dtype=np.uint64)])
    ours = [bool(K.fuse_contains(params, fp, 0, k)) for k in probe]
    theirs = [bool(lib.binary_fuse8_contain(int(k), f._Fuse8__filter)) for k in probe]
    assert ours == theirs and all(ours[:len(keys)])
    assert 0 < sum(ours[len(keys):]) < 0.02 * (len(probe) - len(keys))  # some false positives, ~0.4 %


def test_filter_bounds_are_true_and_the_replay_is_the_index(files):
    d, docs, ev = files
    text = corpus_text(docs)
    params, fp, stats = sfb.build_filter(text, ORDERS)
    grams = {k: {tuple(doc[i:i + k]) for doc in docs for i in range(len(doc) - k + 1)} for k in ORDERS}
    assert [stats["orders"][str(k)]["distinct"] for k in ORDERS] == [len(grams[k]) for k in ORDERS]
    ev64 = ev.astype(np.int64)
    with StaticCache.open(d / "c.lkc") as cache:
        index = cache.suffix
        lens, bounds, runs = sf.replay_arrays(index, ev64, 1, len(ev), sf.N_RUN, "plain", None)
        f_lens, f_bounds, _ = sf.replay_arrays(index, ev64, 1, len(ev), sf.N_RUN, "filtered", (params, fp))
        o_lens, _, o_runs = sf.replay_arrays(index, ev64, 1, len(ev), sf.N_RUN, "oracle", None, lens)
        prev, cut = sf.MAX_LEN, 0
        for q, p in enumerate(range(1, len(ev))):
            top = min(sf.MAX_LEN, prev + 1, p)
            m = longest_match(index, ev64[:p], top)[0]
            assert (lens[q], bounds[q], f_lens[q], o_lens[q]) == (m, top, m, m)
            assert m <= f_bounds[q] <= top
            if f_bounds[q] < top:  # the filter said the (b + 1)-gram ending here does not occur: it must not
                b = int(f_bounds[q])
                assert b + 1 in ORDERS and tuple(ev64[p - b - 1:p]) not in grams[b + 1]
                cut += 1
            prev = m
        assert cut > 0 and np.array_equal(o_runs, runs)
        summary, truth = sf.accounting(index, ev64, 1, len(ev))
        got = sf.filter_accounting(index, ev64, 1, len(ev), (params, fp), truth)
        assert np.array_equal(truth[0], lens) and got["false_negatives"] == 0
        with pytest.raises(AssertionError, match="differs from the index"):  # a filter that misses an n-gram
            sf.filter_accounting(index, ev64, 1, len(ev), (params, np.zeros_like(fp) + 1), truth)
    assert sum(summary["match_length_histogram"]) == len(ev) - 1
    assert got["cut_bound"] == round(cut / (len(ev) - 1), 4)


def test_probe_counts_replay_the_search():
    lens, bounds = np.array([5, 0, 3, 7, 2]), np.array([5, 1, 9, 7, 0])
    out = np.zeros((5, 2), np.int64)
    K.probe_counts(lens, bounds, out)
    # 3 under 9: whole window fails, gallop 1, 2 ok, 4 fails, bisect 3 ok -> 5 probes, 2 failing
    assert out.tolist() == [[1, 0], [1, 1], [5, 2], [1, 0], [0, 0]]


def test_the_bench_runs_end_to_end(files, tmp_path):
    d, _, ev = files
    out = tmp_path / "r.json"
    sf.main(["--cache", str(d / "c.lkc"), "--eval-ids", str(d / "ev.i32"), "--orders", "2,3,5", "--runs", "1",
             "--work", str(tmp_path), "--out", str(out), "--evict", "fadvise", "--api-keys", "2000",
             "--max-load", "1000"])
    res = json.loads(out.read_text())
    s = res["sizes"][0]
    variants = ["plain", "oracle", "filtered 2,3,5"]
    assert [r["variant"] for r in s["runs"]] == variants
    # the kernel may keep pages fadvise asks it to drop (seen in the full suite: all of this small file stayed
    # resident), so the bench reports the share it measured with mincore rather than assuming eviction worked
    assert all(r["evicted_by"] == "posix_fadvise(DONTNEED)" and 0 <= r["resident_before_open"] <= 1 for r in s["runs"])
    assert s["accounting"]["calls"] == s["calls"] == len(ev) - 1
    for d in s["designs"].values():
        assert d["same_matches_and_runs"] and d["false_negatives"] == 0
        assert d["filter"]["keys"] == sum(o["distinct"] for o in d["filter"]["orders"].values())
    assert list(s["us_per_call"]) == variants and isinstance(res["filter_pays"], bool)
