"""The next token from a logits row (the picker that llama_generate.verify checks a draft with), so that
drafting never changes what a request generates.

Greedy (temperature <= 0) takes the argmax, as generate() does. Otherwise llama.cpp's sampler chain in
its default order: top_k, top_p and min_p on the model's own distribution, then the temperature, then one
uniform draw from the request's numpy generator (seeded by the request, else from the OS).

Why drafting stays exact: a deterministic draft d_1..d_k is verified row by row with the same picker;
row j's pick is accepted while it equals d_(j+1), and the first pick that differs (or the last row's)
is emitted after the accepted ones. Every emitted token is therefore a draw from the model's
distribution given exactly the tokens emitted before it, made with one uniform per emitted token in
emission order: the draws plain sampling makes. With equal logits (exact-arithmetic models) a seed gives
the same text drafted or not; on any model the distribution is plain sampling's. This is speculative
sampling's rule for a draft that puts probability 1 on its token: accept d with probability p(d), else
sample from p without d, renormalised; sampling t ~ p and accepting iff t = d is the same law, so no
separate rejection draw is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TOP_P_PROBES = (64, 1024)  # top_p sorts the best 64, then 1024 candidates, before it sorts them all


@dataclass(frozen=True)
class Sampling:
    """A request's sampler: temperature <= 0 is greedy; top_k 0, top_p 1 and min_p 0 leave the
    distribution as it is; seed None draws from the OS."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


class Picker:
    """Picks tokens from logits rows for one request (its generator advances one draw per sampled token)."""

    def __init__(self, sampling: Sampling):
        self.s = sampling
        self.rng = None if sampling.greedy else np.random.default_rng(sampling.seed)

    def __call__(self, row: np.ndarray) -> int:
        if self.rng is None:
            return int(np.argmax(row))
        ids, vals = self.candidates(row)
        w = np.exp((vals - vals.max()) / self.s.temperature)
        cum = np.cumsum(w)
        i = min(int(np.searchsorted(cum, self.rng.random() * cum[-1], side="right")), len(cum) - 1)
        return int(ids[i]) if ids is not None else i

    def candidates(self, row: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """(ids, logits) left by top_k, top_p and min_p; ids None means the whole row, in order."""
        s = self.s
        vals = row.astype(np.float64)
        ids = None
        if 0 < s.top_k < len(vals):
            ids = np.argpartition(vals, -s.top_k)[-s.top_k:]
            vals = vals[ids]
        if s.top_p < 1:
            ids, vals = _top_p(ids, vals, s.top_p)
        if s.min_p > 0:
            keep = np.flatnonzero(vals >= vals.max() + math.log(s.min_p))
            ids, vals = (keep if ids is None else ids[keep]), vals[keep]
        return ids, vals


def _top_p(ids, vals, top_p: float):
    """The fewest most likely candidates whose probabilities (at temperature 1) sum to top_p or more."""
    w = np.exp(vals - vals.max())
    total = w.sum()
    for m in (*[m for m in TOP_P_PROBES if m < len(vals)], len(vals)):
        best = np.argpartition(-w, m - 1)[:m] if m < len(vals) else np.arange(len(vals))
        best = best[np.argsort(-w[best], kind="stable")]
        cum = np.cumsum(w[best]) / total
        if cum[-1] >= top_p or m == len(vals):
            keep = best[:min(int(np.searchsorted(cum, top_p)) + 1, m)]
            return (keep if ids is None else ids[keep]), vals[keep]
