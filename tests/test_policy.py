"""lookupkit's policy and the higher-order sections it drafts from: counting, the version-2 file, the compiled
policy draft for draft against its readable reference, the confidence table, and the CLI/API wiring.
llama.cpp's rule is untouched by all this: its conformance tests live in test_conformance/test_fast_engine."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookupkit import Drafter, StaticCache
from lookupkit.counts.bigrams import count_static
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.counts.high_orders import count_order, ngram_hash, parse_orders
from lookupkit.policy import confidence
from lookupkit.policy.chain import (AGREE_MAX, N_SOURCES, P_BINS, SHARE_BINS, SRC_MATCH, SRC_STATIC, TOTAL_BINS,
                                    make_policy, source_code)
from lookupkit.policy.reference import draft_policy_reference, learn_trust
from lookupkit.policy.trust import N_ROWS
from lookupkit.errors import FormatError, InputError
from lookupkit.files import atomic_writer
from lookupkit.formats import lkc_read
from lookupkit.formats.lkc_write import write_file
from lookupkit.formats.lkc_orders import HighOrders, OrderParams, unpack_value
from lookupkit.replay.loop import replay_fast
from lookupkit.rules import SOURCE_NAMES, TRUST_PRIOR, TRUST_WINDOW, context_code, dynamic_code, static_code

FBITS = 10  # ids < 1024 in these tests


def phrase_stream(seed: int, vocab: int = 300, n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, vocab, rng.integers(2, 9)) for _ in range(30)]
    return np.concatenate([phrases[i] for i in rng.integers(0, 30, n // 5)]).astype(np.int32)


def reference_orders(docs: list[np.ndarray], n: int, params: OrderParams) -> dict:
    """{n-gram tuple: (top follower, total, share q16)} as counts.high_orders keeps them, by plain counting."""
    followers = defaultdict(Counter)
    for d in docs:
        for i in range(n, len(d)):
            followers[tuple(int(t) for t in d[i - n:i])][int(d[i])] += 1
    kept = {}
    for gram, c in followers.items():
        total, best = sum(c.values()), max(c.values())
        tok = min(t for t, v in c.items() if v == best)
        if total >= params.min_total and best * 0xFFFF >= int(np.ceil(params.min_share * 0xFFFF)) * total:
            kept[gram] = (tok, min(total, 0xFFFF), best * 0xFFFF // total)
    return kept


def with_orders(docs: list[np.ndarray], orders=(3, 4, 5), **kw) -> tuple[StaticCache, dict]:
    params = OrderParams(tuple(orders), follower_bits=FBITS, **kw)
    high = HighOrders(params, {n: count_order([[d] for d in docs], n, params, part_entries=700) for n in orders})
    cache = StaticCache.from_table(count_static(docs, 1024), high=high)
    return cache, {n: reference_orders(docs, n, params) for n in orders}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(3, 7), min_total=st.integers(1, 4),
       min_share=st.sampled_from([0.0, 0.3, 0.5, 0.9]), parts=st.sampled_from([50, 700, 1 << 20]))
def test_order_counts_equal_plain_counting(seed, n, min_total, min_share, parts):
    docs = [phrase_stream(seed), phrase_stream(seed + 1, n=500)]
    params = OrderParams((n,), min_total=min_total, min_share=min_share, follower_bits=FBITS)
    keys, values = count_order([[d[:200], d[200:]] for d in docs], n, params, part_entries=parts)
    want = {int(ngram_hash(np.array(g, np.int32), n, n)) >> FBITS: v for g, v in reference_orders(docs, n, params).items()}
    got = {int(k): (lambda t: (t[0], t[1], int(round(t[2] * 0xFFFF))))(unpack_value(v)) for k, v in zip(keys, values)}
    assert np.all(np.diff(keys.astype(np.float64)) > 0) or len(keys) < 2
    assert got == want


def test_orders_flag_is_parsed_and_checked():
    assert parse_orders("2") == (2,) and parse_orders("2-6") == (2, 3, 4, 5, 6) and parse_orders("2,5,3") == (2, 3, 5)
    for bad in ("1", "3-6", "2-17", "x", "", "2,2"):
        with pytest.raises(InputError, match="--orders"):
            parse_orders(bad)


def test_version_2_file_round_trips_and_old_readers_refuse_it(tmp_path, monkeypatch):
    docs = [phrase_stream(7)]
    cache, ref = with_orders(docs)
    path = tmp_path / "o.lkc"
    table = count_static(docs, 1024)
    with atomic_writer(path) as f:
        write_file(f, table, {}, True, HighOrders(OrderParams((3, 4, 5), follower_bits=FBITS),
                                                     {n: count_order([docs], n, OrderParams((3, 4, 5), follower_bits=FBITS))
                                                      for n in (3, 4, 5)}))
    with StaticCache.open(path) as opened:
        assert opened.orders == [2, 3, 4, 5] and opened.meta["format_version"] == 2
        assert opened.meta["orders"]["n_keys"] == {str(n): len(ref[n]) for n in ref}
        assert opened.verify()["ok"] and any("order-3 map" in c for c in opened.verify()["checks"])
        assert opened.to_table().to_dict() == table.to_dict()  # the 2-gram part is unchanged
    plain = tmp_path / "plain.lkc"
    with atomic_writer(plain) as f:
        write_file(f, table, {}, True)
    assert plain.read_bytes()[8:12] == (1).to_bytes(4, "little")  # no higher orders: still version 1
    monkeypatch.setattr(lkc_read, "VERSION", 1)  # a reader of version 1 only
    with pytest.raises(FormatError, match="newer lookupkit"):
        StaticCache.open(path)


def test_source_codes_match_the_rules():
    for n in range(1, 5):
        assert source_code(n - 1) == context_code(n) and source_code(4 + n - 1) == dynamic_code(n)
    for n in range(2, 17):
        assert source_code(SRC_STATIC + n - 2) == static_code(n)
        assert SOURCE_NAMES[static_code(n)] == f"s{n}"


def random_tables(rng) -> tuple[np.ndarray, np.ndarray]:
    table = np.sort(rng.random((N_SOURCES, SHARE_BINS, TOTAL_BINS)), axis=1)
    table[rng.random(table.shape) < 0.2] = 0.5  # forced ties between sources
    agree = np.sort(np.sort(rng.random((P_BINS, AGREE_MAX + 1)), axis=0), axis=1)
    return table, agree


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), cost=st.sampled_from([0.0, 0.05, 0.25, 1.0, "curve"]), n_draft=st.integers(1, 8),
       others=st.sampled_from([0.0, 0.0, 1.0, 3.5]))
def test_compiled_policy_drafts_as_its_reference(seed, cost, n_draft, others):
    rng = np.random.default_rng(seed)
    corpus = [phrase_stream(seed), phrase_stream(seed + 3, n=800)]
    cache, high = with_orders(corpus, orders=(3, 4, 6), min_total=1, min_share=0.0)
    tables = random_tables(rng)
    curve = {k: 1 + 0.3 * k - 0.01 * k * k for k in range(9)}
    cost_of = (lambda k: curve.get(k, np.inf)) if cost == "curve" else (lambda k: 1 + cost * k)
    seq = phrase_stream(seed + 9, n=400)
    learnt = phrase_stream(seed + 11, n=300)
    dyn = NgramCache()
    dyn.update(learnt.tolist())
    drafter = Drafter(static=cache, dynamic=dyn.to_table(), policy="lookupkit")
    drafter._pol = make_policy(tables, cost_of, 1024, cache.high)
    drafted, evidence, record, prior = 0, np.zeros((N_ROWS, 2)), [], TRUST_PRIOR
    params = (prior, 1 - 1 / TRUST_WINDOW)
    for i in range(1, len(seq), 7):
        ctx = NgramCache()
        ctx.update(seq[:i].tolist())
        learn_trust(evidence, params, record, seq[i - 7:i].tolist())  # what followed the last call
        record = []
        want = draft_policy_reference(seq[:i].tolist(), n_draft, ctx, dyn, cache, high, tables,
                                      [cost_of(k) for k in range(n_draft + 1)],
                                      factors=(evidence[:, 1] + prior) / (evidence[:, 0] + prior), record=record,
                                      others=others)
        price = (np.array([cost_of(k) for k in range(n_draft + 1)]), others) if others else None
        assert drafter.draft(seq[:i], n_draft, price) == want, i
        np.testing.assert_allclose(drafter._pol.trust.evidence, evidence, rtol=1e-12)
        drafted += len(want)
    dear = cost == 1.0 or (others and cost != 0.0)  # nothing pays (beside others, only free rows surely do)
    assert drafted > 0 or dear  # the comparison is not between two empty drafts
    assert evidence[0, 0] > 0 or dear  # and the trust learnt something (nothing pays: no candidate is looked up)


def test_replay_with_the_policy_never_drafts_what_cannot_pay(tmp_path):
    seq = phrase_stream(5, n=20_000)
    cache, _ = with_orders([phrase_stream(6, n=20_000)])
    tables = confidence.learn(phrase_stream(8, n=30_000), 512, static=cache)
    free, _ = replay_fast(seq, 512, 8, static=cache, policy=make_policy(tables, lambda k: 1.0, 8, cache.high))
    dear, _ = replay_fast(seq, 512, 8, static=cache, policy=make_policy(tables, lambda k: 1 + 1e6 * k, 8, cache.high))
    rule, _ = replay_fast(seq, 512, 8, static=cache)
    assert dear.n_drafted.sum() == 0 and dear.summary()["expected_speedup"]["1"] == 1.0
    assert free.n_accepted.sum() > rule.n_accepted.sum()  # free verification: draft whatever might be accepted
    assert set(free.summary()["per_source"]) <= set(SOURCE_NAMES.values())


def test_confidence_tables_are_probabilities_and_round_trip(tmp_path):
    cache, _ = with_orders([phrase_stream(1, n=20_000)])
    table, agree = confidence.learn(phrase_stream(2, n=20_000), 512, static=cache)
    assert table.shape == (N_SOURCES, SHARE_BINS, TOTAL_BINS) and agree.shape == (P_BINS, AGREE_MAX + 1)
    assert np.all((table >= 0) & (table <= 1)) and np.all(np.diff(table, axis=1) >= 0)
    assert np.all(np.diff(agree, axis=0) >= -1e-12)  # non-decreasing in the best candidate's probability
    path = confidence.save((table, agree), tmp_path / "p.json", {"trained_on": "test"})
    back = confidence.load(path)
    assert np.allclose(back[0], table, atol=1e-6) and np.allclose(back[1], agree, atol=1e-6)
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(FormatError, match="policy table"):
        confidence.load(tmp_path / "bad.json")
    with pytest.raises(InputError, match="does not exist"):
        confidence.load(tmp_path / "none.json")


def test_the_default_table_loads_and_a_policy_drafter_works_without_higher_orders():
    table, agree = confidence.load()
    assert table.shape == (N_SOURCES, SHARE_BINS, TOTAL_BINS)
    seq = phrase_stream(3, n=2000)
    drafter = Drafter(policy="lookupkit", verify_cost=0.0)
    assert len(drafter.draft(seq[:1500], 8)) > 0  # the context repeats: something is worth drafting for free
    with pytest.raises(InputError, match="unknown policy"):
        Drafter(policy="greedy")


def test_lookup_create_orders_streams_the_same_bytes_as_the_in_memory_writer(tmp_path):
    from lookupkit.create import build_static
    from lookupkit.corpora import TokenFile

    ids = phrase_stream(4, n=20_000)
    ids.tofile(tmp_path / "t.i32")
    params = OrderParams((3, 4, 5), min_total=2, min_share=0.3)
    built = tmp_path / "b.lkc"
    for jobs in (1, 2):
        build_static([TokenFile(tmp_path / "t.i32")], None, built, jobs=jobs, orders=params)
        with StaticCache.open(built) as cache:
            meta = {k: cache.meta[k] for k in ("vocab", "corpus", "build")}
            fbits = 64 - cache.meta["orders"]["key_bits"]
        p = OrderParams((3, 4, 5), 2, 0.3, follower_bits=fbits)
        with atomic_writer(tmp_path / "m.lkc") as f:
            write_file(f, count_static([ids], 2**31 - 1), meta, True,
                           HighOrders(p, {n: count_order([[ids]], n, p) for n in (3, 4, 5)}))
        assert built.read_bytes() == (tmp_path / "m.lkc").read_bytes(), jobs


def test_orders_need_an_lkc_output_and_valid_flags(tmp_path):
    from typer.testing import CliRunner

    from lookupkit.cli.create import app

    np.arange(100, dtype="<i4").tofile(tmp_path / "t.i32")
    for args, fragment in ((["--orders", "2-6", "-lcs", str(tmp_path / "o.ggngcmap")], ".lkc"),
                           (["--orders", "1-3", "-lcs", str(tmp_path / "o.lkc")], "--orders"),
                           (["--orders", "2-40", "-lcs", str(tmp_path / "o.lkc")], "--orders"),
                           (["--orders", "2-4", "--order-min-share", "1.5", "-lcs", str(tmp_path / "o.lkc")], "between 0 and 1")):
        r = CliRunner().invoke(app, ["--tokens", str(tmp_path / "t.i32"), *args])
        assert r.exit_code == 2 and fragment in r.output, r.output
    assert not list(tmp_path.glob("o.*"))


def test_lookup_stats_policy_flags(tmp_path):
    import json

    from typer.testing import CliRunner

    from lookupkit.cli.stats import app

    ids = phrase_stream(12, n=12_000)
    ids.tofile(tmp_path / "t.i32")
    cache, _ = with_orders([phrase_stream(13, n=12_000)])
    table = count_static([phrase_stream(13, n=12_000)], 1024)
    with atomic_writer(tmp_path / "o.lkc") as f:
        p = OrderParams((3, 4, 5), follower_bits=FBITS)
        write_file(f, table, {}, True, HighOrders(p, {n: count_order([[phrase_stream(13, n=12_000)]], n, p)
                                                          for n in (3, 4, 5)}))
    run = CliRunner().invoke
    base = ["--tokens", str(tmp_path / "t.i32"), "-c", "512"]
    r = run(app, [*base, "-lcs", str(tmp_path / "o.lkc"), "--policy", "lookupkit", "--verify-cost", "0.25", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["policy"] == "lookupkit" and out["policy_cost"] == 0.25 and out["n_draft"] == 8
    assert out["expected_speedup"]["0.25"] == pytest.approx(out["speedup"]) and "warning" not in r.stderr
    two = tmp_path / "two.lkc"
    with atomic_writer(two) as f:
        write_file(f, table, {}, True)
    r = run(app, [*base, "-lcs", str(two), "--policy", "lookupkit"])
    assert r.exit_code == 0 and r.stderr.count("warning:") == 1 and "--orders 2-6" in r.stderr
    r = run(app, [*base, "-lcs", str(tmp_path / "o.lkc"), "--policy", "lookupkit", "--sweep", "--json"])
    rows = json.loads(r.stdout)["rows"]
    assert [row["policy_cost"] for row in rows] == [0.0, 0.05, 0.1, 0.25, 0.5, 1.0]
    assert rows[-1]["n_drafted"] <= rows[0]["n_drafted"]  # dearer verification, fewer drafts
    for args, fragment in ((["--policy", "lookupkit", "--engine", "reference"], "fast engine"),
                           (["--policy-table", str(tmp_path / "t.i32")], "only used with --policy lookupkit"),
                           (["--policy", "lookupkit", "--policy-table", str(tmp_path / "t.i32")], "policy table"),
                           (["--policy", "greedy"], "Invalid value")):
        r = run(app, [*base, *args])
        assert r.exit_code == 2 and fragment in r.output, (args, r.output)


def test_learning_on_generations_scores_generated_positions_only():
    """A model that copies its prompt: the longest-match source is right at every generated position, and
    positions inside the prompts are never scored (prompt_len = length scores nothing)."""
    rng = np.random.default_rng(5)
    seqs, lens = [], []
    for _ in range(6):
        prompt = rng.integers(0, 500, 120).astype(np.int32)
        seqs.append(np.concatenate([prompt, prompt[:80]]))
        lens.append(len(prompt))
    pol = make_policy((np.zeros((N_SOURCES, SHARE_BINS, TOTAL_BINS)), np.zeros((P_BINS, AGREE_MAX + 1))),
                      lambda k: 1.0, 1, None)
    chunks = [(s, p) for s, p in zip(seqs, lens)]
    hits, trials = confidence._replay_counts(chunks, 256, None, None, pol, pol.table.shape, 0)
    match = SRC_MATCH
    assert trials[match].sum() >= 6 * (80 - 32) and hits[match].sum() == trials[match].sum()
    assert trials.sum() <= N_SOURCES * 6 * 80
    none = confidence._replay_counts([(s, len(s)) for s in seqs], 256, None, None, pol, pol.table.shape, 0)
    assert none[1].sum() == 0
    table, agree = confidence.learn_generations(seqs, lens)
    assert table[match, SHARE_BINS - 1, 0] > 0.9  # matches of >= 24 tokens
    with pytest.raises(InputError, match="longer than its prompt"):
        confidence.learn_generations(seqs, [len(s) for s in seqs])


def test_a_registered_model_finds_the_table_learnt_on_its_generations():
    path = confidence.for_model("gemma-3-270m")
    assert path is not None and path == confidence.for_model("/anywhere/gemma-3-270m-q4_k_m.gguf")
    table, agree = confidence.load(path)
    assert table.shape == (N_SOURCES, SHARE_BINS, TOTAL_BINS) and agree.shape == (P_BINS, AGREE_MAX + 1)
    assert confidence.for_model("someone-elses.gguf") is None


@pytest.mark.parametrize("real_match,want_len", [(8, 16), (20, 48)])
def test_a_draft_grows_past_16_only_on_a_long_match(real_match, want_len):
    """Verification is free and every source is right 90 % of the time, so any chain pays: the draft is as long
    as the evidence allows. A block of 80 tokens, 30 others, then the block's first `real_match` tokens again: the
    chain follows the block. With 8 real tokens matched, at 16 drafted the match is 24 < LONG_MATCH (32): the draft
    stops at SHORT_DRAFT. With 20, the match reaches 32 by the 12th drafted token and the draft runs to --draft 48
    (the rest of the block, then what followed it). The compiled policy drafts as its reference in both."""
    from lookupkit.rules import LONG_MATCH, SHORT_DRAFT

    assert (SHORT_DRAFT, LONG_MATCH) == (16, 32)
    rng = np.random.default_rng(3)
    block, other = rng.integers(100, 5000, 80).tolist(), rng.integers(5000, 9000, 30).tolist()
    seq = block + other + block[:real_match]
    tables = (np.full((N_SOURCES, SHARE_BINS, TOTAL_BINS), 0.9), np.full((P_BINS, AGREE_MAX + 1), 0.9))
    drafter = Drafter(policy="lookupkit")
    drafter._pol = make_policy(tables, lambda k: 1.0, 1024, None, trust=(0.0, 8.0))
    got = drafter.draft(seq, 48)
    ctx = NgramCache()
    ctx.update(seq)
    assert got == draft_policy_reference(seq, 48, ctx, None, None, {}, tables, [1.0] * 49)
    assert len(got) == want_len and got == (block + other)[real_match:real_match + want_len]
