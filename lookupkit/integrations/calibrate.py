"""What verifying a draft costs on one model and machine, and the speed-up a replay then predicts.

Whether prompt lookup pays depends on acceptance (the replay measures it) and on what evaluating 1 + k
tokens costs against 1 on *this* model (this module measures it). `calibrate` times the verify step of
lookupkit's own generation loop (integrations.llama_generate): one llama_decode of 1 + k tokens with
logits on exactly those rows, and the argmax of each row, at a realistic context position, dropping
the batch from the KV cache before every repetition, interleaving the sizes so drift hits all alike,
and keeps, per size, the median of its repetitions each relative to the 1-token decode of the same
sweep (pairing cancels drift; the ratio of two medians did not: on a busy machine it fell outside
its own repetitions' spread), with their middle half as the repeat spread, and the cores other
processes used meanwhile (a curve measured beside them is not this machine's cost: the CLI warns). llama.cpp decodes a single token with n_threads and a batch with n_threads_batch:
`threads` sets both (llama-cpp-python's defaults give the batch twice the threads of one token, which
would flatter drafts); the result records both. The curve is not linear: for a 262,144-token vocabulary
the output layer is most of a small model's work per row, and llama.cpp's kernels favour some batch sizes.

With `slots` = N > 1 it also measures what a server's shared step costs: one decode of `rows` rows over n = 2..N
sequences (each slot's next-token row, and drafts of in all up to max_k more), on a grid of rows, each paired
with the same sweep's 1-token decode like the curve: the surface a server prices each slot's draft by
(verify_cost.VerifyCost.step), as a batch's rows, not its sequences, set most of its cost.

    result = calibrate("model.gguf", max_k=64)          # {"curve": {k: cost of 1+k / cost of 1}, ...}
    verify_cost.save_curve(result, "curve.json")         # lookup-stats --verify-cost curve.json uses it
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from ..errors import InputError
from ..verify_cost import FORMAT
from ..rules import MAX_DRAFT, PARALLEL_MAX


def calibrate(model_path, *, reps: int = 20, max_k: int = 64, position: int = 512, threads: int | None = None,
              seed: int = 0, slots: int = 1, on_sweep=None) -> dict:
    """Median cost of evaluating 1 + k tokens after `position` tokens, relative to 1 token, k = 0..max_k; with
    slots > 1, "batch": {n: {rows: cost}} for n = 2..slots sequences. on_sweep(done, total, seconds): called after
    each sweep over the sizes (the first one is the warm-up), with the sweeps done, their number and the seconds
    since the first began."""
    if not isinstance(reps, int) or reps < 1:
        raise InputError(f"reps must be a whole number >= 1, got {reps!r}")
    if not isinstance(max_k, int) or not 1 <= max_k <= MAX_DRAFT:
        raise InputError(f"max_k must be between 1 and {MAX_DRAFT}, got {max_k!r}")
    if not isinstance(position, int) or position < 1:
        raise InputError(f"position must be a whole number >= 1, got {position!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InputError(f"threads must be a whole number >= 1, got {threads!r}")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= PARALLEL_MAX:
        raise InputError(f"slots must be between 1 and {PARALLEL_MAX}, got {slots!r}")
    from .compare import CpuSampler
    from .llama_model import Batch, Model, open_model

    n_batch = max(512, slots + max_k)
    # the context generate() runs in (open_model: llama-server's flash attention and SWA cache settings)
    per_seq = -(-(position + max_k + 1) // CTX_PAD) * CTX_PAD  # as llama.cpp pads it: each sequence gets all of it
    llm = open_model(model_path, n_ctx=slots * per_seq, threads=threads, parallel=slots,
                     n_batch=n_batch, n_ubatch=n_batch)
    m = Model(llm)
    batch = Batch(m.lib, n_batch)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, m.n_vocab, position + max_k + 1).astype(np.int32)
    sizes = list(range(max_k + 1))
    grid = [(n, n + e) for n in range(2, slots + 1) for e in ROWS_GRID if e <= max_k]
    points = [("k", k) for k in sizes] + [("b", p) for p in grid]
    raw: dict = {p: [] for p in points}
    try:
        m.clear()
        for seq in range(slots):
            for i in range(0, position, n_batch):
                batch.clear()
                batch.add(ids[i:min(i + n_batch, position)], i, 1, seq)
                m.decode(batch)
        sampler = CpuSampler()
        sampler.start()
        t_start = time.perf_counter()
        for rep in range(reps + 1):  # the first sweep warms caches and is not kept
            for p in points[rep % len(points):] + points[:rep % len(points)]:
                n, rows = (1, p[1] + 1) if p[0] == "k" else p[1]
                batch.clear()
                for seq, count in enumerate(split_rows(rows, n)):
                    m.forget_from(position, seq)
                    batch.add(ids[position:position + count], position, count, seq)
                t0 = time.perf_counter()
                m.decode(batch)
                for j in range(rows):
                    np.argmax(m.row(j))
                dt = time.perf_counter() - t0
                if rep:
                    raw[p].append(dt)
            if on_sweep is not None:
                on_sweep(rep + 1, reps + 1, time.perf_counter() - t_start)
        others = sampler.stop()
    finally:
        batch.free()
        m.clear()
    one = raw[("k", 0)]
    paired = {p: [a / b for a, b in zip(raw[p], one)] for p in points}
    curve = {k: statistics.median(paired[("k", k)]) for k in sizes}
    spread = {k: quartiles(paired[("k", k)]) for k in sizes}
    surface: dict = {}
    for n, rows in grid:
        surface.setdefault(n, {})[rows] = statistics.median(paired[("b", (n, rows))])
    slope = float(np.polyfit(np.array(sizes, float), np.array([curve[k] for k in sizes]), 1)[0])
    result = {"format": FORMAT, "model": os.fspath(model_path), "n_ctx_pos": position,
              "threads": int(llm.context_params.n_threads), "threads_batch": int(llm.context_params.n_threads_batch),
              "reps": reps, "t1_s": statistics.median(one), "curve": curve, "spread": spread, "per_position_cost": slope,
              "others_cores": others, "raw_s": {k: raw[("k", k)] for k in sizes}}
    if surface:
        result["slots"] = slots
        result["batch"] = {1: {k + 1: c for k, c in curve.items()}, **surface}
    llm.close()
    return result


CTX_PAD = 256  # llama.cpp rounds a context up to a multiple of this (then split evenly between sequences)
# A server step's drafted rows beyond its slots' own, measured for each slot count (interpolated between): every
# count to 8, where a curve bends most, then coarser.
ROWS_GRID = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256)


def split_rows(rows: int, n: int) -> list[int]:
    """rows spread over n sequences as evenly as they go, at least one each (each slot's next-token row)."""
    return [rows // n + (1 if s < rows % n else 0) for s in range(n)]


def quartiles(values: list) -> tuple[float, float]:
    """The first and third quartiles of `values` (the spread of one point's repetitions)."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]
