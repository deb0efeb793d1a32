"""Which verify-cost curve is this machine's: the steps a one-client server really decodes, timed, against curves.

A curve (`lookupkit calibrate`) is measured once, in a loop of its own; the server and `replay-requests` price
every draft by it, so a curve whose long drafts are too cheap makes the policy draft too long and the replay
predict too much. Each repeat serves held-out prompts (a generations file: `python -m lookupkit.bench.generations`)
at one client through the serve engine in-process, once with lookupkit's policy drafting by the first curve and once
with --draft 0 (the order alternating by repeat), times every decoding step the engine makes (its model's decode
wrapped; prompt decodes and the warm-up left out), and sets the median time of the policy's steps of each row count,
over the --draft 0 run's median one-row step, beside each curve's cost of that many rows; per repeat, each curve's
error on the policy's steps weighted by their time (negative: the curve under-prices them, so a replay predicts
too much).

    python -m lookupkit.bench.serve.step_cost --gens gens.json --curves A.curve.json,B.curve.json -o out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from lookupkit.bench.harness import command, entry, git_state, loadavg, machine, write_text
from lookupkit.bench.serve.fairness import N_CTX, complete, ended_early, prompts_by_task
from lookupkit.errors import InputError

N_DRAFT = 64  # the policy's --draft: a curve checked here must reach it


def serve(model: str, prompts: list, n_new: int, threads: int, curve: str | None) -> list[tuple[int, float]]:
    """(rows, seconds) of every decoding step a one-slot engine makes serving `prompts` one after another (curve
    None: --draft 0); a failed request is an error, not fewer timings."""
    from lookupkit.serve.startup import open_server

    kw = dict(n_draft=0) if curve is None else dict(policy="lookupkit", verify_cost=curve, n_draft=N_DRAFT)
    served = open_server(model, parallel=1, n_ctx=N_CTX, threads=threads, **kw)
    m, slots, steps, why = served.engine.m, served.engine.slots, [], None
    decode = m.decode

    def timed(batch) -> None:  # a step: a slot serving, none feeding a prompt (the warm-up has no job)
        step = any(s.job is not None for s in slots) and not any(s.feeding for s in slots)
        t = time.perf_counter()
        decode(batch)
        if step:
            steps.append((int(batch.b.n_tokens), time.perf_counter() - t))

    m.decode = timed
    served.engine.start()
    try:
        for prompt in prompts:
            why = complete(served.engine, prompt, n_new)
            if why is not None:
                break
    finally:
        served.engine.close()
        served.llm.close()
    if why is not None:
        raise ended_early(why)
    return steps


def compare(steps: list, plain: list, curves: dict) -> dict:
    """Per row count of the policy's steps: n, median ms, the measured cost over the plain run's median one-row
    step, and each curve's; and each curve's time-weighted error over those steps."""
    t1 = statistics.median(t for r, t in plain if r == 1)
    by: dict = {}
    for r, t in steps:
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
    if a.prompts < 1 or a.repeats < 1 or a.n_new < 2:
        raise InputError("--prompts and --repeats must be 1 or more, --n-new 2 or more")
    paths = list(dict.fromkeys(x for x in a.curves.split(",") if x))
    if not paths:
        raise InputError("--curves names no curve file: give one or more (lookupkit calibrate -o CURVE.json)")
    curves = {x: VerifyCost.of(x) for x in paths}  # a missing or bad curve: InputError
    short = [x for x, c in curves.items() if not c.at(N_DRAFT) < float("inf")]
    if short:
        raise InputError(f"{short[0]} stops short of k = {N_DRAFT}: calibrate with --max-k {N_DRAFT}")
    tasks = a.tasks.split(",")
    if not tasks or any(t not in ("wiki", "copy") for t in tasks):
        raise InputError(f"--tasks {a.tasks!r}: it takes wiki and/or copy (comma-separated), the generations' tasks")
    try:
        gens = json.loads(a.gens.read_text())
        by = prompts_by_task(gens)
    except (OSError, ValueError) as exc:
        raise InputError(f"{exc}: --gens is a generations JSON file (lookupkit.bench.generations)") from None
    except (KeyError, TypeError, AttributeError):
        raise InputError(f"{a.gens} holds no generations: make it with lookupkit.bench.generations") from None
    empty = [t for t in tasks if not by[t]]
    if empty:
        raise InputError(f"{a.gens} has no {empty[0]} prompts: make it with lookupkit.bench.generations --tasks "
                         "wiki,copy")
    model = str(models.resolve(a.model))
    out, load0, t0 = {}, loadavg(), time.time()
    for task in tasks:
        prompts = by[task][:a.prompts]
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
