"""The lookup-stats replay loop compiled with numba: drafts, acceptance and context updates per chunk.

The same loop as `replay.loop_reference` (llama.cpp's lookup-stats loop), over flat caches
and the compiled drafting rules (draft.rule, policy.chain). One compiled call replays one chunk (or resumes it when a record buffer had to grow);
between chunks Python merges the context cache into the dynamic one, untimed as in llama.cpp.
"""

from __future__ import annotations

import time

import numpy as np

from ..counts import flat as fc
from ..counts.match_index import clear_index, index_position, index_positions, new_index
from ..draft.rule import Thresholds, draft
from ..static.source import grow_memo, new_memo, static_arrays
from ..policy.chain import Policy, learn, llama_rule, own_state, policy_draft
from ..policy.suffix_source import reset as reset_suffix
from ..errors import InputError
from ..kernels import kernel
from ..rules import DEFAULT_DRAFT, check_n_draft, check_replay
from ..counts.tables import NgramTable
from .trace import ReplayTrace

CHUNK_DONE, NEED_RECORDS = 0, 1
OUT, CALLS, TOKS = 0, 1, 2  # state: |out| in the current chunk, calls recorded, drafted tokens recorded


@kernel
def _run_chunk(truth, chunk, n_draft, ctx, dyn, st, memo, pol, state, calls, drafted, sources):
    """Replay one chunk (`truth` = its n_ctx tokens) from `state` on; CHUNK_DONE or NEED_RECORDS.

    Drafts with llama.cpp's rule, or with lookupkit's policy when pol.on (policy.chain)."""
    n_ctx = truth.shape[0]
    out, n_calls, n_toks = max(state[OUT], 1), state[CALLS], state[TOKS]  # out = [truth[0]] to start
    status = CHUNK_DONE
    while out < n_ctx:
        if n_calls >= calls.shape[0] or n_toks + n_draft > drafted.shape[0]:
            status = NEED_RECORDS
            break
        if pol.on:
            k = policy_draft(truth, out, n_draft, ctx, dyn, st, memo, pol, drafted, sources, n_toks)
        else:
            k = draft(truth, out, n_draft, ctx, dyn, st, memo, True, drafted, sources, n_toks)
        pos = out
        while out - pos < k and out < n_ctx and truth[out] == drafted[n_toks + out - pos]:
            fc.count_position(ctx, truth, out)  # accepted: the output grows by the drafted token
            if pol.on:
                index_position(pol.index, truth, out)
            out += 1
        accepted = out - pos
        if out < n_ctx:
            fc.count_position(ctx, truth, out)  # the sampled token: the ground truth
            if pol.on:
                index_position(pol.index, truth, out)
            out += 1
        learn(pol, truth, pos, out, drafted, n_toks)  # the policy's trust learns what followed (policy.trust)
        calls[n_calls, 0], calls[n_calls, 1], calls[n_calls, 2], calls[n_calls, 3] = chunk, pos, k, accepted
        n_calls += 1
        n_toks += k
    state[OUT], state[CALLS], state[TOKS] = out, n_calls, n_toks
    return status


class _Records:
    """The per-call rows and drafted tokens of one replay, grown between kernel calls when full."""

    def __init__(self, n_calls: int, n_draft: int):
        self.calls = np.full((n_calls, 4), 0, np.int32)  # np.full: no first-touch faults while timed
        self.drafted = np.full(max(2 * n_calls, n_draft), 0, np.int32)
        self.sources = np.full(len(self.drafted), 0, np.int8)

    def run(self, truth, chunk, n_draft, ctx, dyn, st, memo, pol, state) -> float:
        """Replay `truth` from `state` to its end; returns the seconds spent inside the compiled loop."""
        t = 0.0
        while True:
            t0 = time.perf_counter()
            status = _run_chunk(truth, chunk, n_draft, ctx.c, dyn.c, st, memo, pol, state, self.calls, self.drafted,
                                self.sources)
            t += time.perf_counter() - t0
            if status == CHUNK_DONE:
                return t
            self.drafted = _grow(self.drafted, state[TOKS] + n_draft)
            self.sources = _grow(self.sources, len(self.drafted))

    def trace(self, state, **fields) -> ReplayTrace:
        n, m = int(state[CALLS]), int(state[TOKS])
        c = self.calls
        return ReplayTrace(chunk=c[:n, 0].copy(), pos=c[:n, 1].copy(), n_drafted=c[:n, 2].copy(),
                           n_accepted=c[:n, 3].copy(), tokens=self.drafted[:m].copy(), sources=self.sources[:m].copy(),
                           **fields)


