"""The lookup-stats replay: draft over known text as if it were being generated, and count hits.

`replay` validates its inputs and runs either the readable reference loop (replay.loop_reference) or
the fast engine (the compiled loop, replay.loop). Both return (ReplayTrace, final dynamic cache as an
NgramTable).
n_ctx is used as given: llama.cpp pads -c up to a multiple of 32, lookupkit does not (the
reference vectors use n_ctx 8).
"""

from __future__ import annotations

import numpy as np

from ..counts.dict_cache import NgramCache
from ..counts.tables import NgramTable
from ..errors import InputError
from ..rules import DEFAULT_DRAFT, check_replay, DEFAULT_CTX
from .loop import replay_fast
from .loop_reference import replay_reference
from .trace import ReplayTrace

ENGINES = ("reference", "fast")


def replay(tokens, n_ctx: int = DEFAULT_CTX, n_draft: int = DEFAULT_DRAFT, static=None,
           dynamic: NgramTable | None = None, engine: str = "fast", policy=None) -> tuple[ReplayTrace, NgramTable]:
    """Run lookup-stats over `tokens`; returns the trace and the dynamic cache after the last chunk.

    `static` is a StaticCache (or, for the reference engine, anything with `.find(t0, t1)`),
    `dynamic` the table of an -lcd file, `policy` a draft.policy.make_policy (fast engine) to draft with
    lookupkit's policy instead of llama.cpp's rule. Only full chunks of n_ctx tokens are replayed.
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    if engine == "fast":
        return replay_fast(tokens, n_ctx, n_draft, static, dynamic, policy=policy)  # it checks its inputs
    if policy is not None:
        raise InputError("the reference engine replays llama.cpp's rule only; lookupkit's policy runs on the fast one")
    if engine != "reference":
        raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    check_replay(len(tokens), n_ctx, n_draft)
    dyn = NgramCache.from_table(dynamic) if dynamic is not None else NgramCache()
    trace = replay_reference(tokens.tolist(), n_ctx, n_draft, static, dyn)
    return trace, dyn.to_table()
