"""Replacing `lookupkit serve`'s -lcs cache while it runs: SIGHUP (or POST /static/reload) opens the file again
and each slot drafts from it from its next request on, exactly as a server started with the new file does;
a request in flight finishes on the mapping it began with; a file that fails its checks is refused in one log
line and the old mapping stays."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

from lookupkit import Tokenizer  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import WAIT_S, process, running  # noqa: E402
from tiny_models import README, static_from_text, tiny_gguf  # noqa: E402,F401

PROMPT = "Prompt lookup decoding drafts tokens from n-gram caches kept by the server."
N = 96


def ask(url) -> tuple:
    r = httpx.post(f"{url}/completion", json={"prompt": PROMPT, "n_predict": N, "temperature": 0, "ignore_eos": True,
                                              "return_tokens": True, "cache_prompt": False}, timeout=WAIT_S).json()
    return r["tokens"], r["timings"].get("draft_n", 0), r["timings"].get("draft_n_accepted", 0)


@pytest.fixture(scope="module")
def caches(tiny_gguf, tmp_path_factory):
    """Two caches a request drafts differently from: one of unrelated text, one that holds its answer."""
    d = tmp_path_factory.mktemp("reload")
    old = static_from_text("An unrelated text about something else entirely.\n" * 20, d / "old.lkc")
    served = open_server(tiny_gguf, n_draft=8, threads=1, n_ctx=1024)
    try:
        with running(served) as url:
            tokens, _, _ = ask(url)
    finally:
        served.llm.close()
    new = static_from_text((PROMPT + Tokenizer.default().decode(tokens) + "\n") * 3, d / "new.lkc")
    counts = {}
    for name, path in (("old", old), ("new", new)):
        served = open_server(tiny_gguf, lcs=path, n_draft=8, threads=1, n_ctx=1024)
        try:
            with running(served) as url:
                counts[name] = ask(url)
        finally:
            served.llm.close()
    assert counts["old"][1:] != counts["new"][1:], "the two caches must draft differently, or nothing is tested"
    return d, old, new, counts


def test_sighup_drafts_from_the_replaced_file_as_a_fresh_server_does(tiny_gguf, caches):
    d, old, new, counts = caches
    live = d / "live.lkc"
    live.write_bytes(old.read_bytes())
    with process("-m", tiny_gguf, "-lcs", live, "-c", 1024, "-t", 1) as (proc, url, lines, rest):
        assert ask(url) == counts["old"]
        os.replace(_copy(new, d / "next.lkc"), live)  # as a new cache is put in place: a rename
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + WAIT_S
        while ask(url) != counts["new"]:
            assert time.monotonic() < deadline, "the server never drafted from the replaced file"
            time.sleep(0.2)
        (d / "bad.lkc").write_bytes(b"LKC0 not a cache at all" * 10)
        os.replace(d / "bad.lkc", live)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert ask(url) == counts["new"]  # the refused file changed nothing
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
        log = proc.stderr.read()
    assert log.count("SIGHUP: static cache") == 1 and "the server drafts from the cache it had" in log
    assert "Traceback" not in log


def _copy(src, dst):
    dst.write_bytes(src.read_bytes())
    return dst


def test_a_request_in_flight_finishes_on_the_old_mapping(tiny_gguf, caches):
    from lookupkit import StaticCache

    d, old, new, counts = caches
    served = open_server(tiny_gguf, lcs=old, n_draft=8, threads=1, n_ctx=1024)
    try:
        with running(served) as url:
            with httpx.stream("POST", f"{url}/completion", timeout=WAIT_S, json={
                    "prompt": PROMPT, "n_predict": N, "temperature": 0, "ignore_eos": True, "stream": True,
                    "cache_prompt": False}) as r:
                lines = (x for x in r.iter_lines() if x)
                next(lines)
                served.engine.swap_static(StaticCache.open(new))
                last = [json.loads(x[6:]) for x in lines][-1]
            assert (last["timings"].get("draft_n", 0), last["timings"].get("draft_n_accepted", 0)) == counts["old"][1:]
            assert ask(url) == counts["new"]
            assert httpx.post(f"{url}/static/reload", timeout=WAIT_S).status_code == 403  # no --api-key
    finally:
        served.llm.close()
