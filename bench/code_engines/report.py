"""The code-task engines bench's results (bench/code_engines/run.py) as bench/ENGINES_CODE.md.

Per row, from one results JSON: tokens/s of each generation (generated tokens / generation time after the
first token), the median over repetitions per prompt, then the median over prompts with its min-max; the
speed-up over the same engine's plain row, paired generation by generation (same prompt, same repetition,
same round) and summarised the same way; accepted drafted tokens per verify call and tokens per verify
(generated tokens after the first / verify calls); the machine's 1-minute load at each generation's start;
the replay's calls against the engine's; how often the output differs from the plain row's. Then the
headline: the policy with the suffix source against the same row without it, paired the same way, stated
as a ratio; and the untimed greedy check (every emitted token the argmax of its batch's logits row, the
same tokens as the timed run, and which sources drafted: the row without the suffix source drafts none
from it).

    python -m lookupkit.bench.code_engines.report bench/results/code-engines-<date>-vm.json
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from lookupkit.bench.engines.report import first_divergence, plain_row
from lookupkit.bench.harness import load_results, output_dir, report_entry, spread, write_text

HERE = output_dir()  # where its markdown goes by default: see lookupkit.bench.harness
SUFFIX = "sx"  # rules.SOURCE_NAMES of the suffix source


def load(path: Path) -> dict:
    return load_results(path, "code-engines", "a code-engines result", "python -m lookupkit.bench.code_engines")


def tok_s(data: dict) -> dict:
    """{(row, prompt, rep): tokens/s} of every generation with a positive generation time."""
    return {(r["row"], r["prompt"], r["rep"]): r["n_gen"] / r["t_gen_s"] for r in data["runs"] if r["t_gen_s"] > 0}


def per_prompt(tps: dict, name: str) -> dict:
    """{prompt: the median tokens/s over its repetitions} of one row."""
    by = defaultdict(list)
    for (row, prompt, _), v in tps.items():
        if row == name:
            by[prompt].append(v)
    return {p: statistics.median(vs) for p, vs in by.items()}


def paired(tps: dict, name: str, base: str) -> dict | None:
    """tokens/s of `name` over `base` on the same prompt and repetition: the median over repetitions per
    prompt, then spread over prompts."""
    by = defaultdict(list)
    for (row, prompt, rep), v in tps.items():
        if row == name and (base, prompt, rep) in tps:
            by[prompt].append(v / tps[(base, prompt, rep)])
    return spread(statistics.median(vs) for vs in by.values())


def summarise(data: dict) -> dict:
    """{row: figures} in the rows' order."""
    tps = tok_s(data)
    runs = defaultdict(list)
    for r in data["runs"]:
        runs[r["row"]].append(r)
    plain_tokens = {}
    figs = {}
    for row in data["rows"]:
        name, rs = row["name"], runs.get(row["name"], [])
        if not rs:
            continue
        plain = plain_row(data, row["engine"])
        fig = {"row": name, "engine": row["engine"], "gens": len(rs), "tok_s": spread(per_prompt(tps, name).values()),
               "speedup": paired(tps, name, plain) if plain and plain != name else None,
               "load": spread(r.get("load1") for r in rs)}
        if row.get("plain"):
            fig.update(accepted_per_call=0.0, tokens_per_verify=1.0)
            plain_tokens[row["engine"]] = {(r["prompt"], r["rep"]): r["tokens"] for r in rs}
        else:  # llama-server leaves its draft counters out of a generation that drafted nothing
            calls = sum(r["n_gen"] - 1 if r.get("calls") is None else r["calls"] for r in rs)
            accepted = sum(r.get("accepted") or 0 for r in rs)
            fig.update(drafted=sum(r.get("drafted") or 0 for r in rs), accepted=accepted, calls=calls,
                       accepted_per_call=accepted / calls if calls else None,
                       tokens_per_verify=sum(r["n_gen"] - 1 for r in rs) / calls if calls else None)
        replays = [r["replay_equal"] for r in rs if r.get("replay_equal") is not None]
        if replays:
            fig["replay_equal"] = (sum(replays), len(replays))
        figs[name] = fig
    for name, fig in figs.items():
        base = plain_tokens.get(fig["engine"], {})
        pairs = [(base[(r["prompt"], r["rep"])], r["tokens"]) for r in runs[name] if (r["prompt"], r["rep"]) in base]
        if pairs and not next(r for r in data["rows"] if r["name"] == name).get("plain"):
            fig["diverged"] = (sum(first_divergence(a, b) is not None for a, b in pairs), len(pairs))
    return figs


