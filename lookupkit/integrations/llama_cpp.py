"""lookupkit drafting in llama-cpp-python: `generate()` (the fast path) and the `draft_model=` hook.

`generate(llm, prompt_tokens, max_tokens, drafter=...)` (llama_generate) runs its own greedy loop over
the low-level API: no logits_all, one logits row per verified token. `LookupDraftModel` plugs into
llama-cpp-python's own speculative loop for code that already uses `Llama(draft_model=...)`.

llama-cpp-python (0.3.x) calls the draft model once per verify batch with the whole history so far
(the first call comes after the first token is sampled from the prompt's own evaluation), evaluates
`[last sampled token] + draft` in one batch, keeps the prefix of the draft that sampling agrees with
plus one sampled token, and calls again; it cuts a draft only at n_ctx. It never says that a
generation ended: the last draft's outcome is known when `finish(final_tokens)` is called, and counted
as unresolved if the next call starts a new prompt instead.

    gen = generate(open_model("model.gguf"), tokens, 256, drafter=Drafter(static="wiki.lkc"), n_draft=16)
    llm = Llama(model_path="model.gguf", draft_model=LookupDraftModel(static="wiki.lkc", n_draft=8))
    llm = load_llama("model.gguf", static="wiki.lkc", n_draft=8, n_ctx=4096)  # vocabulary checked first

With a draft model llama-cpp-python copies the logits of every evaluated position into `Llama.scores`,
which it sizes for n_batch rows unless logits_all=True: past n_batch tokens of history it fails with
"could not broadcast input array ... into shape (0,)". The hook binds itself to the Llama that calls it
(vocabulary check, n_ctx) and gives it the n_ctx rows it needs, so generation may run past n_batch; a
*first* prompt longer than n_batch fails inside llama-cpp-python before any hook runs, so bind first
(`draft.bind(llm)`), or use load_llama, or generate() (which needs neither).

Importing this module imports llama-cpp-python (lookupkit itself never does).
"""

from __future__ import annotations

import os
import sys
import weakref

import numpy as np

from .engines import open_static, require
from .session import Counted
from .llama_generate import Generation, generate  # noqa: F401  (the fast path)
from .llama_model import model_vocab, open_model  # noqa: F401
from ..errors import InputError
from ..rules import ENGINE_DRAFT

llama_cpp = require("llama_cpp", "llama-cpp-python", "llama")
LlamaDraftModel = require("llama_cpp.llama_speculative", "llama-cpp-python", "llama").LlamaDraftModel


class LookupDraftModel(Counted, LlamaDraftModel):
    """Drafts with lookupkit's Drafter (context, dynamic and static caches, llama.cpp's rule).

    static: a path or an open StaticCache (pass one StaticCache to many draft models: one mapping);
    dynamic: an -lcd file or an NgramTable; n_draft: 1..MAX_DRAFT tokens per call; model: a GGUF path
    or a Llama whose vocabulary the static cache must have (or call `bind(llm)` once the Llama exists);
    policy: "llama.cpp" (its rule, exactly) or "lookupkit" (draft only what pays at verify_cost, a number
    per drafted token or a `lookupkit calibrate` curve file of this very model; None: the Drafter's 0.1);
    history: a draft.history.History (policy "lookupkit"), shared with any other drafters, learning each sequence.
    The Drafter is built and its kernels loaded in a background thread from construction on, so the
    Llama's own load hides them; the first draft waits for it and raises what failed there.
    Counters: n_calls, n_drafted, n_accepted, and `stats()`. One sequence at a time: one draft model
    per Llama (and so per thread).
    """

    def __init__(self, static=None, dynamic=None, n_draft: int = ENGINE_DRAFT, model=None, policy: str = "llama.cpp",
                 verify_cost=None, history=None):
        self.static = open_static(static)
        self._start(dict(static=self.static, dynamic=dynamic, policy=policy, verify_cost=verify_cost, history=history),
                    n_draft)
        self.n_ctx: int | None = None
        self._bound = None  # a weak reference to the Llama bound to
        if model is not None:
            self.bind(model)

    def bind(self, model) -> "LookupDraftModel":
        """Refuse a static cache built for another vocabulary than `model`'s (a GGUF path or a Llama);
        for a Llama, also cut drafts at its n_ctx, as llama-cpp-python does, so the counters stay exact,
        and give its logits buffer the n_ctx rows llama-cpp-python's speculative loop writes into."""
        is_path = isinstance(model, (str, os.PathLike))
        path = model if is_path else getattr(model, "model_path", None)
        if path is None:
            raise InputError(f"bind() takes a GGUF model path or a llama_cpp.Llama, got {type(model).__name__}")
        vocab = model_vocab(path)  # a file that is not GGUF is refused here, static cache or not
        if self.static is not None:
            self.static.check_vocab(vocab)
        if not is_path:
            self.n_ctx = int(model.n_ctx())
            _room_for_all_logits(model)
            self._bound = weakref.ref(model)
        return self

    def __call__(self, input_ids, /, **kwargs) -> np.ndarray:
        caller = sys._getframe(1).f_locals.get("self")  # llama-cpp-python calls us from Llama.generate
        if isinstance(caller, llama_cpp.Llama) and (self._bound is None or self._bound() is not caller):
            self.bind(caller)
        limit = None if self.n_ctx is None else self.n_ctx - len(input_ids)
        return self.session.draft(input_ids, limit).astype(np.intc)

    def dynamic_table(self):
        """What the finished sequences taught the dynamic cache (to save as an -lcd file)."""
        return self.session.drafter.dynamic_table()


def _room_for_all_logits(llm) -> None:
    """Give llm.scores n_ctx rows (what logits_all=True allocates) if it has fewer: the speculative loop
    writes every evaluated position's logits there."""
    n_ctx = int(llm.n_ctx())
    if llm.scores.shape[0] < n_ctx:
        grown = np.zeros((n_ctx, llm.scores.shape[1]), dtype=llm.scores.dtype)
        kept = min(int(llm.n_tokens), llm.scores.shape[0])  # rows past the evaluated tokens hold nothing
        grown[:kept] = llm.scores[:kept]  # (n_batch rows of 262,144 floats: 0.5 GB to copy for nothing)
        llm.scores = grown


def load_llama(model_path, static=None, dynamic=None, n_draft: int = ENGINE_DRAFT, **llama_kwargs):
    """A Llama drafting with lookupkit; the static cache's vocabulary is checked before the model loads."""
    model_path = os.fspath(model_path)
    draft = LookupDraftModel(static=static, dynamic=dynamic, n_draft=n_draft, model=model_path)
    llama_kwargs.setdefault("logits_all", True)  # llama-cpp-python 0.3.36 fails past n_batch of history without it
    llm = llama_cpp.Llama(model_path=model_path, draft_model=draft, **llama_kwargs)
    draft.n_ctx = int(llm.n_ctx())
    return llm
