"""The lookup-stats replay: draft over known text as if it were being generated, and count hits.

`replay` validates its inputs and runs either the readable reference loop below (llama.cpp's
lookup-stats loop, docs/llama-lookup.md section 7, with draft_ref) or the fast engine
(lookupkit.replay.fast). Both return (ReplayTrace, final dynamic cache as an NgramTable).
n_ctx is used as given: llama.cpp pads -c up to a multiple of 32, lookupkit does not (the
reference vectors use n_ctx 8).
"""

from __future__ import annotations

import time

import numpy as np

from ..counts.dict_cache import NgramCache
from ..counts.tables import NgramTable
from ..draft.reference import draft_reference
from ..errors import InputError
from ..rules import DEFAULT_DRAFT, check_replay
from .fast import replay_fast
from .trace import ReplayTrace

ENGINES = ("reference", "fast")


def replay(tokens, n_ctx: int = 4096, n_draft: int = DEFAULT_DRAFT, static=None,
           dynamic: NgramTable | None = None, engine: str = "fast", policy=None) -> tuple[ReplayTrace, NgramTable]:
    """Run lookup-stats over `tokens`; returns the trace and the dynamic cache after the last chunk.

    `static` is a StaticCache (or, for the reference engine, anything with `.find(t0, t1)`),
    `dynamic` the table of an -lcd file, `policy` a draft.policy.make_policy (fast engine) to draft with
    lookupkit's policy instead of llama.cpp's rule. Only full chunks of n_ctx tokens are replayed.
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    check_replay(len(tokens), n_ctx, n_draft)
    if engine == "fast":
        return replay_fast(tokens, n_ctx, n_draft, static, dynamic, policy=policy)
    if policy is not None:
        raise InputError("the reference engine replays llama.cpp's rule only; lookupkit's policy runs on the fast one")
    if engine != "reference":
        raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    dyn = NgramCache.from_table(dynamic) if dynamic is not None else NgramCache()
    trace = replay_reference(tokens.tolist(), n_ctx, n_draft, static, dyn)
    return trace, dyn.to_table()


def replay_reference(inp: list[int], n_ctx: int, n_draft: int, static, dyn: NgramCache) -> ReplayTrace:
    """llama.cpp's lookup-stats loop over full chunks; `dyn` grows by each chunk's context cache."""
    calls: list[tuple[int, int, int, int]] = []  # chunk, pos, n_drafted, n_accepted
    drafted_tokens: list[int] = []
    drafted_sources: list[int] = []
    t_draft = 0.0
    ctx = NgramCache()
    for chunk, i_start in enumerate(range(0, len(inp) - n_ctx, n_ctx)):
        truth = inp[i_start:i_start + n_ctx]
        out = [truth[0]]
        while len(out) < n_ctx:
            t0 = time.perf_counter()
            draft, sources = draft_reference(out, n_draft, ctx, dyn, static)
            t_draft += time.perf_counter() - t0
            pos = len(out)
            for tok in draft:  # accept the drafted prefix that matches the ground truth
                if len(out) >= n_ctx or truth[len(out)] != tok:
                    break
                out.append(tok)
                t0 = time.perf_counter()
                ctx.update(out, nnew=1)
                t_draft += time.perf_counter() - t0
            n_accepted = len(out) - pos
            if len(out) < n_ctx:  # the token the target model would sample: the ground truth
                out.append(truth[len(out)])
                t0 = time.perf_counter()
                ctx.update(out, nnew=1)
                t_draft += time.perf_counter() - t0
            calls.append((chunk, pos, len(draft), n_accepted))
            drafted_tokens.extend(draft)
            drafted_sources.extend(sources)
        dyn.merge(ctx)
        ctx.clear()
    cols = np.array(calls, dtype=np.int32).reshape(-1, 4)
    return ReplayTrace(n_ctx=n_ctx, n_draft=n_draft, n_input=len(inp), chunk=cols[:, 0], pos=cols[:, 1],
                       n_drafted=cols[:, 2], n_accepted=cols[:, 3], tokens=np.array(drafted_tokens, dtype=np.int32),
                       sources=np.array(drafted_sources, dtype=np.int8), t_draft_s=t_draft)
