"""The lookup-stats replay loop compiled with numba: drafts, acceptance and context updates per chunk.

The same loop as `replay.replay_reference` (docs/llama-lookup.md section 7), over flat caches and the
jitted drafter. One compiled call replays one chunk (or resumes it when a record buffer had to grow);
between chunks Python merges the context cache into the dynamic one, untimed as in llama.cpp.
"""

from __future__ import annotations

import time

import numpy as np

from ..counts import flat as fc
from ..draft.fast import Thresholds, draft, grow_memo, new_memo, static_arrays
from ..rules import check_replay
from ..counts.tables import NgramTable
from .trace import ReplayTrace

CHUNK_DONE, NEED_RECORDS = 0, 1
OUT, CALLS, TOKS = 0, 1, 2  # state: |out| in the current chunk, calls recorded, drafted tokens recorded


@fc.kernel
def _run_chunk(truth, chunk, n_draft, ctx, dyn, st, memo, state, calls, drafted, sources):
    """Replay one chunk (`truth` = its n_ctx tokens) from `state` on; CHUNK_DONE or NEED_RECORDS."""
    n_ctx = truth.shape[0]
    out, n_calls, n_toks = max(state[OUT], 1), state[CALLS], state[TOKS]  # out = [truth[0]] to start
    status = CHUNK_DONE
    while out < n_ctx:
        if n_calls >= calls.shape[0] or n_toks + n_draft > drafted.shape[0]:
            status = NEED_RECORDS
            break
        k = draft(truth, out, n_draft, ctx, dyn, st, memo, True, drafted, sources, n_toks)
        pos = out
        while out - pos < k and out < n_ctx and truth[out] == drafted[n_toks + out - pos]:
            fc.count_position(ctx, truth, out)  # accepted: the output grows by the drafted token
            out += 1
        accepted = out - pos
        if out < n_ctx:
            fc.count_position(ctx, truth, out)  # the sampled token: the ground truth
            out += 1
        calls[n_calls, 0], calls[n_calls, 1], calls[n_calls, 2], calls[n_calls, 3] = chunk, pos, k, accepted
        n_calls += 1
        n_toks += k
    state[OUT], state[CALLS], state[TOKS] = out, n_calls, n_toks
    return status


def replay_fast(tokens, n_ctx: int, n_draft: int, static=None, dynamic_table: NgramTable | None = None,
                thresholds: Thresholds | None = None) -> tuple[ReplayTrace, NgramTable]:
    """lookup-stats over `tokens` with the compiled engine; returns the trace and the final dynamic cache.

    `static` is a StaticCache (anything with `.pairs` and `.cmap`) or None, `dynamic_table` the
    counts of an -lcd file or None, `thresholds` other drafting thresholds than llama.cpp's (sweeps).
    t_draft_s is the time inside the compiled chunk loop: drafting and context updates, as llama.cpp
    times them, plus the loop's own bookkeeping (recording each call), so it slightly overstates
    llama.cpp's t_draft. The merges into the dynamic cache (and growing the memo) are timed apart
    (extra["t_merge_ms"]). Page faults on the mapped static cache happen inside the loop and are timed,
    as they are part of what drafting from an mmap'd cache costs. Compilation is never timed (a warm-up
    call on an empty chunk comes first).
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    n_draft, n_ctx = int(n_draft), int(n_ctx)
    check_replay(len(tokens), n_ctx, n_draft)
    thr = thresholds or Thresholds()
    st = static_arrays(static, thr.static)
    n_chunks = (len(tokens) - 1) // n_ctx  # full chunks with at least one more token after them
    ctx = fc.FlatCache(4 * n_ctx, 4 * n_ctx, thr.context)
    dyn = fc.FlatCache.from_table(dynamic_table, 8 * n_ctx, 8 * n_ctx, thr.dynamic)  # grows as chunks merge in
    memo = new_memo()
    state = np.zeros(3, np.int64)
    calls = np.full((n_chunks * (n_ctx - 1), 4), 0, np.int32)  # np.full: no first-touch faults while timed
    drafted = np.full(max(2 * len(calls), n_draft), 0, np.int32)
    sources = np.full(len(drafted), 0, np.int8)
    _run_chunk(tokens[:1], 0, n_draft, ctx.c, dyn.c, st, memo, state, calls, drafted, sources)  # compile or load
    state[:] = 0
    t_draft = t_merge = 0.0
    for chunk in range(n_chunks):
        truth = tokens[chunk * n_ctx:(chunk + 1) * n_ctx]
        while True:
            t0 = time.perf_counter()
            status = _run_chunk(truth, chunk, n_draft, ctx.c, dyn.c, st, memo, state, calls, drafted, sources)
            t_draft += time.perf_counter() - t0
            if status == CHUNK_DONE:
                break
            drafted = _grow(drafted, state[TOKS] + n_draft)
            sources = _grow(sources, len(drafted))
        t0 = time.perf_counter()
        dyn.merge(ctx)
        ctx.clear()
        memo = grow_memo(memo)
        t_merge += time.perf_counter() - t0
        state[OUT] = 0
    n, m = int(state[CALLS]), int(state[TOKS])
    trace = ReplayTrace(n_ctx=n_ctx, n_draft=n_draft, n_input=len(tokens), chunk=calls[:n, 0].copy(),
                        pos=calls[:n, 1].copy(), n_drafted=calls[:n, 2].copy(), n_accepted=calls[:n, 3].copy(),
                        tokens=drafted[:m].copy(), sources=sources[:m].copy(), t_draft_s=t_draft,
                        extra={"t_merge_ms": t_merge * 1e3})
    return trace, dyn.to_table()



def _grow(arr: np.ndarray, need: int) -> np.ndarray:
    out = np.full(max(int(need), 2 * len(arr)), 0, arr.dtype)
    out[:len(arr)] = arr
    return out
