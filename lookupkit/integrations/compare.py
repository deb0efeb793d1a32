"""Does drafting pay on this model? Plain and drafted runs, paired and repeated, and a verdict that says
when it cannot be trusted (`lookupkit generate`).

Why each rule (one plain and one drafted run, back to back, printed speed-ups that differed widely from one
try to the next and that a handful of accepted tokens could not explain:
bench/RESULTS.md: Figures the code's comments rely on):

* An untimed drafted run of a few tokens comes first (llama.cpp sets up its first decodes, the drafter's
  kernels load). Then every run times the same number of tokens: the first plain run ends at EOS or max_tokens, and every
  later run generates exactly that many, past any EOS of its own. A drafted run whose text diverged (a
  quantised model's arithmetic depends on the batch shape) is not rewarded for stopping early.
* A pair is one plain and one drafted run; pairs alternate their order (plain first, drafted first) so
  a machine that warms up or slows down hits both alike, and the speed-up is the median of the pairs'
  ratios, shown with their spread. Each drafted run starts from a fresh Drafter: one that had learnt
  the previous run's text into its dynamic cache would draft it back.
* While the runs go, the CPU time of every other process is sampled: a neighbour using a core of a
  2-core machine shows up as spread, and as a bias no pairing removes.
* The calls' drafted/accepted counts (what `replay.replay_generation` gives for the same tokens) and a
  verify-cost curve predict the speed-up; a measurement far from its prediction is not trusted either.

When the spread straddles a boundary, the machine was busy, too few tokens were timed or measurement
and prediction disagree, the answer is "uncertain", with each reason in words and what to do.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import InputError

PAYS, LOSES = 1.05, 0.95  # median speed-ups above / below which drafting "pays" / "does not pay"
RUNS = 5  # pairs by default: see judge()'s docstring (bench/results/generate-verdict-2026-12-03.json)
MAX_RUNS = 100
BUSY_CORES = 0.25  # other processes using more than this many cores on average make the answer uncertain
MIN_TIMED = 32  # fewer timed tokens per run than this are no measurement of a generation's speed
WARMUP_TOKENS = 4  # an untimed drafted run first: no timed run pays for llama.cpp's first-decode set-up
AGREE = 1.25  # measured / predicted beyond this factor (either way) is a disagreement


class CpuSampler:
    """How many cores' worth of CPU time processes other than this one used between start() and stop()."""

    def __init__(self):
        import psutil

        self._psutil, self._me = psutil, psutil.Process()

    def _now(self) -> tuple[float, float, float]:
        t = self._psutil.cpu_times()
        busy = sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        own = self._me.cpu_times()
        return time.perf_counter(), busy, own.user + own.system

    def start(self) -> None:
        self._t0 = self._now()

    def stop(self) -> float:
        (w0, b0, o0), (w1, b1, o1) = self._t0, self._now()
        return max(0.0, ((b1 - b0) - (o1 - o0)) / (w1 - w0)) if w1 > w0 else 0.0


@dataclass
class Verdict:
    """answer: "pays", "does not pay", "breaks even" or "uncertain"; text: the answer in one line;
    reasons: why it is uncertain (empty otherwise), each with what to do."""

    answer: str
    text: str
    reasons: list = field(default_factory=list)


def band(ratio: float) -> str:
    return "pays" if ratio >= PAYS else "does not pay" if ratio <= LOSES else "breaks even"


def judge(ratios: list, *, others: float, predicted: float | None, timed: int,
          curve_others: float | None = None) -> Verdict:
    """The verdict on paired speed-ups `ratios` (drafted / plain tokens/s), `others` cores used by other
    processes meanwhile, the speed-up the verify cost `predicted` (None: no curve) and the tokens `timed`
    per run; `curve_others`: the cores other processes used while the predicting curve was measured
    (a curve measured on a busy machine predicts wrongly: it is a reason too). The spread that counts is the middle half of the ratios (all of them below 4 pairs): one
    outlier of five does not make an answer uncertain, two do. RUNS = 5: on a quiet machine 5 consecutive
    pairs' median seldom answered otherwise than 9 pairs', and fewer pairs often did (python -m
    lookupkit.bench.verdict; bench/RESULTS.md: Figures the code's comments rely on)."""
    if not ratios:
        raise InputError("no paired runs to judge")
    s = sorted(ratios)
    med = statistics.median(s)
    q = len(s) // 4 if len(s) >= 4 else 0
    lo, hi = s[q], s[len(s) - 1 - q]
    reasons = []
    if len(s) == 1:
        reasons.append("one pair of runs shows no spread (give --runs 3 or more)")
    elif band(lo) != band(hi):
        reasons.append(f"the pairs range from {s[0]:.2f}x to {s[-1]:.2f}x, across the line between "
                       f"'{band(lo)}' and '{band(hi)}' (give more --runs, on a quiet machine)")
    if others > BUSY_CORES:
        reasons.append(f"other processes used {others:.1f} cores meanwhile (measure on a quiet machine)")
    if timed < MIN_TIMED:
        reasons.append(f"only {timed} tokens were timed per run: the plain run ended at EOS "
                       "(give --ignore-eos, or a prompt the model continues further)")
    if predicted is not None and curve_others is not None and curve_others > BUSY_CORES:
        reasons.append(f"the verify-cost curve was measured while other processes used {curve_others:.1f} cores "
                       "(calibrate again on a quiet machine)")
    if predicted is not None and not 1 / AGREE <= med / predicted <= AGREE:
        reasons.append(f"the verify-cost curve predicts {predicted:.2f}x for these drafts, the runs measured "
                       f"{med:.2f}x (calibrate on this machine with these threads: lookupkit calibrate)")
    spread = f"median of {len(s)} pair{'s' if len(s) > 1 else ''}" + (f", {s[0]:.2f}x-{s[-1]:.2f}x" if len(s) > 1 else "")
    if reasons:
        return Verdict("uncertain", f"uncertain whether drafting pays on this model: measured {med:.2f}x "
                                    f"({spread}), but " + "; ".join(reasons), reasons)
    answer = band(med)
    words = {"pays": "drafting pays on this model", "does not pay": "drafting does not pay on this model",
             "breaks even": "drafting breaks even on this model"}[answer]
    return Verdict(answer, f"{words}: {med:.2f}x ({spread})")


