"""Greedy generation on llama.cpp (integrations.llama_model, the layer under every loop), plain or drafted by a
lookupkit Drafter.

The prompt is decoded once with one logits row (its last); each call then verifies `[last token] + draft` in one
batch with logits on exactly those rows, takes the argmax of each row only as far as it agrees with the draft,
keeps the agreeing drafted prefix plus one token, and removes the rejected positions from the KV cache. Without a
drafter the same loop verifies `[last token]` alone: the plain baseline.

The drafter's draft is never cut at `max_tokens` (only at n_ctx and at the batch size), so a run's
counters equal `replay.replay_generation(prompt + tokens, len(prompt) + 1, n_draft, ...)` exactly;
the last call may verify drafted tokens past the end, which are not emitted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .. import warmup
from ..errors import InputError
from ..rules import ENGINE_DRAFT, check_n_draft
from .llama_model import Batch, Model, Stop, greedy_pick, model_vocab, valid_draft, verify


@dataclass
class Generation:
    """One greedy generation: what was emitted, how long it took, and what drafting did.

    tokens: the generated ids (an EOS/EOG token that ended it is the last one); stop: Stop.EOS, Stop.LENGTH
    (max_tokens) or Stop.CTX (the context is full; strings "eos", "length", "n_ctx"); eog: where the first EOS/EOG token is, if any
    (stop_at_eos=False generates past it). t_prompt_s: decoding the prompt and picking the first
    token; t_gen_s: everything after it. n_calls: verify batches after the first token (one per emitted
    token for plain generation); drafted/accepted: per call. tokens_per_s counts every generated token
    over t_gen_s, as llama-server's predicted_per_second does.
    """

    tokens: list
    prompt_len: int
    stop: Stop
    t_prompt_s: float
    t_gen_s: float
    drafted: np.ndarray = field(repr=False)
    accepted: np.ndarray = field(repr=False)
    eog: int | None = None  # index in tokens of the first end-of-generation token (with stop_at_eos, the last)

    @property
    def n_calls(self) -> int:
        return len(self.drafted)

    @property
    def n_drafted(self) -> int:
        return int(self.drafted.sum())

    @property
    def n_accepted(self) -> int:
        return int(self.accepted.sum())

    @property
    def tokens_per_s(self) -> float | None:
        return len(self.tokens) / self.t_gen_s if self.t_gen_s > 0 else None

    @property
    def accepted_per_call(self) -> float | None:
        """Mean drafted tokens accepted per verify call (0 for plain generation)."""
        return self.n_accepted / self.n_calls if self.n_calls else None

    @property
    def eos(self) -> bool:
        return self.stop == Stop.EOS

    def summary(self) -> dict:
        return {"prompt_tokens": self.prompt_len, "tokens": len(self.tokens), "stop": self.stop.value, "eog": self.eog,
                "t_prompt_s": self.t_prompt_s, "t_gen_s": self.t_gen_s, "tokens_per_s": self.tokens_per_s,
                "calls": self.n_calls, "drafted": self.n_drafted, "accepted": self.n_accepted,
                "accepted_per_call": self.accepted_per_call,
                "acceptance": self.n_accepted / self.n_drafted if self.n_drafted else None}


def generate(llm, prompt_tokens, max_tokens: int, *, drafter=None, n_draft: int = ENGINE_DRAFT, stop_at_eos: bool = True,
             on_token=None, on_batch=None) -> Generation:
    """Greedy continuation of `prompt_tokens` (ids, BOS included if the model wants one) on `llm`.

    llm: a `llama_cpp.Llama` (logits_all not needed; its KV cache is cleared first and after);
    drafter: None (plain greedy) or a `lookupkit.Drafter` (a static cache of another vocabulary than the
    model's is refused); n_draft: tokens per draft (cut so the sequence never passes n_ctx, and to the
    Llama's n_batch - 1). The drafter follows the prompt from scratch and learns the finished sequence
    into its dynamic cache. on_token(token) is called for each emitted token; on_batch(pos0, tokens,
    logits) for each decoded batch with its logits rows (rows, n_vocab) — for checks, not speed.
    One generation at a time per Llama (its KV cache is the loop's state); a Drafter follows one too.
    """
    m = Model(llm)
    prompt = _check_prompt(prompt_tokens, m.n_vocab)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InputError(f"max_tokens must be a whole number >= 1, got {max_tokens!r}")
    n_draft = check_n_draft(n_draft)
    if len(prompt) >= m.n_ctx:
        raise InputError(f"the prompt has {len(prompt)} tokens but n_ctx is {m.n_ctx}: "
                         f"raise n_ctx (-c) above the prompt length or shorten the prompt")
    if drafter is not None:
        warmup.wait_kernels()
        check_drafter(drafter, llm)
        drafter.reset(learn=False)
        drafter.accept(prompt)
    batch = Batch(m.lib, max(1, min(m.n_batch, max(len(prompt), n_draft + 1))))
    try:
        m.clear()
        return _run(m, batch, prompt, max_tokens, drafter, n_draft, stop_at_eos, on_token, on_batch)
    finally:
        batch.free()
        m.clear()
        if drafter is not None:
            drafter.reset(learn=True)


def _run(m: Model, batch: Batch, prompt: np.ndarray, max_tokens, drafter, n_draft, stop_at_eos, on_token,
         on_batch) -> Generation:
    t0 = time.perf_counter()
    for i in range(0, len(prompt), batch.capacity):
        chunk = prompt[i:i + batch.capacity]
        last = i + len(chunk) == len(prompt)
        batch.set(chunk, i, 1 if last else 0)
        m.decode(batch)
    if on_batch is not None:
        on_batch(len(prompt) - 1, prompt[-1:].copy(), m.row(len(chunk) - 1)[None, :])
    tok = int(np.argmax(m.row(len(chunk) - 1)))
    out, drafted, accepted = [tok], [], []
    if on_token is not None:
        on_token(tok)
    t1 = time.perf_counter()
    ended = stop_at_eos and m.is_eog(tok)  # with stop_at_eos, each emitted token is checked once, as it comes
    stop = _stop(m, ended, out, len(prompt), max_tokens)
    if drafter is not None:
        drafter.accept(out)
    limit_batch = min(n_draft, batch.capacity - 1)
    while stop is None:
        pos = len(prompt) + len(out) - 1  # position of the last emitted token, not yet in the KV cache
        k = min(limit_batch, m.n_ctx - 2 - pos)  # the sequence, all it may emit included, stays within n_ctx
        draft = valid_draft(drafter.draft(None, k), m.n_vocab)[0] if drafter is not None and k > 0 else []
        seq = [tok, *draft]
        batch.set(seq, pos, len(seq))
        m.decode(batch)
        if on_batch is not None:
            on_batch(pos, np.asarray(seq, np.int32), _rows(m, len(seq)))
        new = verify(greedy_pick, m.row, draft)
        tok = new[-1]
        n_acc = len(new) - 1
        if n_acc < len(draft):
            m.forget_from(pos + 1 + n_acc)
        new = new[:max_tokens - len(out)]
        if stop_at_eos:
            cut = _first_eog(m, new)
            ended = cut is not None
            new = new if cut is None else new[:cut + 1]
        drafted.append(len(draft))
        accepted.append(min(n_acc, len(new)))  # drafted tokens that are in the output
        out.extend(new)
        if on_token is not None:
            for t in new:
                on_token(t)
        stop = _stop(m, ended, out, len(prompt), max_tokens)
        if drafter is not None:
            drafter.accept(new)
    t2 = time.perf_counter()
    # without stop_at_eos the first EOG is looked for once, after the timed loop
    eog = (len(out) - 1 if ended else None) if stop_at_eos else _first_eog(m, out)
    return Generation(tokens=out, prompt_len=len(prompt), stop=stop, t_prompt_s=t1 - t0, t_gen_s=t2 - t1,
                      drafted=np.asarray(drafted, np.int32), accepted=np.asarray(accepted, np.int32), eog=eog)


def _stop(m: Model, ended: bool, out: list, n_prompt: int, max_tokens: int) -> Stop | None:
    """Why the generation ends after this step, if it does (ended: an EOG was emitted, with stop_at_eos)."""
    if ended:
        return Stop.EOS
    if len(out) >= max_tokens:
        return Stop.LENGTH
    if n_prompt + len(out) >= m.n_ctx:
        return Stop.CTX
    return None


def _first_eog(m: Model, tokens: list) -> int | None:
    """Index of the first end-of-generation token in tokens (the check stops there)."""
    return next((i for i, t in enumerate(tokens) if m.is_eog(t)), None)


def _rows(m: Model, n: int) -> np.ndarray:
    return np.stack([m.row(i) for i in range(n)])


def _check_prompt(prompt_tokens, n_vocab: int) -> np.ndarray:
    try:
        prompt = np.asarray(prompt_tokens)
    except (TypeError, ValueError):
        raise InputError("prompt_tokens must be a sequence of token ids") from None
    if prompt.ndim != 1 or (len(prompt) and not np.issubdtype(prompt.dtype, np.integer)):
        raise InputError("prompt_tokens must be a 1-D sequence of integer token ids")
    if not len(prompt):
        raise InputError("the prompt is empty: give at least one token (a BOS token will do)")
    if prompt.min() < 0 or prompt.max() >= n_vocab:
        raise InputError(f"prompt token ids must be in 0..{n_vocab - 1} (this model's vocabulary), "
                         f"got {int(prompt.min())}..{int(prompt.max())}")
    return prompt.astype(np.int32)


def check_drafter(drafter, llm) -> None:
    """Refuse a drafter whose static cache was built for another vocabulary than llm's model."""
    from .. import Drafter

    if not isinstance(drafter, Drafter):
        raise InputError(f"drafter must be a lookupkit.Drafter or None, got {type(drafter).__name__}")
    if drafter.static is not None:
        drafter.static.check_vocab(model_vocab(llm.model_path))
