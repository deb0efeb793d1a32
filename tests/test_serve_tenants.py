"""`lookupkit serve` with tenants (issue 30): a request drafts only from what its own tenant was served (its
API key's, else its body's `user`'s), so another tenant's counts are a fresh server's, while --learn-scope
global shares on purpose; API keys (401 in OpenAI's body, /health open, keys never in logs, state files or
/metrics); the tenants kept stay within the budget whatever `user` strings arrive. On the tiny
exact-arithmetic model, one slot, one thread."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

import httpx  # noqa: E402

from lookupkit.serve.startup import open_server  # noqa: E402
from lookupkit.serve.tenants import tenant_id  # noqa: E402
from serve_helpers import WAIT_S, metric, process, running  # noqa: E402
from tiny_models import tiny_gguf  # noqa: E402,F401

TEXT = "Prompt lookup decoding drafts tokens from n-gram caches kept by the server, for each tenant apart."
N = 48
KEYS = ("sk-tenant-a-0123456789", "sk-tenant-b-9876543210")


def complete(url: str, user: str | None = None, key: str | None = None, path: str = "/completion") -> dict:
    body = {"prompt": TEXT, "temperature": 0, "ignore_eos": True}
    body.update({"n_predict": N} if path == "/completion" else {"max_tokens": N})
    if user is not None:
        body["user"] = user
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    r = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=WAIT_S)
    assert r.status_code == 200, r.text
    return r.json()


def counts(reply: dict) -> tuple[int, int]:
    timings = reply["timings"]
    return timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)


def serve(tiny_gguf, **kw):
    return open_server(tiny_gguf, policy="lookupkit", n_draft=16, parallel=1, n_ctx=1024, threads=1, learn="history",
                       **kw)


@pytest.fixture(scope="module")
def fresh(tiny_gguf):
    """B's request on a server that has served nothing: what B must get wherever A was served before."""
    served = serve(tiny_gguf)
    try:
        with running(served) as url:
            return counts(complete(url, user="bob"))
    finally:
        served.llm.close()


@pytest.mark.parametrize("scope", ["tenant", "global"])
def test_a_tenant_drafts_only_from_what_it_was_served(tiny_gguf, fresh, scope):
    served = serve(tiny_gguf, learn_scope=scope)
    try:
        with running(served) as url:
            first = complete(url, user="alice")
            retry = complete(url, user="alice")
            assert retry["content"] == first["content"]  # drafts never change the output
            assert counts(first) == fresh  # alice's first request: nothing learnt yet, in either scope
            assert counts(retry)[1] > fresh[1] + N // 8  # her retry drafts (and has accepted) what she was served
            hx = metric(url, "accepted_tokens_total", source="hx")
            assert hx > 0
            other = complete(url, user="bob")
            assert other["content"] == first["content"]
            if scope == "tenant":
                assert counts(other) == fresh  # bob learns nothing of alice's text, not even by its timing
                assert metric(url, "accepted_tokens_total", source="hx") == hx
                assert len(served.tenants) == 2 and metric(url, "history_tenants") == 2
            else:
                assert counts(other)[1] > fresh[1] + N // 8  # one shared History: the leak tenants close
                assert len(served.tenants) == 1
            assert metric(url, "history_tokens") == served.tenants.n_tokens
    finally:
        served.llm.close()


def test_each_api_key_is_a_tenant_and_the_user_field_does_not_cross_it(tiny_gguf, fresh):
    served = serve(tiny_gguf, api_keys=KEYS)
    try:
        with running(served) as url:
            complete(url, user="bob", key=KEYS[0])
            assert counts(complete(url, user="bob", key=KEYS[0], path="/completion"))[1] > fresh[1]
            assert counts(complete(url, user="bob", key=KEYS[1])) == fresh  # same user field, another key
            r = httpx.post(f"{url}/v1/completions", json={"prompt": TEXT, "max_tokens": 4, "user": "u"},
                           headers={"Authorization": f"Bearer {KEYS[1]}"}, timeout=WAIT_S)
            assert r.status_code == 200
            assert sorted(t.id for t in served.tenants.snapshot()) == sorted(tenant_id(key=k) for k in KEYS)
    finally:
        served.llm.close()


