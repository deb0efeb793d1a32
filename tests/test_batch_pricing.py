"""Drafts priced by what they add to a step shared by many slots (issue 31): the step-cost surface that
`lookupkit calibrate --slots` writes, the price rows a slot's policy maximises against, the policy's
(others + E_k) / cost[k] rule on a hand-worked case, and a step's drafts planned together (engine and replay)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import needs
from lookupkit import Drafter
from lookupkit.errors import FormatError, InputError
from lookupkit.policy.chain import AGREE_MAX, N_SOURCES, P_BINS, SHARE_BINS, TOTAL_BINS, make_policy
from lookupkit.verify_cost import StepPricer, VerifyCost, load_curve, save_curve
from tiny_models import tiny_gguf  # noqa: F401


def test_a_step_is_priced_by_its_rows_on_the_measured_surface_else_by_the_curve():
    cost = VerifyCost(curve={0: 1.0, 1: 1.5, 2: 2.0, 3: 2.4}, batch={2: ([2, 4, 6], [1.8, 3.0, 4.0])})
    assert cost.step(2, 3) == pytest.approx(2.4)  # halfway between rows 2 and 4
    assert cost.step(2, 7) == math.inf and cost.step(2, 1) == math.inf  # outside what was measured
    assert cost.step(1, 3) == 2.0 and cost.step(3, 2) == 1.5  # no surface for 1 or 3 slots: the curve's 1 + k rows
    one = StepPricer(cost)  # one busy slot: a chain is offered the curve itself
    one.start([0])
    np.testing.assert_allclose(one.offer(3, 0)[0], [1.0, 1.5, 2.0, 2.4])
    # two slots, the second drafting 1 + k rows beside the first's one: a pass of 2 rows over both and a pass of k
    # rows over the second alone; both drafting 1: one pass of 4 rows over both
    assert cost.layout([1, 2]) == pytest.approx(1.8 + 1.0) and cost.layout([2, 2]) == pytest.approx(3.0)
    two = StepPricer(cost)
    two.start([0, 1])  # offered the cheaper of both drafting j (one pass) and the second alone drafting j
    np.testing.assert_allclose(two.offer(2, 1)[0], [1.0, min(3.0, 1.8 + 1.0) / 1.8, min(4.0, 1.8 + 1.5) / 1.8])
    past = StepPricer(VerifyCost(curve={0: 1.0, 1: 1.5}))  # past the curve: nothing more is priced
    past.start([0])
    assert list(past.offer(2, 0)[0][:2]) == [1.0, 1.5] and np.isinf(past.offer(2, 0)[0][2])
    assert VerifyCost(constant=0.5).layout([2, 1, 1, 1]) == pytest.approx(2.5 + 1.0)  # 1 + C (rows - 1) a pass


def test_a_step_is_the_passes_llama_cpp_splits_it_into():
    """A KV stream per sequence: each pass takes as many rows from each of a run of consecutive busy sequences
    (llama.cpp's split_equal), worked by hand."""
    from lookupkit.verify_cost import passes

    assert passes([1, 1, 1, 1]) == [(4, 4)]
    assert passes([17, 1, 6, 1]) == [(4, 4), (1, 16), (1, 5)]
    assert passes([9, 9, 9, 9]) == [(4, 36)]
    assert passes([3, 2, 0, 1]) == [(2, 4), (1, 1), (1, 1)]  # an idle slot ends a run
    assert passes([0, 0]) == [] and passes([]) == []


def test_a_curve_with_a_batch_surface_round_trips_and_a_bad_surface_is_refused(tmp_path):
    path = save_curve({"curve": {0: 1.0, 1: 1.5}, "batch": {2: {2: 1.9, 3: 2.6}}}, tmp_path / "c.json")
    cost = VerifyCost.parse(str(path))
    assert cost.step(2, 2) == pytest.approx(1.9) and cost.step(2, 3) == pytest.approx(2.6)
    assert load_curve(path)["batch"] == {2: {2: 1.9, 3: 2.6}}
    for batch in ({2: {2: 1.9}}, {2: {1: 1.0, 3: 2.0}}, {2: {2: -1.0, 3: 2.0}}, {2: "x"}, {0: {0: 1.0, 1: 2.0}}):
        data = {"format": "lookupkit-verify-cost-1", "curve": {0: 1.0, 1: 1.5}, "batch": batch}
        (tmp_path / "bad.json").write_text(json.dumps(data))
        with pytest.raises(FormatError, match="batch surface"):
            load_curve(tmp_path / "bad.json")


def flat_tables(p: float):
    """Every source's every bin, and the chain's calibration, at probability p."""
    return np.full((N_SOURCES, SHARE_BINS, TOTAL_BINS), p), np.full((P_BINS, AGREE_MAX + 1), p)


def test_the_other_slots_raise_the_bar_a_draft_must_clear():
    """Hand-worked: each chain token has P = 0.6 and costs 0.5 more. Alone, 1 token yields E_1 = 1.6 for cost
    1.5 (1.07 > 1), 2 tokens E_2 = 1.96 for 2.0 (0.98): draft 1. Beside slots expected to yield 3 tokens,
    (3 + 1.6) / 1.5 = 3.07 < 4: the draft would cost the others more than it brings, so none."""
    seq = [5, 6, 7] * 20
    drafter = Drafter(policy="lookupkit")
    drafter._pol = make_policy(flat_tables(0.6), lambda k: 1 + 0.5 * k, 1024, None, trust=(0.0, 8.0))
    cost = np.array([1 + 0.5 * k for k in range(9)])
    assert drafter.draft(seq, 8) == [5] and drafter.expected == pytest.approx(1.6)
    assert drafter.draft(seq, 8, price=(cost, 0.0)) == [5]  # priced alone: the same
    assert drafter.draft(seq, 8, price=(cost, 3.0)) == [] and drafter.expected == pytest.approx(1.0)
    cheap = np.array([1.0] + [1.01] * 8)  # extra rows nearly free: worth drafting beside others too
    assert len(drafter.draft(seq, 8, price=(cheap, 3.0))) == 8


def test_a_drafter_hands_its_chain_to_the_plan():
    """plan() is what each prefix of the last chain would yield (P = 0.6 a token: 1, 1.6, 1.96, ...), and take(d)
    drafts its first d tokens instead of the policy's own choice, with `expected` and the sources following."""
    seq = [5, 6, 7] * 20
    drafter = Drafter(policy="lookupkit")
    drafter._pol = make_policy(flat_tables(0.6), lambda k: 1 + 0.5 * k, 1024, None, trust=(0.0, 8.0))
    cheap = np.array([1.0] + [1.01] * 4)
    assert drafter.draft(seq, 4, price=(cheap, 0.0)) == [5, 6, 7, 5]
    np.testing.assert_allclose(drafter.plan(), np.cumsum([1.0, 0.6, 0.36, 0.216, 0.1296]))
    assert drafter.take(2) == [5, 6] and drafter.expected == pytest.approx(1.96)
    assert len(drafter.last_sources) == 2 and drafter.take(0) == [] and drafter.expected == 1.0
    assert Drafter().plan().tolist() == [1.0]  # llama.cpp's rule: no chain to plan with


def test_a_step_plans_drafts_that_share_a_pass():
    """Hand-worked on two slots whose equal drafts share one pass: (1, 1) rows cost 1.0, (2, 2) 1.2, (3, 3) 1.5;
    a slot drafting alone adds a pass ((2, 1): 1.0 + 1.0; (3, 2): 1.2 + 1.0). Both chains yield E = 1, 1.9, 2.7
    for 0, 1, 2 tokens: alone, slot 0's first token would bring (1 + 1.9) / 2.0 < 2 / 1.0, so a slot priced beside
    the other's one row drafts nothing, while the plan drafts both chains whole: 5.4 / 1.5 = 3.6 tokens per unit."""
    cost = VerifyCost(curve={0: 1.0, 1: 1.8, 2: 2.6}, batch={2: ([2, 4, 6], [1.0, 1.2, 1.5])})
    pricer = StepPricer(cost)
    pricer.start([0, 1])
    chain = np.array([1.0, 1.9, 2.7])
    assert pricer.plan({0: chain, 1: chain}) == {0: 2, 1: 2}
    assert pricer.layout == [3, 3] and pricer.cost_of_step() == pytest.approx(1.5)
    pricer.start([0, 1])  # slot 1 not drafting (its one row, one token): slot 0's 2 tokens are a pass of their own
    assert pricer.plan({0: chain}) == {0: 0}  # (1 + 2.7) / (1.0 + 1.8) = 1.32 < 2 / 1.0
    cheap = StepPricer(VerifyCost(curve={0: 1.0, 1: 1.8, 2: 2.6}, batch={2: ([2, 4], [1.0, 1.2])}))
    cheap.start([0, 1])  # (3, 3) was never measured: a plan never drafts into a step it cannot price
    assert cheap.plan({0: chain, 1: chain}) == {0: 1, 1: 1}


def test_a_step_offers_the_cheaper_of_an_equal_and_a_lone_draft():
    """On the surface where equal drafts share a pass, slot 1's chain is offered every slot drafting j ((2, 2): 1.2,
    (3, 3): 1.5) rather than drafting alone ((1, 2): 1.0 + 1.0, (1, 3): 1.0 + 1.8)."""
    pricer = StepPricer(VerifyCost(curve={0: 1.0, 1: 1.8, 2: 2.6}, batch={2: ([2, 4, 6], [1.0, 1.2, 1.5])}))
    pricer.start([0, 1])
    np.testing.assert_allclose(pricer.offer(2, 1)[0], [1.0, 1.2, 1.5])


def test_a_step_drafts_by_the_plan_and_llama_cpp_drafters_as_alone():
    """StepPricer.drafts: one busy slot drafts exactly what it drafts alone under the curve; beside a drafter with
    llama.cpp's rule (its draft kept, its rows counted) a policy drafter's share comes from the plan."""
    seq = [5, 6, 7] * 20
    cost = VerifyCost(curve={k: 1 + 0.1 * k for k in range(9)})

    def drafter():
        d = Drafter(policy="lookupkit")
        d._pol = make_policy(flat_tables(0.8), cost.at, 1024, None, trust=(0.0, 8.0))
        d.accept(seq)
        return d

    alone, planned = drafter(), drafter()
    want = alone.draft(None, 8, price=(np.array([cost.at(k) for k in range(9)]), 0.0))
    pricer = StepPricer(cost)
    assert pricer.drafts([(3, planned, 8)]) == {3: want} and pricer.layout == [0, 0, 0, 1 + len(want)]
    rule = Drafter()
    rule.accept(seq)
    got = pricer.drafts([(0, rule, 4), (1, drafter(), 8), (2, drafter(), 0)])
    assert got[0] == Drafter().draft(seq, 4) and got[2] == []
    assert pricer.layout[0] == 1 + len(got[0]) and pricer.layout[1] == 1 + len(got[1]) and pricer.layout[2] == 1
    with pytest.raises(InputError, match="no chain"):
        rule.take(0)
    with pytest.raises(InputError, match="chain has"):
        planned.take(len(planned.plan()))


def test_a_plan_weighs_the_searched_lengths_and_the_whole_chain():
    """Past 16 tokens a plan weighs StepPricer.SEARCHED and the whole chain: of a chain of 40 tokens at P = 0.9 each
    on a curve with cheap batches at 37 and at 32 tokens, it drafts 32 (E_32 / 5.0 = 5.96), not 37 (not weighed);
    with 37 tokens in the chain, all 37."""
    curve = {k: 1.0 + 0.5 * k for k in range(41)}
    curve[37] = curve[32] = 5.0
    pricer = StepPricer(VerifyCost(curve=curve))
    pricer.start([2])
    e = 1.0 + np.cumsum([0.0] + [0.9] * 40)
    assert pricer.plan({2: e}) == {2: 32}
    pricer.start([2])
    assert pricer.plan({2: e[:38]}) == {2: 37} and pricer.cost_of_step() == 5.0


def test_a_plan_matches_a_search_of_every_plan():
    """On a calibrated 4-slot surface of this VM, 600 seeded steps of 2-4 busy slots (a third of them with one that
    drafts nothing) with chains of 0-5 tokens (each token's probability 0.3-1 given the ones before): the plan
    yields as much per unit of cost as the best of every combination of lengths; with a floor and each slot's lag
    drawn at random, as much as the best combination that leaves no slot behind its floor (or further behind than
    drafting nothing would)."""
    import itertools
    from pathlib import Path

    cost = VerifyCost.parse(str(Path(__file__).parent.parent / "bench" / "results" /
                                "calibration-gemma-3-270m-2026-12-07-amd-slots4-k64.curve.json"))
    rng = np.random.default_rng(1)
    for trial in range(600):
        floor = 0.0 if trial % 2 else 0.8
        busy = list(range(int(rng.integers(2, 5))))
        seqs = busy[:-1] if trial % 3 == 0 else busy  # then the last busy slot drafts nothing (k = 0: no chain)
        chains = {s: 1 + np.cumsum(np.r_[0, np.cumprod(rng.uniform(0.3, 1.0, rng.integers(0, 6)))]) for s in seqs}
        lag = {s: float(rng.uniform(-StepPricer.CREDIT, 1.0)) for s in busy}
        pricer = StepPricer(cost)
        pricer.FLOOR, pricer.lag = floor, dict(lag)
        pricer.start(busy)
        got = pricer.plan(chains)
        plain = cost.layout([1] * len(busy))

        def rows(d):
            return [1 + d.get(s, 0) for s in busy]

        def value(d):
            return (len(busy) - len(seqs) + sum(chains[s][d[s]] for s in seqs)) / cost.layout(rows(d))

        def keeps_floor(d):
            due = floor * cost.layout(rows(d)) / plain
            return all(lag[s] + due - (chains[s][d[s]] if s in chains else 1.0)
                       <= max(0.0, lag[s] + floor - 1.0) + 1e-9 for s in busy)

        plans = [dict(zip(seqs, ds)) for ds in itertools.product(*[range(len(chains[s])) for s in seqs])]
        best = max(value(d) for d in plans if keeps_floor(d))
        assert keeps_floor(got) and value(got) == pytest.approx(best, rel=1e-12), (chains, lag, floor, got)


def test_the_engine_prices_each_slot_by_the_step_it_shares(tiny_gguf):
    """Two requests at once on two slots, with extra rows nearly free for one busy slot, and beside another the
    step's one pass over both nearly free while any more rows (a second pass, or a pass of more rows over both)
    cost more than they could yield: the slots draft nothing while both are busy, and draft once the short
    request has ended; both outputs stay the model's greedy ones."""
    needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
    needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
    needs.module("uvicorn", "pip install 'lookupkit[serve]'")
    import httpx

    from lookupkit.integrations.llama_generate import generate
    from lookupkit.serve.startup import open_server
    from serve_helpers import running
    from tiny_models import in_threads

    curve = {k: 1.0 + 0.01 * k for k in range(9)}
    dear = VerifyCost(curve=curve, batch={1: (list(range(1, 10)), list(curve.values())),
                                          2: ([2, 3, 10], [0.1, 1000.0, 2000.0])})
    served = open_server(tiny_gguf, policy="lookupkit", verify_cost=dear, n_draft=8, parallel=2, n_ctx=1024, threads=1)
    seen, drafts = [], served.engine._drafts

    def spy(live):
        out = drafts(live)
        seen.append((len(live), sum(map(len, out.values()))))
        return out

    served.engine._drafts = spy
    prompt = served.llm.tokenize(b"The quick brown fox", add_bos=True)
    try:
        with running(served) as url:
            got = in_threads(lambda i: httpx.post(f"{url}/completion", timeout=120, json={
                "prompt": prompt, "n_predict": (16, 80)[i], "temperature": 0, "ignore_eos": True,
                "return_tokens": True}).json()["tokens"], 2)
    finally:
        served.llm.close()
    together = [n for live, n in seen if live == 2]
    alone = [n for live, n in seen if live == 1]
    assert together and sum(together) == 0 and sum(alone) > 0, seen
    import llama_cpp

    ref = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, verbose=False)
    want = generate(ref, prompt, 80, stop_at_eos=False).tokens
    ref.close()
    assert got[0] == want[:16] and got[1] == want


