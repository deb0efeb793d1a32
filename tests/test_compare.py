"""`lookupkit generate`'s verdict (integrations.compare) on fake runs with fake timings: every run times the
same tokens, pairs alternate their order, each drafted run gets a fresh drafter, and the answer is
"uncertain" exactly when the spread, the machine's load, too few tokens or the prediction say so."""

from __future__ import annotations

import numpy as np
import pytest

from lookupkit.errors import InputError
from lookupkit.integrations.compare import (AGREE, BUSY_CORES, LOSES, MIN_TIMED, PAYS, WARMUP_TOKENS, band, compare,
                                            judge, ratios)
from lookupkit.integrations.llama_generate import Generation
from lookupkit.verify_cost import VerifyCost


class Sampler:
    def __init__(self, others: float):
        self.others = others

    def start(self):
        pass

    def stop(self):
        return self.others


class FakeEngine:
    """generate() stand-in with a fake clock: plain runs take `plain_s` per token, drafted `drafted_s`;
    the plain text has EOS at `eos` (index) and a drafted one at `drafted_eos`."""

    def __init__(self, plain_s=0.02, drafted_s=0.01, eos=None, drafted_eos=None, speeds=None):
        self.plain_s, self.drafted_s, self.eos, self.drafted_eos = plain_s, drafted_s, eos, drafted_eos
        self.speeds = list(speeds) if speeds else None  # per-run seconds per token, overriding the two above
        self.calls, self.warmup = [], None

    def __call__(self, llm, prompt, max_tokens, *, drafter, n_draft, stop_at_eos):
        if self.warmup is None:  # compare's untimed warm-up: not a timed run
            self.warmup = (drafter, max_tokens, stop_at_eos)
            return None
        self.calls.append((drafter, max_tokens, stop_at_eos))
        eos = self.eos if drafter is None else self.drafted_eos
        n = eos + 1 if stop_at_eos and eos is not None and eos < max_tokens else max_tokens
        per = self.speeds.pop(0) if self.speeds else (self.plain_s if drafter is None else self.drafted_s)
        calls = n - 1 if drafter is None else (n - 1) // 3
        drafted = np.full(calls, 0 if drafter is None else 4, np.int32)
        accepted = np.full(calls, 0 if drafter is None else 2, np.int32)
        tokens = [7] * n
        return Generation(tokens=tokens, prompt_len=len(prompt), stop="eos" if n < max_tokens else "length",
                          t_prompt_s=0.5, t_gen_s=per * n, drafted=drafted, accepted=accepted,
                          eog=eos if eos is not None and eos < n else None)


def run(engine, runs=5, others=0.0, cost=None, ignore_eos=False, max_tokens=100):
    made = []

    def make():
        made.append(object())
        return made[-1]

    c = compare(None, [1, 2, 3], max_tokens, make, n_draft=8, runs=runs, cost=cost, ignore_eos=ignore_eos,
                gen=engine, sampler=Sampler(others))
    return c, made


def test_every_run_times_the_tokens_of_the_first_plain_run_past_any_eos_of_its_own():
    # the old command's 2.63x: plain ran 256 tokens, the drafted run stopped at its EOS after 27
    engine = FakeEngine(plain_s=0.02, drafted_s=0.02, eos=None, drafted_eos=26)
    c, _ = run(engine, max_tokens=256)
    assert {len(g.tokens) for g in c.plain + c.drafted} == {256} and c.timed == 256
    assert c.speedup == pytest.approx(1.0) and c.verdict.answer == "breaks even"
    # the first plain run may stop at EOS; every later run then generates exactly that many tokens
    engine = FakeEngine(eos=59, drafted_eos=10)
    c, _ = run(engine, max_tokens=256)
    assert c.timed == 60 and {len(g.tokens) for g in c.plain + c.drafted} == {60}
    assert [stop for _, _, stop in engine.calls] == [True] + [False] * (2 * 5 - 1)
    assert [n for _, n, _ in engine.calls] == [256] + [60] * 9
    # --ignore-eos: every run, the first too, generates max_tokens
    engine = FakeEngine(eos=59, drafted_eos=10)
    c, _ = run(engine, max_tokens=256, ignore_eos=True)
    assert c.timed == 256 and all(stop is False for _, _, stop in engine.calls)


def test_pairs_alternate_their_order_and_each_drafted_run_has_a_fresh_drafter():
    engine = FakeEngine()
    c, made = run(engine, runs=4)
    assert engine.warmup == (made[0], WARMUP_TOKENS, False)  # an untimed drafted warm-up comes first
    made = made[1:]
    kinds = ["drafted" if d is not None else "plain" for d, _, _ in engine.calls]
    assert kinds == ["plain", "drafted", "drafted", "plain", "plain", "drafted", "drafted", "plain"]
    assert c.order == ["plain first", "drafted first"] * 2
    drafters = [d for d, _, _ in engine.calls if d is not None]
    assert drafters == made and len({id(d) for d in drafters}) == 4


