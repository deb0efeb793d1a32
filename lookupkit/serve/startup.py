"""Everything `lookupkit serve` opens, opened once at start-up and timed: the model (one llama.cpp context
of --parallel sequences), the static cache (mapped once, shared read-only by every slot's Drafter),
the dynamic cache (read once; each slot's Drafter starts every request from it), the policy tables, the
drafting kernels and the chat template. A bad cache, table or flag is refused before the model loads."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..rules import MAX_DRAFT


@dataclass
class Served:
    """What the handlers share: the Llama (tokenizing), the engine, the chat template, the model's id."""

    llm: object
    engine: object
    metrics: object
    chat: object
    model_id: str
    n_vocab: int
    n_ctx_slot: int
    loaded: list = field(default_factory=list)  # (what, seconds, detail) in the order they were opened


def open_server(model, *, lcs=None, lcd=None, policy: str = "llama.cpp", policy_table=None, verify_cost=None,
                n_draft: int = 8, n_ctx: int = 4096, threads: int | None = None, parallel: int = 1, queue: int = 32,
                on_batch=None) -> Served:
    """Open everything (see the module docstring); n_draft 0 serves without drafting (the plain baseline)."""
    from .. import models, warmup
    from ..integrations.engines import drafter_factory
    from ..integrations.llama_generate import LLAMA_BATCH, model_vocab, open_model
    from ..verify_cost import VerifyCost
    from .chat import ChatTemplate
    from .engine import Engine
    from .metrics import Metrics

    _check(n_draft, n_ctx, threads, parallel, queue)
    loaded = []

    def timed(what: str, fn, detail=""):
        t = time.perf_counter()
        value = fn()
        loaded.append((what, time.perf_counter() - t, detail(value) if callable(detail) else detail))
        return value

    path = models.resolve(model)
    vocab = timed("model vocabulary", lambda: model_vocab(path), lambda v: v.name)
    static = dynamic = make_drafter = None
    if n_draft:
        from ..static import StaticCache

        if lcs is not None:
            static = timed(f"static cache {lcs}", lambda: StaticCache.open(lcs, expect_vocab=vocab),
                           "mapped, vocabulary checked")
        if lcd is not None:
            from ..formats import read_ngrams

            dynamic = timed(f"dynamic cache {lcd}", lambda: read_ngrams(lcd), lambda t: f"{len(t.ngrams):,} n-grams")
        make_drafter, _ = drafter_factory(path, static=static, dynamic=dynamic, policy=policy, policy_table=policy_table,
                                          verify_cost=VerifyCost.of(verify_cost) if verify_cost is not None else None)
    elif lcs is not None or lcd is not None:
        raise InputError("--draft 0 serves without drafting: leave out -lcs/-lcd, or give --draft 1 or more")
    n_batch = max(LLAMA_BATCH, parallel * (n_draft + 1))  # prompt chunks of at least llama-cpp-python's default
    llm = timed(f"model {path}", lambda: open_model(path, n_ctx=n_ctx, threads=threads, parallel=parallel,
                                                    n_batch=n_batch), f"{parallel} sequences, n_batch {n_batch}")
    try:
        timed("drafting kernels (after the model)", warmup.wait_kernels)
        metrics = Metrics()
        engine = timed(f"{parallel} slot{'s' * (parallel > 1)}", lambda: Engine(
            llm, make_drafter, parallel=parallel, queue=queue, n_draft=n_draft, metrics=metrics, on_batch=on_batch),
            "a Drafter each" if make_drafter else "no drafting")
        metrics.gauge("slots_total", parallel)
        chat = timed("chat template", lambda: ChatTemplate(llm), lambda c: c.describe())
    except BaseException:
        llm.close()
        raise
    model_id = str(model) if str(model) in models.MODELS else Path(path).name
    return Served(llm=llm, engine=engine, metrics=metrics, chat=chat, model_id=model_id, n_vocab=engine.m.n_vocab,
                  n_ctx_slot=engine.n_ctx_slot, loaded=loaded)


def _check(n_draft, n_ctx, threads, parallel, queue) -> None:
    if isinstance(n_draft, bool) or not isinstance(n_draft, int) or not 0 <= n_draft <= MAX_DRAFT:
        raise InputError(f"--draft must be between 0 (no drafting) and {MAX_DRAFT}, got {n_draft!r}")
    if not isinstance(parallel, int) or not 1 <= parallel <= PARALLEL_MAX:
        raise InputError(f"--parallel must be between 1 and {PARALLEL_MAX}, got {parallel!r}")
    if not isinstance(n_ctx, int) or n_ctx < CTX_MIN * parallel:
        raise InputError(f"-c must be at least {CTX_MIN} per slot ({CTX_MIN * parallel} for --parallel {parallel}), "
                         f"got {n_ctx!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InputError(f"--threads must be at least 1, got {threads!r}")
    if not isinstance(queue, int) or queue < 0:
        raise InputError(f"--queue must be 0 or more, got {queue!r}")


CTX_MIN = 16  # tokens per slot: -c below this cannot hold a prompt and an answer
PARALLEL_MAX = 64  # slots; llama.cpp's own limit is llama_max_parallel_sequences() (256)
