"""Greedy generation over llama-cpp-python's low-level API, plain or drafted by a lookupkit Drafter.

Why not `Llama.generate` with a draft model: llama-cpp-python then forces logits for every position
(the whole prompt included: 262,144 floats per token for Gemma 3) and samples through its sampler
chain, Python overhead on every token. Here the prompt is decoded once with one logits row (its last);
each call then verifies `[last token] + draft` in one batch with logits on exactly those rows, takes
the argmax of each row in numpy (a view of llama.cpp's float rows, no copy) only as far as it agrees
with the draft, keeps the agreeing drafted prefix plus one token, and removes the rejected positions
from the KV cache. Without a drafter the same loop verifies `[last token]` alone: the plain baseline.

The drafter's draft is never cut at `max_tokens` (only at n_ctx and at the batch size), so a run's
counters equal `replay.replay_generation(prompt + tokens, len(prompt) + 1, n_draft, ...)` exactly;
the last call may verify drafted tokens past the end, which are not emitted.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .. import warmup
from .engines import check_gguf, gguf_vocab, require
from ..errors import InputError
from ..rules import ENGINE_DRAFT, check_n_draft, DEFAULT_CTX

SEQ = 0  # the one llama.cpp sequence this loop uses


@dataclass
class Generation:
    """One greedy generation: what was emitted, how long it took, and what drafting did.

    tokens: the generated ids (an EOS/EOG token that ended it is the last one); stop: "eos", "length"
    (max_tokens) or "n_ctx" (the context is full); eog: where the first EOS/EOG token is, if any
    (stop_at_eos=False generates past it). t_prompt_s: decoding the prompt and picking the first
    token; t_gen_s: everything after it. n_calls: verify batches after the first token (one per emitted
    token for plain generation); drafted/accepted: per call. tokens_per_s counts every generated token
    over t_gen_s, as llama-server's predicted_per_second does.
    """

    tokens: list
    prompt_len: int
    stop: str
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
        return self.stop == "eos"

    def summary(self) -> dict:
        return {"prompt_tokens": self.prompt_len, "tokens": len(self.tokens), "stop": self.stop, "eog": self.eog,
                "t_prompt_s": self.t_prompt_s, "t_gen_s": self.t_gen_s, "tokens_per_s": self.tokens_per_s,
                "calls": self.n_calls, "drafted": self.n_drafted, "accepted": self.n_accepted,
                "accepted_per_call": self.accepted_per_call,
                "acceptance": self.n_accepted / self.n_drafted if self.n_drafted else None}


class _Batch:
    """A llama_batch with numpy views of its token, position and logits-flag arrays. `set` fills it with one
    run of sequence SEQ (generate's loop); `clear` + `add` fill it with runs of several sequences (the
    server verifies every slot's draft in one batch)."""

    def __init__(self, lib, capacity: int):
        self.lib, self.capacity = lib, capacity
        self.b = lib.llama_batch_init(capacity, 0, 1)
        self.token = np.ctypeslib.as_array(self.b.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(self.b.pos, shape=(capacity,))
        self.logits = np.ctypeslib.as_array(self.b.logits, shape=(capacity,))
        np.ctypeslib.as_array(self.b.n_seq_id, shape=(capacity,))[:] = 1
        self._seqs = np.full(capacity, SEQ, np.int32)  # what each row's seq_id[r][0] holds: written when it changes
        for r in range(capacity):
            self.b.seq_id[r][0] = SEQ

    def set(self, tokens, pos0: int, n_logits: int) -> None:
        """tokens at positions pos0.., logits on the last n_logits of them."""
        self.clear()
        self.add(tokens, pos0, n_logits)

    def clear(self) -> None:
        self.b.n_tokens = 0

    def add(self, tokens, pos0: int, n_logits: int, seq: int = SEQ) -> int:
        """Append tokens of sequence seq at positions pos0.., logits on the last n_logits of them; returns
        the batch row of the first (llama_get_logits_ith's index)."""
        i, n = self.b.n_tokens, len(tokens)
        self.token[i:i + n] = tokens
        self.pos[i:i + n] = np.arange(pos0, pos0 + n, dtype=np.int32)
        self.logits[i:i + n - n_logits] = 0
        self.logits[i + n - n_logits:i + n] = 1
        stale = np.flatnonzero(self._seqs[i:i + n] != seq)
        if len(stale):  # only rows that held another sequence: generate()'s one sequence writes none per step
            seq_id = self.b.seq_id
            for r in (stale + i).tolist():
                seq_id[r][0] = seq
            self._seqs[i:i + n] = seq
        self.b.n_tokens = i + n
        return i

    def free(self) -> None:
        if self.b is not None:
            self.lib.llama_batch_free(self.b)
            self.b = None


class _Model:
    """What the loop needs from a Llama: its context, memory, vocabulary size and end-of-generation test."""

    def __init__(self, llm):
        self.lib = require("llama_cpp", "llama-cpp-python", "llama")
        if not isinstance(llm, self.lib.Llama):
            raise InputError(f"generate() takes a llama_cpp.Llama, got {type(llm).__name__}")
        self.llm, self.ctx = llm, llm.ctx
        self.mem = self.lib.llama_get_memory(self.ctx)
        self.vocab = self.lib.llama_model_get_vocab(llm.model)
        self.n_vocab = int(self.lib.llama_vocab_n_tokens(self.vocab))
        self.n_ctx = int(llm.n_ctx())
        self.n_batch = int(llm.context_params.n_batch)
        self.n_swa = int(self.lib.llama_model_n_swa(llm.model))  # a sliding window's size, 0 for none
        self._row = ctypes.c_float * self.n_vocab
        self._piece = ctypes.create_string_buffer(64)

    def decode(self, batch: _Batch) -> None:
        rc = self.lib.llama_decode(self.ctx, batch.b)
        if rc != 0:
            raise InputError(f"llama_decode failed (code {rc}) on a batch of {batch.b.n_tokens} tokens")

    def row(self, i: int) -> np.ndarray:
        """The logits of batch row i (a view of llama.cpp's buffer, valid until the next decode)."""
        ptr = self.lib.llama_get_logits_ith(self.ctx, i)
        if not ptr:
            raise InputError(f"llama.cpp has no logits for batch row {i}")
        return np.frombuffer(self._row.from_address(ctypes.addressof(ptr.contents)), np.float32)

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def piece(self, token: int) -> bytes:
        """The token's text as llama.cpp writes it, special tokens as nothing (pieces concatenate to
        llama-cpp-python's detokenize of the whole run)."""
        n = self.lib.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, False)
        if n < 0:  # longer than the buffer: grow it once
            self._piece = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, False)
        return self._piece.raw[:n]

    def forget_from(self, pos: int, seq: int = SEQ) -> None:
        """Drop sequence seq's KV cells at positions >= pos (rejected drafts; pos 0: the whole sequence)."""
        if not self.lib.llama_memory_seq_rm(self.mem, seq, pos, -1):
            raise InputError(f"this model's KV cache cannot drop positions from {pos} on, which drafting needs")

    def pos_min(self, seq: int = SEQ) -> int:
        """The smallest position seq's KV cells hold (-1: none): sliding-window layers forget the oldest ones."""
        return int(self.lib.llama_memory_seq_pos_min(self.mem, seq))

    def clear(self) -> None:
        self.lib.llama_memory_clear(self.mem, True)
        self.llm.n_tokens = 0  # Llama's own calls must not take our KV cache for its prompt cache


