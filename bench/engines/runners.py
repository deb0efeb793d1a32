"""How each engine of the engines bench generates one greedy continuation of token ids, and what it counts.

Every runner returns the same record: the generated ids, prompt and generation time, and (where the
engine exposes them) draft calls, drafted and accepted tokens. All of them generate exactly `n` tokens
(an end-of-generation token does not stop them) so that rows compare like for like.

* `LlamaCppRunner`: llama-cpp-python. Plain and lookupkit rows run lookupkit's own greedy loop
  (`lookupkit.integrations.llama_cpp.generate`: no logits_all, one logits row per verified token) on one
  shared `Llama` from `open_model` (llama-server's context defaults: flash attention, window-sized SWA cache); the `plain-b32` row runs the same plain loop on a second `Llama` whose batches hold
  32 tokens, so the prompt is evaluated in other shapes (the floor of greedy divergence); the
  `LlamaPromptLookupDecoding` row runs llama-cpp-python's own speculative loop (`Llama.generate`, the
  loop `create_completion` drives, minus detokenising), which needs logits_all=True: it gets its own
  `Llama` with n_ctx 1024 (logits of every position: 262,144 floats each, 1 GB at 1024 positions).
* `TransformersRunner`: the same GGUF dequantised to float32 in transformers; plain greedy `generate`,
  its `prompt_lookup_num_tokens`, and lookupkit's `LookupGenerate`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from lookupkit.errors import InputError
from lookupkit.rules import DEFAULT_CTX

FLOOR_BATCH = 32  # the plain-b32 row's n_batch / n_ubatch
PLD_N_CTX = 1024  # the LlamaPromptLookupDecoding row's context (logits_all: every position's logits)


def accepted_of(calls: list[tuple[int, list[int]]], sequence: list[int]) -> list[int]:
    """For draft calls made at history length h with draft d: how many of d the final `sequence` agrees
    with from position h on (what greedy verification accepted)."""
    out = []
    for h, draft in calls:
        n = 0
        while n < len(draft) and h + n < len(sequence) and sequence[h + n] == draft[n]:
            n += 1
        out.append(n)
    return out


def record(tokens, t_prompt_s, t_gen_s, drafted=None, accepted=None) -> dict:
    """The runner's common result; drafted/accepted are per-call lists (None: the engine does not say)."""
    rec = {"tokens": [int(t) for t in tokens], "n_gen": len(tokens), "t_prompt_s": float(t_prompt_s),
           "t_gen_s": float(t_gen_s), "calls": None, "drafted": None, "accepted": None}
    if drafted is not None:
        rec.update(calls=len(drafted), drafted=int(np.sum(drafted)), accepted=int(np.sum(accepted)),
                   drafted_calls=[int(x) for x in drafted], accepted_calls=[int(x) for x in accepted])
    return rec


