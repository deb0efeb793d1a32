"""The one layer over llama-cpp-python's low-level API that every loop stands on — `generate`, the server's
engine, `calibrate` and `model-corpus`: a Batch of token runs with logits where asked, a Model (its context, KV
memory, vocabulary and logits rows), open_model with llama-server's context settings, the verify step, the check
every draft passes before it reaches llama_decode, and why a generation stopped (Stop).

Why the low-level API and not `Llama.generate` with a draft model: llama-cpp-python then forces logits for every
position (the whole prompt included: a row of the vocabulary's size per token) and samples through its sampler
chain in Python per token. Here a prompt is decoded with one logits row (its last), and a verify step asks for
logits on exactly the rows it checks, read as numpy views of llama.cpp's buffers (no copy).
"""

from __future__ import annotations

import ctypes
import os
import threading
from enum import Enum

import numpy as np

from .. import warmup
from .engines import check_gguf, gguf_vocab, require
from ..errors import InputError
from ..rules import DEFAULT_CTX

SEQ = 0  # the llama.cpp sequence a one-sequence loop uses


class Stop(str, Enum):
    """Why a generation ended, the same word in every loop: an end-of-generation token, a stop string, max_tokens,
    the context full, the client gone, the server stopping, a failure. Each protocol names them its own way
    (serve.responses)."""
    EOS = "eos"
    WORD = "word"
    LENGTH = "length"
    CTX = "n_ctx"
    CANCELLED = "cancelled"
    SHUTDOWN = "shutdown"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Batch:
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


class Model:
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

    def decode(self, batch: Batch) -> None:
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
    a KV stream each as in llama-server without --kv-unified: bench/serve/kv_layout measures both, and one pool
    costs a lone slot and equal drafts more than it saves on unequal ones; `Llama` itself always makes one
    sequence, so its context is made first at a throwaway size and replaced); n_draft: the most tokens a draft call
    adds, so that a verify batch of 1 + n_draft fits in n_batch (unless n_batch is given). The drafting kernels load
    in a background thread meanwhile (warmup.kernels(): the model's load hides them; generate() waits for them before
    its first draft)."""
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


def _replace_context(llm, n_ctx: int, parallel: int, n_batch: int, n_ubatch: int, unified: bool = False) -> None:
    from llama_cpp import _internals

    lib = require("llama_cpp", "llama-cpp-python", "llama")
    params = lib.llama_context_default_params()
    for name, _ in lib.llama_context_params._fields_:
        setattr(params, name, getattr(llm.context_params, name))
    params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx, parallel, unified
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


def valid_draft(draft: list[int], n_vocab: int) -> tuple[list[int], int]:
    """(the draft up to its first id outside 0..n_vocab - 1, how many were cut): the one check a draft passes before
    any loop puts it in a batch (a damaged cache can draft any int32; llama_decode must never see it)."""
    bad = next((i for i, t in enumerate(draft) if not 0 <= t < n_vocab), None)
    return (draft, 0) if bad is None else (draft[:bad], len(draft) - bad)


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
