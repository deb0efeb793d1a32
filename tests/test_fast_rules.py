"""The fast engine against the reference where the rules decide: big vocabularies, long streams, big static caches.

test_fast_engine.py compares the engines on tiny inputs (6 ids, <= 48 tokens, <= 6 static 2-grams), which
never reach the rules that decide drafts on real text. Here the fast engine (replay_fast, draft_tokens and
the public Drafter) is compared with the reference draft for draft on streams of thousands of tokens over
vocabularies of hundreds to thousands of ids (sometimes spread up to 2^31-1), built from recurring phrases
so that 1..4-grams recur, with:
* static caches of hundreds to thousands of 2-grams, counted (count_static) from a related stream that mixes
  the same phrases in other proportions, so followers with and without static support compete;
* forced ties: twin phrases that differ in one token and are emitted in turn, so their followers have equal
  counts (and, as the static stream emits them in turn too, equal weighted scores);
* skewed twins: common in the replayed stream as one variant (rarely another), seen once or twice by the static
  corpus as another variant, so the static weight of 100 decides between a frequent unsupported follower and
  a rare supported one;
* stuttering phrases (x y x y ...) and short chunks (-c 3..12): n-gram windows at the start of a sequence;
* a memo of a few 2-grams, so the drafter's static memo fills up and grows (static.source.grow_memo).
Then the three rules are pinned on the fast engine with hand-made caches: the static weight is exactly 100,
static-only ties go to the smallest id, and a window starting before position 0 is a miss.
Nothing here needs ../shared.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lookupkit import Drafter
from lookupkit.counts import flat as fc
from lookupkit.counts.bigrams import count_static
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.counts.tables import NgramTable, StaticTable
from lookupkit.draft.rule import draft_tokens
from lookupkit.static.source import grow_memo, new_memo, static_arrays
from lookupkit.draft import rule_reference
from lookupkit.draft.rule_reference import draft_reference
from lookupkit.replay.loop import replay_fast
from lookupkit.replay.run import replay
from lookupkit.rules import ID_MAX, SOURCE_NAMES, STATIC, STATIC_WEIGHT
from lookupkit.static.cache import StaticCache

# Derandomized: the same examples on every run, so a pass or a failure reproduces. No shrinking: an example is
# a seed of numpy's generator plus a few sizes (a failure prints make_world's parameters, enough to rebuild it).
SETTINGS = dict(deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---- worlds: a phrase book, a stream to replay, a related stream for the static cache, a history ------------

def phrase_book(rng, vocab: int, n_groups: int, max_len: int, twin_p: float, stutter_p: float, skew: float):
    """Groups of phrases, each (variants, skewed); several variants are twins: they differ in one position.

    Twins are emitted in turn, so their followers have equal counts (ties). A skewed group is emitted as its
    first variant, rarely (`stray`) as another, in the replayed stream; the static corpus has it a few times
    only, as another variant: the follower the context sees most often has no static support, a rare one
    has a little, and the weight of 100 decides between them."""
    groups = []
    for _ in range(n_groups):
        length = int(rng.integers(2, max_len + 1))
        if rng.random() < stutter_p:  # x y x y ... z: windows of a sequence that starts here recur inside it
            x, y = rng.integers(0, vocab, 2).tolist()
            base = ([x, y] * length)[:length] + [int(rng.integers(vocab))]
        else:
            base = rng.integers(0, vocab, length).tolist()
        variants = [base]
        if rng.random() < twin_p:
            at = int(rng.integers(min(2, len(base) - 1), len(base)))  # a shared prefix, of 2 tokens if it can be
            for _ in range(int(rng.integers(1, 3))):
                v = list(base)
                v[at] = int(rng.integers(vocab))
                variants.append(v)
        groups.append((variants, len(variants) > 1 and rng.random() < skew))
    return groups


def emit(rng, groups, n_tokens: int, noise: float, vocab: int, stray: float,
         skewed_too: bool = True) -> tuple[np.ndarray, list[int]]:
    """A stream of phrases (Zipf-like frequencies of this stream's own) with noise; returns it and phrase starts.

    A skewed group is frequent, emitted as its first variant or with probability `stray` another one (or,
    without `skewed_too`, never)."""
    weights = 1.0 / (1.0 + rng.permutation(len(groups))) ** rng.uniform(0.3, 1.2)
    weights[[g for g, (_, skewed) in enumerate(groups) if skewed]] *= max(5.0, len(groups) / 6) if skewed_too else 0.0
    if not weights.sum():
        return np.array(rng.integers(0, vocab, n_tokens), np.int64), [0]
    weights /= weights.sum()
    turn = [0] * len(groups)
    out: list[int] = []
    starts: list[int] = []
    for g in rng.choice(len(groups), size=n_tokens, p=weights).tolist():  # more than enough phrases
        if len(out) >= n_tokens:
            break
        variants, skewed = groups[g]
        if skewed:
            v = 0 if rng.random() >= stray else int(rng.integers(1, len(variants)))
        else:
            v = turn[g] % len(variants)
            turn[g] += 1
        starts.append(len(out))
        out.extend(variants[v])
        if rng.random() < noise:
            out.append(int(rng.integers(vocab)))
    return np.array(out[:n_tokens], np.int64), [s for s in starts if s < n_tokens]


def sprinkle(rng, groups, vocab: int) -> np.ndarray:
    """The static corpus's few sightings of the skewed groups: 1..2 times each as a variant other than the first,
    between random tokens."""
    out: list[int] = []
    for variants, skewed in groups:
        if skewed:
            for _ in range(1 if rng.random() < 0.75 else 2):
                out += rng.integers(0, vocab, 2).tolist() + variants[int(rng.integers(1, len(variants)))]
    return np.array(out, np.int64)


class World:
    """What one example replays or drafts from; the repr names the parameters that rebuild it (make_world)."""

    def __init__(self, params: dict, tokens: np.ndarray, starts: list, static: StaticCache | None,
                 lcd: NgramTable | None, history: list):
        self.params = params
        self.tokens = tokens  # the stream to replay (int32)
        self.starts = starts  # where its phrases start
        self.static = static
        self.lcd = lcd  # an -lcd file's counts
        self.history = history  # earlier sequences (the dynamic cache of single drafts)

    def __repr__(self) -> str:
        return f"make_world({self.params!r})"


@st.composite
def worlds(draw, min_tokens=1000, max_tokens=5000, static_p=0.85, lcd_p=0.5):
    p = dict(seed=draw(st.integers(0, 2**32 - 1)),
             vocab=draw(st.one_of(st.integers(200, 1000), st.integers(1000, 6000))),
             spread=draw(st.sampled_from(["dense", "sparse", "int32"])),
             n_groups=draw(st.integers(8, 120)), max_len=draw(st.integers(3, 14)),
             twin_p=draw(st.sampled_from([0.2, 0.5, 0.8])), stutter_p=draw(st.sampled_from([0.1, 0.3])),
             skew=draw(st.sampled_from([0.3, 0.7])), stray=draw(st.sampled_from([0.05, 0.08])),
             noise=draw(st.sampled_from([0.0, 0.02, 0.1, 0.3])),
             n_tokens=draw(st.integers(min_tokens, max_tokens)),
             n_static=draw(st.integers(1500, 8000)) if draw(st.floats(0, 1)) < static_p else 0,
             n_lcd=draw(st.integers(200, 2000)) if draw(st.floats(0, 1)) < lcd_p else 0)
    return make_world(p)


def make_world(p: dict) -> World:
    rng = np.random.default_rng(p["seed"])
    vocab = p["vocab"]
    groups = phrase_book(rng, vocab, p["n_groups"], p["max_len"], p["twin_p"], p["stutter_p"], p["skew"])
    top = {"dense": vocab, "sparse": 8 * vocab, "int32": ID_MAX + 1}[p["spread"]]
    ids = np.sort(rng.choice(top, size=vocab, replace=False)) if top > vocab else np.arange(vocab)
    ids = ids.astype(np.int32)  # order-preserving except when shuffled below: ties compare real ids
    if rng.random() < 0.5:
        ids = rng.permutation(ids)

    def stream(n, skewed_too=True):
        toks, starts = emit(rng, groups, n, p["noise"], vocab, p["stray"], skewed_too)
        return ids[toks], starts

    tokens, starts = stream(p["n_tokens"])
    static = None
    if p["n_static"]:
        half = p["n_static"] // 2
        docs = [stream(half, False)[0], stream(p["n_static"] - half, False)[0], ids[sprinkle(rng, groups, vocab)]]
        static = StaticCache.from_table(count_static(docs, int(ids.max()) + 1))
    lcd = None
    if p["n_lcd"]:
        cache = NgramCache()
        cache.update(stream(p["n_lcd"])[0].tolist())
        lcd = cache.to_table()
    history = [stream(int(rng.integers(50, 600)))[0] for _ in range(int(rng.integers(0, 4)))]
    return World(p, tokens, starts, static, lcd, history)


def stutter_starts(w: World) -> list[int]:
    """Phrase starts of the form x y x y: a sequence starting there has windows that would wrap onto its own end."""
    t = w.tokens
    return [i for i in w.starts if i + 3 < len(t) and t[i] == t[i + 2] and t[i + 1] == t[i + 3] and t[i] != t[i + 1]]


def test_worlds_are_as_large_as_claimed():
    w = make_world(dict(seed=1, vocab=3000, spread="dense", n_groups=80, max_len=10, twin_p=0.5, stutter_p=0.1,
                        skew=0.3, stray=0.03, noise=0.02, n_tokens=4000, n_static=6000, n_lcd=1000))
    assert len(w.tokens) == 4000 and len(np.unique(w.tokens)) > 300
    assert w.static.n_keys > 300
    ctx = NgramCache()
    ctx.update(w.tokens.tolist())
    recurring = [g for g, part in ctx.parts.items() if len(g) == 4 and sum(part.values()) >= 4]
    tied = [g for g, part in ctx.parts.items() if len(part) >= 2 and len(set(part.values())) == 1]
    assert len(recurring) > 100 and len(tied) > 20


# ---- whole replays: fast vs reference, call for call ----------------------------------------------------------

TRACE_FIELDS = ("chunk", "pos", "n_drafted", "n_accepted", "tokens", "sources")


def assert_same_replay(tokens, n_ctx, n_draft, static, lcd):
    ref_trace, ref_dyn = replay(tokens, n_ctx, n_draft, static, lcd, engine="reference")
    trace, dyn = replay_fast(tokens, n_ctx, n_draft, static, lcd)
    for name in TRACE_FIELDS:
        got, want = getattr(trace, name).tolist(), getattr(ref_trace, name).tolist()
        if got != want:
            bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            pytest.fail(f"{name} differs first at index {bad}: fast {got[bad:bad + 8]}, reference {want[bad:bad + 8]}")
    assert dyn.to_dict() == ref_dyn.to_dict()
    return trace


@settings(max_examples=25, **SETTINGS)
@given(w=worlds(), n_ctx=st.integers(64, 2000), n_draft=st.integers(1, 16))
def test_long_replays_equal_the_reference(w, n_ctx, n_draft):
    n_ctx = min(n_ctx, len(w.tokens) // 2)  # at least two chunks: the dynamic cache is used
    assert_same_replay(w.tokens, n_ctx, n_draft, w.static, w.lcd)


@settings(max_examples=40, **SETTINGS)
@given(w=worlds(min_tokens=400, max_tokens=1500, lcd_p=0.7), n_ctx=st.integers(3, 12), n_draft=st.integers(1, 8))
def test_replays_in_short_chunks_equal_the_reference(w, n_ctx, n_draft):
    # every chunk starts with drafts from 2 and 3 tokens, where 3- and 4-gram windows start before 0
    assert_same_replay(w.tokens, n_ctx, n_draft, w.static, w.lcd)


# ---- single drafts: draft_tokens (both prechecks, a small growing memo) and the Drafter -----------------------

def both(sequences, table=None, thresholds=fc.STRICT):
    ref = NgramCache.from_table(table) if table is not None else NgramCache()
    flat = fc.FlatCache.from_table(table, thresholds=thresholds)
    for seq in sequences:
        ref.update(seq.tolist())
        flat.update(seq)
    return ref, flat


@settings(max_examples=25, **SETTINGS)
@given(w=worlds(min_tokens=600, max_tokens=3000), n_draft=st.integers(1, 16), memo_cap=st.integers(1, 8))
def test_drafts_along_a_stream_equal_the_reference(w, n_draft, memo_cap):
    ref_dyn, dyn = both(w.history, w.lcd)
    st_arrays = static_arrays(w.static)
    memo = new_memo(memo_cap)
    size0 = len(memo.table)
    # sequences starting at the stream's start, at a few phrase starts and at a stuttering one (x y x y), drafted
    # at every length up to 24, then at 40 lengths further on (the positions come from the world's seed)
    rng = np.random.default_rng(w.params["seed"] + 1)
    for first in [0] + rng.choice(w.starts, size=3).tolist() + stutter_starts(w)[:1]:
        seq = w.tokens[first:]
        lengths = list(range(1, min(25, len(seq)))) + sorted(set(rng.integers(25, max(26, len(seq)), 40).tolist()))
        ref_ctx, ctx = NgramCache(), fc.FlatCache(16, 16, fc.LAX)
        done = 0
        for n in lengths:
            if n > len(seq):
                break
            ref_ctx.update(seq[:n].tolist(), nnew=n - done)
            ctx.update(seq[:n], nnew=n - done)
            done = n
            expected = draft_reference(seq[:n], n_draft, ref_ctx, ref_dyn, w.static)
            for precheck in (True, False):
                toks, codes = draft_tokens(seq[:n], n_draft, ctx.c, dyn.c, st_arrays, memo, precheck)
                assert (toks.tolist(), codes.tolist()) == expected, (first, n, precheck)
                memo = grow_memo(memo)
    if w.static is not None and w.static.n_keys > 64:
        assert len(memo.table) > size0  # the memo filled up and grew


@settings(max_examples=20, **SETTINGS)
@given(w=worlds(min_tokens=800, max_tokens=3000), n_draft=st.integers(1, 16), memo_cap=st.integers(1, 8),
       n_seqs=st.integers(2, 5))
def test_the_drafter_in_a_generation_loop_equals_the_reference(w, n_draft, memo_cap, n_seqs):
    drafter = Drafter(static=w.static, dynamic=w.lcd)
    drafter._memo = new_memo(memo_cap)  # white box: a memo of a few 2-grams, so grow_memo runs between drafts
    size0 = len(drafter._memo.table)
    ref_dyn = NgramCache.from_table(w.lcd) if w.lcd is not None else NgramCache()
    cuts = sorted(set(w.starts[:: max(1, len(w.starts) // n_seqs)]) | set(stutter_starts(w)[:2]) | {len(w.tokens)})
    drafted = 0
    for a, b in zip(cuts, cuts[1:]):
        truth = w.tokens[a:b]
        ref_ctx = NgramCache()
        out = truth[:1]
        ref_ctx.update(out.tolist())
        while len(out) < len(truth):
            draft = drafter.draft(out, n_draft)
            toks, codes = draft_reference(out, n_draft, ref_ctx, ref_dyn, w.static)
            assert (draft, drafter.last_sources) == (toks, [SOURCE_NAMES[c] for c in codes]), (a, len(out))
            drafted += len(draft)
            pos, accepted = len(out), 0
            while accepted < len(draft) and pos + accepted < len(truth) and truth[pos + accepted] == draft[accepted]:
                accepted += 1
            new = truth[:min(pos + accepted + 1, len(truth))]  # + the token the model samples itself
            ref_ctx.update(new.tolist(), nnew=len(new) - len(out))
            out = new
        drafter.reset(out)  # learnt into the dynamic cache
        ref_dyn.merge(ref_ctx)
        assert drafter.dynamic_table().to_dict() == ref_dyn.to_table().to_dict()
    assert drafted > 0
    if w.static is not None and w.static.n_keys > 64:
        assert len(drafter._memo.table) > size0


@pytest.mark.parametrize("grow", [True, False])
def test_a_memo_that_fills_up_keeps_drafting_right(grow):
    # 200 static 2-grams (i, i+1) -> i+2 (twice) and, on ties, i+3 (twice) when i is even; a memo of 1 2-gram
    parts = {(i, i + 1): ({i + 3: 2, i + 2: 2} if i % 2 == 0 else {i + 2: 2}) for i in range(200)}
    static = static_of(parts)
    empty = fc.FlatCache(thresholds=fc.STRICT)
    arrays, memo = static_arrays(static), new_memo(1)
    size0 = len(memo.table)
    for _ in range(2):  # the second pass finds the memo full (or grown) of what the first learnt
        for i in range(0, 200, 3):
            seq = np.array([i, i + 1], np.int32)
            expected = draft_reference(seq, 4, None, None, static)
            toks, codes = draft_tokens(seq, 4, empty.c, empty.c, arrays, memo)
            assert (toks.tolist(), codes.tolist()) == expected
            assert expected[0][:1] == [i + 2]
            if grow:
                memo = grow_memo(memo)
    assert (len(memo.table) > 8 * size0) if grow else (len(memo.table) == size0 and memo.n[0] == size0 // 2)


# ---- the rules, pinned on the fast engine with hand-made caches ------------------------------------------------

def ngram_table(parts: dict) -> NgramTable:
    """Parts keyed by n-gram tuples; a key of 4 slots is taken as given (padding -1 included)."""
    ngrams, offsets, pairs = [], [0], []
    for key, part in parts.items():
        ngrams.append(tuple(key) + (-1,) * (4 - len(key)))
        pairs.extend(part.items())
        offsets.append(len(pairs))
    return NgramTable.canonical(np.array(ngrams, np.int32).reshape(-1, 4), np.array(offsets, np.int64),
                                np.array(pairs, np.int32).reshape(-1, 2))


def static_of(parts: dict | None) -> StaticCache | None:
    return StaticCache.from_table(StaticTable.from_ngrams(ngram_table(parts))) if parts else None


def flat_of(parts: dict | None, thresholds, order=None) -> fc.FlatCache:
    """A FlatCache with the parts; `order` "desc" inserts each n-gram's followers largest id first."""
    cache = fc.FlatCache(64, 64, thresholds)
    for key, part in (parts or {}).items():
        e = fc.find_or_add(cache.c, *(tuple(key) + (-1,) * (4 - len(key))))
        for tok in sorted(part, reverse=order == "desc"):
            fc.add_count(cache.c, e, tok, part[tok])
    return cache


def fast_drafts(seq, n_draft, ctx=None, dyn=None, static=None, order=None):
    """The fast engine's drafts, every way it can be driven (both prechecks, a fresh and a warm memo)."""
    seq = np.array(seq, np.int32)
    flat_ctx, flat_dyn = flat_of(ctx, fc.LAX, order), flat_of(dyn, fc.STRICT, order)
    arrays = static_arrays(static)
    results = set()
    for precheck in (True, False):
        memo = new_memo(4)
        for _ in range(2):  # the second call reads what the first left in the memo
            toks, codes = draft_tokens(seq, n_draft, flat_ctx.c, flat_dyn.c, arrays, memo, precheck)
            results.add((tuple(toks.tolist()), tuple(codes.tolist())))
    assert len(results) == 1, results
    toks, codes = results.pop()
    return list(toks), list(codes)


def reference_drafts(seq, n_draft, ctx=None, dyn=None, static=None):
    return draft_reference(seq, n_draft, NgramCache.from_table(ngram_table(ctx or {})),
                           NgramCache.from_table(ngram_table(dyn or {})), static)


C1, C2, D1, D2, D4 = 1, 2, 5, 6, 8

# seq [0, 7]: the 2-gram (0, 7) has two followers: 4 is the static cache's (count s there), 3 is not.
# Scores: 3 -> count(3) * 1, 4 -> count(4) * 100 * s. The shorter n-gram (7,) always drafts 5 (6 of 6).
WEIGHT_CASES = [
    # (count of 3, count of 4, static count of 4) -> drafted
    ((99, 1, 1), [5]),  # 100 > 99: 4 wins, its share 1/100 fails -> the 1-gram drafts 5 (with weight 10: 3)
    ((100, 1, 1), [3]),  # 100 == 100: the tie goes to 3, share 100/101 passes (with weight 101: 5)
    ((199, 1, 2), [5]),  # 200 > 199 (the weight multiplies the static count)
    ((200, 1, 2), [3]),
    ((199, 2, 1), [5]),  # 200 > 199 (and the primary count)
    ((201, 2, 1), [3]),
    ((11, 1, 1), [5]),  # 100 > 11 (with weight 10: 10 < 11 and 3 drafts)
]


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("counts, drafted", WEIGHT_CASES, ids=lambda v: str(v))
def test_the_static_weight_is_exactly_100(counts, drafted, order):
    assert STATIC_WEIGHT == 100
    c3, c4, s4 = counts
    static = static_of({(0, 7): {4: s4}, (9, 9): {1: 1}})
    ctx = {(0, 7): {3: c3, 4: c4}, (7,): {5: 6}}
    code = C2 if drafted == [3] else C1
    assert reference_drafts([0, 7], 1, ctx=ctx, static=static) == (drafted, [code])
    assert fast_drafts([0, 7], 1, ctx=ctx, static=static, order=order) == (drafted, [code])
    # the same in the dynamic cache (strict thresholds pass too), through the public Drafter
    code = D2 if drafted == [3] else D1
    assert fast_drafts([0, 7], 1, dyn=ctx, static=static, order=order) == (drafted, [code])
    drafter = Drafter(static=static, dynamic=ngram_table(ctx))
    assert drafter.draft([0, 7], 1) == drafted and drafter.last_sources == [SOURCE_NAMES[code]]


def draft_at(trace, pos: int) -> list[int]:
    """The tokens drafted by the call at output length `pos` (of the first chunk)."""
    i = trace.pos.tolist().index(pos)
    start = int(trace.n_drafted[:i].sum())
    return trace.tokens[start:start + int(trace.n_drafted[i])].tolist()


def test_the_static_weight_decides_a_replay(monkeypatch):
    # The context sees 0 7 -> 3 up to eleven times and 0 7 -> 4 once; the static cache knows 0 7 -> 4 once (and
    # 7 3 -> 8 or 200). At the last 0, 7 is drafted; then, with the weight of 100, 4 wins the 2-gram 0 7 (100 > 11)
    # and fails its share, and so does the 1-gram 7: the draft stops. With a weight of 10, 3 wins (11 > 10).
    tokens = [0, 7, 4, 100] + sum(([0, 7, 3, 101 + i] for i in range(11)), []) + [0, 7, 3, 200, 6]
    static = static_of({(0, 7): {4: 1}, (7, 3): {8: 1, 200: 1}})
    trace = assert_same_replay(tokens, len(tokens) - 1, 4, static, None)
    assert draft_at(trace, 49) == [7]
    monkeypatch.setattr(rule_reference, "STATIC_WEIGHT", 10)  # the example is sensitive to the weight
    weight_10, _ = replay(tokens, len(tokens) - 1, 4, static, None, engine="reference")
    assert draft_at(weight_10, 49) == [7, 3, 8]


@pytest.mark.parametrize("part, drafted", [
    ({20: 2, 10: 2}, [10]),
    ({10: 5, 20: 5}, [10]),
    ({1000: 4, 999: 4}, [999]),
    ({ID_MAX: 1, ID_MAX - 1: 1}, [ID_MAX - 1]),
    ({0: 3, ID_MAX: 3}, [0]),
    ({30: 1, 10: 1, 20: 1}, []),  # three-way: 1/3 < 50 %
    ({30: 2, 10: 1, 20: 1}, [30]),  # no tie: the largest count, whatever its id
])
def test_static_only_ties_go_to_the_smallest_id(part, drafted):
    static = static_of({(0, 7): part})
    code = [STATIC] * len(drafted)
    assert reference_drafts([0, 7], 1, static=static) == (drafted, code)
    assert fast_drafts([0, 7], 1, static=static) == (drafted, code)
    drafter = Drafter(static=static)
    for _ in range(2):  # the second draft reads the static choice from the memo
        assert drafter.draft([5, 0, 7], 1) == drafted and drafter.last_sources == ["s2"] * len(drafted)


def test_a_static_only_tie_in_a_replay():
    # after 0 7 the static cache has 10 and 20 twice each, after 7 10 it has 1 and 30 once each: 10 1 is drafted
    # and accepted in both chunks (the dynamic cache's counts of 1 are below its thresholds in chunk 1)
    tokens = [0, 7, 10, 1] * 2 + [0]
    static = static_of({(0, 7): {20: 2, 10: 2}, (7, 10): {1: 1, 30: 1}})
    trace = assert_same_replay(tokens, 4, 3, static, None)
    assert trace.tokens.tolist() == [10, 1] * 2 and trace.sources.tolist() == [STATIC] * 4


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("part, static_part, ctx_drafts, dyn_drafts", [
    # (dynamic: a 50/50 split fails the strict 66 %, then the static cache alone decides, smallest id on ties)
    ({3: 2, 4: 2}, None, ([3], [C2]), ([], [])),  # equal counts, no static support
    ({4: 5, 3: 5}, {3: 1, 4: 1}, ([3], [C2]), ([3], [STATIC])),  # equal weighted scores, both supported
    ({900: 5, 800: 5}, {900: 2, 800: 2, 7: 9}, ([800], [C2]), ([7], [STATIC])),
    ({3: 2, 4: 1}, {3: 1, 4: 2}, ([3], [C2]), ([3], [D2])),  # 2 * 100 == 1 * 200: 3, share 2/3
    ({9: 2, 4: 4}, {9: 2, 4: 1}, ([4], [C2]), ([4], [D2])),  # 2 * 200 == 4 * 100: 4 < 9, share 4/6
    ({9: 2, 4: 4, 5: 1}, {9: 2, 4: 1, 5: 4}, ([4], [C2]), ([5], [STATIC])),  # three scores of 400: 4, share 4/7
])
def test_primary_ties_go_to_the_smallest_id_in_either_insertion_order(part, static_part, ctx_drafts, dyn_drafts,
                                                                      order):
    static = static_of({(0, 7): static_part} if static_part else None)
    for name, expected in (("ctx", ctx_drafts), ("dyn", dyn_drafts)):
        caches = {name: {(0, 7): part}}
        assert reference_drafts([0, 7], 1, static=static, **caches) == expected
        assert fast_drafts([0, 7], 1, static=static, order=order, **caches) == expected


# Windows that start before position 0. For seq [5, 7] the 3- and 4-gram windows would read seq[-1], seq[-2]
# (numba, like numpy, wraps negative indices: 7, then 5) or, padded, -1; for [7, 5, 7] the 4-gram window.
# The caches hold exactly those keys; none may match.
WINDOWS = {
    (5, 7): ({(7, 5, 7): {9: 10}, (5, 7, 5, 7): {8: 10}}, {(-1, 5, 7, -1): {9: 10}, (-1, -1, 5, 7): {8: 10}}),
    (7, 5, 7): ({(7, 7, 5, 7): {8: 10}}, {(-1, 7, 5, 7): {8: 10}}),
}


@pytest.mark.parametrize("kind", ["wrapped", "padded"])
@pytest.mark.parametrize("where", ["ctx", "dyn"])
@pytest.mark.parametrize("seq", list(WINDOWS), ids=str)
def test_windows_before_position_0_miss(seq, kind, where):
    wrapped, padded = WINDOWS[seq]
    keys = wrapped if kind == "wrapped" else padded
    assert fast_drafts(list(seq), 4, **{where: keys}) == ([], [])
    if kind == "wrapped":  # (the reference's tables drop padding, so padded keys are for the fast engine only)
        assert reference_drafts(list(seq), 4, **{where: keys}) == ([], [])
    if where == "dyn":  # the Drafter's own context cache (of seq) drafts; the reference says what
        ctx = NgramCache()
        ctx.update(list(seq))
        toks, codes = draft_reference(list(seq), 4, ctx, NgramCache.from_table(ngram_table(wrapped)))
        if kind == "padded":
            assert (toks, codes) == draft_reference(list(seq), 4, ctx, None)  # as if the keys were absent
        drafter = Drafter(dynamic=ngram_table(keys))
        assert (drafter.draft(list(seq), 4), drafter.last_sources) == (toks, [SOURCE_NAMES[c] for c in codes])


def test_a_window_through_a_drafted_token_still_starts_at_0():
    # after [5, 7] the 2-gram drafts 3; the lookup sequence is then [5, 7, 3], and its 4-gram window starts at -1
    dyn = {(5, 7): {3: 10}, (7, 5, 7, 3): {6: 10}, (-1, 5, 7, 3): {6: 10}}
    assert fast_drafts([5, 7], 4, dyn=dyn) == ([3], [D2])
    assert Drafter(dynamic=ngram_table(dyn)).draft([5, 7], 4) == [3]
    dyn_ok = {(5, 7): {3: 10}, (2, 5, 7, 3): {6: 10}}  # at [2, 5, 7] the same window starts at 0 and matches
    assert fast_drafts([2, 5, 7], 4, dyn=dyn_ok) == reference_drafts([2, 5, 7], 4, dyn=dyn_ok) == ([3, 6], [D2, D4])


def test_windows_at_the_start_of_every_chunk_in_a_replay():
    # chunk [5, 7, 1, 2]: at out = [5, 7] the windows (2, 5, 7) and (1, 2, 5, 7) would wrap to the chunk's end;
    # the -lcd file knows both, so a wrapping engine would draft 9 at every chunk's first real call
    tokens = [5, 7, 1, 2] * 3 + [0]
    lcd = ngram_table({(2, 5, 7): {9: 10}, (1, 2, 5, 7): {9: 10}})
    trace = assert_same_replay(tokens, 4, 4, None, lcd)
    first_calls = [i for i, p in enumerate(trace.pos.tolist()) if p == 2]
    assert [int(trace.n_drafted[i]) for i in first_calls[:1]] == [0]
    assert 9 not in trace.tokens.tolist()
