"""The calibration study's section of RESULTS.md (bench/calibration/run.py's JSON): the verify-cost curve
with its noise, the expected speed-up of each static cache, and the cost model against wall clock."""

from __future__ import annotations

import statistics
from pathlib import Path

ERROR_TARGET = 0.15  # predicted generation time within 15 % of the measured one


def _mmm(values, scale=1.0, digits=2) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    med = statistics.median(vals)
    return f"{med * scale:.{digits}f} ({min(vals) * scale:.{digits}f}–{max(vals) * scale:.{digits}f})"


def _load(avg) -> str:
    return f"{avg[0]:.1f}" if avg else "?"


def render_calibration(data: dict) -> list[str]:
    cal, m = data["calibration"], data["model"]
    th = cal["threads"]
    out = [f"### {th} thread{'s' if th != 1 else ''} (`{data['command']}`)", "",
           f"Model: random weights with Qwen2.5-0.5B's shapes, {m['type']}, {m['bytes'] / 1e6:.0f} MB "
           f"(`python -m lookupkit.bench.models`). Calibration: `calibrate(model, reps={cal['reps']}, max_k=16, "
           f"position={cal['n_ctx_pos']}, threads={th})` (threads {cal['threads']}, batch threads "
           f"{cal['threads_batch']}), {cal['seconds']:.0f} s. Commit {str(data.get('commit'))[:12]}"
           f"{' (dirty)' if data.get('dirty') else ''}; run {data['started']} → {data.get('finished', 'unfinished')}; "
           f"load average {_load(data['machine'].get('loadavg_at_start'))} → "
           f"{_load(data['machine'].get('loadavg_at_end'))} on {data['machine']['cores']} cores.", "",
           f"t1 (one token after {cal['n_ctx_pos']}) = {cal['t1_s'] * 1e3:.1f} ms; least-squares cost per drafted "
           f"position {cal['per_position_cost']:.3f} (1.0 = as dear as a plain decoding step).", "",
           "| k | cost(1+k) / cost(1) | eval ms median (min–max) | IQR / median |", "|---|---|---|---|"]
    noise = {int(k): v for k, v in cal["noise"].items()}
    for k in sorted(noise):
        n = noise[k]
        out.append(f"| {k} | {cal['curve'][str(k)] if str(k) in cal['curve'] else cal['curve'][k]:.3f} | "
                   f"{n['median_s'] * 1e3:.1f} ({n['min_s'] * 1e3:.1f}–{n['max_s'] * 1e3:.1f}) | "
                   f"{n['iqr_rel'] * 100:.0f} % |")
    iqr = [n["iqr_rel"] for n in noise.values()]
    spread = [n["max_s"] / n["min_s"] for n in noise.values()]
    out += ["", f"Noise: IQR / median {min(iqr) * 100:.0f}–{max(iqr) * 100:.0f} % (median {statistics.median(iqr) * 100:.0f} %), "
            f"max / min per k {min(spread):.1f}–{max(spread):.1f}× over {cal['reps']} interleaved repetitions.", ""]
    exp = data.get("expected")
    if exp:
        consts = list(exp[0]["S_const"])
        out += ["Expected speed-up over plain decoding, replaying `wiki.test.qwen2.i32` at `-c 4096 --draft 8` "
                "(S = Σ(accepted + 1) / Σ cost(call); drafting's own µs left out):", "",
                "| static cache MB | draft calls | tokens / verify | break-even C | **S (measured curve)** | " +
                " | ".join(f"S(C = {c})" for c in consts) + " |", "|" + "---|" * (5 + len(consts))]
        for r in exp:
            out.append(f"| {r['size'] or 'none'} | {r['draft_calls']:,} | {r['tokens_per_verify']:.3f} | "
                       f"{r['break_even_C']:.3f} | **{r['S_curve']:.3f}** | " +
                       " | ".join(f"{r['S_const'][c]:.3f}" for c in consts) + " |")
        out.append("")
    wc = data.get("wall_clock")
    if wc:
        out += _wall_clock(wc, cal)
    return out