def open_model(model, *, n_ctx: int = DEFAULT_CTX, threads: int | None = None, parallel: int = 1, n_draft: int = 0,
               **llama_kwargs):
    """A `llama_cpp.Llama` for generate(), with llama-server's context defaults: flash attention on (the
    server's "auto" picks it on CPU; llama-cpp-python's default turns it off) and a sliding-window KV cache
    of the window's size (swa_full=False; llama-cpp-python's default keeps n_ctx cells for those layers).
    model: a GGUF path or a `lookupkit.models` name; threads: for single tokens and batches alike;
    parallel: sequences the context holds (llama-server's -np: n_seq_max, each of n_ctx / parallel cells,
    kv_unified off as in llama-server; `Llama` itself always makes one sequence, so its context is made
    first at a throwaway size and replaced); n_draft: the most tokens a draft call adds, so that a verify batch
    of 1 + n_draft fits in n_batch (unless n_batch is given). The drafting kernels load in a background thread meanwhile
    (warmup.kernels(): the model's load hides them; generate() waits for them before its first draft)."""
    from .. import models

    warmup.kernels()
    path = models.resolve(model)
    check_gguf(path)  # a file that is not GGUF is refused in one line, before llama.cpp reads it
    model_vocab(path, wait=False)  # read meanwhile, for generate()'s check of a drafter's static cache
    lib = require("llama_cpp", "llama-cpp-python", "llama")
    llama_kwargs.setdefault("n_batch", batch_size(n_draft, parallel))
    kwargs = {"n_ctx": n_ctx if parallel == 1 else THROWAWAY_CTX, "n_threads": threads, "n_threads_batch": threads,
              "flash_attn": True, "swa_full": False, "verbose": False, **llama_kwargs}
    llm = lib.Llama(model_path=str(path), **kwargs)
    if parallel > 1:
        _replace_context(llm, n_ctx, parallel, llama_kwargs["n_batch"],
                         llama_kwargs.get("n_ubatch", LLAMA_BATCH))
    return llm


