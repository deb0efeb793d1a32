"""What the pace floor (verify_cost.StepPricer.FLOOR) does at 4 clients, on prompts nobody tuned on.

In-process (the serve engine in threads, no HTTP): 4 closed-loop clients send held-out prompts (a generations file
of WikiText-103 test paragraphs: `python -m lookupkit.bench.generations`) to a 4-slot engine, once per variant
(--draft 0, and the policy with each --floors value), the variants alternated set by set. --mode fixed gives each
client its own list, as a conversation is (the slowest client sets the wall time); pool lets every client take the
next prompt of one list (the serving bench's concurrency part). --mix mixed gives client 0 the copy prompts and the
others prose: one slot whose long drafts make every step dearer for the rest. Per run: the wall time, every
request's time and each client's; the summary pools the sets (tok/s = all tokens / all wall time).

    python -m lookupkit.bench.generations -m gemma-3-270m -o gens.json --prompts 32 --tasks wiki,copy -n 256 --seed 13
    python -m lookupkit.bench.serve.fairness --gens gens.json --mix mixed --mode fixed --sets 0,1,2 -o out.json
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import threading
import time
from pathlib import Path

from lookupkit.bench.harness import command, entry, git_state, machine, write_text
from lookupkit.bench.serve.run import CURVE
from lookupkit.errors import InputError

CLIENTS, PER_CLIENT = 4, 2  # each set: 4 clients x 2 prompts
N_CTX = 4096  # the in-process engines' context (all slots)


def prompts_by_task(gens: dict) -> dict:
    """{task: its prompts, in the file's order} of a generations file (wiki and copy)."""
    return {t: [s["tokens"][:s["prompt_len"]] for s in gens["sequences"] if s["task"] == t] for t in ("wiki", "copy")}


def client_lists(by: dict, mix: str, index: int) -> list[list]:
    """Set `index`'s prompts (`by`: prompts_by_task), a list per client: their tasks by --mix, consecutive
    paragraphs."""
    out = []
    for c in range(CLIENTS):
        task = mix if mix != "mixed" else ("copy" if c == 0 else "wiki")
        if not by[task]:
            raise InputError(f"the generations file has no {task} prompts: make it with --tasks wiki,copy")
        start = (index * CLIENTS + c) * PER_CLIENT
        out.append([by[task][(start + j) % len(by[task])] for j in range(PER_CLIENT)])
    return out


def complete(engine, prompt, n_new: int) -> str | None:
    """Serve one greedy request of n_new tokens through an in-process engine and wait for its end; why it ended
    early, or None."""
    import numpy as np

    from lookupkit.serve import engine as E
    from lookupkit.serve.sampling import Sampling

    done, why = threading.Event(), []

    def deliver(event) -> None:
        if isinstance(event, E.Done):
            if event.reason != E.Stop.LENGTH:
                why.append(event.message or event.reason.value)
            done.set()

    engine.submit(E.Job(prompt=np.asarray(prompt, np.int32), max_tokens=n_new, sampling=Sampling(temperature=0),
                        ignore_eos=True, deliver=deliver))
    done.wait()
    return why[0] if why else None


def ended_early(why: str) -> InputError:
    return InputError(f"a request ended early ({why}): its timings would not be a whole request's; lower --n-new or "
                      f"give shorter prompts (the engine's context is {N_CTX} tokens)")


def serve_set(model: str, floor: tuple | None, lists: list[list], mode: str, n_new: int, threads: int) -> dict:
    """One engine (floor None: --draft 0, else (FLOOR, CREDIT or None: the class's)), the clients' lists through it;
    times in seconds."""
    from lookupkit.serve.startup import open_server

    kw = dict(n_draft=0) if floor is None else dict(policy="lookupkit", verify_cost=str(CURVE), n_draft=64)
    served = open_server(model, parallel=CLIENTS, n_ctx=N_CTX, threads=threads, **kw)
    if floor is not None:
        served.engine.pricer.FLOOR = floor[0]
        if floor[1] is not None:
            served.engine.pricer.CREDIT = floor[1]
    served.engine.start()  # its own pricer's floor and credit set above; the class constants are untouched
    shared = queue.SimpleQueue()
    for prompt in (p for lst in lists for p in lst):
        shared.put(prompt)
    requests, per_client, failed = [], [0.0] * CLIENTS, []

    def client(c: int) -> None:
        t0, mine = time.perf_counter(), list(lists[c])
        while True:
            if mode == "fixed":
                if not mine:
                    break
                prompt = mine.pop(0)
            else:
                try:
                    prompt = shared.get_nowait()
                except queue.Empty:
                    break
            t = time.perf_counter()
            why = complete(served.engine, prompt, n_new)
            requests.append(time.perf_counter() - t)
            if why is not None:
                failed.append(why)
        per_client[c] = time.perf_counter() - t0

    t0 = time.perf_counter()
    workers = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    served.engine.close()
    served.llm.close()
    if failed:
        raise ended_early(failed[0])
    return {"wall_s": wall, "requests_s": requests, "clients_s": per_client}


def variant(text: str) -> tuple:
    """(FLOOR, CREDIT or None) of one --floors item, FLOOR or FLOOR:CREDIT; ValueError if it is neither."""
    floor, colon, credit = text.partition(":")
    f, c = float(floor), float(credit) if colon else None
    if not 0 <= f < 1.5 or (c is not None and not (math.isfinite(c) and c >= 0)):
        raise ValueError(text)
    return f, c


def label(floor: tuple | None) -> str:
    """A variant's name: plain, floor F, or floor F credit C."""
    return "plain" if floor is None else f"floor {floor[0]:g}" + (f" credit {floor[1]:g}" if floor[1] is not None else "")


def run(argv) -> None:
    from lookupkit import models

    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve.fairness", description=__doc__.split("\n")[0])
    p.add_argument("--gens", type=Path, required=True, help="held-out generations (lookupkit.bench.generations)")
    p.add_argument("-m", "--model", default="gemma-3-270m")
    p.add_argument("--floors", default="0,0.8", help="StepPricer.FLOOR values to serve with (comma-separated), each "
                   "FLOOR or FLOOR:CREDIT")
    p.add_argument("--mix", choices=("mixed", "wiki", "copy"), default="mixed")
    p.add_argument("--mode", choices=("fixed", "pool"), default="fixed")
    p.add_argument("--sets", default="0,1,2", help="which sets of 8 prompts (comma-separated indexes)")
    p.add_argument("--no-plain", action="store_true", help="leave out the --draft 0 engine")
    p.add_argument("-n", "--n-new", type=int, default=256)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-o", "--output", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        floors = [variant(x) for x in a.floors.split(",")]
        sets = [int(x) for x in a.sets.split(",")]
    except ValueError:
        raise InputError(f"--floors {a.floors!r}, --sets {a.sets!r}: each floor is FLOOR or FLOOR:CREDIT, FLOOR in "
                         "[0, 1.5) and CREDIT a number of tokens >= 0; sets are integers") from None
    try:
        gens = json.loads(a.gens.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{exc}: --gens is a generations JSON file (lookupkit.bench.generations)") from None
    if not isinstance(gens, dict) or not gens.get("sequences"):
        raise InputError(f"{a.gens} holds no generations: make it with lookupkit.bench.generations")
    model = str(models.resolve(a.model))
    variants = ([] if a.no_plain else [None]) + floors
    by, runs = prompts_by_task(gens), []
    for i, index in enumerate(sets):
        lists = client_lists(by, a.mix, index)
        for floor in variants if i % 2 == 0 else variants[::-1]:
            r = serve_set(model, floor, lists, a.mode, a.n_new, a.threads)
            name = label(floor)
            runs.append({"set": index, "floor": None if floor is None else floor[0], "variant": name, **r})
            n = CLIENTS * PER_CLIENT * a.n_new
            print(f"set {index} {name:10s} {n / r['wall_s']:6.1f} tok/s, slowest request {max(r['requests_s']):5.1f} s,"
                  f" clients {' '.join(f'{x:.1f}' for x in r['clients_s'])} s", flush=True)
    summary = {}
    for floor in variants:
        mine = [r for r in runs if r["variant"] == label(floor)]
        summary[label(floor)] = {
            "tok_per_s": CLIENTS * PER_CLIENT * a.n_new * len(mine) / sum(r["wall_s"] for r in mine),
            "slowest_request_s_mean": sum(max(r["requests_s"]) for r in mine) / len(mine)}
    for name, s in summary.items():
        print(f"{name:10s} {s['tok_per_s']:6.1f} tok/s pooled, slowest request {s['slowest_request_s_mean']:.1f} s "
              f"(mean over sets)")
    write_text(a.output, json.dumps({"kind": "serve-fairness", "date": time.strftime("%Y-%m-%d"), "git": git_state(),
                                     "machine": machine(), "command": command("lookupkit.bench.serve.fairness", argv),
                                     "curve": str(CURVE), "gens": {k: v for k, v in gens.items() if k != "sequences"},
                                     "mix": a.mix,
                                     "mode": a.mode, "runs": runs, "summary": summary}, indent=1))


if __name__ == "__main__":
    entry(run)
