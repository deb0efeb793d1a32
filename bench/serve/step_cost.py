"""Which verify-cost curve is this machine's: the steps a one-client server really decodes, timed, against curves.

A curve (`lookupkit calibrate`) is measured once, in a loop of its own; the server and `replay-requests` price
every draft by it, so a curve whose long drafts are too cheap makes the policy draft too long and the replay
predict too much. This serves held-out prompts (a generations file: `python -m lookupkit.bench.generations`) at one
client through the serve engine in-process with lookupkit's policy, then with --draft 0, repeat by repeat, times
every llama_decode the engine makes (its model's decode wrapped), and sets the median time of the steps of each
row count, over the same run's median one-row step, beside each curve's cost of that many rows. The summary: the
error of each curve on the policy's verify steps, weighted by their time (what a replay would mispredict).

    python -m lookupkit.bench.serve.step_cost --gens gens.json --curves A.curve.json,B.curve.json -o out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from lookupkit.bench.harness import command, entry, git_state, loadavg, machine, write_text
from lookupkit.errors import InputError


def serve(model: str, prompts: list, n_new: int, threads: int, curve: str | None) -> list[tuple[int, float]]:
    """(rows, seconds) of every decode a one-slot engine makes serving `prompts` one after another (curve None:
    --draft 0)."""
    import numpy as np

    from lookupkit.serve import engine as E
    from lookupkit.serve.sampling import Sampling
    from lookupkit.serve.startup import open_server

    kw = dict(n_draft=0) if curve is None else dict(policy="lookupkit", verify_cost=curve, n_draft=64)
    served = open_server(model, parallel=1, n_ctx=4096, threads=threads, **kw)
    m, steps = served.engine.m, []
    decode = m.decode

    def timed(batch) -> None:
        t = time.perf_counter()
        decode(batch)
        steps.append((int(batch.b.n_tokens), time.perf_counter() - t))

    m.decode = timed
    served.engine.start()
    try:
        for prompt in prompts:
            done = threading.Event()
            served.engine.submit(E.Job(prompt=np.asarray(prompt, np.int32), max_tokens=n_new,
                                       sampling=Sampling(temperature=0), ignore_eos=True,
                                       deliver=lambda ev, done=done: done.set() if isinstance(ev, E.Done) else None))
            done.wait()
    finally:
        served.engine.close()
        served.llm.close()
    return steps


def compare(steps: list, plain: list, curves: dict, max_rows: int = 65) -> dict:
    """Per row count of the policy's verify steps: n, median ms, the measured cost over the plain run's median
    one-row step, and each curve's; and each curve's time-weighted error over those steps."""
    t1 = statistics.median(t for r, t in plain if r == 1)
    by: dict = {}
    for r, t in steps:
        if r <= max_rows:  # a prompt's decode has more rows than any verify step
            by.setdefault(r, []).append(t)
    rows = {r: {"n": len(v), "ms": statistics.median(v) * 1e3, "measured": statistics.median(v) / t1,
                **{name: c.at(r - 1) for name, c in curves.items()}} for r, v in sorted(by.items())}
    total = sum(sum(v) for v in by.values())
    error = {name: sum(sum(v) * (c.at(r - 1) / rows[r]["measured"] - 1) for r, v in by.items()) / total
             for name, c in curves.items()}
    return {"t1_ms": t1 * 1e3, "rows": rows, "error": error}


def run(argv) -> None:
    from lookupkit import models
    from lookupkit.verify_cost import VerifyCost

    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve.step_cost", description=__doc__.split("\n")[0])
    p.add_argument("--gens", type=Path, required=True, help="held-out generations (lookupkit.bench.generations)")
    p.add_argument("--curves", required=True, help="curve files to check (comma-separated); the first drafts")
    p.add_argument("-m", "--model", default="gemma-3-270m")
    p.add_argument("--tasks", default="copy,wiki")
    p.add_argument("--prompts", type=int, default=4, help="prompts of each task per repeat")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("-n", "--n-new", type=int, default=256)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-o", "--output", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        gens = json.loads(a.gens.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{exc}: --gens is a generations JSON file (lookupkit.bench.generations)") from None
    paths = [x for x in a.curves.split(",") if x]
    curves = {Path(x).name: VerifyCost.of(x) for x in paths}  # a missing or bad curve: InputError
    seqs = gens.get("sequences") if isinstance(gens, dict) else None
    if not seqs or a.prompts < 1 or a.repeats < 1:
        raise InputError(f"{a.gens} holds no generations, or --prompts / --repeats below 1")
    model = str(models.resolve(a.model))
    out, load0, t0 = {}, loadavg(), time.time()
    for task in a.tasks.split(","):
        prompts = [s["tokens"][:s["prompt_len"]] for s in seqs if s["task"] == task][:a.prompts]
        if not prompts:
            raise InputError(f"{a.gens} has no {task} prompts")
        runs = []
        for rep in range(a.repeats):
            order = ("policy", "plain") if rep % 2 == 0 else ("plain", "policy")
            got = {name: serve(model, prompts, a.n_new, a.threads, paths[0] if name == "policy" else None)
                   for name in order}
            runs.append(compare(got["policy"], got["plain"], curves))
            print(f"{task} repeat {rep + 1}: one row {runs[-1]['t1_ms']:.1f} ms; error on the policy's steps "
                  + ", ".join(f"{n} {e:+.1%}" for n, e in runs[-1]["error"].items()), flush=True)
        out[task] = runs
    write_text(a.output, json.dumps({"kind": "serve-step-cost", "date": time.strftime("%Y-%m-%d"), "git": git_state(),
                                     "machine": machine(), "command": command("lookupkit.bench.serve.step_cost", argv),
                                     "curves": paths, "loadavg": [load0, loadavg()], "wall_s": time.time() - t0,
                                     "tasks": out}, indent=1))


if __name__ == "__main__":
    entry(run)
