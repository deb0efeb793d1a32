"""The server's life has one owner (serve.lifecycle): stop accepting, finish or abort, the engine thread ended,
the histories saved, the model freed once no handler reads it — in that order, whoever stops it. On Gemma 3
270M, SIGTERM while a long prompt is being decoded ends the process with 0 and no crash."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

import httpx  # noqa: E402

from lookupkit.errors import InputError  # noqa: E402
from lookupkit.serve.config import ServeConfig  # noqa: E402
from lookupkit.serve.engine import Busy  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import WAIT_S, process, running  # noqa: E402
from tiny_models import tiny_gguf  # noqa: E402,F401


def test_close_stops_in_order_and_waits_for_the_models_readers(tiny_gguf):
    """close(): the engine thread has ended before the model is freed, and a handler still tokenizing holds the
    free back; a handler that comes once close() has begun is told the server is stopping (503)."""
    served = open_server(tiny_gguf, n_draft=4, n_ctx=512, threads=1)
    life, order, inside, release = served.life, [], threading.Event(), threading.Event()
    life.start()
    real_close, real_free = served.engine.close, served.llm.close
    served.engine.close = lambda: (real_close(), order.append(("engine", served.engine._thread.is_alive())))
    served.llm.close = lambda: (order.append(("model", None)), real_free())

    def reader():
        return life.reading(lambda: (inside.set(), release.wait(WAIT_S), served.llm.tokenize(b"hi"))[-1])

    t = threading.Thread(target=reader)
    t.start()
    inside.wait(WAIT_S)
    closer = threading.Thread(target=life.close)
    closer.start()
    time.sleep(0.2)
    assert order == [("engine", False)]  # the engine stopped; the model waits for the reader
    with pytest.raises(Busy, match="shutting down"):
        life.reading(lambda: None)
    release.set()
    t.join(WAIT_S)
    closer.join(WAIT_S)
    assert order == [("engine", False), ("model", None)]
    life.close()  # again: nothing
    assert order == [("engine", False), ("model", None)]


def test_every_setting_is_checked_once_in_the_config(tiny_gguf):
    """One frozen ServeConfig: a bad value or combination is one InputError naming the flag, before anything
    opens; an unknown setting too (not a TypeError)."""
    c = ServeConfig(tiny_gguf, n_draft=4)
    with pytest.raises(Exception):
        c.n_draft = 5  # frozen
    for settings, fragment in (
            ({"n_draft": -1}, "--draft must be between 0"), ({"n_draft": True}, "--draft"),
            ({"parallel": 0}, "--parallel must be"), ({"port": 70000}, "--port must be"),
            ({"shutdown_timeout": -1}, "--shutdown-timeout"), ({"learn": "history"}, "--policy lookupkit"),
            ({"n_draft": 0, "lcs": "x.lkc"}, "--draft 0 serves without drafting"),
            ({"state_reset": True}, "apply to --learn history only"), ({"alias": " "}, "--alias is empty")):
        with pytest.raises(InputError, match=fragment):
            ServeConfig(tiny_gguf, **settings)
    with pytest.raises(InputError, match="unknown server setting 'drafts'"):
        open_server(tiny_gguf, drafts=4)


def test_sigterm_during_a_long_prompt_decode_exits_0_without_a_crash(tmp_path):
    """A 4,000-token prompt on Gemma 3 270M decodes in 8 n_batch chunks for seconds; SIGTERM in the
    middle with --shutdown-timeout 0 aborts it: the engine stops at the end of its chunk, then the model is freed,
    and the command exits 0 with its last line; the client's stream ends with an error event."""
    from lookupkit import models

    gemma = models.get("gemma-3-270m")
    needs.module(gemma.module, "pip install 'lookupkit[model]'")
    prompt = [2] + [(i * 7919) % 200000 + 1000 for i in range(4000)]
    with process("-m", "gemma-3-270m", "-c", "4096", "--draft", "0", "--threads", "2", "--shutdown-timeout", "0") as (
            proc, url, _, rest):
        got = []

        def ask():
            try:
                with httpx.stream("POST", f"{url}/completion", timeout=WAIT_S, json={
                        "prompt": prompt, "n_predict": 8, "stream": True}) as r:
                    got.extend(line for line in r.iter_lines() if line)
            except httpx.HTTPError as exc:
                got.append(f"closed: {exc}")

        t = threading.Thread(target=ask)
        t.start()
        time.sleep(0.3)  # the prompt's decode has begun (8 chunks of 512: seconds on 2 cores)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT_S) == 0
        t.join(WAIT_S)
        err = proc.stderr.read()
        assert "Traceback" not in err and "Segmentation" not in err and "Aborted" not in err, err
        assert rest().strip().endswith("lookupkit serve: stopped")
        assert got and ("shutting down" in got[-1] or got[-1].startswith("closed")), got