def test_a_step_that_feeds_a_prompt_drafts_nothing(tiny_gguf):
    """A request arriving while another drafts: every step that feeds its prompt drafts nothing for the busy slot
    (a drafted row would delay the new request's first token), the steps around it do; both outputs stay the
    model's greedy ones."""
    needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
    needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
    needs.module("uvicorn", "pip install 'lookupkit[serve]'")
    import threading
    import time

    import httpx

    from lookupkit.integrations.llama_generate import generate
    from lookupkit.serve.startup import open_server
    from serve_helpers import running

    served = open_server(tiny_gguf, policy="lookupkit", verify_cost=VerifyCost(constant=0.01), n_draft=8,
                         parallel=2, n_ctx=1024, threads=1)
    engine, seen, drafting = served.engine, [], threading.Event()
    drafts = engine._drafts

    def spy(live):
        feeding = any(s.job is not None and s.tok is None for s in engine.slots)
        out = drafts(live)
        seen.append((len(live), feeding, sum(map(len, out.values()))))
        if not drafting.is_set() and sum(n for live_n, f, n in seen if live_n == 1 and not f) > 8:
            drafting.set()  # the first request has drafted: the second arrives beside it before the next step
            deadline = time.monotonic() + 60
            while not engine._pending and time.monotonic() < deadline:
                time.sleep(0.001)
        return out

    engine._drafts = spy
    prompt = served.llm.tokenize(b"The quick brown fox", add_bos=True)
    got = {}
    try:
        with running(served) as url:
            def ask(i, n):
                got[i] = httpx.post(f"{url}/completion", timeout=120, json={
                    "prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True,
                    "return_tokens": True}).json()["tokens"]

            first = threading.Thread(target=ask, args=(0, 200))
            first.start()
            assert drafting.wait(60), seen
            ask(1, 16)
            first.join()
    finally:
        served.llm.close()
    assert [n for live, feeding, n in seen if live and feeding] and all(
        n == 0 for live, feeding, n in seen if feeding), seen
    assert sum(n for live, feeding, n in seen if live and not feeding) > 0, seen
    import llama_cpp

    ref = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, verbose=False)
    want = generate(ref, prompt, 200, stop_at_eos=False).tokens
    ref.close()
    assert got[1] == want[:16] and got[0] == want


