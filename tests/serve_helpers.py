"""Servers for the `lookupkit serve` tests, on 127.0.0.1 only: in-process (uvicorn in a thread, a free port)
or a `lookupkit serve` subprocess (--port 0, the port read from its start-up line). Both are always torn
down and every wait is bounded."""

from __future__ import annotations

import contextlib
import queue
import re
import socket
import subprocess
import sys
import threading
import time

WAIT_S = 60.0


@contextlib.contextmanager
def running(served, graceful_s: float = 2.0):
    """The app over `served` on a free port, yielding its base URL; the engine is closed on exit."""
    import uvicorn

    from lookupkit.serve.app import make_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(make_app(served), log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=graceful_s))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the in-process server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()


@contextlib.contextmanager
def process(*args):
    """`lookupkit serve ARGS --port 0` in a subprocess: yields (Popen, base URL, start-up lines, rest) where
    rest() is the rest of its stdout once it has exited."""
    proc = subprocess.Popen([sys.executable, "-m", "lookupkit", "serve", *map(str, args), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put(None)], daemon=True).start()
    seen = []
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"lookupkit serve exited: {proc.wait(WAIT_S)}, {proc.stderr.read()}"
            seen.append(line.rstrip("\n"))
            if m := re.match(r"listening on (http://127\.0\.0\.1:\d+)", line):
                break

        def rest() -> str:
            out = []
            while (line := lines.get(timeout=WAIT_S)) is not None:
                out.append(line)
            return "".join(out)

        yield proc, m.group(1), seen, rest
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(WAIT_S)
        proc.stdout.close()
        proc.stderr.close()


def openai_client(url: str):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=WAIT_S)


def metric(url: str, name: str, **labels) -> float:
    """One sample of /metrics (0 if it has none yet)."""
    import httpx

    tag = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""
    for line in httpx.get(f"{url}/metrics", timeout=WAIT_S).text.splitlines():
        if line.startswith(f"lookupkit_{name}{tag} "):
            return float(line.split()[-1])
    return 0.0