class LlamaCppRunner:
    """llama-cpp-python rows: plain, plain-b32, pld (llama-cpp-python's own), lookupkit rule/policy."""

    def __init__(self, model: Path, threads: int, n_ctx: int = DEFAULT_CTX):
        from lookupkit.integrations.llama_cpp import generate, open_model

        self._generate, self._open = generate, open_model
        self.model, self.threads = model, threads
        self.llm = open_model(model, n_ctx=n_ctx, threads=threads, n_batch=512, n_ubatch=512)
        self._floor = None
        self._pld = None

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def run(self, row: dict, prompt: list[int], n: int) -> dict:
        kind = row["kind"]
        if kind == "plain-b32":
            return self._lookupkit(self._floor_llm(), None, prompt, n, 1)
        if kind == "pld":
            return self._pld_run(prompt, n, row["n_draft"])
        return self._lookupkit(self.llm, row.get("drafter"), prompt, n, row.get("n_draft", 1))

    def _lookupkit(self, llm, make_drafter, prompt, n, n_draft) -> dict:
        drafter = make_drafter() if make_drafter else None
        g = self._generate(llm, prompt, n, drafter=drafter, n_draft=n_draft, stop_at_eos=False)
        if drafter is None:
            return record(g.tokens, g.t_prompt_s, g.t_gen_s)
        return record(g.tokens, g.t_prompt_s, g.t_gen_s, g.drafted.tolist(), g.accepted.tolist())

    def _floor_llm(self):
        if self._floor is None:
            self._floor = self._open(self.model, n_ctx=self.llm.n_ctx(), threads=self.threads, n_batch=FLOOR_BATCH,
                                     n_ubatch=FLOOR_BATCH)
        return self._floor

    def _pld_run(self, prompt, n, n_draft) -> dict:
        if len(prompt) + n + n_draft >= PLD_N_CTX:
            raise InputError(f"the prompt ({len(prompt)} tokens) + {n} does not fit the pld row's n_ctx {PLD_N_CTX}")
        if self._pld is None or self._pld.draft_model.num_pred_tokens != n_draft:
            # llama-cpp-python's own loop rolls rejected drafts back itself: full-size SWA cache for it
            self._pld = self._open(self.model, n_ctx=PLD_N_CTX, threads=self.threads, n_batch=512, n_ubatch=512,
                                   logits_all=True, swa_full=True, draft_model=_counting_pld(n_draft))
        llm = self._pld
        llm.draft_model.calls = []
        llm.reset()  # no prefix reuse from the previous prompt
        out = []
        t0 = time.perf_counter()
        t1 = None
        for tok in llm.generate(list(prompt), temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            if t1 is None:
                t1 = time.perf_counter()
            out.append(int(tok))
            if len(out) >= n:
                break
        t2 = time.perf_counter()
        seq = list(prompt) + out
        # a call made after the last emitted token was never verified
        calls = [(h, d) for h, d in llm.draft_model.calls if h < len(seq)]
        return record(out, t1 - t0, t2 - t1, [len(d) for _, d in calls], accepted_of(calls, seq))


def _counting_pld(n_draft: int):
    """llama-cpp-python's LlamaPromptLookupDecoding, noting (history length, draft) of every call."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    class Counting(LlamaPromptLookupDecoding):
        calls: list = []

        def __call__(self, input_ids, /, **kwargs):
            draft = super().__call__(input_ids, **kwargs)
            self.calls.append((len(input_ids), [int(t) for t in draft]))
            return draft

    return Counting(num_pred_tokens=n_draft)


class TransformersRunner:
    """transformers rows: plain greedy, prompt_lookup_num_tokens, lookupkit's LookupGenerate."""

    def __init__(self, model: Path, threads: int):
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self.torch = torch
        t0 = time.perf_counter()
        self.model = AutoModelForCausalLM.from_pretrained(os.fspath(Path(model).parent), gguf_file=Path(model).name,
                                                          dtype=torch.float32)
        self.model.eval()
        self.t_load_s = time.perf_counter() - t0

    def run(self, row: dict, prompt: list[int], n: int) -> dict:
        torch = self.torch
        ids = torch.tensor([prompt], dtype=torch.long)
        kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, attention_mask=torch.ones_like(ids))
        lookup = None
        if row["kind"] == "pld":
            kwargs["prompt_lookup_num_tokens"] = row["n_draft"]
        elif row["kind"] == "lookupkit":
            lookup = row["generator"]()
            kwargs["custom_generate"] = lookup
        t_prefill = self.prefill_s(ids)
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = self.model.generate(ids, **kwargs)
            total = time.perf_counter() - t0
        tokens = out[0, len(prompt):].tolist()
        rec = record(tokens, t_prefill, total - t_prefill)
        rec["t_total_s"] = total
        if lookup is not None:
            s = lookup.stats()
            rec.update(calls=s["calls"], drafted=s["drafted"], accepted=s["accepted"])
        return rec

    def prefill_s(self, ids) -> float:
        """One forward pass over the prompt, timed just before each run. Assisted decoding verifies its
        first draft in the prompt's own forward pass, so no row has a separate prompt time of its own:
        every transformers row's generation time is its end-to-end time minus this."""
        with self.torch.inference_mode():
            t0 = time.perf_counter()
            self.model(ids)
            return time.perf_counter() - t0
