"""The HTTP side of `lookupkit serve`: OpenAI's /v1/completions, /v1/chat/completions and /v1/models,
llama-server's /completion, /health and /metrics (and its utility endpoints: serve.utility), on Starlette +
uvicorn.

With API keys (--api-key), every route but /health (a load balancer's probe) answers 401 unless the request
says `Authorization: Bearer KEY` with one of them, compared in constant time. A request's tenant (whose
history it drafts from: serve.tenants) is its key's, else its body's `user`'s.

Handlers never touch llama.cpp: each request becomes an engine Job whose events the engine thread
hands over with `loop.call_soon_threadsafe` into an asyncio queue, one event per verify step; a stream
sends one event per token, as llama-server's clients expect. While a response is pending or streaming, a
watcher reads the connection's ASGI `receive`: a client that goes away cancels its job at once (out of the
queue, or out of its slot within one step).

Why this stack: Starlette is the maintained ASGI toolkit FastAPI is built on, and FastAPI's one gain
here, body models, does not fit: a body must be read as JSON whatever its Content-Type (llama-server
does; `curl -d` sends form-urlencoded) and parsed by pydantic's own strict JSON parser (NaN, "10" for
an int and unknown fields refused), which `protocol.read_body` does in one call. uvicorn serves it (h11, or
httptools when installed): even one streamed event per token costs a small model's token a negligible share
of its time in the HTTP path (bench/RESULTS.md: Figures the code's comments rely on).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from ..errors import LookupkitError
from ..integrations.llama_model import Stop
from .engine import Busy, Delta, Done, Job
from .protocol import ApiError, ChatRequest, CompletionRequest, LlamaCompletionRequest, read_body
from .responses import OpenAIBody, llama_chunk, llama_final, sse
from .sampling import Sampling
from .tenants import tenant_id
from . import utility

log = logging.getLogger("lookupkit.serve")
ROUTES = ("POST /v1/completions, POST /v1/chat/completions, POST /completion, GET /v1/models, /health, /metrics, "
          "POST /tokenize, POST /detokenize, POST /apply-template, GET /props, GET /slots, POST /static/reload")
FAILED = {Stop.ERROR: 500, Stop.SHUTDOWN: 503, Stop.CANCELLED: 499}  # a Done that is no answer, its status (499: client gone)


class Submitted:
    """A job in the engine, its events as an async iterator."""

    def __init__(self, served, prompt, max_tokens: int, sampling: Sampling, stops: list, ignore_eos: bool,
                 cache_prompt: bool = True, tenant: str = "anonymous"):
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.engine = served.engine
        self.job = Job(prompt=prompt, max_tokens=max_tokens, sampling=sampling, stops=stops, ignore_eos=ignore_eos,
                       cache_prompt=cache_prompt, tenant=tenant,
                       deliver=lambda event: loop.call_soon_threadsafe(self.queue.put_nowait, event))
        self.done: Done | None = None
        try:
            self.engine.submit(self.job)
        except Busy as exc:
            served.metrics.inc("requests_total", outcome="rejected")
            raise ApiError(503, str(exc), retry_after=exc.retry_after) from None

    async def events(self):
        while self.done is None:
            event = await self.queue.get()
            if isinstance(event, Done):
                self.done = event
            yield event

    def cancel(self) -> None:
        if self.done is None:
            self.engine.cancel(self.job)

    async def watch(self, receive) -> None:
        """Cancel the job when the client disconnects."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self.cancel()

    async def collect(self, receive) -> tuple[list, str, Done]:
        """All of it (a non-streamed response), cancelled if the client goes first."""
        watcher = asyncio.ensure_future(self.watch(receive))
        tokens, text = [], []
        try:
            async for event in self.events():
                if isinstance(event, Delta):
                    tokens += event.tokens
                text.append(event.text)
        finally:
            watcher.cancel()
            self.cancel()
        _raise_failed(self.done)
        return tokens, "".join(text), self.done


def _raise_failed(done: Done) -> None:
    if done.reason in FAILED:
        raise ApiError(FAILED[done.reason], done.message or "the request was not finished", retry_after=1)