@dataclass
class Comparison:
    """Plain and drafted runs (`llama_generate.Generation`s, in the order they ran), paired; `timed`: the
    tokens every run generated; `others`: cores other processes used meanwhile; `predicted`: the speed-up
    the verify cost predicts from the drafted runs' calls (None without a cost)."""

    plain: list
    drafted: list
    order: list  # per pair: "plain first" or "drafted first"
    timed: int
    others: float
    predicted: float | None
    verdict: Verdict
    no_prediction: str | None = None  # why there is no prediction though a cost was given

    @property
    def ratios(self) -> list:
        return ratios(self.plain, self.drafted)

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    def first_divergence(self) -> int | None:
        """The first generated token where any drafted run's output differs from the first plain run's."""
        ref = self.plain[0].tokens
        firsts = [next((i for i, (a, b) in enumerate(zip(ref, d.tokens)) if a != b), None) for d in self.drafted]
        firsts = [f for f in firsts if f is not None]
        return min(firsts) if firsts else None


def ratios(plain: list, drafted: list) -> list:
    """Each pair's drafted / plain tokens per second (a run too short to time counts as no faster)."""
    return [d.tokens_per_s / p.tokens_per_s if p.tokens_per_s and d.tokens_per_s else 1.0
            for p, d in zip(plain, drafted)]


def compare(llm, prompt, max_tokens: int, make_drafter: Callable, *, n_draft: int, runs: int = RUNS, cost=None,
            ignore_eos: bool = False, on_run: Callable | None = None, gen: Callable | None = None,
            sampler=None) -> Comparison:
    """`runs` pairs of greedy generations of `prompt` on `llm`, plain and drafted by a fresh
    `make_drafter()` each, all timing the same number of tokens (see the module docstring).
    cost: a VerifyCost (or None) for the prediction; on_run(name, pair, generation) after each run;
    gen: the generation function (integrations.llama_generate.generate; tests pass a fake)."""
    from ..verify_cost import speedup
    from .llama_generate import generate

    gen = gen or generate
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise InputError(f"--runs must be between 1 and {MAX_RUNS}, got {runs!r}")
    sampler = sampler or CpuSampler()
    gen(llm, prompt, WARMUP_TOKENS, drafter=make_drafter(), n_draft=n_draft, stop_at_eos=False)
    plain, drafted, order = [], [], []
    timed = max_tokens
    sampler.start()
    for pair in range(runs):
        first = "plain" if pair % 2 == 0 else "drafted"
        order.append(f"{first} first")
        for name in (("plain", "drafted") if first == "plain" else ("drafted", "plain")):
            stop_at_eos = not ignore_eos and not plain  # only the first plain run may end at EOS
            g = gen(llm, prompt, timed, drafter=make_drafter() if name == "drafted" else None, n_draft=n_draft,
                    stop_at_eos=stop_at_eos)
            if not plain and name == "plain":
                timed = len(g.tokens)
            (plain if name == "plain" else drafted).append(g)
            if on_run is not None:
                on_run(name, pair, g)
    others = sampler.stop()
    predicted = no_prediction = None
    if cost is not None:
        calls_d = [x for g in drafted for x in g.drafted.tolist()]
        calls_a = [x for g in drafted for x in g.accepted.tolist()]
        try:
            predicted = speedup(calls_d, calls_a, cost)
        except InputError as exc:
            no_prediction = str(exc)  # the curve does not reach the longest draft
    verdict = judge(ratios(plain, drafted), others=others, predicted=predicted, timed=timed,
                    curve_others=getattr(cost, "others_cores", None))
    return Comparison(plain, drafted, order, timed, others, predicted, verdict, no_prediction)
