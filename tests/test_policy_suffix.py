"""The suffix index as a source of lookupkit's policy (issue 15): the compiled policy drafts as its readable
reference does (whose search is the brute force of lookupkit.suffix.reference), Drafter and replay alike,
sequence after sequence; tables learn the source's rows; tables written before it never draft from it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lookupkit import Drafter, StaticCache
from lookupkit.counts.bigrams import count_static
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.counts.high_orders import count_order
from lookupkit.policy import confidence
from lookupkit.replay import tuning
from lookupkit.policy.chain import (N_SOURCES, SHARE_BINS, SRC_MATCH, SRC_SUFFIX, TOTAL_BINS, make_policy,
                                    source_code, suffix_on)
from lookupkit.policy.reference import candidates, draft_policy_reference, history_rows, suffix_candidate, suffix_run
from lookupkit.policy.suffix_source import LENGTH_EDGES, MATCH_LEN, MAX_LEN, min_match_of, suffix_arrays
from lookupkit.errors import FormatError
from lookupkit.formats.lkc_orders import HighOrders, OrderParams
from lookupkit.replay.loop import replay_fast
from lookupkit.rules import SOURCE_NAMES, SUFFIX
from lookupkit.suffix import build_index, corpus_text

from test_policy import FBITS, phrase_stream, random_tables, with_orders

NO_TRUST = (0.0, 0.0)  # these tests pin the sources; the trust (policy.trust) is pinned in test_policy


def code_task(seed: int, n: int = 700, pieces: int = 6):
    """A corpus of documents and a text 'rewritten' from them."""
    docs = [phrase_stream(seed, n=n), phrase_stream(seed + 1, n=n // 2)]
    return docs, rewritten(docs, seed, pieces)


def rewritten(docs, seed: int, pieces: int) -> np.ndarray:
    """Long stretches copied from the documents with a few new tokens between (code at its next version)."""
    rng = np.random.default_rng(seed + 100)
    parts = []
    for _ in range(pieces):
        d = docs[rng.integers(0, len(docs))]
        a = int(rng.integers(0, len(d) - 60))
        parts += [d[a:a + int(rng.integers(20, 60))], rng.integers(0, 300, int(rng.integers(1, 4))).astype(np.int32)]
    return np.concatenate(parts).astype(np.int32)


def with_suffix(docs, orders=(3, 4), suffix: bool = True) -> StaticCache:
    """A static cache of the documents with higher orders and their suffix index (or without it)."""
    params = OrderParams(tuple(orders), follower_bits=FBITS)
    high = HighOrders(params, {n: count_order([[d] for d in docs], n, params) for n in orders})
    return StaticCache.from_table(count_static(docs, 1024), high=high,
                                  suffix=build_index(corpus_text(docs)) if suffix else None)


def suffix_tables(rng, strong: bool):
    """Random tables whose suffix rows are learnt (all high when `strong`)."""
    table, agree = random_tables(rng)
    if strong:
        table[SRC_SUFFIX:] = np.sort(0.9 + 0.1 * rng.random((2, SHARE_BINS, TOTAL_BINS)), axis=1)
    return table, agree


def test_the_source_has_its_code_rows_and_bins():
    assert source_code(SRC_SUFFIX) == source_code(SRC_SUFFIX + 1) == SUFFIX and SOURCE_NAMES[SUFFIX] == "sx"
    assert SRC_SUFFIX == SRC_MATCH + 1 and N_SOURCES == SRC_SUFFIX + 2
    assert len(LENGTH_EDGES) == SHARE_BINS and LENGTH_EDGES[0] == 1 and LENGTH_EDGES[-1] == MAX_LEN
    assert np.all(np.diff(LENGTH_EDGES) > 0)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cost=st.sampled_from([0.0, 0.1, 0.25, "curve"]), n_draft=st.integers(1, 12),
       max_len=st.sampled_from([MAX_LEN, 5]), gate=st.sampled_from([0, 0, 3, 7, 12]))
@example(seed=1244, cost=0.0, n_draft=1, max_len=5, gate=3)  # strong rows lose at short matches (see below)
def test_compiled_policy_with_the_suffix_source_drafts_as_its_reference(seed, cost, n_draft, max_len, gate):
    """gate: the table's first `gate` length bins of the suffix rows unlearnt (zero): the source drafts
    only after matches of LENGTH_EDGES[gate] tokens or more, and skips searches that cannot reach it.
    Wherever the suffix candidate is the most probable at a draft's first position, the draft is the
    suffix source's. (Strong rows are not enough: sorted along the length bins, a match capped at 5
    tokens reads their lowest values, and other sources' random rows reach higher; at seed 1244 the
    suffix candidate was offered at 46 positions and lost each on probability.)"""
    rng = np.random.default_rng(seed)
    docs, seq = code_task(seed)
    index = build_index(corpus_text(docs))
    cache, high = with_orders(docs, orders=(3, 4), min_total=1, min_share=0.0)
    strong = seed % 2 == 0
    tables = suffix_tables(rng, strong)
    tables[0][SRC_SUFFIX:, :gate] = 0.0
    min_match = int(LENGTH_EDGES[gate])
    assert min_match_of(tables[0][SRC_SUFFIX:]) == min_match
    curve = {k: 1 + 0.3 * k - 0.01 * k * k for k in range(13)}
    cost_of = (lambda k: curve.get(k, np.inf)) if cost == "curve" else (lambda k: 1 + cost * k)
    costs = [cost_of(k) for k in range(n_draft + 1)]
    drafter = Drafter(static=cache, policy="lookupkit")
    pol = make_policy(tables, cost_of, 1024, cache.high, index, trust=NO_TRUST)
    assert pol.suffix.min_match == min_match
    drafter._pol = pol._replace(suffix=suffix_arrays(index, 1024, max_len, min_match))
    dyn = NgramCache()
    # growing sequences (the bounded search), then sequences that are no extension of the last (a reset):
    # one the corpus has never seen, then one a token longer that ends in a long match
    prefixes = [seq[:i] for i in range(1, len(seq), 5)]
    long = max(prefixes, key=lambda p: suffix_run(index, p.tolist(), 1, max_len)[0])
    prefixes += [np.arange(500, 500 + len(long) - 1, dtype=np.int32), long]
    for prefix in prefixes:
        ctx = NgramCache()
        ctx.update(prefix.tolist())
        want = draft_policy_reference(prefix.tolist(), n_draft, ctx, dyn, cache, high, tables, costs, index, max_len)
        assert drafter.draft(prefix, n_draft) == want, len(prefix)
        m = suffix_run(index, prefix.tolist(), 1, max_len)[0]
        found = drafter._pol.suffix.state[MATCH_LEN]  # the bounded search found the longest, or did not search
        assert found == m or (found == 0 and m < min_match), len(prefix)
        if want and suffix_leads(prefix.tolist(), ctx, dyn, cache, high, tables[0], index, max_len, min_match):
            assert drafter.last_sources[0] == "sx", len(prefix)


def suffix_leads(s: list[int], ctx, dyn, cache, high, table, index, max_len: int, min_match: int) -> bool:
    """Whether the suffix source's candidate is strictly the most probable one at a draft's first position."""
    run = suffix_run(index, s, 1, max_len)
    if run[0] < min_match:
        return False
    table = history_rows(table)
    cands = {**candidates(s, ctx, dyn, cache, high, len(s)), **suffix_candidate(run, [])}
    prob = {row: min(1.0, table[row, c[1], c[2]]) for row, c in cands.items()}
    lead = max(prob, key=prob.get) if prob else -1
    return lead >= SRC_SUFFIX and all(p < prob[lead] for row, p in prob.items() if row != lead)


def test_a_suffix_source_that_outranks_the_others_drafts():
    """The comparison includes the suffix source: with its rows above every other row it drafts."""
    rng = np.random.default_rng(7)
    docs, seq = code_task(8)
    index = build_index(corpus_text(docs))
    cache, _ = with_orders(docs, orders=(3, 4), min_total=1, min_share=0.0)
    table, agree = suffix_tables(rng, True)
    table[:SRC_SUFFIX] *= 0.5
    drafter = Drafter(static=cache, policy="lookupkit")
    drafter._pol = make_policy((table, agree), lambda k: 1.0, 1024, cache.high, index, trust=NO_TRUST)
    n_sx = 0
    for i in range(40, len(seq), 7):
        drafter.draft(seq[:i], 4)
        n_sx += drafter.last_sources.count("sx")
    assert n_sx > 0


def test_a_replay_with_the_suffix_source_drafts_as_the_reference_call_after_call():
    """replay_fast's every call (chunks, the context and dynamic caches, the suffix state reset per chunk)
    against draft_policy_reference at that call's position."""
    rng = np.random.default_rng(3)
    docs, seq = code_task(11, n=500)
    index = build_index(corpus_text(docs))
    cache, high = with_orders(docs, orders=(3,), min_total=1, min_share=0.0)
    tables = suffix_tables(rng, True)
    n_ctx, n_draft = 96, 6
    pol = make_policy(tables, lambda k: 1 + 0.1 * k, n_draft, cache.high, index, trust=NO_TRUST)
    trace, _ = replay_fast(seq, n_ctx, n_draft, static=cache, policy=pol)
    dyn, at = NgramCache(), 0
    for chunk in range((len(seq) - 1) // n_ctx):
        truth = seq[chunk * n_ctx:(chunk + 1) * n_ctx].tolist()
        for r in np.flatnonzero(trace.chunk == chunk):
            pos = int(trace.pos[r])
            want = draft_policy_reference(truth[:pos], n_draft, _counted(truth[:pos]), dyn, cache, high, tables,
                                          [1 + 0.1 * k for k in range(n_draft + 1)], index)
            k = int(trace.n_drafted[r])
            assert trace.tokens[at:at + k].tolist() == want, (chunk, pos)
            at += k
        dyn.merge(_counted(truth))  # the chunk's context cache, merged as the replay does
    assert at == len(trace.tokens) and SOURCE_NAMES[SUFFIX] in trace.summary()["per_source"]


def _counted(tokens: list[int]) -> NgramCache:
    c = NgramCache()
    c.update(tokens)
    return c


def test_tables_learn_the_suffix_rows_and_the_source_pays_on_the_copy_task():
    docs, held_out = code_task(21, n=3000, pieces=200)
    cache, _ = with_orders(docs, orders=(3, 4))
    rich = with_suffix(docs)
    tables = confidence.learn(held_out, 512, static=rich)
    assert suffix_on(tables[0]) and not suffix_on(confidence.learn(held_out, 512, static=cache)[0])
    eval_ids = rewritten(docs, 22, 150)
    runs = {}
    for name, suffix in (("with", rich.suffix), ("without", None)):
        pol = make_policy(tables, lambda k: 1 + 0.25 * k, 8, cache.high, suffix)
        runs[name] = replay_fast(eval_ids, 512, 8, static=cache, policy=pol)[0].summary()
    assert "sx" in runs["with"]["per_source"] and "sx" not in runs["without"]["per_source"]
    assert runs["with"]["expected_speedup"]["0.25"] > runs["without"]["expected_speedup"]["0.25"]


def test_the_gate_keeps_the_source_where_it_pays_and_drops_it_where_it_cannot():
    """tuning.gate_suffix: the best worst ratio over GATE_COSTS to the policy without the source, or no source:
    then exactly the tables a cache without the index learns."""
    docs, held = code_task(21, n=3000, pieces=200)
    rich = with_suffix(docs)
    first, second, chunk = confidence.halves(held, 512)
    table = confidence.learn_sources(first, chunk, rich, None)
    agree_for = lambda t: confidence.learn_agree(t, second, chunk, rich, None)  # noqa: E731
    halves = [held[:len(held) // 2], held[len(held) // 2:]]
    gated, record = tuning.gate_suffix(table, agree_for, rich, halves, None, 512)
    chosen = next(r for r in record["tried"] if r["min_match"] == record["min_match"])
    assert chosen["worst_bound"] > 1 and chosen["worst_bound"] == max(r["worst_bound"] for r in record["tried"])
    for r in record["tried"]:  # the bound: the worse half's ratio less the halves' difference, at the worst cost
        assert r["worst_bound"] == min(min(a, b) - abs(a - b) for a, b in r["ratios_by_half"].values())
    assert min_match_of(gated[0][SRC_SUFFIX:]) == record["min_match"] and suffix_on(gated[0])
    assert [r["min_match"] for r in record["tried"]] == [int(LENGTH_EDGES[b]) for b in tuning.GATE_BINS]
    assert np.array_equal(gated[0][:SRC_SUFFIX], table[:SRC_SUFFIX])
    noise = np.random.default_rng(0).integers(700, 1000, 3000).astype(np.int32)  # ids the corpus never holds
    off, rec = tuning.gate_suffix(table, agree_for, rich, [noise[:1500], noise[1500:]], None, 512)
    assert rec["min_match"] is None and all(r["worst_bound"] <= 1.0 for r in rec["tried"])
    plain = confidence.learn(held, 512, static=with_suffix(docs, suffix=False))
    assert np.array_equal(off[0], plain[0]) and np.array_equal(off[1], plain[1])
    _, gens = tuning.gate_suffix(table, agree_for, rich, [held[:1500], held[1500:]], [200, 200], 512)
    assert gens["min_match"] is not None  # (generations: each replayed after its prompt)


def test_tables_from_before_the_source_load_and_never_draft_from_it(tmp_path):
    table, agree = confidence.load()
    assert table.shape[0] == N_SOURCES and not suffix_on(table)
    old = {"format": confidence.FORMAT_1, "table": table[:SRC_SUFFIX].tolist(), "agree": agree.tolist()}
    (tmp_path / "old.json").write_text(json.dumps(old))  # a table written before the source: 24 rows
    back = confidence.load(tmp_path / "old.json")
    assert np.array_equal(back[0][:SRC_SUFFIX], table[:SRC_SUFFIX]) and not back[0][SRC_SUFFIX:].any()
    (tmp_path / "bad.json").write_text(json.dumps({**old, "format": confidence.FORMAT}))  # 24 rows claiming 2
    with pytest.raises(FormatError, match="lookupkit-policy-2 table of shapes"):
        confidence.load(tmp_path / "bad.json")
    docs, seq = code_task(5, n=2000)
    index = build_index(corpus_text(docs))
    cache, _ = with_orders(docs, orders=(3,))
    ids = np.concatenate([seq] * 4)
    a = replay_fast(ids, 128, 8, static=cache, policy=make_policy(back, lambda k: 1.0, 8, cache.high, index))[0]
    b = replay_fast(ids, 128, 8, static=cache, policy=make_policy(back, lambda k: 1.0, 8, cache.high))[0]
    assert a.tokens.tolist() == b.tokens.tolist() and "sx" not in a.summary()["per_source"]
    saved = confidence.save(confidence.learn(ids, 128, static=with_suffix(docs)), tmp_path / "new.json")
    doc = json.loads(saved.read_text())
    assert doc["format"] == confidence.FORMAT and doc["sources"][SRC_SUFFIX:] == ["sx (unanimous)", "sx (majority)"]


def test_lookup_create_suffix_index_then_tune_policy_then_lookup_stats(tmp_path):
    """The commands end to end: a cache with a suffix index, tables tune-policy learns with it, and lookup-stats
    drafting from it with those tables (and warning that the bundled ones have not learnt it)."""
    from typer.testing import CliRunner

    from lookupkit.cli.create import app as create
    from lookupkit.cli.main import app as umbrella
    from lookupkit.cli.stats import app as stats

    docs, held = code_task(41, n=3000, pieces=150)
    for name, ids in (("corpus", np.concatenate(docs)), ("held", held), ("eval", rewritten(docs, 42, 120))):
        ids.astype("<i4").tofile(tmp_path / f"{name}.i32")
    run = CliRunner().invoke
    lkc, tables = str(tmp_path / "c.lkc"), str(tmp_path / "t.json")
    r = run(create, ["--tokens", str(tmp_path / "corpus.i32"), "--orders", "2-4", "--suffix-index", "-lcs", lkc])
    assert r.exit_code == 0, r.output
    r = run(umbrella, ["tune-policy", "--cache", lkc, "--tokens", str(tmp_path / "held.i32"), "-c", "512",
                       "-o", tables])
    assert r.exit_code == 0 and "suffix index" in r.stdout, r.output
    assert suffix_on(confidence.load(tables)[0]) and json.loads(open(tables).read())["about"]["cache_suffix_index"]
    base = ["--tokens", str(tmp_path / "eval.i32"), "-lcs", lkc, "-c", "512", "--policy", "lookupkit", "--json"]
    r = run(stats, [*base, "--policy-table", tables])
    assert r.exit_code == 0 and "warning" not in r.stderr, r.output
    assert "sx" in json.loads(r.stdout)["per_source"]
    r = run(stats, base)
    assert r.exit_code == 0 and "learnt without one" in r.stderr and "sx" not in json.loads(r.stdout)["per_source"]