def _wall_clock(wc: dict, cal: dict) -> list[str]:
    out = [f"Cost model against wall clock: greedy generation of {wc['n_new']} tokens after a {wc['prompt_len']}-token "
           f"WikiText prompt, `LookupDraftModel(static={Path(wc['static']).name if wc['static'] else None}, n_draft="
           f"{wc['n_draft']})` in a new `Llama(n_ctx={wc['n_ctx']}, n_threads={wc['threads']})` per run, alternating "
           "with plain generation (no draft model). Predicted = the prompt's own measured eval + t1 × Σ curve[k] over "
           "the evals the engine made after it (k = drafted tokens in that eval).", "",
           "| run | evals after the prompt | drafted / accepted | measured s | predicted s | error | after the prompt: "
           "measured s | predicted s | error | of which in eval s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, runs in (("draft", wc["draft_runs"]), ("plain", wc["plain_runs"])):
        for i, r in enumerate(runs):
            d = r.get("draft") or {}
            out.append(f"| {kind} {i + 1} | {r['n_evals']} | {d.get('drafted', '–')} / {d.get('accepted', '–')} | "
                       f"{r['wall_s']:.2f} | {r['predicted_s']:.2f} | {r['error'] * 100:+.1f} % | "
                       f"{r['measured_rest_s']:.2f} | {r['predicted_rest_s']:.2f} | {r['error_rest'] * 100:+.1f} % | "
                       f"{r['measured_eval_s']:.2f} |")
    err = wc["median_error"]
    err_rest = wc["median_error_after_prompt"]
    ok = abs(err) <= ERROR_TARGET
    rep = wc["draft_runs"][0].get("replay", {})
    d0 = wc["draft_runs"][0].get("draft") or {}
    same = (rep.get("calls"), rep.get("drafted"), rep.get("accepted")) == (d0.get("calls"), d0.get("drafted"),
                                                                           d0.get("accepted"))
    s_pred = [r.get("S_predicted_for_these_calls") for r in wc["draft_runs"]]
    ok_rest = abs(err_rest) <= ERROR_TARGET
    out += ["", f"* Predicted vs measured (drafted runs, median): {err * 100:+.1f} % for the whole generation (the "
            f"target as defined, prompt included: ±{ERROR_TARGET * 100:.0f} % **{'met' if ok else 'not met'}**); "
            f"{err_rest * 100:+.1f} % after the prompt alone, the part the curve predicts (the prompt's time is "
            f"measured on both sides): **{'met' if ok_rest else 'not met'}**. With t1 re-measured by the plain run "
            f"just before each drafted one (the curve's shape alone, the machine's drift removed): "
            f"{wc.get('median_error_after_prompt_adjacent_t1', float('nan')) * 100:+.1f} % after the prompt. Drafting itself took "
            f"{_mmm([r.get('drafting_s') for r in wc['draft_runs']], 1e3, 1)} ms per run.",
            f"* Real speed-up, plain ÷ drafted wall time of the same tokens (runs side by side): "
            f"{_mmm(wc['speedup_measured'], digits=3)} whole generation, "
            f"{_mmm(wc['speedup_measured_after_prompt'], digits=3)} after the prompt; the curve predicts "
            f"{_mmm(s_pred, digits=3)} for the calls these runs made.",
            f"* Greedy output with the draft model identical to plain: {'yes' if wc.get('greedy_output_identical') else '**no**'}; "
            f"engine counters (calls / drafted / accepted {d0.get('calls')} / {d0.get('drafted')} / {d0.get('accepted')}) "
            f"equal `replay_generation`'s: {'yes' if same else '**no** (' + str(rep) + ')'}.",
            "* Plain runs are predicted with the same curve (t1 × evals), although plain decoding does not copy every "
            "position's logits; their error shows how far one-token evals drift from the calibration's t1.", ""]
    return out