def test_the_speed_up_is_the_median_of_paired_ratios_from_the_fake_clock():
    # seconds per token, in run order: pairs (p, d), (d, p), (p, d)
    engine = FakeEngine(speeds=[0.02, 0.01, 0.01, 0.025, 0.02, 0.008])
    c, _ = run(engine, runs=3)
    assert c.ratios == pytest.approx([2.0, 2.5, 2.5])
    assert c.speedup == pytest.approx(2.5)
    assert c.verdict.answer == "pays" and c.verdict.text.startswith("drafting pays on this model: 2.50x")
    assert "median of 3 pairs, 2.00x-2.50x" in c.verdict.text


def test_the_prediction_comes_from_the_drafted_runs_calls_and_a_disagreement_is_uncertain():
    engine = FakeEngine(plain_s=0.02, drafted_s=0.01)  # measured 2.0x
    c, _ = run(engine, cost=VerifyCost(constant=0.1))
    calls = [g for g in c.drafted]
    d = np.concatenate([g.drafted for g in calls])
    a = np.concatenate([g.accepted for g in calls])
    assert c.predicted == pytest.approx((a + 1).sum() / (1 + 0.1 * d).sum())  # 3 / 1.4 = 2.14x: agrees
    assert c.verdict.answer == "pays"
    c, _ = run(FakeEngine(plain_s=0.02, drafted_s=0.004), cost=VerifyCost(constant=0.1))  # measured 5x
    assert c.verdict.answer == "uncertain" and "predicts 2.14x" in c.verdict.text and "measured 5.00x" in c.verdict.text
    c, _ = run(FakeEngine(plain_s=0.02, drafted_s=0.01), cost=VerifyCost(constant=0.1, others_cores=1.5))
    assert c.verdict.answer == "uncertain" and "1.5 cores" in c.verdict.text
    c, _ = run(FakeEngine(), cost=VerifyCost(curve={0: 1.0, 1: 1.1, 2: 1.2}, source="c.json"))
    assert c.predicted is None and "calibrate with --max-k 4" in c.no_prediction


def test_judge_bands_and_each_reason_for_uncertainty():
    assert band(PAYS) == "pays" and band(LOSES) == "does not pay" and band(1.0) == "breaks even"
    quiet = dict(others=0.0, predicted=None, timed=256)
    assert judge([0.5, 0.52, 0.55], **quiet).answer == "does not pay"
    assert judge([1.0, 1.01, 0.99], **quiet).answer == "breaks even"
    # one outlier of five does not make it uncertain (the middle half counts), two do
    assert judge([1.5, 1.6, 1.6, 1.7, 0.9], **quiet).answer == "pays"
    v = judge([1.5, 1.6, 1.0, 1.7, 0.9], **quiet)
    assert v.answer == "uncertain" and "from 0.90x to 1.70x" in v.text and "more --runs" in v.text
    v = judge([2.0], **quiet)
    assert v.answer == "uncertain" and "--runs 3" in v.text
    v = judge([2.0, 2.1, 2.2], others=BUSY_CORES + 0.5, predicted=None, timed=256)
    assert v.answer == "uncertain" and "other processes used 0.8 cores" in v.text and "quiet machine" in v.text
    assert judge([2.0, 2.1, 2.2], others=BUSY_CORES, predicted=None, timed=256).answer == "pays"
    v = judge([2.0, 2.1, 2.2], others=0.0, predicted=None, timed=MIN_TIMED - 1)
    assert v.answer == "uncertain" and "--ignore-eos" in v.text
    assert judge([2.0, 2.1, 2.2], others=0.0, predicted=2.1 * AGREE, timed=256).answer == "pays"
    v = judge([2.0, 2.1, 2.2], others=0.0, predicted=2.1 * AGREE * 1.01, timed=256)
    assert v.answer == "uncertain" and "lookupkit calibrate" in v.text
    assert len(judge([1.0, 2.0], others=1.0, predicted=9.0, timed=3).reasons) == 4
    # a prediction from a curve measured on a busy machine is a reason too (not without a prediction)
    v = judge([2.0, 2.1, 2.2], others=0.0, predicted=2.1, timed=256, curve_others=BUSY_CORES + 0.1)
    assert v.answer == "uncertain" and "calibrate again on a quiet machine" in v.text
    assert judge([2.0, 2.1, 2.2], others=0.0, predicted=None, timed=256, curve_others=1.0).answer == "pays"
    assert judge([2.0, 2.1, 2.2], others=0.0, predicted=2.1, timed=256, curve_others=BUSY_CORES).answer == "pays"
    with pytest.raises(InputError):
        judge([], **quiet)


def test_runs_out_of_range_and_untimed_runs():
    for bad in (0, -1, 101, True, 2.5):
        with pytest.raises(InputError, match="--runs must be between 1 and 100"):
            run(FakeEngine(), runs=bad)
    g = Generation(tokens=[1], prompt_len=3, stop="length", t_prompt_s=0.1, t_gen_s=0.0,
                   drafted=np.zeros(0, np.int32), accepted=np.zeros(0, np.int32))
    assert ratios([g], [g]) == [1.0]
