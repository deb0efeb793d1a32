"""Sampling with drafting on is sampling: the output distribution is the one the same sampler gives without
drafting. Fixed seed grids, so each test's outcome is fixed (a chi-square p-value below 1e-4 fails it).

* On a synthetic model of 6 tokens with a deterministic drafter that is right about half the time, the
  speculative loop's first 3 tokens equal plain sampling's for every seed, and their frequencies over
  4,000 seeds fit the exact probabilities of the sampler (temperature, top_k, top_p, min_p).
* On the tiny GGUF through the engine (4 slots, drafting on), the first three sampled tokens over 600
  seeds fit the exact probabilities computed from the model's own logits.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from lookupkit.integrations.llama_model import verify
from lookupkit.serve.sampling import Picker, Sampling

P_MIN = 1e-4
V = 6


def chi_square_p(observed: dict, expected: dict) -> float:
    """Pearson's test of counts against expected counts (cells under 5 expected pooled into one); the
    p-value by the Wilson-Hilferty approximation of the chi-square tail (within ~1e-3 for df >= 3)."""
    small = [k for k, e in expected.items() if e < 5]
    cells = [(observed.get(k, 0), e) for k, e in expected.items() if e >= 5]
    if small:
        cells.append((sum(observed.get(k, 0) for k in small), sum(expected[k] for k in small)))
    assert sum(observed.values()) == sum(observed.get(k, 0) for k in expected), "a sample outside the support"
    x = sum((o - e) ** 2 / e for o, e in cells)
    df = len(cells) - 1
    z = ((x / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_the_chi_square_helper_rejects_a_wrong_distribution():
    rng = np.random.default_rng(0)
    counts = np.bincount(rng.choice(4, 4000, p=[0.4, 0.3, 0.2, 0.1]), minlength=4)
    observed = dict(enumerate(counts.tolist()))
    assert chi_square_p(observed, {i: 4000 * p for i, p in enumerate([0.4, 0.3, 0.2, 0.1])}) > 0.01
    assert chi_square_p(observed, {i: 4000 * p for i, p in enumerate([0.35, 0.35, 0.2, 0.1])}) < P_MIN


class Synthetic:
    """logits(prefix): a fixed random row per prefix; draft(prefix, k): k tokens chained by the argmax of
    a perturbed row (deterministic, right about half the time)."""

    def __init__(self):
        self._rows: dict = {}

    def logits(self, prefix: tuple) -> np.ndarray:
        if prefix not in self._rows:
            seed = hash(prefix) % 2**32
            self._rows[prefix] = (np.random.default_rng(seed).standard_normal(V) * 1.5).astype(np.float32)
        return self._rows[prefix]

    def draft(self, prefix: tuple, k: int) -> list:
        out = []
        for _ in range(k):
            noise = np.random.default_rng(hash(prefix + tuple(out)) % 2**31 + 7).standard_normal(V)
            out.append(int(np.argmax(self.logits(prefix + tuple(out)) + noise)))
        return out


def speculative(model: Synthetic, sampling: Sampling, n: int, k: int = 3) -> tuple:
    """The engine's loop: verify [last] + draft, keep the accepted drafts plus one, cut at n."""
    pick, out = Picker(sampling), []
    out.append(pick(model.logits(())))
    while len(out) < n:
        draft = model.draft(tuple(out), k)
        out += verify(pick, lambda j: model.logits(tuple(out) + tuple(draft[:j])), draft)
    return tuple(out[:n])


def plain(model: Synthetic, sampling: Sampling, n: int) -> tuple:
    pick, out = Picker(sampling), []
    while len(out) < n:
        out.append(pick(model.logits(tuple(out))))
    return tuple(out)


def probabilities(row: np.ndarray, sampling: Sampling) -> dict:
    """The sampler's exact distribution over one row (Picker.candidates, then the temperature)."""
    ids, vals = Picker(sampling).candidates(row)
    ids = np.arange(len(row)) if ids is None else ids
    w = np.exp((vals - vals.max()) / sampling.temperature)
    return dict(zip(ids.tolist(), (w / w.sum()).tolist()))


@pytest.mark.parametrize("config", [dict(temperature=1.0), dict(temperature=0.7, top_k=4), dict(top_p=0.8),
                                    dict(temperature=1.3, min_p=0.1)])