class EventStream(StreamingResponse):
    """Server-sent events from a Submitted job; the job is cancelled when the client goes or the stream
    ends early (the watcher reads `receive` meanwhile, as Starlette does only for older ASGI servers)."""

    def __init__(self, submitted: Submitted, chunks):
        super().__init__(chunks, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.submitted = submitted

    async def __call__(self, scope, receive, send) -> None:
        watcher = asyncio.ensure_future(self.submitted.watch(receive))
        try:
            await self.stream_response(send)
        except OSError:
            pass  # the client is gone; the watcher has cancelled the job
        finally:
            watcher.cancel()
            self.submitted.cancel()


def make_app(served) -> Starlette:
    """The app over a startup.Served; its lifespan starts the engine and closes it (aborting what is left)."""

    @asynccontextmanager
    async def lifespan(app):
        served.life.start()
        yield
        await run_in_threadpool(served.life.stop_engine)

    async def completions(request: Request):
        body = await read_body(request, CompletionRequest)
        ids = await _prompt_ids(served, body.prompt)
        limit = _limit(served, body.max_tokens)
        return await _openai(served, request, body, ids, limit, body.stops(), chat=False)

    async def chat_completions(request: Request):
        body = await read_body(request, ChatRequest)
        ids, stops = await run_in_threadpool(served.life.reading, served.chat.render,
                                             [m.as_dict() for m in body.messages])
        _check_length(served, ids, "messages")
        return await _openai(served, request, body, ids, _limit(served, body.limit()), body.stops() + stops, chat=True)

    async def completion(request: Request):
        body = await read_body(request, LlamaCompletionRequest)
        ids = await _prompt_ids(served, body.prompt)
        # n_predict 0: the prompt is only decoded into a slot's cache (llama-server's way to warm it)
        limit = served.n_ctx_slot if body.n_predict < 0 else min(body.n_predict, served.n_ctx_slot)
        job = Submitted(served, ids, limit, body.sampling(), body.stop, body.ignore_eos, body.cache_prompt,
                        _tenant(request, body))
        if body.stream:
            return EventStream(job, _llama_chunks(served, job, len(ids)))
        tokens, text, done = await job.collect(request.receive)
        return JSONResponse(llama_final(served.model_id, text, tokens if body.return_tokens else [], done, False))

    async def list_models(request: Request):
        return JSONResponse({"object": "list", "data": [{
            "id": served.model_id, "object": "model", "created": int(time.time()), "owned_by": "lookupkit",
            "meta": {"n_ctx_slot": served.n_ctx_slot, "n_vocab": served.n_vocab, "slots": len(served.engine.slots)}}]})

    async def health(request: Request):
        if not served.engine.serving:
            raise ApiError(503, "the engine is not serving (shutting down, or stopped: see the server's log)")
        busy = served.engine.busy
        return JSONResponse({"status": "ok", "slots_idle": len(served.engine.slots) - busy, "slots_processing": busy})

    async def reload_static(request: Request):
        if not served.keys:
            raise ApiError(403, "POST /static/reload changes what every client is drafted from: start the server "
                                "with --api-key to use it (or send the server SIGHUP)")
        try:
            return JSONResponse({"reloaded": await run_in_threadpool(served.reload_static)})
        except LookupkitError as exc:
            raise ApiError(400, f"{exc} (the server drafts from the cache it had)") from None

    async def metrics(request: Request):
        return PlainTextResponse(served.metrics.render(), media_type="text/plain; version=0.0.4")

    routes = [Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat_completions, methods=["POST"]),
              Route("/completion", completion, methods=["POST"]),
              Route("/v1/models", list_models), Route("/health", health), Route("/metrics", metrics),
              Route("/static/reload", reload_static, methods=["POST"]), *utility.routes(served)]
    keys = [Middleware(KeyCheck, served=served)] if served.keys else []
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=_error_handlers(served), middleware=keys)


class KeyCheck:
    """ASGI middleware: a request to any route but /health needs `Authorization: Bearer KEY` with one of
    served.keys (each compared with hmac.compare_digest, all of them every time); else a 401 in OpenAI's error
    body, which never repeats what was sent. The key's tenant goes into the request's state."""

    def __init__(self, app, served):
        self.app, self.served = app, served
        self.keys = [(k.encode(), tenant_id(key=k)) for k in served.keys]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] == "/health":
            return await self.app(scope, receive, send)
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        tenant = None
        for key, tid in self.keys:
            if hmac.compare_digest(given.strip(), key) and scheme.lower() == b"bearer":
                tenant = tid
        if tenant is None:
            self.served.metrics.inc("requests_total", outcome="unauthorized")
            message = ("the API key given is not one of this server's" if given.strip() else "no API key was given")
            err = ApiError(401, f"{message}: send the header 'Authorization: Bearer KEY' with a key the server was "
                                f"started with (--api-key, --api-key-file)", code="invalid_api_key")
            return await JSONResponse(err.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"})(
                scope, receive, send)
        scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)


def _tenant(request: Request, body) -> str:
    """The request's tenant: its API key's (KeyCheck put it there), else its body's user's, else anonymous."""
    return getattr(request.state, "tenant", None) or tenant_id(user=body.user)


