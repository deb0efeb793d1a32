"""`lookupkit serve` under bad input and faults, over real HTTP on 127.0.0.1 (tiny model).

Malformed JSON, unknown or wrongly typed fields, a prompt longer than a slot's context and absurd
max_tokens / n / temperature are 4xx with OpenAI's error body, never a 5xx (also for hypothesis-made
bodies); a client that disconnects mid-stream frees its slot within a step; SIGTERM makes the server
finish or abort what is in flight within --shutdown-timeout and exit 0; start-up says what it opened.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

import httpx  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import WAIT_S, metric, process, running  # noqa: E402
from tiny_models import foreign_static, tiny_gguf  # noqa: E402,F401

N_CTX = 256  # per slot: small, so that fuzzed requests finish fast and a long prompt is easy to make


@pytest.fixture(scope="module")
def server(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=8, parallel=2, n_ctx=2 * N_CTX, threads=1, queue=64)
    with running(served) as url:
        yield url
    served.llm.close()


def post(url, path, body, raw: bool = False):
    data = body if raw else json.dumps(body)
    return httpx.post(f"{url}{path}", content=data, headers={"content-type": "application/json"}, timeout=WAIT_S)


def assert_error(r, status: int, fragment: str, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert fragment in err["message"] and "Traceback" not in err["message"], err
    if param is not None:
        assert err["param"] == param


LONG = "word " * (2 * N_CTX)


@pytest.mark.parametrize("path, body, fragment, param", [
    ("/v1/completions", b"{bad json", "not valid JSON", None),
    ("/v1/completions", b"", "not valid JSON", None),
    ("/v1/completions", b"[1, 2]", "must be a JSON object", None),
    ("/v1/completions", {"prompt": "x", "bogus": 1}, "Unrecognized request argument supplied: bogus", "bogus"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "10"}, "Invalid value for 'max_tokens'", "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "greater than or equal to 1", "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 10**9}, "more than a slot's whole context", "max_tokens"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 10**30}, "Invalid value for 'max_tokens'", "max_tokens"),
    ("/v1/completions", {"prompt": "x", "n": 5}, "send n requests", "n"),
    ("/v1/completions", {"prompt": "x", "temperature": 50}, "less than or equal to 2", "temperature"),
    ("/v1/completions", {"prompt": "x", "temperature": -1}, "greater than or equal to 0", "temperature"),
    ("/v1/completions", b'{"prompt": "x", "temperature": NaN}', "", "temperature"),
    ("/v1/completions", {"prompt": "x", "stream": "yes"}, "Invalid value for 'stream'", "stream"),
    ("/v1/completions", {"prompt": "x", "logprobs": 3}, "does not implement logprobs", "logprobs"),
    ("/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "Invalid value for 'stop'", "stop"),
    ("/v1/completions", {"prompt": []}, "Invalid value for 'prompt'", "prompt"),
    ("/v1/completions", {"prompt": [1, 50257]}, "below 50257", "prompt"),
    ("/v1/completions", {"prompt": [-1]}, "Invalid value for 'prompt'", "prompt"),
    ("/v1/completions", {"prompt": LONG}, "maximum context length is 256 tokens per slot", "prompt"),
    ("/v1/completions", {}, "'prompt' is a required property", "prompt"),
    ("/v1/chat/completions", {"messages": []}, "Invalid value for 'messages'", "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role", "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}]}, "maximum context length", "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "presence_penalty": 1},
     "does not implement presence_penalty", "presence_penalty"),
    ("/completion", {"prompt": "x", "n_predict": -2}, "Invalid value for 'n_predict'", "n_predict"),
    ("/completion", {"prompt": "x", "seed": -7}, "Invalid value for 'seed'", "seed"),
    ("/completion", {"prompt": "x", "top_p": 2}, "Invalid value for 'top_p'", "top_p"),
])
def test_bad_input_is_a_400_with_openais_error_body(server, path, body, fragment, param):
    r = post(server, path, body, raw=isinstance(body, bytes))
    assert_error(r, 400, fragment, param)
    assert r.json()["error"]["code"] in ("invalid_json", "invalid_type", "invalid_value", "unknown_parameter",
                                         "missing_required_parameter", "context_length_exceeded", None)


def test_unknown_routes_and_methods_are_4xx_naming_the_routes(server):
    assert_error(httpx.get(f"{server}/v2/nothing", timeout=WAIT_S), 404, "/v1/chat/completions")
    assert_error(httpx.get(f"{server}/v1/completions", timeout=WAIT_S), 405, "GET is not allowed")
    r = httpx.post(f"{server}/completion", content=b'{"prompt": "hello", "n_predict": 2}', timeout=WAIT_S,
                   headers={"content-type": "application/x-www-form-urlencoded"})  # curl -d: JSON all the same
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 2


def answers(url) -> None:
    """The server still serves: a good request gets its tokens (asserted after every edge and fuzzed body)."""
    r = post(url, "/completion", {"prompt": [1, 2, 3], "n_predict": 2, "temperature": 0})
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 2, r.text


def first_piece(url, prompt) -> str:
    r = post(url, "/completion", {"prompt": prompt, "n_predict": 1, "temperature": 0, "return_tokens": True})
    return r.json()["content"]


def edge_bodies(url) -> list:
    """Requests at the edges of a slot's life: one token (the slot ends on the prompt's row), a stop string
    hit by the first token, budgets up to the context, a prompt of exactly the context."""
    ids = [(7 * i) % 5000 + 1 for i in range(N_CTX)]
    first = first_piece(url, "Hello there")
    bodies = []
    for stream in (False, True):
        bodies += [
            ("/v1/completions", {"prompt": "Hello there", "max_tokens": 1, "temperature": 0, "stream": stream}, 200),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 1,
                                      "temperature": 0, "stream": stream}, 200),
            ("/completion", {"prompt": "Hello there", "n_predict": 1, "stream": stream}, 200),
            ("/completion", {"prompt": "Hello there", "n_predict": 0, "stream": stream}, 200),
            ("/v1/completions", {"prompt": "Hello there", "stop": [first], "temperature": 0, "stream": stream}, 200),
            ("/v1/completions", {"prompt": ids[:N_CTX - 1], "max_tokens": 1, "stream": stream}, 200),
            ("/v1/completions", {"prompt": ids[:8], "max_tokens": N_CTX - 8, "ignore_eos": True, "temperature": 0,
                                 "stream": stream}, 200),
            ("/v1/completions", {"prompt": ids[:8], "max_tokens": N_CTX, "ignore_eos": True, "stream": stream}, 200),
            ("/v1/completions", {"prompt": ids[:8], "max_tokens": N_CTX + 1, "stream": stream}, 400),
            ("/v1/completions", {"prompt": ids, "max_tokens": 1, "stream": stream}, 400),
        ]
    return bodies


def test_requests_at_the_edges_end_cleanly_and_the_server_still_answers(server):
    for path, body, status in edge_bodies(server):
        r = post(server, path, body)
        assert r.status_code == status, (path, body, r.text[:300])
        if status == 200 and body.get("stream"):
            assert "data: " in r.text and '"error"' not in r.text, (path, body, r.text[-300:])
        answers(server)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(max_size=20), st.lists(st.integers(-5, 60000), max_size=6))
FIELDS = ["prompt", "max_tokens", "n_predict", "temperature", "top_p", "top_k", "min_p", "seed", "n", "stream",
          "stop", "messages", "ignore_eos", "logprobs", "stream_options", "return_tokens", "model", "bogus"]
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "bot"]),
                                           "content": st.one_of(st.text(max_size=30), st.integers())}), max_size=3)
BODIES = st.dictionaries(st.sampled_from(FIELDS), st.one_of(SCALARS, MESSAGES,
                                                            st.dictionaries(st.text(max_size=5), SCALARS, max_size=2)),
                         max_size=7)


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/v1/completions", "/v1/chat/completions", "/completion"]), body=BODIES,
       small=st.sampled_from([0, 1, 1, 2, 8]))
def test_fuzzed_bodies_never_get_a_5xx(server, path, body, small):
    for key in ("max_tokens", "n_predict"):  # valid token budgets are kept small (0 and 1 drawn often): the
        if isinstance(body.get(key), int) and body[key] > small:  # fuzz is of the input
            body[key] = small
    r = post(server, path, body)
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    answers(server)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64))
def test_fuzzed_bytes_never_get_a_5xx(server, raw):
    assert post(server, "/v1/chat/completions", raw, raw=True).status_code == 400


def test_a_client_that_disconnects_mid_stream_frees_its_slot(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=8, parallel=1, n_ctx=4096, threads=1)
    with running(served) as url:
        with httpx.stream("POST", f"{url}/v1/completions", timeout=WAIT_S, json={
                "prompt": "A long story", "max_tokens": 4000, "stream": True, "ignore_eos": True}) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            assert httpx.get(f"{url}/health", timeout=WAIT_S).json()["slots_processing"] == 1
        deadline = time.monotonic() + 5
        while metric(url, "slots_busy") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert metric(url, "slots_busy") == 0 and metric(url, "requests_total", outcome="cancelled") == 1
        assert metric(url, "generated_tokens_total") < 4000  # stopped, not run to the end
        ok = httpx.post(f"{url}/completion", json={"prompt": [1, 2, 3], "n_predict": 4}, timeout=WAIT_S)
        assert ok.status_code == 200 and ok.json()["tokens_predicted"] == 4  # the slot serves again
    served.llm.close()


def test_a_queued_request_whose_client_leaves_is_told_and_counted(tiny_gguf):
    """A job cancelled while it waits for a slot gets its Done (its handler waits for one), once."""
    import numpy as np

    from lookupkit.serve.engine import Done, Job
    from lookupkit.serve.sampling import Sampling

    served = open_server(tiny_gguf, n_draft=0, parallel=1, n_ctx=2048, threads=1, queue=4)
    engine = served.engine
    engine.start()
    got = {"a": [], "b": []}

    def job(name, n):
        return Job(prompt=np.array([1, 2, 3], np.int32), max_tokens=n, sampling=Sampling(temperature=0.0),
                   deliver=got[name].append, ignore_eos=True)

    a, b = job("a", 1500), job("b", 4)
    try:
        engine.submit(a)
        deadline = time.monotonic() + WAIT_S
        while not got["a"] and time.monotonic() < deadline:  # a has the slot
            time.sleep(0.01)
        engine.submit(b)
        engine.cancel(b)
        assert [type(e) for e in got["b"]] == [Done] and got["b"][0].reason == "cancelled"
        engine.cancel(a)
        while not any(isinstance(e, Done) for e in got["a"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(got["a"][-1], Done) and got["a"][-1].reason == "cancelled"
        assert served.metrics.value("requests_total", outcome="cancelled") == 2
        assert len(got["b"]) == 1
    finally:
        engine.close()
        served.llm.close()


def test_sigterm_finishes_or_aborts_in_flight_requests_and_exits_0(tiny_gguf):
    got = {}

    def stream(url, key, n):
        with httpx.stream("POST", f"{url}/v1/completions", timeout=WAIT_S, json={
                "prompt": "Once", "max_tokens": n, "stream": True, "ignore_eos": True}) as r:
            got[key] = [json.loads(line[6:]) if line != "data: [DONE]" else "DONE" for line in r.iter_lines() if line]

    for timeout, n, finished in ((5.0, 200, True), (0.5, 4000, False)):
        with process("-m", tiny_gguf, "-c", 4096, "-t", 1, "--shutdown-timeout", timeout) as (proc, url, lines, rest):
            assert any(line.startswith("  model ") for line in lines) and "ready in" in lines[-2]
            if finished:  # which chat template and why (issue 34): the tiny GGUF has none
                assert any(line.startswith("  chat template: ") and line.endswith(
                    "(ChatML, from the GGUF has no tokenizer.chat_template: llama-server's fallback)") for line in lines)
            t = threading.Thread(target=stream, args=(url, timeout, n))
            t.start()
            deadline = time.monotonic() + WAIT_S
            while metric(url, "generated_tokens_total") < 10 and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout + 10) == 0
            assert time.monotonic() - t0 < timeout + 5
            t.join(WAIT_S)
            assert rest().strip().endswith("lookupkit serve: stopped")
        events = got[timeout]
        assert events[-1] == "DONE"  # both streams end properly: the short one finished, the long one aborted
        if finished:
            assert events[-2]["choices"][0]["finish_reason"] == "length"
        else:
            assert events[-2]["error"]["type"] == "unavailable_error" and "shutting down" in events[-2]["error"]["message"]


def test_start_up_refusals_are_one_line(tiny_gguf, tmp_path):
    import subprocess
    import sys

    cases = [
        (["-m", tiny_gguf, "--draft", "-1"], "--draft must be between 0 (no drafting)"),
        (["-m", tiny_gguf, "--parallel", "0"], "--parallel must be between 1"),
        (["-m", tiny_gguf, "-c", "20", "--parallel", "2"], "-c must be at least 16 per slot"),
        (["-m", tiny_gguf, "-lcs", foreign_static(tmp_path / "qwen2.lkc")], "was built for qwen2"),
        (["-m", tiny_gguf, "--draft", "0", "-lcs", tmp_path / "x.lkc"], "--draft 0 serves without drafting"),
        (["-m", tmp_path / "missing.gguf"], "does not exist"),
        (["-m", tiny_gguf, "--port", "70000"], "--port must be between 0 and 65535"),
    ]
    for args, fragment in cases:
        r = subprocess.run([sys.executable, "-m", "lookupkit", "serve", *map(str, args)], capture_output=True,
                           text=True, timeout=WAIT_S)
        assert r.returncode == 2 and fragment in r.stderr and r.stderr.strip().count("\n") == 0, (args, r.stderr)