def suffix_effect(data: dict, figs: dict) -> list[dict]:
    """Per n_draft: the policy row with the suffix source against the same row without it."""
    tps = tok_s(data)
    out = []
    for row in data["rows"]:
        if row.get("suffix") and row["name"] in figs and row.get("pair") in figs:
            on, off = figs[row["name"]], figs[row["pair"]]
            out.append({"n_draft": row["n_draft"], "on": row["name"], "off": row["pair"],
                        "ratio": paired(tps, row["name"], row["pair"]),
                        "tok_s_on": on["tok_s"], "tok_s_off": off["tok_s"],
                        "apc_on": on.get("accepted_per_call"), "apc_off": off.get("accepted_per_call"),
                        "speedup_on": on["speedup"], "speedup_off": off["speedup"]})
    return out


def greedy_summary(data: dict) -> dict:
    """{row: {checked, greedy, same, sources}} of the untimed greedy check."""
    out = {}
    for c in data.get("greedy_checks") or []:
        s = out.setdefault(c["row"], {"checked": 0, "greedy": 0, "same": 0, "sources": defaultdict(int)})
        s["checked"] += 1
        s["greedy"] += bool(c["greedy"])
        s["same"] += bool(c["same_as_timed"])
        for src, n in c["sources"].items():
            s["sources"][src] += n
    return out


