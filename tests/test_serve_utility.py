"""llama-server's utility endpoints on `lookupkit serve` (issue 34): POST /tokenize, /detokenize, /apply-template,
GET /props and /slots with llama-server b11434's JSON shapes, `--alias`, and every bad body (not JSON, wrong
types, unknown fields, ids outside the vocabulary) a 400 in OpenAI's error body after which the server goes on
serving. One server over the tiny exact-arithmetic model (GPT-2 vocabulary, no chat template in its GGUF: the
ChatML fallback), two slots, for every test here."""

from __future__ import annotations

import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

import httpx  # noqa: E402

from lookupkit import Tokenizer  # noqa: E402
from lookupkit.serve.chat import CHATML_SOURCE  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import WAIT_S, running  # noqa: E402
from tiny_models import N_VOCAB, tiny_gguf  # noqa: E402,F401

ALIAS = "tiny-alias"
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]


@pytest.fixture(scope="module")
def url(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=8, parallel=2, n_ctx=1024, threads=1, alias=ALIAS)
    try:
        with running(served) as base:
            yield base
    finally:
        served.llm.close()


def post(url, path, body=None, content=None):
    return httpx.post(f"{url}{path}", json=body, content=content, timeout=WAIT_S)


def refused(r, *fragments, param=None):
    """A 400 in OpenAI's error body naming what was wrong."""
    assert r.status_code == 400, (r.status_code, r.text)
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    for fragment in fragments:
        assert fragment in err["message"], err["message"]


def still_serving(url):
    assert httpx.get(f"{url}/health", timeout=WAIT_S).json()["status"] == "ok"
    r = post(url, "/completion", {"prompt": "The quick brown fox", "n_predict": 4, "temperature": 0})
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 4


