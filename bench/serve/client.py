"""One client for both servers: llama-server's /completion on token ids, streamed, greedy.

Both servers take the same body (greedy as `temperature` 0 with `top_k` 1, exactly `n_predict` tokens
with `ignore_eos`, no prompt reuse unless `cache_prompt`: the conversations' sessions reuse) and answer with
server-sent events whose `tokens` carry the ids and whose last event (`stop`: true) carries `timings`
(`predicted_n`, `draft_n`, `draft_n_accepted`; `cache_n` prompt tokens a slot's cache held, `prompt_n` those
decoded). The
client times what a user sees: time to the first generated token (TTFT) and to the last event (wall).
http.client and one connection per request: the same client code and cost on both sides.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

from lookupkit.errors import InputError


def body(prompt_ids: list[int], n_predict: int, cache_prompt: bool = False) -> dict:
    return {"prompt": [int(t) for t in prompt_ids], "n_predict": int(n_predict), "temperature": 0.0,
            "top_k": 1, "ignore_eos": True, "cache_prompt": cache_prompt, "return_tokens": True, "stream": True}


def complete(port: int, prompt_ids: list[int], n_predict: int, cache_prompt: bool = False,
             timeout: float = 600.0) -> dict:
    """One streamed greedy /completion: tokens, ttft_s, wall_s, and the server's own counters."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    payload = json.dumps(body(prompt_ids, n_predict, cache_prompt)).encode()
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/completion", payload, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise InputError(f"/completion on port {port} answered {resp.status}: {resp.read()[:300]!r}")
        tokens, ttft, final = [], None, None
        for event in _events(resp):
            got = event.get("tokens") or []
            if got and ttft is None:
                ttft = time.perf_counter() - t0
            tokens += got
            if event.get("stop"):
                final = event
                break
        wall = time.perf_counter() - t0
    finally:
        conn.close()
    if final is None:
        raise InputError(f"/completion on port {port} ended its stream without a last event")
    t = final.get("timings") or {}
    return {"tokens": [int(x) for x in tokens], "n_gen": len(tokens), "ttft_s": ttft, "wall_s": wall,
            "t_prompt_s": float(t.get("prompt_ms", 0.0)) / 1e3, "t_gen_s": float(t.get("predicted_ms", 0.0)) / 1e3,
            "drafted": t.get("draft_n"), "accepted": t.get("draft_n_accepted"), "cache_n": t.get("cache_n"),
            "prompt_n": t.get("prompt_n")}


def _events(resp):
    """The JSON objects of an SSE stream's `data:` lines (llama-server and lookupkit both send one per line)."""
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        event = json.loads(data)
        if "error" in event:
            raise InputError(f"the server sent an error event: {event['error']}")
        yield event


def pool(items: list, clients: int, job) -> tuple[list, float]:
    """`clients` threads take the items in order from one list, each starting its next item when its last one
    finished: job(item)'s results in the items' order, and the wall time from the first start to the last end.
    Every item is done or the run fails (nothing is lost silently)."""
    todo = list(enumerate(items))
    lock = threading.Lock()
    done, errors = {}, []

    def worker():
        while True:
            with lock:
                if not todo or errors:
                    return
                i, item = todo.pop(0)
            try:
                done[i] = job(item)
            except Exception as exc:  # noqa: BLE001 - reported below as the run's failure
                errors.append(f"item {i}: {exc}")

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    if errors:
        raise InputError(f"{len(errors)} of {len(items)} failed at {clients} clients: {errors[0]}")
    return [done[i] for i in range(len(items))], wall


def concurrent(port: int, prompts: list[list[int]], n_predict: int, clients: int) -> dict:
    """`clients` clients (pool) send the prompts: aggregate tokens/s = all tokens / the pool's wall time."""
    runs, wall = pool(prompts, clients, lambda ids: complete(port, ids, n_predict))
    total = sum(r["n_gen"] for r in runs)
    return {"clients": clients, "requests": len(runs), "tokens": total, "wall_s": wall, "tok_per_s": total / wall,
            "ttft_s": [r["ttft_s"] for r in runs], "runs": runs}