THROWAWAY_CTX = 256  # the context Llama makes before open_model replaces it with a multi-sequence one
LLAMA_BATCH = 512  # llama-cpp-python's n_batch and n_ubatch defaults


def batch_size(n_draft: int, parallel: int = 1) -> int:
    """n_batch for `parallel` sequences that each verify 1 + n_draft tokens in one step (prompt chunks of at least
    llama-cpp-python's default)."""
    return max(LLAMA_BATCH, parallel * (n_draft + 1))


def _replace_context(llm, n_ctx: int, parallel: int, n_batch: int, n_ubatch: int) -> None:
    from llama_cpp import _internals

    lib = require("llama_cpp", "llama-cpp-python", "llama")
    params = lib.llama_context_default_params()
    for name, _ in lib.llama_context_params._fields_:
        setattr(params, name, getattr(llm.context_params, name))
    params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx, parallel, False
    params.n_batch = min(n_ctx, n_batch)
    params.n_ubatch = min(params.n_batch, n_ubatch)
    llm._ctx.close()  # freed before the new one is made: never two KV caches at once
    try:
        llm._ctx = _internals.LlamaContext(model=llm._model, params=params, verbose=False)
    except ValueError:
        llm.close()
        raise InputError(f"llama.cpp cannot make a context of {n_ctx} tokens for {parallel} sequences "
                         f"(lower -c or --parallel)") from None
    llm.context_params = params  # (the model frees the new context before itself, as it did the old one)


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
    m = _Model(llm)
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
    batch = _Batch(m.lib, max(1, min(m.n_batch, max(len(prompt), n_draft + 1))))
    try:
        m.clear()
        return _run(m, batch, prompt, max_tokens, drafter, n_draft, stop_at_eos, on_token, on_batch)
    finally:
        batch.free()
        m.clear()
        if drafter is not None:
            drafter.reset(learn=True)


def _run(m: _Model, batch: _Batch, prompt: np.ndarray, max_tokens, drafter, n_draft, stop_at_eos, on_token,
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
        draft = drafter.draft(None, k) if drafter is not None and k > 0 else []
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


def verify(pick, row, draft: list[int]) -> list[int]:
    """The tokens one verify batch emits: pick(row(j)) for j = 0.. while it equals draft[j], and the
    first that differs (or row len(draft)'s pick): the accepted drafted tokens plus one. Greedy here
    (greedy_pick); the server's sampler picks by sampling, which keeps drafting exact (serve.sampling)."""
    out = []
    for j in range(len(draft) + 1):
        tok = pick(row(j))
        out.append(tok)
        if j == len(draft) or tok != draft[j]:
            break
    return out


def greedy_pick(logits: np.ndarray) -> int:
    return int(np.argmax(logits))


def _stop(m: _Model, ended: bool, out: list, n_prompt: int, max_tokens: int) -> str | None:
    """Why the generation ends after this step, if it does (ended: an EOG was emitted, with stop_at_eos)."""
    if ended:
        return "eos"
    if len(out) >= max_tokens:
        return "length"
    if n_prompt + len(out) >= m.n_ctx:
        return "n_ctx"
    return None


def _first_eog(m: _Model, tokens: list) -> int | None:
    """Index of the first end-of-generation token in tokens (the check stops there)."""
    return next((i for i, t in enumerate(tokens) if m.is_eog(t)), None)


def _rows(m: _Model, n: int) -> np.ndarray:
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


def model_vocab(model_path, *, wait: bool = True):
    """engines.gguf_vocab, read once per model file (a large vocabulary's metadata is slow to read) in a
    background thread; wait=False only starts the read (open_model: the model's load hides it)."""
    try:
        st = os.stat(model_path)
    except OSError:
        return gguf_vocab(model_path)  # says in one line why the file cannot be read
    key = (os.path.realpath(model_path), st.st_size, st.st_mtime_ns)
    with _VOCAB_LOCK:
        read = _VOCABS.get(key)
        if read is None:
            if len(_VOCABS) >= 8:
                _VOCABS.pop(next(iter(_VOCABS)))
            read = _VOCABS[key] = warmup.Warmup(lambda: gguf_vocab(key[0]), "lookupkit-vocab")
    return read.wait() if wait else None


_VOCABS: dict = {}  # (real path, size, mtime) -> the Warmup reading that file's vocabulary
_VOCAB_LOCK = threading.Lock()