def test_tokenize_gives_llama_cpps_ids_with_pieces_as_llama_server(url):
    tok = Tokenizer.default()
    text = "Prompt lookup decoding drafts tokens."
    ids = tok.encode(text, add_special=False).tolist()
    assert post(url, "/tokenize", {"content": text}).json() == {"tokens": ids}
    with_pieces = post(url, "/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in with_pieces] == ids and "".join(p["piece"] for p in with_pieces) == text
    # a piece that is not whole UTF-8 is its bytes as numbers (a flamingo is three byte-level tokens)
    pieces = post(url, "/tokenize", {"content": "ok \U0001F9A9", "with_pieces": True}).json()["tokens"]
    assert any(isinstance(p["piece"], list) for p in pieces)
    raw = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert raw == "ok \U0001F9A9".encode()
    # mixed content: strings and ids, only the first string gets the special tokens add_special asks for
    mixed = post(url, "/tokenize", {"content": ["Hello", 11, " world"], "add_special": True}).json()["tokens"]
    first = post(url, "/tokenize", {"content": "Hello", "add_special": True}).json()["tokens"]
    assert mixed == first + [11] + tok.encode(" world", add_special=False).tolist()
    assert post(url, "/tokenize", {}).json() == {"tokens": []}  # no content: no tokens, as llama-server


def test_detokenize_round_trips_and_writes_special_tokens(url):
    text = "The quick brown fox jumps over the lazy dog."
    ids = post(url, "/tokenize", {"content": text}).json()["tokens"]
    assert post(url, "/detokenize", {"tokens": ids}).json() == {"content": text}
    assert post(url, "/detokenize", {"tokens": [N_VOCAB - 1]}).json() == {"content": "<|endoftext|>"}
    assert post(url, "/detokenize", {"tokens": []}).json() == {"content": ""}


@pytest.mark.parametrize("path, body, fragments, param", [
    ("/detokenize", {"tokens": [1, N_VOCAB]}, (f"token id {N_VOCAB} is out of range", f"0..{N_VOCAB - 1}"), "tokens"),
    ("/detokenize", {"tokens": [-1]}, ("token id -1 is out of range",), "tokens"),
    ("/detokenize", {"tokens": [2**40]}, ("tokens.0",), "tokens"),
    ("/detokenize", {"tokens": "12"}, ("'tokens'",), "tokens"),
    ("/detokenize", {"tokens": [1.5]}, ("tokens.0",), "tokens"),
    ("/detokenize", {"tokens": [1], "special": True}, ("Unrecognized request argument supplied: special",), "special"),
    ("/tokenize", {"content": ["a", N_VOCAB + 5]}, (f"token id {N_VOCAB + 5} is out of range",), "content"),
    ("/tokenize", {"content": 7}, ("'content'",), "content"),
    ("/tokenize", {"content": "a", "with_pieces": "yes"}, ("'with_pieces'",), "with_pieces"),
    ("/apply-template", {"messages": []}, ("'messages'",), "messages"),
    ("/apply-template", {"messages": [{"role": "wizard", "content": "x"}]}, ("messages.0.role",), "messages"),
    ("/apply-template", {}, ("'messages' is a required property",), "messages"),
])
def test_bad_bodies_are_400s_and_the_server_goes_on(url, path, body, fragments, param):
    refused(post(url, path, body), *fragments, param=param)
    still_serving(url)


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize", "/apply-template"])
def test_a_body_that_is_not_json_is_a_400(url, path):
    for content in (b"{not json", b"", b"[1, 2]", b'"text"'):
        r = post(url, path, content=content)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (content, r.text)
    still_serving(url)


def test_apply_template_is_llama_servers_chatml_fallback(url):
    """The tiny GGUF has no tokenizer.chat_template: llama-server b11434 then renders ChatML (its
    CHATML_TEMPLATE_SRC through Jinja), worked by hand here."""
    r = post(url, "/apply-template", {"messages": CHAT})
    assert r.json() == {"prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hi<|im_end|>\n"
                                  "<|im_start|>assistant\n"}
    turns = CHAT + [{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": [{"type": "text", "text": "Again"}]}]
    assert post(url, "/apply-template", {"messages": turns}).json()["prompt"] == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\nHi!"
        "<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n")
    # the chat endpoint decodes exactly that prompt, tokenized as llama-server tokenizes it
    prompt = r.json()["prompt"]
    ids = post(url, "/tokenize", {"content": prompt, "add_special": True}).json()["tokens"]
    chat = httpx.post(f"{url}/v1/chat/completions", json={"messages": CHAT, "max_tokens": 8, "temperature": 0},
                      timeout=WAIT_S).json()
    plain = post(url, "/completion", {"prompt": ids, "n_predict": 8, "temperature": 0}).json()
    assert chat["usage"]["prompt_tokens"] == len(ids) and chat["choices"][0]["message"]["content"] == plain["content"]


def test_props_has_llama_servers_fields(url, tiny_gguf):
    props = httpx.get(f"{url}/props", timeout=WAIT_S).json()
    assert props["total_slots"] == 2 and props["model_alias"] == ALIAS and props["model_path"] == str(tiny_gguf)
    assert props["chat_template"] == CHATML_SOURCE and props["bos_token"] == props["eos_token"] == "<|endoftext|>"
    settings = props["default_generation_settings"]
    assert settings["n_ctx"] == 512  # a slot's
    # the fields llama-server b11434's /props has (test_serve_chat_gemma records them), but its model_ftype,
    # media_marker and cors_proxy_enabled
    assert {"default_generation_settings", "total_slots", "model_alias", "model_path", "modalities", "endpoint_slots",
            "endpoint_props", "endpoint_metrics", "ui", "ui_settings", "chat_template", "chat_template_caps",
            "bos_token", "eos_token", "build_info", "is_sleeping"} <= set(props)
    assert props["chat_template_caps"]["supports_system_role"] and not props["chat_template_caps"]["supports_tools"]
    assert {k: settings["params"][k] for k in ("temperature", "top_k", "top_p", "min_p", "n_predict", "seed")} == {
        "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "n_predict": -1, "seed": -1}
    assert "ChatML" in props["lookupkit"]["chat_template"] and "fallback" in props["lookupkit"]["chat_template"]


def test_slots_say_what_each_slot_drafted(url):
    done = post(url, "/completion", {"prompt": "Once upon a time", "n_predict": 48, "temperature": 0,
                                     "ignore_eos": True}).json()
    slots = httpx.get(f"{url}/slots", timeout=WAIT_S).json()
    assert [s["id"] for s in slots] == [0, 1] and all(s["n_ctx"] == 512 and not s["is_processing"] for s in slots)
    mine = slots[done["id_slot"]]["lookupkit"]
    assert mine["draft_sources"] == ["context"] and mine["cached_tokens"] > 0
    assert (mine["drafted"], mine["accepted"]) == (done["timings"]["draft_n"], done["timings"]["draft_n_accepted"])
    assert mine["accepted"] > 0 and set(mine["last_draft_sources"]) <= {"c1", "c2", "c3", "c4"}
    with httpx.stream("POST", f"{url}/completion", timeout=WAIT_S,
                      json={"prompt": [1, 2], "n_predict": 1000, "stream": True, "ignore_eos": True}) as busy:
        lines = busy.iter_lines()
        next(lines)  # its slot is generating
        assert sum(s["is_processing"] for s in httpx.get(f"{url}/slots", timeout=WAIT_S).json()) == 1
    still_serving(url)


def test_the_alias_is_the_models_name_everywhere(url):
    assert [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=WAIT_S).json()["data"]] == [ALIAS]
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=WAIT_S).json()
    assert r["model"] == ALIAS
    assert post(url, "/completion", {"prompt": "x", "n_predict": 2}).json()["model"] == ALIAS


def test_unknown_routes_name_the_utility_endpoints(url):
    r = httpx.get(f"{url}/no-such-route", timeout=WAIT_S)
    assert r.status_code == 404 and "POST /tokenize" in r.json()["error"]["message"]
    assert httpx.get(f"{url}/tokenize", timeout=WAIT_S).status_code == 405


def test_a_template_that_refuses_messages_is_a_400_and_one_that_cannot_render_is_refused_at_start(tiny_gguf):
    refuses = ("{% if messages[0].role == 'system' %}{{ raise_exception('this template has no system role') }}{% endif %}"
               "{% for m in messages %}{{ m.content }}\n{% endfor %}")
    served = open_server(tiny_gguf, n_draft=0, n_ctx=512, threads=1, chat_template=refuses)
    try:
        with running(served) as base:
            for path in ("/apply-template", "/v1/chat/completions"):
                refused(post(base, path, {"messages": CHAT}), "cannot render these messages",
                        "this template has no system role", param="messages")
            assert post(base, "/apply-template", {"messages": CHAT[1:]}).json() == {"prompt": "Say hi\n"}
            still_serving(base)
    finally:
        served.llm.close()
    from lookupkit.errors import InputError

    with pytest.raises(InputError, match="cannot render one user message: boom"):
        open_server(tiny_gguf, n_draft=0, n_ctx=512, threads=1, chat_template="{{ raise_exception('boom') }}")
