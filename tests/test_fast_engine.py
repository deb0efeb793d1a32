"""The compiled engine: conformance with llama.cpp's vectors, and draft for draft with the reference.

The reference (draft.rule_reference + NgramCache + replay.loop_reference) is the readable spec; the fast
engine (counts.flat + draft.rule + replay.loop) must agree with it on every draft, every source code and
every count, with and without the precheck, including counts past 2^31 where int32 would wrap.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookupkit.counts import flat as fc
from lookupkit.draft.rule import Thresholds, draft_tokens
from lookupkit.static.source import new_memo, static_arrays
from lookupkit.draft.rule_reference import draft_reference
from lookupkit.errors import InputError
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.formats import read_ngrams
from lookupkit.replay.run import replay
from lookupkit.replay.loop import replay_fast
from lookupkit.static.cache import StaticCache
from lookupkit.counts.tables import NgramTable, StaticTable
from lookupkit.rules import COUNT_MAX
import needs

REF = needs.SHARED / "reference"
CASES = json.loads((REF / "cases.json").read_text()) if (REF / "cases.json").is_file() else []
needs_shared = needs.shared_mark("reference/cases.json")

VOCAB = 6  # a small vocabulary: many repeats, many ties
tokens_st = st.lists(st.integers(0, VOCAB - 1), min_size=0, max_size=48)
count_st = st.one_of(st.integers(1, 4), st.integers(1, COUNT_MAX))


@needs_shared
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["case"])
def test_reference_cases_exact(case):
    static = StaticCache.open(REF / case["static"]) if case["static"] else None
    dynamic = read_ngrams(REF / case["dynamic"]) if case["dynamic"] else None
    tokens = np.fromfile(REF / case["tokens"], "<i4")
    trace, _ = replay_fast(tokens, case["n_ctx"], case["n_draft"], static, dynamic)
    s = trace.summary()
    assert (s["n_predict"], s["n_drafted"], s["n_accept"]) == (case["n_predict"], case["n_drafted"], case["n_accept"])
    assert list(trace.steps_lines()) == (REF / case["steps_file"]).read_text().splitlines()


@needs.shared_mark("reference/wikitext/wiki.test.qwen2.i32")
def test_wikitext_without_static_cache_gives_the_published_counts():
    tokens = np.fromfile(REF / "wikitext" / "wiki.test.qwen2.i32", "<i4")
    trace, _ = replay_fast(tokens, 4096, 8)
    s = trace.summary()
    assert (s["n_drafted"], s["n_accept"]) == (299_268, 46_660)


# ---- caches built two ways: the reference NgramCache and the flat cache --------------------------

def both_caches(sequences, extra: NgramTable | None = None, thresholds=fc.STRICT):
    """The same counts as an NgramCache (update + merge) and a FlatCache (its own update + merge)."""
    ref = NgramCache.from_table(extra) if extra is not None else NgramCache()
    flat = fc.FlatCache.from_table(extra, thresholds=thresholds)
    for seq in sequences:
        r, f = NgramCache(), fc.FlatCache(4, 4, thresholds)  # tiny: forces growth
        r.update(seq)
        f.update(np.array(seq, np.int32))
        ref.merge(r)
        flat.merge(f)
    return ref, flat


@st.composite
def big_table(draw, sizes=(1, 2, 3, 4), min_size=0) -> NgramTable:
    """A few n-grams with followers whose counts may be near 2^31-1."""
    parts = draw(st.dictionaries(
        st.sampled_from(sizes).flatmap(lambda n: st.tuples(*[st.integers(0, VOCAB - 1)] * n)),
        st.dictionaries(st.integers(0, VOCAB - 1), count_st, min_size=1, max_size=4), min_size=min_size, max_size=6))
    cache = NgramCache()
    cache.parts = parts
    return cache.to_table()


@st.composite
def static_cache(draw):
    table = draw(big_table(sizes=(2,), min_size=1))
    return StaticCache.from_table(StaticTable.from_ngrams(table)) if draw(st.booleans()) else None


def fast_draft(seq, n_draft, ctx, dyn, static, precheck=True):
    toks, codes = draft_tokens(np.array(seq, np.int32), n_draft, ctx.c, dyn.c, static_arrays(static), new_memo(16),
                               precheck)
    return toks.tolist(), codes.tolist()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seq=tokens_st, history=st.lists(tokens_st, max_size=3), lcd=st.one_of(st.none(), big_table()),
       static=static_cache(), n_draft=st.integers(1, 6))
def test_drafts_equal_the_reference_with_and_without_precheck(seq, history, lcd, static, n_draft):
    ref_ctx, ctx = both_caches([seq], thresholds=fc.LAX)
    ref_dyn, dyn = both_caches(history, lcd)
    expected = draft_reference(seq, n_draft, ref_ctx, ref_dyn, static)
    assert fast_draft(seq, n_draft, ctx, dyn, static, precheck=True) == expected
    assert fast_draft(seq, n_draft, ctx, dyn, static, precheck=False) == expected


@pytest.mark.parametrize("parts, static_parts, expected", [
    ({(0, 7): {3: 5}}, {(0, 7): {9: 1}}, ([3], [2])),  # one follower: chosen without scoring
    ({(0, 7): {3: 2, 4: 2}}, None, ([3], [2])),  # no static part: the kept best (smallest id of the max)
    ({(0, 7): {3: 1, 4: 2}}, {(0, 7): {3: 9}}, ([3], [9])),  # weighted winner 3 fails its share -> static
    ({(0, 7): {3: 1, 4: 1, 5: 1}}, None, ([], [])),  # 1/3 < 50 %: the precheck rejects before scoring
])
def test_each_precheck_branch(parts, static_parts, expected):
    ctx = fc.FlatCache.from_table(NgramCache.from_table(_table(parts)).to_table(), thresholds=fc.LAX)
    static = StaticCache.from_table(StaticTable.from_ngrams(_table(static_parts))) if static_parts else None
    dyn = fc.FlatCache(thresholds=fc.STRICT)
    for precheck in (True, False):
        assert fast_draft([0, 7], 1, ctx, dyn, static, precheck) == expected


def _table(parts: dict) -> NgramTable:
    cache = NgramCache()
    cache.parts = {k: dict(v) for k, v in parts.items()}
    return cache.to_table()


def test_scores_past_2_to_the_63_are_compared_exactly():
    # 5 scores (2^31-1) * 100 * (2^31-1) ~ 4.6e20, 3 scores 1. In int64 the first wraps to -4.3e11, 3 would
    # win, fail its share, and the static cache would draft 5 as "s2"; exactly, the context drafts 5 ("c2").
    parts = {(0, 7): {5: COUNT_MAX, 3: 1}}
    ctx = fc.FlatCache.from_table(_table(parts), thresholds=fc.LAX)
    static = StaticCache.from_table(StaticTable.from_ngrams(_table({(0, 7): {5: COUNT_MAX}})))
    expected = draft_reference([0, 7], 1, NgramCache.from_table(_table(parts)), None, static)
    assert expected == ([5], [2])
    for precheck in (True, False):
        assert fast_draft([0, 7], 1, ctx, fc.FlatCache(thresholds=fc.STRICT), static, precheck) == expected


# ---- the flat cache itself -----------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(seq=tokens_st, cut=st.integers(0, 48))
def test_incremental_updates_equal_one_bulk_update(seq, cut):
    arr = np.array(seq, np.int32)
    bulk = fc.FlatCache(4, 4)
    bulk.update(arr)
    step = fc.FlatCache(4, 4)
    step.update(arr[:min(cut, len(arr))])
    for n in range(min(cut, len(arr)) + 1, len(arr) + 1):
        step.update(arr[:n], nnew=1)
    ref = NgramCache()
    ref.update(seq)
    assert step.to_table().to_dict() == bulk.to_table().to_dict() == ref.to_table().to_dict()


@settings(max_examples=100, deadline=None)
@given(a=big_table(), b=big_table(), c=big_table())
def test_merge_is_associative_and_saturates_on_export(a, b, c):
    def merged(*tables):
        out = fc.FlatCache(4, 4)
        for t in tables:
            out.merge(fc.FlatCache.from_table(t))
        return out

    left = merged(a, b)
    left.merge(fc.FlatCache.from_table(c))
    bc = merged(b, c)
    right = fc.FlatCache.from_table(a)
    right.merge(bc)
    expected = NgramCache()
    for t in (a, b, c):
        expected.merge(NgramCache.from_table(t))
    assert left.to_table().to_dict() == right.to_table().to_dict() == expected.to_table().to_dict()


@settings(max_examples=100, deadline=None)
@given(history=st.lists(tokens_st, max_size=4))
def test_precheck_filter_has_no_false_negatives(history):
    _, dyn = both_caches(history)
    c = dyn.c
    for e in range(dyn.n_keys):
        key = c.ent[e, :4]
        if fc.passes_precheck(c, e):
            assert fc.may_pass(c, np.uint64(fc.hash_key(*key))), key


# ---- whole replays: fast engine vs reference loop ------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens=st.lists(st.integers(0, VOCAB - 1), min_size=3, max_size=120), data=st.data())
def test_replay_equals_the_reference_loop(tokens, data):
    n_ctx = data.draw(st.integers(2, len(tokens) - 1))
    n_draft = data.draw(st.integers(1, 8))
    static = data.draw(static_cache())
    lcd = data.draw(st.one_of(st.none(), big_table()))
    ref_trace, ref_dyn = replay(tokens, n_ctx, n_draft, static, lcd, engine="reference")
    trace, dyn = replay_fast(tokens, n_ctx, n_draft, static, lcd)
    for field in ("chunk", "pos", "n_drafted", "n_accepted", "tokens", "sources"):
        assert getattr(trace, field).tolist() == getattr(ref_trace, field).tolist(), field
    assert dyn.to_dict() == ref_dyn.to_dict()


def test_other_thresholds_change_drafts_and_keep_the_static_rule():
    tokens = [1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 2, 4, 1, 2]
    default, _ = replay_fast(tokens, 13, 4)
    never = Thresholds(context=[[10**9] * 4, [100] * 4], dynamic=[[10**9] * 4, [100] * 4])
    none, _ = replay_fast(tokens, 13, 4, thresholds=never)
    assert default.n_drafted.sum() > 0 and none.n_drafted.sum() == 0


def test_a_span_outside_the_pairs_is_a_miss_never_read():
    full = StaticCache.from_table(StaticTable.from_ngrams(_table({(0, 7): {3: 5}, (1, 2): {4: 5}})))
    truncated = SimpleNamespace(pairs=full.pairs[:1], cmap=full.cmap)  # as a corrupted file could claim
    empty = fc.FlatCache(thresholds=fc.STRICT)
    assert fast_draft([0, 7], 1, empty, empty, truncated) == ([3], [9])  # (0, 7) -> pairs[0:1], inside
    assert fast_draft([1, 2], 1, empty, empty, truncated) == ([], [])  # (1, 2) -> pairs[1:2], outside
    assert fast_draft([1, 2], 1, empty, empty, full) == ([4], [9])


@pytest.mark.parametrize("bad", [Thresholds(context=[[1, 1], [50, 50]]), Thresholds(dynamic=[[0] * 4, [50] * 4]),
                                 Thresholds(static=(2, 101))])
def test_bad_thresholds_are_refused(bad):
    with pytest.raises(InputError, match="thresholds"):
        replay_fast([1, 2, 3, 1, 2, 3], 4, 2, thresholds=bad)


def test_record_buffers_grow_in_the_middle_of_a_chunk():
    tokens = [1, 2, 3] * 60  # drafts of 16 at almost every call: more than the first buffer holds
    trace, _ = replay_fast(tokens, 170, 16)
    ref, _ = replay(tokens, 170, 16, engine="reference")
    assert trace.n_drafted.sum() > 2 * len(trace.n_drafted)
    assert trace.tokens.tolist() == ref.tokens.tolist() and trace.n_accepted.tolist() == ref.n_accepted.tolist()
