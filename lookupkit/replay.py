"""The lookup-stats replay: draft over known text as if it were being generated, and count hits.

`replay` validates its inputs and runs either the readable reference loop below (llama.cpp's
lookup-stats loop, docs/llama-lookup.md section 7, with draft_ref) or the fast engine
(lookupkit.replay_fast). Both return (ReplayTrace, final dynamic cache as an NgramTable).
n_ctx is used as given: llama.cpp pads -c up to a multiple of 32, lookupkit does not (the
reference vectors use n_ctx 8).
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from .corpora import Budget, TextFile, TokenFile
from .corpora.tokenized import tokenize_source
from .draft_ref import draft_reference
from .errors import InputError
from .ids import token_ids
from .ngram_cache import NgramCache
from .table import NgramTable
from .tokstore import TokenStore
from .trace import ReplayTrace

DEFAULT_DRAFT = 16  # lookup-stats' --draft default
MAX_DRAFT = 1024
MAX_CTX = 2**31 - 1
ENGINES = ("reference", "fast")


def load_tokens(path: str | os.PathLike) -> np.ndarray:
    """Token ids (--tokens): raw little-endian int32 (.i32 or any name) or a 1-D integer .npy."""
    return token_ids(TokenFile(path).ids(), f"token file {path}")


def tokenize_file(path: str | os.PathLike, tokenizer) -> np.ndarray:
    """Ids of a text file (-f) as llama.cpp's lookup tools get them: the whole file, one trailing "\\n"
    cut, special tokens added and parsed (the same document rule as lookup-create)."""
    with tempfile.TemporaryDirectory(prefix="lookupkit-stats-") as root:
        doc = tokenize_source(TextFile(path), Budget(None), tokenizer, TokenStore(root))
        try:
            return np.concatenate([np.asarray(a, dtype=np.int32) for a in doc.arrays()] or [np.empty(0, np.int32)])
        finally:
            doc.close()


def check_args(n_input: int, n_ctx: int, n_draft: int) -> None:
    """Refuse parameters that cannot give a meaningful replay, with the reason."""
    if not 1 <= n_draft <= MAX_DRAFT:
        raise InputError(f"--draft must be between 1 and {MAX_DRAFT}, got {n_draft}")
    if not 2 <= n_ctx <= MAX_CTX:
        raise InputError(f"--ctx-size must be between 2 and {MAX_CTX}, got {n_ctx}")
    if n_input <= n_ctx:
        raise InputError(f"the input has {n_input} tokens; replaying with --ctx-size {n_ctx} needs more than "
                         f"{n_ctx} (only full chunks followed by at least one more token are evaluated)")


def replay(tokens, n_ctx: int = 4096, n_draft: int = DEFAULT_DRAFT, static=None,
           dynamic: NgramTable | None = None, engine: str = "fast") -> tuple[ReplayTrace, NgramTable]:
    """Run lookup-stats over `tokens`; returns the trace and the dynamic cache after the last chunk.

    `static` is a StaticCache (or, for the reference engine, anything with `.find(t0, t1)`),
    `dynamic` the table of an -lcd file. Only full chunks of n_ctx tokens are replayed.
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    check_args(len(tokens), n_ctx, n_draft)
    if engine == "fast":
        from .replay_fast import replay_fast

        return replay_fast(tokens, n_ctx, n_draft, static, dynamic)
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