def test_speculative_sampling_is_plain_sampling_seed_for_seed_and_in_distribution(config):
    model, n, seeds = Synthetic(), 3, 4000
    drafted = [speculative(model, Sampling(seed=s, **config), n) for s in range(seeds)]
    assert drafted == [plain(model, Sampling(seed=s, **config), n) for s in range(seeds)]
    expected: dict = {(): 1.0}
    for _ in range(n):
        expected = {seq + (t,): p * q for seq, p in expected.items()
                    for t, q in probabilities(model.logits(seq), Sampling(**config)).items()}
    observed: dict = {}
    for seq in drafted:
        observed[seq] = observed.get(seq, 0) + 1
    assert chi_square_p(observed, {k: seeds * p for k, p in expected.items()}) > P_MIN


def test_greedy_verification_accepts_the_argmax_run():
    rows = [np.eye(V, dtype=np.float32)[t] for t in (2, 3, 5, 1)]
    assert verify(Picker(Sampling(temperature=0)), lambda j: rows[j], [2, 3, 4]) == [2, 3, 5]
    assert verify(Picker(Sampling(temperature=0)), lambda j: rows[j], [2, 3, 5]) == [2, 3, 5, 1]
    assert verify(Picker(Sampling(temperature=0)), lambda j: rows[j], []) == [2]


def test_the_engine_samples_the_tiny_models_distribution(tmp_path_factory):
    """Three sampled tokens per request over 600 seeds, 4 slots sharing batches, each slot drafting the
    likeliest continuation (so drafts are accepted often and rejected often) against the exact joint
    probabilities from the model's own logits."""
    import needs

    needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
    llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
    from lookupkit import Drafter
    from lookupkit.serve.engine import Done, Job
    from lookupkit.serve.startup import open_server
    from tiny_models import write_llama_gguf

    path = write_llama_gguf(tmp_path_factory.mktemp("sampling") / "tiny.gguf", embd_scale=0.05)
    sampling, prompt, n = dict(temperature=1.0, top_k=4), [464, 2068, 7586, 11], 3
    ref = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, logits_all=True, verbose=False)
    dist: dict = {}

    def probs(prefix: tuple) -> dict:
        if prefix not in dist:
            ref.reset()
            ref.eval(prompt + list(prefix))
            dist[prefix] = probabilities(np.asarray(ref.scores[ref.n_tokens - 1], np.float32), Sampling(**sampling))
        return dist[prefix]

    expected: dict = {(): 1.0}
    for _ in range(n):
        expected = {seq + (t,): p * q for seq, p in expected.items() for t, q in probs(seq).items()}
    ref.close()

    class Likeliest(Drafter):
        """Drafts the likeliest next tokens of the generated part (a deterministic draft)."""

        def draft(self, tokens=None, n_draft=8, price=None):
            out = tuple(self.sequence[len(prompt):].tolist())
            draft = []
            while len(out) + len(draft) < n and out + tuple(draft) in dist:
                p = dist[out + tuple(draft)]
                draft.append(max(p, key=p.get))
            return draft[:n_draft]

    served = open_server(path, n_draft=8, parallel=4, n_ctx=4 * 64, threads=1, queue=1000)
    for slot in served.engine.slots:
        slot.drafter = Likeliest()
    seeds, results, ends, finished = 600, {}, [], threading.Semaphore(0)

    def deliver(seed):
        def on(event):
            results.setdefault(seed, []).extend(getattr(event, "tokens", []))
            if isinstance(event, Done):
                ends.append(event.stats)
                finished.release()
        return on

    served.engine.start()
    for s in range(seeds):
        served.engine.submit(Job(prompt=np.asarray(prompt, np.int32), max_tokens=n, ignore_eos=True,
                                 sampling=Sampling(seed=s, **sampling), deliver=deliver(s)))
    for _ in range(seeds):
        assert finished.acquire(timeout=60)
    accepted, drafted = sum(e["accepted"] for e in ends), sum(e["drafted"] for e in ends)
    served.engine.close()
    served.llm.close()
    assert 0 < accepted < drafted  # drafts were accepted and rejected
    observed: dict = {}
    for toks in results.values():
        observed[tuple(toks)] = observed.get(tuple(toks), 0) + 1
    assert chi_square_p(observed, {k: seeds * p for k, p in expected.items()}) > P_MIN
