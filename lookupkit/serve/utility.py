"""llama-server's utility endpoints, with b11434's JSON shapes, because programs written for llama-server call
them: its web UI reads GET /props, scripts count and inspect tokens with POST /tokenize and /detokenize, and
GET /slots and POST /apply-template show what a slot holds and what prompt a chat becomes.

Bodies are read as every lookupkit body is (serve.protocol: strict JSON, unknown fields and wrong types a 400
naming the field), and an id outside the vocabulary is a 400, never a 500 (llama-server would index past
its vocabulary). GET /slots adds, beyond llama-server's fields, a `lookupkit` object per slot: the sources
its drafter drafts from, the sources of its last draft, and the drafted and accepted tokens and verify calls
of its current (or last) request.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .._version import __version__
from .chat import CHATML_SOURCE, special_piece
from .protocol import INT_MAX, ApiError, ChatRequest, LlamaCompletionRequest, _Body, read_body

Id = Annotated[int, Field(ge=-INT_MAX - 1, le=INT_MAX)]  # range-checked against the vocabulary by _check_ids


class TokenizeRequest(_Body):
    content: Annotated[str, Field(max_length=1 << 24)] | list[str | Id] = ""
    add_special: bool = False  # llama-server's defaults: no BOS, special tokens parsed, ids only
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(_Body):
    tokens: list[Id] = []


class ApplyTemplateRequest(ChatRequest):
    """A chat request (the sampler fields are accepted and ignored, as llama-server does)."""


def routes(served) -> list:
    """The utility routes over a startup.Served."""
    async def tokenize(request: Request):
        body = await read_body(request, TokenizeRequest)
        ids = await run_in_threadpool(served.life.reading, _tokenize, served, body)
        if not body.with_pieces:
            return JSONResponse({"tokens": ids})
        pieces = await run_in_threadpool(served.life.reading, _pieces, served, ids)
        return JSONResponse({"tokens": [{"id": t, "piece": _piece_json(p)} for t, p in zip(ids, pieces)]})

    async def detokenize(request: Request):
        body = await read_body(request, DetokenizeRequest)
        _check_ids(served, body.tokens, "tokens")
        pieces = await run_in_threadpool(served.life.reading, _pieces, served, body.tokens)
        return JSONResponse({"content": b"".join(pieces).decode("utf-8", "replace")})

    async def apply_template(request: Request):
        body = await read_body(request, ApplyTemplateRequest)
        raw = await run_in_threadpool(served.life.reading, served.chat.prompt_bytes,
                                      [m.as_dict() for m in body.messages])
        return JSONResponse({"prompt": raw.decode("utf-8")})

    async def props(request: Request):
        return JSONResponse(_props(served))

    async def slots(request: Request):
        return JSONResponse([_slot(served, s) for s in served.engine.slots])

    return [Route("/tokenize", tokenize, methods=["POST"]), Route("/detokenize", detokenize, methods=["POST"]),
            Route("/apply-template", apply_template, methods=["POST"]), Route("/props", props),
            Route("/slots", slots)]


def _tokenize(served, body: TokenizeRequest) -> list:
    """llama-server's tokenize_mixed: a string, or strings and ids in a list (only the first string gets the
    special tokens add_special asks for)."""
    parts = [body.content] if isinstance(body.content, str) else body.content
    _check_ids(served, [p for p in parts if isinstance(p, int)], "content")
    out = []
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out.append(part)
            continue
        try:
            raw = part.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "the content is not valid Unicode (a lone surrogate escape)", param="content") from None
        out += served.llm.tokenize(raw, add_bos=body.add_special and i == 0, special=body.parse_special)
    return out


def _check_ids(served, ids, param: str) -> None:
    bad = next((t for t in ids if not 0 <= t < served.n_vocab), None)
    if bad is not None:
        raise ApiError(400, f"token id {bad} is out of range: this model's ids are 0..{served.n_vocab - 1}",
                       param=param, code="invalid_value")


def _pieces(served, ids: list) -> list:
    """Each token's text, special tokens written out (read in the threadpool through Lifecycle.reading)."""
    return [special_piece(served.llm, t) for t in ids]


def _piece_json(piece: bytes):
    """A piece as llama-server sends it: a string if it is whole UTF-8, else its bytes as numbers."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def generation_defaults(n_ctx: int) -> dict:
    """llama-server's default_generation_settings: /completion's defaults (serve.protocol names them once)."""
    fields = LlamaCompletionRequest.model_fields
    params = {name: fields[name].default for name in ("n_predict", "seed", "temperature", "top_k", "top_p", "min_p",
                                                     "stream", "ignore_eos", "cache_prompt")}
    return {"params": {**params, "max_tokens": params["n_predict"], "stop": [],
                       "samplers": ["top_k", "top_p", "min_p", "temperature"]}, "n_ctx": n_ctx}


def _props(served) -> dict:
    """llama-server b11434's GET /props fields (recorded on Gemma 3 270M), lookupkit's values; beyond them a
    `lookupkit` object saying which chat template is used and why."""
    chat = served.chat
    return {"default_generation_settings": generation_defaults(served.n_ctx_slot),
            "total_slots": len(served.engine.slots), "model_alias": served.model_id, "model_path": served.model_path,
            "modalities": {"vision": False, "video": False, "audio": False}, "endpoint_slots": True,
            "endpoint_props": False, "endpoint_metrics": True, "ui": False, "ui_settings": {},
            "chat_template": chat.source, "chat_template_caps": CHATML_CAPS if chat.source == CHATML_SOURCE else {},
            "bos_token": chat.bos, "eos_token": chat.eos, "build_info": f"lookupkit {__version__}",
            "is_sleeping": False, "lookupkit": {"chat_template": chat.describe()}}


# what llama-server b11434's /props says its ChatML fallback supports (other templates: not analysed, {})
CHATML_CAPS = {"supports_object_arguments": False, "supports_parallel_tool_calls": False,
               "supports_preserve_reasoning": False, "supports_reasoning_effort": False,
               "supports_string_content": True, "supports_system_role": True, "supports_tool_calls": False,
               "supports_tools": False, "supports_typed_content": False}


def _slot(served, slot) -> dict:
    """llama-server's fields of an idle slot, and lookupkit's drafting of the slot's current or last request."""
    drafter = slot.drafter
    return {"id": slot.seq, "n_ctx": served.n_ctx_slot, "speculative": drafter is not None,
            "is_processing": slot.job is not None,
            "lookupkit": {"draft_sources": list(served.sources) if drafter is not None else [],
                          "last_draft_sources": list(getattr(drafter, "last_sources", []) or []),
                          "drafted": getattr(slot, "drafted", 0), "accepted": getattr(slot, "accepted", 0),
                          "verify_calls": getattr(slot, "calls", 0), "cached_tokens": len(slot.cached)}}