def replay_fast(tokens, n_ctx: int, n_draft: int, static=None, dynamic_table: NgramTable | None = None,
                thresholds: Thresholds | None = None, policy: Policy | None = None) -> tuple[ReplayTrace, NgramTable]:
    """lookup-stats over `tokens` with the compiled engine; returns the trace and the final dynamic cache.

    `static` is a StaticCache (anything with `.pairs` and `.cmap`) or None, `dynamic_table` the
    counts of an -lcd file or None, `thresholds` other drafting thresholds than llama.cpp's (sweeps).
    t_draft_s is the time inside the compiled chunk loop: drafting and context updates, as llama.cpp
    times them, plus the loop's own bookkeeping (recording each call), so it slightly overstates
    llama.cpp's t_draft. The merges into the dynamic cache (and growing the memo) are timed apart
    (extra["t_merge_ms"]). Page faults on the mapped static cache happen inside the loop and are timed,
    as they are part of what drafting from an mmap'd cache costs. Compilation is never timed (a warm-up
    call on an empty chunk comes first). `policy` (policy.chain.make_policy): draft with lookupkit's
    policy instead of llama.cpp's rule.
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
    rec = _Records(n_chunks * (n_ctx - 1), n_draft)
    pol = own_state(policy, new_index(n_ctx)) if policy is not None else llama_rule()
    rec.run(tokens[:1], 0, n_draft, ctx, dyn, st, memo, pol, state)  # compile or load the kernels, untimed
    state[:] = 0
    t_draft = t_merge = 0.0
    for chunk in range(n_chunks):
        t_draft += rec.run(tokens[chunk * n_ctx:(chunk + 1) * n_ctx], chunk, n_draft, ctx, dyn, st, memo, pol, state)
        t0 = time.perf_counter()
        dyn.merge(ctx)
        ctx.clear()
        clear_index(pol.index)
        reset_suffix(pol.suffix)
        memo = grow_memo(memo)
        t_merge += time.perf_counter() - t0
        state[OUT] = 0
    trace = rec.trace(state, n_ctx=n_ctx, n_draft=n_draft, n_input=len(tokens), t_draft_s=t_draft,
                      extra={"t_merge_ms": t_merge * 1e3})
    return trace, dyn.to_table()


def replay_generation(tokens, prompt_len: int, n_draft: int = DEFAULT_DRAFT, static=None,
                      dynamic: NgramTable | None = None, thresholds: Thresholds | None = None,
                      policy: Policy | None = None) -> ReplayTrace:
    """What an engine drafting with lookupkit counts while generating `tokens` from its first `prompt_len`.

    lookup-stats' loop over one sequence, as a speculative engine runs it: the prompt is known (counted
    into the context cache at once), the first draft is made after `prompt_len` tokens, each call is
    verified once (the drafted prefix equal to the sequence is accepted, then one token is sampled),
    no chunking. An engine's draft-call, drafted and accepted counters must equal this trace's.
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    n_draft = check_n_draft(n_draft)
    if not 1 <= prompt_len <= len(tokens):
        raise InputError(f"prompt_len must be between 1 and the {len(tokens)} tokens of the sequence, got {prompt_len}")
    thr = thresholds or Thresholds()
    n = len(tokens)
    ctx = fc.FlatCache(4 * n, 4 * n, thr.context)
    ctx.update(tokens[:prompt_len])
    dyn = fc.FlatCache.from_table(dynamic, 0, 0, thr.dynamic)
    pol = llama_rule()
    if policy is not None:
        pol = own_state(policy, new_index(n))
        index_positions(pol.index, tokens, 1, prompt_len)
    state = np.array([prompt_len, 0, 0], np.int64)
    rec = _Records(max(n - prompt_len, 1), n_draft)
    t = rec.run(tokens, 0, n_draft, ctx, dyn, static_arrays(static, thr.static), new_memo(), pol, state)
    return rec.trace(state, n_ctx=n, n_draft=n_draft, n_input=n, t_draft_s=t)


def _grow(arr: np.ndarray, need: int) -> np.ndarray:
    out = np.full(max(int(need), 2 * len(arr)), 0, arr.dtype)
    out[:len(arr)] = arr
    return out
