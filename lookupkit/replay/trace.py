"""What one replay (lookup-stats) did, call by call, and everything derived from it.

Both replay engines (the readable reference and the fast one) fill the same flat arrays, so the
counters, the per-position and per-source tables and the `.steps` dump are computed once, here.
Source codes are lookupkit.rules' SOURCE_NAMES.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..rules import SOURCE_NAMES
from ..verify_cost import speedups

STEPS_HEADER = ("# chunk pos n_drafted n_accepted | drafted tokens | "
                "source per drafted token (c=context,d=dynamic,s=static; digit=n)")


@dataclass
class ReplayTrace:
    """One row per draft call; drafted tokens and their sources concatenated in call order."""

    n_ctx: int
    n_draft: int
    n_input: int
    chunk: np.ndarray  # int32, per call
    pos: np.ndarray  # int32, per call: |out| at the call
    n_drafted: np.ndarray  # int32, per call
    n_accepted: np.ndarray  # int32, per call
    tokens: np.ndarray  # int32, sum(n_drafted)
    sources: np.ndarray  # int8, sum(n_drafted)
    t_draft_s: float = 0.0  # time spent drafting and updating the context cache
    t_load_s: float = 0.0  # static/dynamic cache open time
    extra: dict = field(default_factory=dict)

    @classmethod
    def of_calls(cls, n_ctx: int, n_draft: int, n_input: int, calls: np.ndarray, n_calls: int, drafted: np.ndarray,
                 n_toks: int, source: int, t_draft_s: float, extra: dict) -> "ReplayTrace":
        """The trace of a replay whose calls are rows (chunk, pos, n_drafted, n_accepted) and whose every
        drafted token comes from one source (the cache-free sources: --source ngram, --source suffix)."""
        return cls(n_ctx=n_ctx, n_draft=n_draft, n_input=n_input, chunk=calls[:n_calls, 0].copy(),
                   pos=calls[:n_calls, 1].copy(), n_drafted=calls[:n_calls, 2].copy(),
                   n_accepted=calls[:n_calls, 3].copy(), tokens=drafted[:n_toks].copy(),
                   sources=np.full(n_toks, source, np.int8), t_draft_s=t_draft_s, extra=extra)

    @property
    def n_predict(self) -> int:
        return self.n_input - self.n_input % self.n_ctx

    def summary(self) -> dict:
        """llama.cpp's seven numbers plus what llama.cpp lacks."""
        n_drafted = int(self.n_drafted.sum())
        n_accept = int(self.n_accepted.sum())
        calls = len(self.n_drafted)
        steps = int(np.count_nonzero(self.n_drafted))
        t_draft_ms = self.t_draft_s * 1e3
        return {
            "n_draft": self.n_draft,
            "n_ctx": self.n_ctx,
            "n_predict": self.n_predict,
            "n_drafted": n_drafted,
            "n_accept": n_accept,
            "accept": 100.0 * n_accept / n_drafted if n_drafted else None,
            "t_load_ms": self.t_load_s * 1e3,
            "t_draft_ms": t_draft_ms,
            "us_per_drafted_token": t_draft_ms * 1e3 / n_drafted if n_drafted else None,
            "draft_calls": calls,
            "drafted_steps": steps,
            "coverage": steps / calls if calls else None,
            "tokens_per_verify": (n_accept + calls) / calls if calls else None,
            "accepted_per_call": n_accept / calls if calls else None,
            "expected_speedup": speedups(self.n_drafted, self.n_accepted),
            "accepted_per_position": self.accepted_per_position().tolist(),
            "per_source": self.per_source(),
            **self.extra,
        }

    def accepted_per_position(self) -> np.ndarray:
        """How many calls had their draft accepted at least up to position k (k = 1..n_draft)."""
        k = np.arange(1, self.n_draft + 1)
        return (self.n_accepted[:, None] >= k[None, :]).sum(axis=0) if len(self.n_accepted) else np.zeros(
            self.n_draft, dtype=np.int64)

    def accepted_mask(self) -> np.ndarray:
        """Per drafted token: was it accepted (it lies within its call's accepted prefix)."""
        starts = np.repeat(np.cumsum(self.n_drafted) - self.n_drafted, self.n_drafted)
        index_in_call = np.arange(len(self.tokens)) - starts
        return index_in_call < np.repeat(self.n_accepted, self.n_drafted)

    def per_source(self) -> dict:
        acc = self.accepted_mask()
        out = {}
        for code, name in SOURCE_NAMES.items():
            sel = self.sources == code
            d = int(sel.sum())
            if d:
                a = int((sel & acc).sum())
                out[name] = {"drafted": d, "accepted": a, "accept": 100.0 * a / d}
        return out

    def steps_lines(self):
        """Lines in the .steps format of the llama.cpp conformance vectors (header first)."""
        yield STEPS_HEADER
        ends = np.cumsum(self.n_drafted)
        toks = self.tokens.tolist()
        srcs = [SOURCE_NAMES[int(s)] for s in self.sources]
        for i in range(len(self.n_drafted)):
            b, e = int(ends[i] - self.n_drafted[i]), int(ends[i])
            yield (f"{self.chunk[i]} {self.pos[i]} {self.n_drafted[i]} {self.n_accepted[i]} | "
                   f"{' '.join(map(str, toks[b:e]))} | {' '.join(srcs[b:e])}").replace("|  |", "| |").rstrip()
