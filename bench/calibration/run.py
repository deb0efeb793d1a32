"""Will prompt lookup pay on a 0.5B model on this machine? The verify-cost curve, the expected speed-up
of the study's static caches, and the cost model checked against wall clock.

1. `calibrate` (lookupkit.integrations.calibrate) a random-weight GGUF with Qwen2.5-0.5B's shapes
   (bench/models.py, Q8_0, cached under ~/.cache/lookupkit/bench/): cost(1 + k) / cost(1), k = 1..16.
2. Replay the WikiText-103 test ids (`-c 4096 --draft 8`) over each static cache of the study that
   exists (static-0/25/100/541.lkc in the study's work directory): the expected speed-up S with the
   measured curve, and S(C) at constant costs per drafted position for comparison.
3. Generate with LookupDraftModel on that model (greedy, a WikiText prompt, a few hundred tokens,
   the largest static cache), record every `Llama.eval` the engine makes, and compare the measured
   time with what the calibration predicts for those evals (t1 x sum of curve[k] over the calls, plus
   the prompt's own measured evaluation); then plain generation (no draft model), alternated with the
   drafted runs, for the real speed-up. The engine's counters are checked against replay_generation.

    python -m lookupkit.bench.calibration [--threads 2] [--reps 30] [--n-new 256] [--runs 3]

writes bench/results/calibration-<date>-t<threads>.json (and the curve as a `--verify-cost` file).
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import statistics
import time
from pathlib import Path

import numpy as np

from lookupkit.bench.models import bench_dir, ensure_model
from lookupkit.bench.harness import RESULTS, SHARED, git_state, loadavg, machine
from lookupkit import verify_cost
from lookupkit.rules import DEFAULT_CTX

EVAL = SHARED / "reference" / "wikitext" / "wiki.test.qwen2.i32"
SIZES = (0, 25, 50, 100, 200, 541)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def noise(raw: dict) -> dict:
    """Per k: median, min, max, and the interquartile range relative to the median."""
    out = {}
    for k, v in raw.items():
        q1, q3 = np.percentile(v, [25, 75])
        med = statistics.median(v)
        out[int(k)] = {"median_s": med, "min_s": min(v), "max_s": max(v), "iqr_rel": float((q3 - q1) / med)}
    return out


def expected_table(curve: dict, eval_path: Path, workdir: Path, n_ctx: int, n_draft: int) -> list[dict]:
    from lookupkit import StaticCache
    from lookupkit.corpora import read_token_file
    from lookupkit.replay import replay
    from lookupkit.verify_cost import REPORTED_COSTS, VerifyCost, break_even, speedup

    ids = read_token_file(eval_path)
    cost = VerifyCost(curve=curve, source="measured")
    rows = []
    for size in SIZES:
        path = workdir / f"static-{size}.lkc"
        if size and not path.exists():
            continue
        cache = StaticCache.open(path) if size else None
        trace, _ = replay(ids, n_ctx=n_ctx, n_draft=n_draft, static=cache)
        s = trace.summary()
        rows.append({"size": size, "cache": str(path) if size else None, "draft_calls": s["draft_calls"],
                     "n_drafted": s["n_drafted"], "n_accept": s["n_accept"], "tokens_per_verify": s["tokens_per_verify"],
                     "break_even_C": break_even(trace.n_drafted, trace.n_accepted),
                     "S_curve": speedup(trace.n_drafted, trace.n_accepted, cost),
                     "S_const": {f"{c:g}": speedup(trace.n_drafted, trace.n_accepted, c) for c in REPORTED_COSTS}})
        log(f"replay {size} MB: {s['tokens_per_verify']:.3f} tokens/verify, S(curve) = {rows[-1]['S_curve']:.3f}")
        if cache is not None:
            cache.close()
    return rows


def _generate(model: Path, prompt: list[int], n_new: int, threads: int, n_ctx: int, static=None, n_draft: int = 8):
    """One generation in a new Llama (no KV reuse between runs); every eval's size and time recorded."""
    import llama_cpp

    from lookupkit.integrations.llama_cpp import LookupDraftModel

    draft = LookupDraftModel(static=static, n_draft=n_draft, model=str(model)) if static is not None else None
    draft_s = []
    if draft is not None:
        inner_draft = draft.__call__

        class Timed(type(draft)):  # time every draft call (drafting's own cost, in the measured wall time)
            def __call__(self, input_ids, /, **kw):
                t0 = time.perf_counter()
                out = inner_draft(input_ids, **kw)
                draft_s.append(time.perf_counter() - t0)
                return out

        draft.__class__ = Timed
    # llama-cpp-python 0.3.x sizes its logits buffer from the logits_all *argument* (n_batch rows when False)
    # although a draft model forces logits_all on: without logits_all=True a history past n_batch tokens fails
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                          draft_model=draft, logits_all=draft is not None, verbose=False, seed=0)
    if draft is not None:
        draft.bind(llm)
    evals: list[tuple[int, float]] = []
    inner = llm.eval

    def timed_eval(tokens):
        t0 = time.perf_counter()
        inner(tokens)
        evals.append((len(tokens), time.perf_counter() - t0))

    llm.eval = timed_eval
    out = []
    t0 = time.perf_counter()
    for tok in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
        out.append(int(tok))
        if len(out) == n_new:
            break
    wall = time.perf_counter() - t0
    if draft is not None:
        draft.finish(list(prompt) + out, learn=False)  # resolves the last draft against the tokens kept
    stats = draft.stats() if draft is not None else None
    llm.close()
    return {"wall_s": wall, "evals": evals, "tokens": out, "draft": stats, "draft_s": sum(draft_s)}


