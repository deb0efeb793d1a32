"""What one server step costs as its slots lay out their rows, with a KV stream per sequence and with one pool.

llama.cpp decodes a batch over per-sequence KV streams (llama-server's default with `-np N`) in ubatches of
consecutive sequence ids that each give the same number of tokens: a step whose slots draft different
lengths, or whose busy slots are not 0..n-1 in order, is several passes over the weights. A unified pool
(`--kv-unified`, what `lookupkit serve` opens) decodes any batch in one. This times one llama_decode of each
layout (rows per sequence, all after `--position` tokens, logits on every row) in both, alternating the two
contexts round by round so drift hits both alike; the median, min and max over the rounds' repetitions.

    python -m lookupkit.bench.serve.kv_layout [-m MODEL] [--rounds 3] [--reps 8] [-o RESULTS.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from lookupkit.bench.harness import command, entry, git_state, loadavg, machine, spread, write_text
from lookupkit.errors import InputError

LAYOUTS = {  # rows each of 4 sequences decodes in the step (0: that slot is idle)
    "plain, 4 slots": (1, 1, 1, 1),
    "plain, slots 0 and 2": (1, 0, 1, 0),
    "one slot drafts 16": (17, 1, 1, 1),
    "two slots draft 16 and 5": (17, 1, 6, 1),
    "all draft 8": (9, 9, 9, 9),
    "one slot drafts 32": (33, 1, 1, 1),
    "one slot alone, plain": (1, 0, 0, 0),
    "one slot alone drafts 16": (17, 0, 0, 0),
}
SLOTS = 4


def measure(model: str, unified: bool, position: int, reps: int, seed: int) -> dict:
    """{layout: [ms of each repetition]} in a fresh context of SLOTS sequences (unified or one stream each)."""
    from lookupkit.integrations.llama_model import Batch, Model, _replace_context, open_model

    llm = open_model(model, n_ctx=SLOTS * 1024, threads=2, parallel=SLOTS, n_batch=512)  # a stream per sequence
    try:
        if unified:
            _replace_context(llm, SLOTS * 1024, SLOTS, 512, 512, unified=True)
        m = Model(llm)
        b = Batch(m.lib, 512)
        rng = np.random.default_rng(seed)
        for s in range(SLOTS):
            b.clear()
            b.add(rng.integers(1000, 20000, position).astype(np.int32), 0, 1, s)
            m.decode(b)
        out = {name: [] for name in LAYOUTS}
        for rep in range(reps + 1):  # the first sweep warms up and is not kept
            for name, rows in LAYOUTS.items():
                b.clear()
                for s, n in enumerate(rows):
                    if n:
                        m.forget_from(position, s)
                        b.add(rng.integers(1000, 20000, n).astype(np.int32), position, n, s)
                t = time.perf_counter()
                m.decode(b)
                for j in range(sum(rows)):
                    np.argmax(m.row(j))
                if rep:
                    out[name].append(1e3 * (time.perf_counter() - t))
        b.free()
    finally:
        llm.close()
    return out


def run(argv) -> None:
    from lookupkit import models

    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve.kv_layout", description=__doc__.split("\n")[0])
    p.add_argument("-m", "--model", default="gemma-3-270m")
    p.add_argument("--position", type=int, default=500, help="tokens each sequence holds before the step")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", type=Path)
    a = p.parse_args(argv)
    for flag, value, low in (("--rounds", a.rounds, 1), ("--reps", a.reps, 1), ("--position", a.position, 1)):
        if value < low:
            raise InputError(f"{flag} must be {low} or more, got {value}")
    if a.position + max(max(v) for v in LAYOUTS.values()) > 1024:
        raise InputError(f"--position {a.position} leaves no room for the layouts in a 1024-token slot: give 900 or less")
    model = str(models.resolve(a.model))
    info = machine()
    times = {mode: {name: [] for name in LAYOUTS} for mode in ("split", "unified")}
    for r in range(a.rounds):
        for mode in ("split", "unified") if r % 2 == 0 else ("unified", "split"):
            for name, ms in measure(model, mode == "unified", a.position, a.reps, a.seed + r).items():
                times[mode][name] += ms
    rows = {mode: {name: spread(v) for name, v in t.items()} for mode, t in times.items()}
    print(f"{'layout (rows per slot)':34} {'split ms':>22} {'unified ms':>22} {'unified/split':>14}")
    for name, lay in LAYOUTS.items():
        s, u = rows["split"][name], rows["unified"][name]
        print(f"{name + ' ' + str(lay):34} {s['median']:7.1f} ({s['min']:.1f}-{s['max']:.1f})".ljust(57)
              + f"{u['median']:7.1f} ({u['min']:.1f}-{u['max']:.1f})".ljust(23) + f"{u['median'] / s['median']:7.2f}")
    if a.output:
        write_text(a.output, json.dumps({
            "kind": "kv-layout", "date": time.strftime("%Y-%m-%d"), "git": git_state(), "machine": info,
            "command": command("lookupkit.bench.serve.kv_layout", argv), "model": model, "slots": SLOTS,
            "position": a.position, "layouts": {k: list(v) for k, v in LAYOUTS.items()}, "ms": rows,
            "raw_ms": times, "loadavg_end": loadavg()}, indent=1))


if __name__ == "__main__":
    entry(run)