def test_a_floor_rations_a_long_draft_beside_a_slot_that_drafts_nothing():
    """Two busy slots, a constant cost of 0.1 per row (a draft beside an undrafting slot is a second pass: 2.1 +
    0.1 (j - 1) against 1.1), a chain expected to yield 1 + 0.9 j: without a floor the plan drafts it whole; with
    FLOOR 0.5 a fresh other slot would fall behind half its plain pace (due 0.5 x 2.8 / 1.1 = 1.27 tokens for its 1),
    so nothing is drafted until plain steps have banked its credit (0.5 a step, at most CREDIT); then the whole
    chain, and the step's lag is what it cost; a new request starts with no credit."""
    chain = 1 + 0.9 * np.arange(9)
    pricer = StepPricer(VerifyCost(constant=0.1))
    pricer.FLOOR = 0.0
    pricer.start([0, 1])
    assert pricer.plan({0: chain}) == {0: 8}
    pricer.FLOOR = 0.5
    pricer.start([0, 1])
    assert pricer.plan({0: chain}) == {0: 0}
    for _ in range(8):  # plain steps: each slot 0.5 tokens ahead of the floor's pace a step, up to CREDIT
        pricer.settle({0: 1, 1: 1})
        pricer.start([0, 1])
    assert pricer.lag == pytest.approx({0: -pricer.CREDIT, 1: -pricer.CREDIT})
    assert pricer.plan({0: chain}) == {0: 8}
    pricer.settle({0: 9, 1: 1})
    assert pricer.lag[1] == pytest.approx(-pricer.CREDIT + 0.5 * 2.8 / 1.1 - 1)
    pricer.start([0, 1])
    pricer.settle({0: 1})  # slot 1's request ended in that step: the next one starts over
    pricer.start([0, 1])
    assert 1 not in pricer.lag and pricer.plan({0: chain}) == {0: 0}
    pricer.start([0])  # one busy slot: its lag is kept, not changed
    pricer.settle({0: 1})
    assert pricer.lag == pytest.approx({0: -pricer.CREDIT})
