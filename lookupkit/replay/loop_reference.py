"""llama.cpp's lookup-stats loop written plainly: the spec the compiled replay.loop is tested against.

llama.cpp's examples/lookup/lookup-stats.cpp loop over the readable caches (counts.dict_cache) and the
readable drafter (draft.rule_reference): chunks of n_ctx tokens, each drafted as if generated, the
context cache merged into the dynamic one after each chunk.
"""

from __future__ import annotations

import time

import numpy as np

from ..counts.dict_cache import NgramCache
from ..draft.rule_reference import draft_reference
from .trace import ReplayTrace


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