def _f(x, fmt="{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def _sp(s: dict | None, fmt="{:.1f}") -> str:
    if not s:
        return "–"
    mid = fmt.format(s["median"])
    return mid if s["n"] == 1 else f"{mid} ({fmt.format(s['min'])}–{fmt.format(s['max'])})"


def row_table(data: dict, figs: dict) -> list[str]:
    lines = ["| engine, row | tok/s median (min–max over prompts) | × its plain (paired) | accepted per call "
             "| tokens per verify | load 1 min | replay = engine's calls | diverged from plain |",
             "|---|---|---|---|---|---|---|---|"]
    for f in figs.values():
        rep = f"{f['replay_equal'][0]}/{f['replay_equal'][1]}" if f.get("replay_equal") else "–"
        div = f"{f['diverged'][0]}/{f['diverged'][1]}" if f.get("diverged") else "–"
        lines.append(f"| {f['engine']} `{f['row'].split(':', 1)[1]}` | {_sp(f['tok_s'])} "
                     f"| {_sp(f['speedup'], '{:.2f}')} "
                     f"| {_f(f.get('accepted_per_call'), '{:.2f}')} | {_f(f.get('tokens_per_verify'), '{:.2f}')} "
                     f"| {_sp(f['load'])} | {rep} | {div} |")
    return lines


def effect_lines(effects: list[dict]) -> list[str]:
    if not effects:
        return ["The suffix source's rows did not run: no ratio measured."]
    lines = ["| n_draft | with sx tok/s | without sx tok/s | **with / without (paired)** | × plain with / without "
             "| accepted per call with / without |", "|---|---|---|---|---|---|"]
    for e in effects:
        lines.append(f"| {e['n_draft']} | {_sp(e['tok_s_on'])} | {_sp(e['tok_s_off'])} "
                     f"| **{_sp(e['ratio'], '{:.2f}')}×** "
                     f"| {_sp(e['speedup_on'], '{:.2f}')} / {_sp(e['speedup_off'], '{:.2f}')} "
                     f"| {_f(e['apc_on'], '{:.2f}')} / {_f(e['apc_off'], '{:.2f}')} |")
    lines.append("")
    for e in effects:
        r = e["ratio"]
        if r:
            lines.append(f"* n_draft {e['n_draft']}: the suffix source makes the policy **{r['median']:.2f}×** "
                         f"as fast "
                         f"(median over {r['n']} prompts of the paired ratio, min {r['min']:.2f}, max {r['max']:.2f}; "
                         f"`{e['on'].split(':', 1)[1]}` against `{e['off'].split(':', 1)[1]}` in the same run).")
    return lines


def greedy_lines(data: dict) -> list[str]:
    g = greedy_summary(data)
    if not g:
        return ["Not run (the timed rounds did not finish, or an older results file)."]
    lines = ["| row | prompts checked | every token greedy in its batch | same tokens as the timed run "
             "| drafted tokens by source |", "|---|---|---|---|---|"]
    for name, s in g.items():
        src = ", ".join(f"{k} {v:,}" for k, v in sorted(s["sources"].items(), key=lambda kv: -kv[1])) or "–"
        lines.append(f"| `{name.split(':', 1)[1]}` | {s['checked']} | {s['greedy']}/{s['checked']} "
                     f"| {s['same']}/{s['checked']} | {src} |")
    off = [r["name"] for r in data["rows"] if r.get("suffix") is False]
    leaked = [n for n in off if g.get(n, {}).get("sources", {}).get(SUFFIX)]
    lines += ["", f"Rows without the suffix source that drafted from it: {', '.join(leaked) if leaked else 'none'}."]
    return lines


def render_markdown(data: dict, results_name: str) -> str:
    figs = summarise(data)
    a, la, git, m = data.get("args", {}), data.get("loadavg", {}), data.get("git", {}), data.get("machine", {})
    cal = data.get("calibration") or {}
    v = data.get("versions", {})
    prompts = data.get("prompts", [])
    n_rounds = len({(r["prompt"], r["rep"]) for r in data["runs"]})
    md = ["## Engines on the code task: Gemma 3 270M, the suffix source on and off (issue 15)", "",
          f"Rendered by `python -m lookupkit.bench.code_engines.report bench/results/{results_name}` from one run of "
          f"{data['date']} ({data.get('wall_s', 0) / 60:.0f} min, {n_rounds} prompt rounds, commit "
          f"`{(git.get('commit') or '?')[:10]}`{', dirty tree' if git.get('dirty') else ''}; {m.get('cpu')}, "
          f"{m.get('cores')} cores; load average {la.get('before_runs', [0])[0]:.1f} before the timed rows, "
          f"{la.get('now', [0])[0]:.1f} after"
          + ("" if data.get("complete") else f"; **stopped early** at its deadline: {len(data['runs'])} generations")
          + (", **--quick**" if data.get("quick") else "") + "). Versions: "
          + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".", "",
          f"Task: `{data['files']['eval']}` (bench/suffix_code_task.py, django 4.2 → 5.0): the earlier release is the "
          f"static corpus, the prompts "
          f"are {len(prompts)} of the 5.0 files that are new or changed, drawn with seed {a.get('seed')} from the "
          f"odd-indexed ones (the even-indexed ones tuned the tables) of at least {a.get('prompt_tokens')} + "
          f"{a.get('n_new')} tokens: BOS and the file's first {a.get('prompt_tokens')} tokens, then {a.get('n_new')} "
          f"greedy tokens (an end of generation does not stop it), {a.get('threads')} threads, {a.get('reps')} "
          f"repetition{'' if a.get('reps') == 1 else 's'}, rows interleaved and rotated prompt by prompt. Files: "
          + ", ".join(f"{p['index']} `{p['head'].removeprefix('# file: ')}`" for p in prompts) + ".", "",
          f"Caches: `{Path(data['files']['code-o6-sx']).name}` (orders 2–6 and the suffix index, "
          f"{data['caches']['code-o6-sx']['bytes'] / 1e6:.0f} MB) for the policy rows, "
          f"`{Path(data['files']['code-2']).name}` "
          f"(2-grams, {data['caches']['code-2']['bytes'] / 1e6:.0f} MB) for llama.cpp's rule and, converted to .lcs, "
          f"llama-server's ngram-cache. Tables: `{Path(data['files']['sx']).name}` (learnt with the index) and "
          f"`{Path(data['files']['nosx']).name}` (learnt without: its suffix rows are zero, so that policy gets no "
          f"index and makes no suffix lookup). Cost curve `{cal.get('source')}` "
          f"(t1 = {_f(cal.get('t1_s') and cal['t1_s'] * 1e3, '{:.1f}')} ms).", "",
          "### The suffix source: the same policy row with and without it", "",
          *effect_lines(suffix_effect(data, figs)), "",
          "### Every row", "", *row_table(data, figs), "",
          "tok/s: per generation, the median over repetitions per prompt, then the median over prompts (min–max). "
          "× its plain: the generation's tok/s over the same engine's plain row's on the same prompt in the same "
          "round, summarised the same way. Tokens per verify: generated tokens after the first over verify calls "
          "(llama-server: calls = tokens − 1 − accepted). Load: the 1-minute load average at each generation's "
          "start. "
          "Replay: `replay_generation` on the row's own tokens makes the same calls as the engine did. Diverged: "
          "generations whose tokens differ from the plain row's of the same engine (batch shapes change llama.cpp's "
          "arithmetic; the greedy check below is what shows the drafted rows are still greedy).", "",
          "### Greedy check (untimed, after the timed rounds)", "", *greedy_lines(data), "",
          "### Reproduce", "", "```bash", "python -m lookupkit.bench.llama_server",
          data.get("command", ""), f"python -m lookupkit.bench.code_engines.report bench/results/{results_name}",
          "```", ""]
    return "\n".join(md)


def render(results: Path, md_out: Path = HERE / "ENGINES_CODE.md") -> str:
    data = load(results)
    md = render_markdown(data, Path(results).name)
    write_text(md_out, md)
    return md


def main(argv=None) -> None:
    report_entry("python -m lookupkit.bench.code_engines.report",
                 lambda results, out: render(results, out / "ENGINES_CODE.md"), argv)


if __name__ == "__main__":
    main()