def wall_clock_check(model: Path, cal: dict, static_path: Path | None, threads: int, n_new: int, runs: int,
                     prompt_len: int, n_ctx: int, n_draft: int) -> dict:
    from lookupkit import StaticCache
    from lookupkit.corpora import read_token_file
    from lookupkit.replay import replay_generation

    curve, t1 = cal["curve"], cal["t1_s"]
    prompt = read_token_file(EVAL)[:prompt_len].tolist()
    static = StaticCache.open(static_path) if static_path else None
    from lookupkit import Drafter

    Drafter(static=static).draft(prompt[:64], 8)  # load the compiled kernels before anything is timed
    drafted, plain, outputs = [], [], {}
    for r in range(runs):  # alternate, so drift on a shared machine hits both alike
        for kind in ("plain", "draft"):
            g = _generate(model, prompt, n_new, threads, n_ctx, static=static if kind == "draft" else None,
                          n_draft=n_draft)
            prompt_eval = g["evals"][0][1]
            rest = g["evals"][1:]
            # cost of 1 + k tokens: calibrated with logits of every position (as a draft model forces);
            # plain generation evaluates one token at a time without logits_all
            predicted_rest = sum(t1 * curve[n - 1] for n, _ in rest)
            row = {"kind": kind, "wall_s": g["wall_s"], "prompt_eval_s": prompt_eval, "n_evals": len(rest),
                   "eval_sizes": [n for n, _ in rest], "measured_eval_s": sum(t for _, t in rest),
                   "predicted_s": prompt_eval + predicted_rest, "predicted_rest_s": predicted_rest,
                   "measured_rest_s": g["wall_s"] - prompt_eval, "draft": g["draft"], "n_new": len(g["tokens"]),
                   "drafting_s": g["draft_s"]}
            row["error"] = row["wall_s"] / row["predicted_s"] - 1
            row["error_rest"] = row["measured_rest_s"] / predicted_rest - 1
            if kind == "plain":
                t1_adjacent = statistics.median(t for _, t in rest)  # one-token evals, measured minutes apart from t1
            else:  # the curve's shape with t1 taken from the plain run just before (drift of the machine removed)
                row["t1_adjacent_s"] = t1_adjacent
                row["predicted_rest_adjacent_s"] = sum(t1_adjacent * curve[n - 1] for n, _ in rest)
                row["error_rest_adjacent"] = row["measured_rest_s"] / row["predicted_rest_adjacent_s"] - 1
            if kind == "draft":
                seq = prompt + g["tokens"]
                rep = replay_generation(seq, len(prompt) + 1, n_draft, static=static)
                sizes = np.array(row["eval_sizes"]) - 1
                row["replay"] = {"calls": len(rep.n_drafted), "drafted": int(rep.n_drafted.sum()),
                                 "accepted": int(rep.n_accepted.sum())}
                # S the cost model predicts for exactly these calls: tokens gained per unit of 1-token cost
                row["S_predicted_for_these_calls"] = float((len(g["tokens"]) - 1) / sum(curve[k] for k in sizes))
            log(f"{kind} run {r + 1}: {row['wall_s']:.2f} s for {row['n_new']} tokens, predicted "
                f"{row['predicted_s']:.2f} s ({row['error'] * 100:+.1f} %), {row['n_evals']} evals after the prompt")
            (drafted if kind == "draft" else plain).append(row)
            outputs.setdefault(kind, g["tokens"])
    if static is not None:
        static.close()
    med = statistics.median
    return {"prompt_len": prompt_len, "n_new": n_new, "static": str(static_path) if static_path else None,
            "n_ctx": n_ctx, "n_draft": n_draft, "threads": threads, "draft_runs": drafted, "plain_runs": plain,
            "speedup_measured": [p["wall_s"] / d["wall_s"] for p, d in zip(plain, drafted)],
            "speedup_measured_after_prompt": [p["measured_rest_s"] / d["measured_rest_s"]
                                              for p, d in zip(plain, drafted)],
            "median_error": med([d["error"] for d in drafted]),
            "median_error_after_prompt": med([d["error_rest"] for d in drafted]),
            "median_error_after_prompt_adjacent_t1": med([d["error_rest_adjacent"] for d in drafted]),
            "greedy_output_identical": outputs.get("plain") == outputs.get("draft"),
            "generated_tokens": outputs.get("draft")}