def test_the_tenants_kept_stay_within_the_budget_whatever_users_arrive(tiny_gguf):
    served = serve(tiny_gguf, history_budget=4096, tenant_budget=1024)
    try:
        with running(served) as url:
            for i in range(7):
                r = httpx.post(f"{url}/v1/completions", json={"prompt": TEXT, "max_tokens": 2, "user": f"u{i}" * 500},
                               timeout=WAIT_S)
                assert r.status_code == 200, r.text
                assert len(served.tenants) == min(i + 1, 4)
            assert served.tenants.dropped == 3 and metric(url, "history_tenants") == 4
            kept = [t.id for t in served.tenants.snapshot()]
            assert kept == [tenant_id(user=f"u{i}" * 500) for i in range(3, 7)]  # the least recently used went first
            assert sum(t.budget for t in served.tenants.snapshot()) <= 4096
    finally:
        served.llm.close()


def test_api_keys_close_every_route_but_health(tiny_gguf, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"\n{KEYS[1]}\n")
    state = tmp_path / "served.lkh"
    args = ["-m", tiny_gguf, "--policy", "lookupkit", "--learn", "history", "--state", state, "-c", 1024, "-t", 1,
            "--api-key", KEYS[0], "--api-key-file", keys]
    with process(*args) as (proc, url, lines, rest):
        assert httpx.get(f"{url}/health", timeout=WAIT_S).status_code == 200
        for path, method in [("/v1/models", "GET"), ("/metrics", "GET"), ("/completion", "POST"),
                             ("/v1/chat/completions", "POST"), ("/no-such-route", "GET")]:
            for headers in [{}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": f"Basic {KEYS[0]}"},
                            {"Authorization": f"Bearer {KEYS[0]}x"}]:
                r = httpx.request(method, f"{url}{path}", headers=headers, json={}, timeout=WAIT_S)
                assert r.status_code == 401, (path, headers, r.text)
                error = r.json()["error"]
                assert set(error) == {"message", "type", "param", "code"} and error["code"] == "invalid_api_key"
                assert "Authorization: Bearer" in error["message"] and "sk-" not in error["message"]
        for key in KEYS:  # one given on the command line, one read from the file
            assert complete(url, user="someone", key=key)["content"]
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {KEYS[0]}"},
                         timeout=WAIT_S).status_code == 200
        text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEYS[0]}"}, timeout=WAIT_S).text
        assert 'outcome="unauthorized"' in text and "someone" not in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
        out = "\n".join(lines) + rest() + proc.stderr.read()
    saved = state.read_bytes()
    for secret in [*KEYS, "someone"]:  # neither the keys nor the user string, anywhere
        assert secret not in out and secret not in text and secret.encode() not in saved
    assert tenant_id(key=KEYS[0]).encode() in saved and tenant_id(key=KEYS[1]).encode() in saved


def test_key_file_refusals_are_one_line(tiny_gguf, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    base = ["-m", tiny_gguf]
    cases = [([*base, "--api-key-file", empty], [str(empty), "holds no key"]),
             ([*base, "--api-key-file", tmp_path / "missing.txt"], ["missing.txt", "does not exist"]),
             ([*base, "--api-key", ""], ["--api-key is empty"]),
             ([*base, "--policy", "lookupkit", "--learn", "history", "--learn-scope", "all"], ["--learn-scope must"]),
             ([*base, "--policy", "lookupkit", "--learn", "history", "--history-budget", 4096, "--tenant-budget",
               8192], ["--tenant-budget 8,192 is more than"]),
             ([*base, "--tenant-budget", 1024], ["apply to --learn history only"])]
    for args, fragments in cases:
        r = subprocess.run([sys.executable, "-m", "lookupkit", "serve", *map(str, args)], capture_output=True,
                           text=True, timeout=WAIT_S)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, (args, r.stderr)
        assert all(f in r.stderr for f in fragments), (args, r.stderr)


def test_a_replica_started_from_the_fleets_merged_state_drafts_what_the_fleet_served(tiny_gguf, fresh, tmp_path):
    from lookupkit.serve.state import merge_states

    states = []
    for user in ("alice", "bob"):  # two replicas, each served one tenant
        states.append(tmp_path / f"{user}.lkh")
        served = serve(tiny_gguf, state=states[-1])
        try:
            with running(served) as url:
                complete(url, user=user)
            served.keeper.close()
        finally:
            served.llm.close()
    merge_states(states, tmp_path / "fleet.lkh")
    served = serve(tiny_gguf, state=tmp_path / "fleet.lkh")
    try:
        with running(served) as url:
            for user in ("alice", "bob", "carol"):
                drafted, accepted = counts(complete(url, user=user))
                if user == "carol":  # served by neither replica: nothing of the others' text
                    assert (drafted, accepted) == fresh
                else:
                    assert accepted > fresh[1] + N // 8
    finally:
        served.llm.close()
