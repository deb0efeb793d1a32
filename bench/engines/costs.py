"""What the engines bench measures beside tokens/s: what llama-server pays to load an .lcs against
lookupkit's StaticCache.open, and what the replay predicts a generation costs.

The prediction prices every call `replay_generation` finds on a row's own generated tokens with the
calibrated curve (cost units of one plain decoding step); times the calibrated t1 it is the predicted
generation time (bench/engines/report.py). The replay's calls are compared with the engine's own.
"""

from __future__ import annotations

import time
from pathlib import Path

from lookupkit.bench import llama_server


def lcs_load_costs(binary: Path, model: Path, lcs: dict, threads: int, reps: int, logs: Path) -> list[dict]:
    """What llama-server pays to load each .lcs: time to /health ready and memory, against no -lcs."""
    out = []
    for rep in range(reps):
        for label, path in [("none", None), *lcs.items()]:
            extra = ["--spec-type", "ngram-cache", "-lcs", str(path)] if path else []
            with llama_server.Server(binary, model, extra, threads=threads, log=logs / f"load-{label}.log") as s:
                out.append({"cache": label, "rep": rep, "lcs_bytes": path.stat().st_size if path else 0,
                            "t_ready_s": s.t_ready_s, "rss": s.memory_ready.get("VmRSS"),
                            "hwm": s.memory_ready.get("VmHWM")})
    return out


def lookupkit_open_costs(caches: dict, reps: int) -> list[dict]:
    """StaticCache.open of each .lkc (warm page cache) and its first lookup, in this process, with the
    growth of this process's resident memory across both."""
    import os

    from lookupkit import StaticCache

    out = []
    for label, path in caches.items():
        for rep in range(reps):
            rss0 = llama_server.proc_memory(os.getpid()).get("VmRSS")
            t0 = time.perf_counter()
            with StaticCache.open(path) as cache:
                t1 = time.perf_counter()
                cache.find(2, 2)
                t2 = time.perf_counter()
                rss1 = llama_server.proc_memory(os.getpid()).get("VmRSS")
            out.append({"cache": label, "rep": rep, "lkc_bytes": path.stat().st_size, "t_open_s": t1 - t0,
                        "t_first_find_s": t2 - t1, "rss_growth": rss1 - rss0 if rss0 and rss1 else None})
    return out


def replay_prediction(row: dict, prompt: list[int], rec: dict, cost, statics: dict, policy_table=None) -> dict:
    """replay_generation on the generated tokens: its calls (equal to the engine's?) priced by the curve. A
    policy row drafts with its own "policy_table" if it names one, else policy_table."""
    from lookupkit.replay import replay_generation

    if row.get("kind") != "lookupkit":  # plain: one call per token after the first; pld: its own calls
        drafted = rec.get("drafted_calls") or [0] * max(rec["n_gen"] - 1, 0)
        return {"replay_calls": len(drafted), "cost_units": float(cost.call_costs(drafted).sum()),
                "replay_equal": None}
    pol = None
    static = statics.get(row["cache"])
    if row["policy"] == "lookupkit":
        from lookupkit.policy.confidence import load as load_table
        from lookupkit.policy.chain import make_policy
        from lookupkit.rules import MAX_DRAFT

        pol = make_policy(load_table(row.get("policy_table", policy_table)), cost.at, MAX_DRAFT,
                          getattr(static, "high", None), getattr(static, "suffix", None))  # as the row's Drafter
    seq = list(prompt) + rec["tokens"]
    trace = replay_generation(seq, len(prompt) + 1, row["n_draft"], static=static, policy=pol)
    drafted = trace.n_drafted.tolist()
    equal = None
    if rec.get("drafted_calls") is not None:
        equal = (drafted == rec["drafted_calls"] and trace.n_accepted.tolist() == rec["accepted_calls"])
    return {"replay_calls": len(drafted), "cost_units": float(cost.call_costs(trace.n_drafted).sum()),
            "replay_drafted": int(sum(drafted)), "replay_accepted": int(trace.n_accepted.sum()),
            "replay_equal": equal}
