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
from ..rules import MAX_DRAFT


def calibrate(model_path, *, reps: int = 20, max_k: int = 16, position: int = 512, threads: int | None = None,
              seed: int = 0, on_sweep=None) -> dict:
    """Median cost of evaluating 1 + k tokens after `position` tokens, relative to 1 token, k = 0..max_k.
    on_sweep(done, total, seconds): called after each sweep over the sizes (the first one is the warm-up),
    with the sweeps done, their number and the seconds since the first began."""
    if not isinstance(reps, int) or reps < 1:
        raise InputError(f"reps must be a whole number >= 1, got {reps!r}")
    if not isinstance(max_k, int) or not 1 <= max_k <= MAX_DRAFT:
        raise InputError(f"max_k must be between 1 and {MAX_DRAFT}, got {max_k!r}")
    if not isinstance(position, int) or position < 1:
        raise InputError(f"position must be a whole number >= 1, got {position!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InputError(f"threads must be a whole number >= 1, got {threads!r}")
    from .compare import CpuSampler
    from .llama_generate import _Batch as Batch, _Model as Model, open_model

    n_batch = max(512, max_k + 1)
    # the context generate() runs in (open_model: llama-server's flash attention and SWA cache settings)
    llm = open_model(model_path, n_ctx=position + max_k + 1, threads=threads, n_batch=n_batch, n_ubatch=n_batch)
    m = Model(llm)
    batch = Batch(m.lib, n_batch)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, m.n_vocab, position + max_k + 1).astype(np.int32)
    try:
        m.clear()
        for i in range(0, position, n_batch):
            chunk = ids[i:min(i + n_batch, position)]
            batch.set(chunk, i, 1)
            m.decode(batch)
        sizes = list(range(max_k + 1))
        raw: dict[int, list[float]] = {k: [] for k in sizes}
        sampler = CpuSampler()
        sampler.start()
        t_start = time.perf_counter()
        for rep in range(reps + 1):  # the first sweep warms caches and is not kept
            for k in sizes[rep % len(sizes):] + sizes[:rep % len(sizes)]:
                m.forget_from(position)
                batch.set(ids[position:position + k + 1], position, k + 1)
                t0 = time.perf_counter()
                m.decode(batch)
                for j in range(k + 1):
                    np.argmax(m.row(j))
                dt = time.perf_counter() - t0
                if rep:
                    raw[k].append(dt)
            if on_sweep is not None:
                on_sweep(rep + 1, reps + 1, time.perf_counter() - t_start)
        others = sampler.stop()
    finally:
        batch.free()
        m.clear()
    med = {k: statistics.median(v) for k, v in raw.items()}
    paired = {k: [a / b for a, b in zip(raw[k], raw[0])] for k in sizes}
    curve = {k: statistics.median(paired[k]) for k in sizes}
    spread = {k: quartiles(paired[k]) for k in sizes}
    slope = float(np.polyfit(np.array(sizes, float), np.array([curve[k] for k in sizes]), 1)[0])
    result = {"format": FORMAT, "model": os.fspath(model_path), "n_ctx_pos": position,
              "threads": int(llm.context_params.n_threads), "threads_batch": int(llm.context_params.n_threads_batch),
              "reps": reps, "t1_s": med[0], "curve": curve, "spread": spread, "per_position_cost": slope,
              "others_cores": others,
              "raw_s": {k: v for k, v in raw.items()}}
    llm.close()
    return result


def quartiles(values: list) -> tuple[float, float]:
    """The first and third quartiles of `values` (the spread of one point's repetitions)."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]
