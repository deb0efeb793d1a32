"""A slot of `lookupkit serve`: one llama.cpp sequence, its Drafter, the job it serves, and the tokens its KV
cache still holds once that job is done (the prompt cache).

A finished slot keeps its KV cells: the prompt and the response up to the last emitted token (that one was
sampled, never decoded). A new job goes to the idle slot whose cached tokens share the longest prefix with
its prompt (llama-server's rule without its similarity threshold: a short match still saves what it matches,
and the least recently used slot breaks ties, so a slot's long cache is not given up for nothing), and only
what follows that prefix is decoded. At least the prompt's last token is decoded again, for its logits.
`cache_prompt: false` takes the least recently used slot and decodes the whole prompt. A slot's cache serves
only requests of the tenant it was made for (serve.tenants): how fast a prompt starts must not tell one
tenant what another sent.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from ..rules import draft_room
from .sampling import Picker
from .text import TextOut

EMPTY = np.zeros(0, np.int32)
_clock = itertools.count(1)  # the order slots became idle in (least recently used first)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class Slot:
    def __init__(self, seq: int, drafter):
        self.seq, self.drafter, self.job = seq, drafter, None
        self.cached, self.tenant = EMPTY, None  # what this sequence's KV cells hold while idle, and for whom
        self.idle_since = 0
        self.swaps = 0  # the engine's static-cache swaps this slot's drafter has followed

    def reusable(self, prompt: np.ndarray, tenant: str) -> int:
        """How many of the prompt's tokens this slot's cache holds for `tenant` (never the last: its logits are
        needed)."""
        if tenant != self.tenant:
            return 0
        return min(common_prefix(self.cached, prompt), len(prompt) - 1)

    def start(self, job, piece) -> None:
        """Serve `job` (from its first token: the engine sets `fed` and `cache_n` to what the cache saves)."""
        self.job, self.fed, self.cache_n, self.out, self.tok = job, 0, 0, [], None
        self.primed = False  # the drafter has the prompt
        self.picker, self.text = Picker(job.sampling), TextOut(piece, job.stops)
        self.t0, self.t1 = time.perf_counter(), None
        self.calls = self.drafted = self.accepted = 0

    @property
    def feeding(self) -> bool:
        """Serving a job whose prompt is not all decoded yet (its first token not sampled)."""
        return self.job is not None and self.tok is None

    def room(self, n_ctx_slot: int) -> int:
        """The most tokens its next draft may hold (rules.draft_room)."""
        return draft_room(self.job.max_tokens, n_ctx_slot, len(self.job.prompt), len(self.out))

    def in_cache(self) -> np.ndarray:
        """The tokens the KV cache holds between steps: the prompt as far as it was fed, then every emitted
        token but the last (sampled, not yet decoded)."""
        if self.tok is None:
            return self.job.prompt[:self.fed]
        return np.concatenate([self.job.prompt, np.asarray(self.out[:-1], np.int32)])

    def idle(self, cached: np.ndarray) -> None:
        self.job, self.cached, self.tenant, self.idle_since = None, cached, self.job.tenant, next(_clock)

    def stats(self) -> dict:
        now = time.perf_counter()
        t1 = self.t1 or now
        return {"slot": self.seq, "prompt_n": len(self.job.prompt), "cache_n": self.cache_n, "prompt_s": t1 - self.t0,
                "predicted_n": len(self.out), "predicted_s": now - t1, "calls": self.calls, "drafted": self.drafted,
                "accepted": self.accepted}


def choose(idle: list, job) -> tuple[Slot, int]:
    """The idle slot for a job, and how many of its prompt's tokens that slot's cache saves."""
    if not job.cache_prompt:
        return min(idle, key=lambda s: s.idle_since), 0
    keep, _, slot = max(((s.reusable(job.prompt, job.tenant), -s.idle_since, s) for s in idle),
                        key=lambda c: c[:2])
    return slot, max(0, keep)