def run(threads: int, reps: int, n_new: int, runs: int, prompt_len: int, position: int, out_dir: Path,
        workdir: Path, skip_table: bool = False, curve: Path | None = None) -> Path:
    from lookupkit.integrations.calibrate import calibrate
    from lookupkit import StaticCache  # noqa: F401  (import before timing anything)

    model = ensure_model("Q8_0", log=log)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d")
    out = out_dir / f"calibration-{stamp}-{socket.gethostname()}-t{threads}.json"
    data = {"machine": machine(gate=True), **git_state(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "model": {"path": str(model), "bytes": model.stat().st_size, "shape": "Qwen2.5-0.5B (bench/models.py)",
                      "type": "Q8_0", "weights": "random, seed 0"},
            "command": f"python -m lookupkit.bench.calibration --threads {threads} --reps {reps} --n-new {n_new} "
                       f"--runs {runs} --prompt-len {prompt_len} --position {position}"}
    t0 = time.perf_counter()
    if curve is not None:  # an earlier calibration (its own file records how it was made)
        cal = verify_cost.load_curve(curve)
        data["calibration_from"] = str(curve)
        data["command"] += f" --curve {curve}"
        if cal.get("threads") != threads:
            raise SystemExit(f"{curve} was calibrated with {cal.get('threads')} threads, not {threads}")
    else:
        log(f"calibrate {model.name}: k = 0..16 at position {position}, {reps} reps, {threads} threads")
        cal = calibrate(model, reps=reps, max_k=16, position=position, threads=threads)
        cal["seconds"] = time.perf_counter() - t0
        verify_cost.save_curve(cal, out.with_suffix(".curve.json"))
    cal["curve"] = {int(k): v for k, v in cal["curve"].items()}
    data["calibration"] = {**{k: v for k, v in cal.items() if k not in ("raw_s", "format")},
                           "seconds": cal.get("seconds", time.perf_counter() - t0),
                           "noise": noise(cal["raw_s"]), "raw_s": cal["raw_s"]}
    log("curve " + " ".join(f"{k}:{v:.2f}" for k, v in cal["curve"].items()) + f"; t1 = {cal['t1_s'] * 1e3:.1f} ms")
    out.write_text(json.dumps(data, indent=1))
    if not skip_table:
        data["expected"] = expected_table(cal["curve"], EVAL, workdir, DEFAULT_CTX, 8)
        out.write_text(json.dumps(data, indent=1))
    largest = next((workdir / f"static-{s}.lkc" for s in reversed(SIZES) if s and (workdir / f"static-{s}.lkc").exists()),
                   None)
    data["wall_clock"] = wall_clock_check(model, cal, largest, threads, n_new, runs, prompt_len,
                                          n_ctx=prompt_len + n_new + 32, n_draft=8)
    data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    data["machine"]["loadavg_at_end"] = loadavg()
    out.write_text(json.dumps(data, indent=1))
    log(f"wrote {out}")
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.calibration")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--n-new", type=int, default=256)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--position", type=int, default=512)
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--workdir", type=Path, default=bench_dir())
    p.add_argument("--skip-table", action="store_true")
    p.add_argument("--curve", type=Path, help="reuse a calibration written by an earlier run (its .curve.json)")
    a = p.parse_args(argv)
    run(a.threads, a.reps, a.n_new, a.runs, a.prompt_len, a.position, a.out_dir, a.workdir, a.skip_table, a.curve)


if __name__ == "__main__":
    main()
