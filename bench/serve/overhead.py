"""What the HTTP path of `lookupkit serve` costs per token and per request, with the model taken out.

A fake engine in the server process emits events as fast as it can, ONE TOKEN PER EVENT (the real engine
sends one event per verify step, so this is the worst case); the app, uvicorn and the asyncio hand-over
are the real ones. A client in another process (raw sockets: its own parsing stays off the server's
core) reads a stream of --tokens tokens from /v1/completions and /completion, then makes --requests
sequential non-streamed requests. Reported: wall and server-CPU microseconds per streamed token, and
per request, for each HTTP implementation uvicorn has here (h11; httptools if installed).

    python -m lookupkit.bench.serve.overhead [--tokens 20000] [--requests 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

from lookupkit.bench.harness import entry, loadavg

CLIENT = r"""
import json, socket, sys, time
port, path, body, until, n = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode(), int(sys.argv[5])
times = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    t = time.perf_counter()
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    got = b""
    while until not in got[-4096:]:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        got += chunk
    times.append(time.perf_counter() - t)
    s.close()
print(json.dumps({"times": times, "events": got.count(b"data: ")}))
"""


class FakeEngine:
    """The engine's interface to the app; each job gets max_tokens one-token events, then its end."""

    def __init__(self):
        self.slots, self.busy = [None], 0

    def start(self):
        pass

    def close(self):
        pass

    def cancel(self, job):
        job.cancel()

    def submit(self, job):
        from lookupkit.integrations.llama_model import Stop
        from lookupkit.serve.engine import Delta, Done

        def run():
            for i in range(job.max_tokens):
                if job.cancelled:
                    break
                job.deliver(Delta([i % 1000], ["x"]))
            job.deliver(Done(Stop.LENGTH, stats={"prompt_n": len(job.prompt), "cache_n": 0, "prompt_s": 0.0,
                                             "predicted_n": job.max_tokens, "predicted_s": 1.0, "calls": 0,
                                             "drafted": 0, "accepted": 0}))

        threading.Thread(target=run, daemon=True).start()


def measure(http: str, tokens: int, requests: int) -> dict:
    import uvicorn

    from lookupkit.serve.app import make_app
    from lookupkit.serve.metrics import Metrics
    from lookupkit.serve.config import ServeConfig
    from lookupkit.serve.startup import Served

    served = Served(config=ServeConfig("fake"), llm=None, engine=FakeEngine(), metrics=Metrics(), chat=None, model_id="fake", n_vocab=50257,
                    n_ctx_slot=10**9)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(make_app(served), http=http, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = sock.getsockname()[1]

    def client(path, body, until, n):
        cpu = time.process_time()
        out = subprocess.run([sys.executable, "-c", CLIENT, str(port), path, json.dumps(body), until, str(n)],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout), time.process_time() - cpu

    result = {"http": http}
    for name, path, body, until in (
            ("v1_stream", "/v1/completions", {"prompt": [1], "max_tokens": tokens, "stream": True}, "[DONE]"),
            ("completion_stream", "/completion", {"prompt": [1], "n_predict": tokens, "stream": True}, '"stop": true')):
        got, cpu = client(path, body, until, 1)
        assert got["events"] >= tokens, got["events"]
        result[name] = {"us_per_token": 1e6 * got["times"][0] / tokens, "server_cpu_us_per_token": 1e6 * cpu / tokens}
    got, cpu = client("/v1/completions", {"prompt": [1], "max_tokens": 1}, '"usage"', requests)
    times = sorted(got["times"])
    result["request"] = {"median_us": 1e6 * times[len(times) // 2], "server_cpu_us": 1e6 * cpu / requests}
    server.should_exit = True
    thread.join(30)
    sock.close()
    return result


def _main(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve.overhead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=20000, help="tokens in each stream")
    ap.add_argument("--requests", type=int, default=300, help="sequential non-streamed requests")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    import importlib.util

    impls = ["h11"] + (["httptools"] if importlib.util.find_spec("httptools") else [])
    rows = [measure(http, args.tokens, args.requests) for http in impls]
    report = {"tokens": args.tokens, "requests": args.requests, "cpus": os.cpu_count(), "rows": rows,
              "load": loadavg()}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for r in rows:
        print(f"uvicorn {r['http']}: /v1/completions stream {r['v1_stream']['us_per_token']:.1f} us/token "
              f"(server CPU {r['v1_stream']['server_cpu_us_per_token']:.1f}), /completion stream "
              f"{r['completion_stream']['us_per_token']:.1f} us/token "
              f"(server CPU {r['completion_stream']['server_cpu_us_per_token']:.1f}); non-streamed request "
              f"{r['request']['median_us']:.0f} us median (server CPU {r['request']['server_cpu_us']:.0f})")
    print(f"load average {report['load'][0]:.2f}, {report['cpus']} CPUs")


def main(argv=None) -> None:
    entry(_main, argv)


if __name__ == "__main__":
    main()
