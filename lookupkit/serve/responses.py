"""Response bodies from the engine's events: OpenAI's completion and chat objects, whole or as stream
chunks, and llama-server b11434's /completion body (tools/server/server-task.cpp: its fields and
`timings` names, `draft_n` / `draft_n_accepted` only when something was drafted, as there), so one
bench client reads both servers. OpenAI bodies carry llama-server's `timings` too, as llama-server's do."""

from __future__ import annotations

import json
import time
import uuid

from ..integrations.llama_model import Stop

FINISH = {Stop.EOS: "stop", Stop.WORD: "stop", Stop.LENGTH: "length", Stop.CTX: "length"}  # OpenAI's finish_reason
STOP_TYPE = {Stop.EOS: "eos", Stop.WORD: "word", Stop.LENGTH: "limit", Stop.CTX: "limit"}  # llama-server's stop_type


def timings(stats: dict) -> dict:
    """llama-server's timings: prompt_n counts the prompt tokens decoded, cache_n those a slot's cache held."""
    n_p, s_p, n_g, s_g = stats["prompt_n"] - stats["cache_n"], stats["prompt_s"], stats["predicted_n"], stats["predicted_s"]
    out = {"cache_n": stats["cache_n"], "prompt_n": n_p, "prompt_ms": 1e3 * s_p, "prompt_per_token_ms": 1e3 * s_p / n_p if n_p else 0.0,
           "prompt_per_second": n_p / s_p if s_p > 0 else 0.0, "predicted_n": n_g, "predicted_ms": 1e3 * s_g,
           "predicted_per_token_ms": 1e3 * s_g / n_g if n_g else 0.0,
           "predicted_per_second": n_g / s_g if s_g > 0 else 0.0}
    if stats["drafted"]:
        out.update(draft_n=stats["drafted"], draft_n_accepted=stats["accepted"])
    return out


def usage(stats: dict) -> dict:
    return {"prompt_tokens": stats["prompt_n"], "completion_tokens": stats["predicted_n"],
            "total_tokens": stats["prompt_n"] + stats["predicted_n"],
            "prompt_tokens_details": {"cached_tokens": stats["cache_n"]}}


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


class OpenAIBody:
    """One OpenAI request's bodies: chat (chat.completion) or not (text_completion)."""

    def __init__(self, model_id: str, chat: bool):
        self.model, self.chat = model_id, chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _head(self, chunk: bool) -> dict:
        kind = ("chat.completion" + ".chunk" * chunk) if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, text: str, done) -> dict:
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if self.chat else
                  {"index": 0, "text": text})
        choice.update(logprobs=None, finish_reason=FINISH.get(done.reason))
        return {**self._head(False), "choices": [choice], "usage": usage(done.stats), "timings": timings(done.stats)}

    def first_chunk(self) -> dict | None:
        """Chat streams open with the assistant's role, as OpenAI's do."""
        return self.chunk("", role=True) if self.chat else None

    def chunk(self, text: str, done=None, role: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": text} if role else ({"content": text} if text or not done else {})
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=None, finish_reason=FINISH.get(done.reason) if done else None)
        out = {**self._head(True), "choices": [choice]}
        if done is not None:
            out["timings"] = timings(done.stats)
        return out

    def usage_chunk(self, done) -> dict:
        """stream_options.include_usage: a last chunk with no choices and the usage."""
        return {**self._head(True), "choices": [], "usage": usage(done.stats)}


def llama_chunk(delta, n_prompt: int, n_decoded: int) -> dict:
    """A streamed /completion event (one per token, as llama-server sends them)."""
    return {"index": 0, "content": delta.text, "tokens": delta.tokens, "stop": False, "id_slot": -1,
            "tokens_predicted": n_decoded, "tokens_evaluated": n_prompt}


def llama_final(model_id: str, text: str, tokens: list, done, streamed: bool) -> dict:
    """The last /completion body (streamed: content and tokens were sent already, as llama-server does)."""
    s = done.stats
    return {"index": 0, "content": "" if streamed else text, "tokens": [] if streamed else tokens,
            "id_slot": s.get("slot", -1),
            "stop": True, "model": model_id, "tokens_predicted": s["predicted_n"], "tokens_evaluated": s["prompt_n"],
            "truncated": False, "stop_type": STOP_TYPE.get(done.reason, "none"), "stopping_word": done.stopping_word,
            "tokens_cached": s["prompt_n"] + max(0, s["predicted_n"] - 1), "timings": timings(s)}