async def _openai(served, request: Request, body, ids, limit: int, stops: list, chat: bool):
    job = Submitted(served, ids, limit, body.sampling(), stops, body.ignore_eos, body.cache_prompt,
                    _tenant(request, body))
    out = OpenAIBody(served.model_id, chat)
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        return EventStream(job, _openai_chunks(job, out, usage))
    _, text, done = await job.collect(request.receive)
    return JSONResponse(out.whole(text, done))


async def _openai_chunks(job: Submitted, out: OpenAIBody, usage: bool):
    first = out.first_chunk()
    if first is not None:
        yield sse(first)
    async for event in job.events():
        if isinstance(event, Delta):
            for piece in event.pieces:  # one chunk per token that released text
                if piece:
                    yield sse(out.chunk(piece))
        elif event.reason in FAILED:
            yield sse(ApiError(FAILED[event.reason], event.message).body())
        else:
            yield sse(out.chunk(event.text, done=event))
            if usage:
                yield sse(out.usage_chunk(event))
    yield b"data: [DONE]\n\n"


async def _llama_chunks(served, job: Submitted, n_prompt: int):
    n = 0
    async for event in job.events():
        if isinstance(event, Delta):
            for tok, piece in zip(event.tokens, event.pieces):  # one event per token
                n += 1
                yield sse(llama_chunk(Delta([tok], [piece]), n_prompt, n))
        elif event.reason in FAILED:
            yield sse(ApiError(FAILED[event.reason], event.message).body())
        else:
            if event.text:
                yield sse(llama_chunk(Delta([], [event.text]), n_prompt, n))
            yield sse(llama_final(served.model_id, "", [], event, True))


async def _prompt_ids(served, prompt) -> list:
    if isinstance(prompt, str):
        try:
            raw = prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "the prompt is not valid Unicode (it holds a lone surrogate escape)",
                           param="prompt") from None
        # BOS and special tokens, as llama-server
        ids = await run_in_threadpool(served.life.reading, served.llm.tokenize, raw, True, True)
    else:
        ids = prompt
        if max(ids) >= served.n_vocab:
            raise ApiError(400, f"prompt token ids must be below {served.n_vocab} (this model's vocabulary), got "
                                f"{max(ids)}", param="prompt", code="invalid_value")
    _check_length(served, ids, "prompt")
    return ids


def _check_length(served, ids, param: str) -> None:
    if not ids:
        raise ApiError(400, "the prompt is empty (no tokens): give some text or token ids", param=param)
    if len(ids) >= served.n_ctx_slot:
        raise ApiError(400, f"This model's maximum context length is {served.n_ctx_slot} tokens per slot, and the "
                            f"prompt has {len(ids)}: shorten it, or start the server with a larger -c (or a "
                            f"smaller --parallel: each slot gets -c / --parallel)",
                       param=param, code="context_length_exceeded")


def _limit(served, max_tokens: int | None) -> int:
    if max_tokens is None:
        return served.n_ctx_slot  # until EOS, a stop string or the slot's context is full
    if max_tokens > served.n_ctx_slot:
        raise ApiError(400, f"max_tokens is {max_tokens}, more than a slot's whole context of {served.n_ctx_slot} "
                            f"tokens: ask for fewer, or start the server with a larger -c",
                       param="max_tokens", code="invalid_value")
    return max_tokens


def _error_handlers(served) -> dict:
    """Every refusal as OpenAI's error body, 4xx for what the client sent, never a traceback."""

    def respond(err: ApiError) -> JSONResponse:
        if err.status < 500:
            served.metrics.inc("requests_total", outcome="invalid")
        headers = {"Retry-After": str(err.retry_after)} if err.status == 503 and err.retry_after else None
        return JSONResponse(err.body(), status_code=err.status, headers=headers)

    async def api_error(request, exc: ApiError):
        return respond(exc)

    async def http_error(request, exc: HTTPException):
        if exc.status_code == 404:
            message = f"Unknown request URL: {request.method} {request.url.path} (lookupkit serve has {ROUTES})"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path} (lookupkit serve has {ROUTES})"
        else:
            message = str(exc.detail)
        return respond(ApiError(exc.status_code, message))

    async def busy(request, exc: Busy):  # (the engine's queue is full, or the server is stopping)
        return respond(ApiError(503, str(exc), retry_after=exc.retry_after))

    async def bug(request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return respond(ApiError(500, f"internal error ({type(exc).__name__}); the server log has the details"))

    return {ApiError: api_error, HTTPException: http_error, Busy: busy, Exception: bug}
