"""What a request may say, and what a refusal looks like.

Request bodies are pydantic models in strict mode with unknown fields forbidden: a field of the wrong
type, NaN/Infinity, an unknown field or a value out of range is a 400 with OpenAI's error body
`{"error": {"message", "type", "param", "code"}}` that names the field and what it accepts, never a 500.
OpenAI fields lookupkit does not implement (logprobs, echo, penalties, logit_bias, n > 1, ...) are
accepted only at their neutral value and refused otherwise, so a client never gets silently different
behaviour. `/v1/*` take OpenAI's defaults (temperature 1, top_p 1, max_tokens 16 for completions);
`/completion` takes llama-server b11434's (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, n_predict
-1), and `top_k`, `min_p` and `ignore_eos` are accepted on every endpoint, as llama-server does.
"""

from __future__ import annotations

import reprlib
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .sampling import Sampling

SEED_MAX = 2**64 - 1
INT_MAX = 2**31 - 1
MAX_STOPS = 4  # OpenAI's limit on stop strings
STOP_CHARS = 1000  # each stop string's (every generated token is checked against the held-back text)


class ApiError(Exception):
    """A refusal: HTTP status and OpenAI's error fields (Retry-After with 503s)."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.retry_after = status, message, param, code, retry_after
        self.type = type or ("invalid_request_error" if status < 500 else
                             "unavailable_error" if status == 503 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def from_validation(errors: list, model) -> ApiError:
    """The first of pydantic's validation errors of a `model` body as a 400 naming the field (for a field
    that may take several types, what each of them needed)."""
    e = errors[0]
    loc = [p for p in e.get("loc", ()) if not _union_tag(p)]
    path = ".".join(str(p) for p in loc)
    param = str(loc[0]) if loc and isinstance(loc[0], str) else None
    kind, msg = e.get("type", ""), str(e.get("msg", "invalid")).removeprefix("Value error, ")
    if any(_union_tag(p) for p in e.get("loc", ())):
        same = [x["msg"] for x in errors if x.get("loc", ())[:1] == e["loc"][:1]]
        msg = ", or ".join(dict.fromkeys(same))
    if kind == "json_invalid":
        detail = (e.get("ctx") or {}).get("error", msg)
        return ApiError(400, f"the body is not valid JSON ({detail}): send one JSON object", code="invalid_json")
    if kind == "extra_forbidden":
        takes = f" (this endpoint takes {', '.join(model.model_fields)})" if len(loc) == 1 else ""
        return ApiError(400, f"Unrecognized request argument supplied: {path}{takes}", param=param,
                        code="unknown_parameter")
    if kind == "missing":
        return ApiError(400, f"'{path}' is a required property", param=param, code="missing_required_parameter")
    if not path:
        return ApiError(400, f"the body must be a JSON object of request fields: {msg}", code="invalid_type")
    got = "" if kind == "value_error" else f" (got {reprlib.repr(e.get('input'))})"
    return ApiError(400, f"Invalid value for '{path}': {msg}{got}", param=param,
                    code="invalid_type" if kind.endswith("_type") else "invalid_value")


async def read_body(request, model):
    """A request's body as `model`, whatever its Content-Type (llama-server reads every body as JSON; curl -d
    sends form-urlencoded): pydantic's own JSON parser, in strict mode; a refusal is an ApiError."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise from_validation(exc.errors(include_url=False), model) from None


def _union_tag(part) -> bool:
    """pydantic names the member of a union it tried inside an error's loc ('str', 'list[int]')."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "list", "dict", "none")
                                      or any(c in part for c in "[(-"))


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _Sampled:
    """A body with sampler fields (temperature, top_k, top_p, min_p, seed): the engine's Sampling, made in
    one place for every endpoint (no seed, or llama-server's -1, draws from the OS)."""

    def sampling(self) -> Sampling:
        seed = None if self.seed is None or self.seed < 0 else self.seed
        return Sampling(self.temperature, self.top_k, self.top_p, self.min_p, seed)


class StreamOptions(_Body):
    include_usage: bool = False


Prompt = Annotated[str, Field(max_length=1 << 24)] | Annotated[list[Annotated[int, Field(ge=0, le=INT_MAX)]],
                                                              Field(min_length=1)]
Stop = Annotated[str, Field(max_length=STOP_CHARS)]
Stops = Stop | Annotated[list[Stop], Field(max_length=MAX_STOPS)]


def _neutral(value, neutral, what: str):
    if value not in neutral:
        raise ValueError(f"lookupkit serve does not implement {what}: leave it out (or at {neutral[0]!r})")
    return value


class _OpenAI(_Body, _Sampled):
    """Fields both OpenAI endpoints share."""

    model: str | None = None
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, ge=0, le=1)
    top_k: int = Field(0, ge=0, le=INT_MAX)
    min_p: float = Field(0.0, ge=0, le=1)
    seed: int | None = Field(None, ge=0, le=SEED_MAX)
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Stops | None = None
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict | None = None
    user: str | None = None
    cache_prompt: bool = True  # llama-server's: start from the slot cache with the longest common prefix

    @field_validator("n")
    @classmethod
    def _one(cls, v):
        if v != 1:
            raise ValueError(f"n must be 1 (got {v}): lookupkit serve makes one choice per request; send n requests")
        return v

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, v, info):
        return _neutral(v, (0, 0.0), info.field_name)

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, v):
        return _neutral(v, (None, {}), "logit_bias")

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class CompletionRequest(_OpenAI):
    prompt: Prompt
    max_tokens: int | None = Field(16, ge=1, le=INT_MAX)
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None

    @field_validator("echo", "logprobs", "best_of", "suffix")
    @classmethod
    def _neutral_fields(cls, v, info):
        return _neutral(v, {"echo": (False,), "best_of": (None, 1)}.get(info.field_name, (None,)), info.field_name)


class TextPart(_Body):
    type: Literal["text"]
    text: str


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def as_dict(self) -> dict:
        """The message as serve.chat renders it: text parts joined by newlines, as llama-server b11434 joins them."""
        content = self.content if not isinstance(self.content, list) else "\n".join(p.text for p in self.content)
        return {"role": self.role, "content": content, **({"name": self.name} if self.name else {})}


class ChatRequest(_OpenAI):
    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: int | None = Field(None, ge=1, le=INT_MAX)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT_MAX)
    logprobs: bool = False
    top_logprobs: int | None = None

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _neutral_fields(cls, v, info):
        return _neutral(v, (False,) if info.field_name == "logprobs" else (None,), info.field_name)

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class LlamaCompletionRequest(_Body, _Sampled):
    """llama-server's /completion, the fields a bench client needs (b11434's names and defaults)."""

    prompt: Prompt
    n_predict: int = Field(-1, ge=-1, le=INT_MAX)
    temperature: float = Field(0.8, ge=0)
    top_k: int = Field(40, ge=0, le=INT_MAX)
    top_p: float = Field(0.95, ge=0, le=1)
    min_p: float = Field(0.05, ge=0, le=1)
    seed: int = Field(-1, ge=-1, le=SEED_MAX)
    stop: Annotated[list[Stop], Field(max_length=MAX_STOPS)] = []
    stream: bool = False
    return_tokens: bool = False
    ignore_eos: bool = False
    cache_prompt: bool = True  # start from the slot cache with the longest common prefix (serve.slots)
    user: str | None = None  # OpenAI's end-user id, the request's tenant when the server has no API keys
