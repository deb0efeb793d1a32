"""`lookupkit serve --learn history`: one History shared by the slots, drafted from and counted per source in
/metrics, kept across a restart through --state (SIGTERM saves it, start-up loads it), nothing kept with
--learn off, and a corrupt or foreign state file refused in one line naming --state-reset. On the tiny
exact-arithmetic model, so outputs are checked equal with and without what was learnt."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

import httpx  # noqa: E402

from lookupkit import History  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import WAIT_S, metric, process, running  # noqa: E402
from tiny_models import tiny_gguf  # noqa: E402,F401

PROMPT = "Prompt lookup decoding drafts tokens from n-gram caches kept by the server."
N = 48


def complete(url: str, prompt: str = PROMPT, n: int = N) -> dict:
    r = httpx.post(f"{url}/completion", json={"prompt": prompt, "n_predict": n, "temperature": 0,
                                              "return_tokens": True, "ignore_eos": True}, timeout=WAIT_S)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("learn", ["off", "history"])
def test_a_repeated_request_drafts_from_the_shared_history_only_when_learning(tiny_gguf, learn):
    served = open_server(tiny_gguf, policy="lookupkit", n_draft=16, parallel=2, n_ctx=2048, threads=1, learn=learn)
    try:
        with running(served) as url:
            first = complete(url)
            again = complete(url)  # the same request again (another slot may serve it: one shared history)
            assert again["tokens"] == first["tokens"]  # drafts never change the output
            hx_drafted, hx_accepted = (metric(url, f"{k}_tokens_total", source="hx") for k in ("drafted", "accepted"))
            if learn == "off":
                assert served.tenants is None and hx_drafted == 0
            else:
                assert hx_accepted > 0 and hx_drafted >= hx_accepted
                assert served.tenants.learnt == 2 and metric(url, "history_tokens") == served.tenants.n_tokens > 0
                assert again["timings"]["draft_n_accepted"] > first["timings"]["draft_n_accepted"]
    finally:
        served.llm.close()


def test_no_draft_runs_past_the_requests_budget(tiny_gguf):
    """A repeat the history knows whole, asked for fewer tokens than it knows: every verify step's rows end where
    the response can still use them (the last emitted token is sampled, never decoded), the first steps drafted
    right up to that limit, and the output is the first run's prefix."""
    batches = []
    served = open_server(tiny_gguf, policy="lookupkit", verify_cost=0.05, n_draft=64, parallel=1, n_ctx=2048,
                         threads=1, learn="history", on_batch=lambda seq, pos, toks, rows: batches.append((pos, toks)))
    try:
        with running(served) as url:
            first = complete(url, n=N)
            start, short = len(batches), N // 3
            again = complete(url, n=short)
    finally:
        served.llm.close()
    assert again["tokens"] == first["tokens"][:short]
    n_prompt = again["timings"]["prompt_n"] + again["timings"].get("cache_n", 0)
    last = n_prompt + short - 2  # the position of the last output token a step decodes
    steps = [(pos, len(toks)) for pos, toks in batches[start:] if pos >= n_prompt]
    assert steps and all(pos + n - 1 <= last for pos, n in steps)
    assert max(pos + n - 1 for pos, n in steps) == last and max(n for _, n in steps) > 2


def test_learn_dynamic_teaches_the_slots_dynamic_cache(tiny_gguf):
    served = open_server(tiny_gguf, n_draft=16, parallel=1, n_ctx=1024, threads=1, learn="dynamic")
    try:
        with running(served) as url:
            first = complete(url)
            assert sum(metric(url, "drafted_tokens_total", source=f"d{n}") for n in range(1, 5)) == 0
            assert complete(url)["tokens"] == first["tokens"]
            assert sum(metric(url, "accepted_tokens_total", source=f"d{n}") for n in range(1, 5)) > 0
    finally:
        served.llm.close()


def test_learnt_state_round_trips_through_a_restart(tiny_gguf, tmp_path):
    state = tmp_path / "served.lkh"
    args = ["-m", tiny_gguf, "--policy", "lookupkit", "--learn", "history", "--state", state, "-c", 1024, "-t", 1,
            "--draft", 16]
    with process(*args, "--save-every", 1) as (proc, url, lines, rest):
        assert any("history" in line and "0 sequences learnt" in line for line in lines)
        first = complete(url)
        assert metric(url, "accepted_tokens_total", source="hx") == 0
        deadline = time.monotonic() + WAIT_S
        while not state.exists():  # --save-every 1: saved after the first request, in a thread of its own
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert History.load(state).learnt == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
        assert f"saved the histories to {state}" in rest()
    saved = History.load(state)
    assert saved.learnt == 1 and saved.n_tokens == len(first["tokens"]) + first["tokens_evaluated"] + 1
    with process(*args) as (proc, url, lines, rest):
        assert any("history" in line and "1 sequences learnt" in line for line in lines)
        again = complete(url)
        assert again["tokens"] == first["tokens"]
        assert metric(url, "accepted_tokens_total", source="hx") > 0  # the first request after the restart
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
    assert History.load(state).learnt == 2


def test_state_refusals_are_one_line(tiny_gguf, tmp_path):
    good = tmp_path / "good.lkh"
    hist = History(4096, vocab="0" * 64)
    hist.learn(np.arange(100))
    hist.save(good)
    corrupt = tmp_path / "corrupt.lkh"
    corrupt.write_bytes(good.read_bytes()[:-9])
    base = ["-m", tiny_gguf, "--policy", "lookupkit"]
    cases = [
        ([*base, "--learn", "history", "--state", corrupt], [str(corrupt), "--state-reset", "truncated"]),
        ([*base, "--learn", "history", "--state", good], [str(good), "--state-reset", "another vocabulary"]),
        ([*base, "--state", good], ["apply to --learn history only"]),
        (["-m", tiny_gguf, "--learn", "history"], ["--policy lookupkit only"]),
        ([*base, "--learn", "history", "--history-budget", "3"], ["--history-budget must be an integer between"]),
        ([*base, "--learn", "history", "--state", tmp_path / "no-such-dir" / "x.lkh"], ["does not exist"]),
    ]
    for args, fragments in cases:
        r = subprocess.run([sys.executable, "-m", "lookupkit", "serve", *map(str, args)], capture_output=True,
                           text=True, timeout=WAIT_S)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, (args, r.stderr)
        assert all(f in r.stderr for f in fragments), (args, r.stderr)
    assert corrupt.read_bytes() == good.read_bytes()[:-9]  # a refused file is left as it was


def test_generate_and_the_draft_model_share_a_history_without_special_cases(tiny_gguf):
    import llama_cpp

    from lookupkit import Drafter
    from lookupkit.integrations.llama_cpp import LookupDraftModel
    from lookupkit.integrations.llama_generate import generate

    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, n_threads_batch=1, verbose=False)
    try:
        prompt = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
        hist = History(4096)
        first = generate(llm, prompt, N, drafter=Drafter(policy="lookupkit", history=hist), n_draft=16,
                         stop_at_eos=False)
        assert hist.learnt == 1 and hist.n_tokens == len(prompt) + N + 1  # learnt at the end of the sequence
        again = generate(llm, prompt, N, drafter=Drafter(policy="lookupkit", history=hist), n_draft=16,
                         stop_at_eos=False)
        assert again.tokens == first.tokens and again.n_accepted > first.n_accepted
        model = LookupDraftModel(policy="lookupkit", history=hist, n_draft=8)
        draft = model(np.array(prompt + first.tokens[:10]))
        assert draft.tolist() == first.tokens[10:10 + len(draft)] and len(draft) > 0
    finally:
        llm.close()
