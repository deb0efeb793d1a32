"""How many pairs of runs does `lookupkit generate` need for a verdict that holds? (issue 21)

    python -m lookupkit.bench.verdict [-m gemma-3-270m] [--prompts 3] [--pairs 9] [-n 256]
        [--threads 2] [--cache C.lkc] [--curve CURVE.json] [--report]

For each held-out prompt (WikiText-103 test paragraphs from ../shared, the `wiki` and `copy` tasks of
bench.generations) it runs `integrations.compare.compare` with --pairs pairs: the plain and drafted runs
`lookupkit generate` makes, drafting by --policy (lookupkit's, with the model's shipped table, or llama.cpp's
rule) from the context (and --cache).
Then, for k = 1, 3, 5, 7 pairs, every window of k consecutive pairs is judged on its spread as generate
judges it: how far its median lies from the median of all pairs, and how often its answer differs from
the answer all pairs give (load and prediction, the same for every window of a prompt, left out). The default --runs is the smallest k whose windows agree with all pairs.
The machine's load (cores other processes used, from the sampler generate uses) is recorded per prompt.
Results: bench/results/generate-verdict-<date>.json (each invocation adds its run); --report writes
the section of bench/RESULTS.md from all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import date
from pathlib import Path

from lookupkit.bench.generations import paragraphs, prompt_text
from lookupkit.bench.harness import RESULTS, SHARED, git_state, loadavg, machine
from lookupkit.integrations.compare import RUNS

WINDOWS = (1, 3, 5, 7)
COMMAND = "python -m lookupkit.bench.verdict"
OLD_COMMAND = "python -m lookupkit.bench.generate_verdict"  # this runner's name in runs recorded before issue 24
SECTION = "## `lookupkit generate`: how many pairs of runs a verdict needs (issue 21)"


def windows(ratios: list, k: int) -> list[list]:
    return [ratios[i:i + k] for i in range(len(ratios) - k + 1)]


def answer(ratios: list, timed: int) -> str:
    """generate's answer on these pairs from their spread alone (load and prediction left out: they are the
    same for every window of a row); one pair: its band (judge calls it uncertain for want of a spread)."""
    from lookupkit.integrations.compare import band, judge

    return judge(ratios, others=0.0, predicted=None, timed=timed).answer if len(ratios) > 1 else band(ratios[0])


def analyse(row: dict) -> dict:
    """Per window size k: the largest relative distance of a k-window's median from all pairs' median, the
    share of k-windows whose answer differs from all pairs' answer, and the share that are uncertain."""
    from lookupkit.integrations.compare import judge

    ratios, timed = row["ratios"], row["timed"]
    full = judge(ratios, others=row["others"], predicted=row["predicted"], timed=timed)
    spread_answer = answer(ratios, timed)
    med = statistics.median(ratios)
    out = {}
    for k in WINDOWS:
        ws = windows(ratios, k)
        if not ws:
            continue
        answers = [answer(w, timed) for w in ws]
        out[str(k)] = {"windows": len(ws), "max_dev": max(abs(statistics.median(w) / med - 1) for w in ws),
                       "differs": sum(a != spread_answer for a in answers) / len(ws),
                       "uncertain": sum(a == "uncertain" for a in answers) / len(ws)}
    return {"answer": full.answer, "verdict": full.text, "spread_answer": spread_answer, "median": med, "by_k": out}


def run(args) -> dict:
    from lookupkit import Drafter, models
    from lookupkit.draft.confidence import for_model
    from lookupkit.integrations.compare import compare
    from lookupkit.integrations.llama_generate import open_model
    from lookupkit.static import StaticCache
    from lookupkit.verify_cost import VerifyCost

    path = models.resolve(args.model)
    table = for_model(path)
    cost = VerifyCost.of(str(args.curve)) if args.curve else None
    static = StaticCache.open(args.cache) if args.cache else None
    paras = paragraphs(args.text)[args.skip:args.skip + args.prompts]
    llm = open_model(path, n_ctx=2048, threads=args.threads)
    rows = []
    try:
        for i, para in enumerate(paras):
            for task in args.tasks.split(","):
                ids = llm.tokenize(prompt_text(para, task).encode(), add_bos=True, special=True)
                t0 = time.time()
                c = compare(llm, ids, args.n, lambda: Drafter(static=static, policy=args.policy,
                                                              policy_table=table if args.policy == "lookupkit" else None,
                                                              verify_cost=cost if cost is not None else 0.1),
                            n_draft=args.draft, runs=args.pairs, cost=cost)
                row = {"prompt": i, "task": task, "prompt_tokens": len(ids), "timed": c.timed,
                       "ratios": c.ratios, "others": c.others, "predicted": c.predicted,
                       "plain_tok_s": [g.tokens_per_s for g in c.plain],
                       "drafted_tok_s": [g.tokens_per_s for g in c.drafted],
                       "accepted_per_call": [g.accepted_per_call for g in c.drafted],
                       "seconds": time.time() - t0, "loadavg": loadavg()}
                row.update(analyse(row))
                rows.append(row)
                print(f"[{time.strftime('%H:%M:%S')}] prompt {i} {task}: {row['median']:.2f}x "
                      f"({min(c.ratios):.2f}-{max(c.ratios):.2f}), others {c.others:.2f} cores, {row['answer']}",
                      flush=True)
    finally:
        llm.close()
    return {"date": date.today().isoformat(), "command": args.command,
            "model": str(path), "table": table and str(table), "cache": args.cache and str(args.cache),
            "curve": args.curve and str(args.curve), "policy": args.policy, "n": args.n, "draft": args.draft, "threads": args.threads,
            "pairs": args.pairs, "inputs": args.inputs, "machine": machine(gate=True), "git": git_state(), "rows": rows,
            "summary": summarise(rows)}


def summarise(rows: list) -> dict:
    """Over all rows, per k: the worst distance from all pairs' median and the share of windows whose
    answer differs; `enough`: the smallest k whose windows never answer otherwise than all pairs."""
    by_k = {}
    for k in map(str, WINDOWS):
        got = [r["by_k"][k] for r in rows if k in r["by_k"]]
        if got:
            n = sum(g["windows"] for g in got)
            by_k[k] = {"max_dev": max(g["max_dev"] for g in got),
                       "differs": sum(g["differs"] * g["windows"] for g in got) / n}
    enough = next((int(k) for k, v in by_k.items() if v["differs"] == 0), None)
    return {"by_k": by_k, "enough": enough, "others_max": max((r["others"] for r in rows), default=None)}


def report(docs: list) -> str:
    """The RESULTS.md section: one table per run (configuration), then the summary over all their rows."""
    lines = [SECTION, ""]
    for doc in docs:
        how = "lookupkit's policy" if doc.get("policy", "lookupkit") == "lookupkit" else "llama.cpp's rule"
        command = doc["command"].replace(OLD_COMMAND, COMMAND, 1)  # the same run, rerunnable as it is written
        lines += [f"`{command}` ({doc['date']}, {doc['machine']['cpu']}, {doc['threads']} threads, "
                  f"{doc['n']} tokens per run, --draft {doc['draft']}, {how}, "
                  f"{'cache ' + Path(doc['cache']).name if doc['cache'] else 'context only'}"
                  f"{', prediction from ' + Path(doc['curve']).name if doc.get('curve') else ''}"
                  f"{'; inputs made by ' + ' and '.join(f'`{c}`' for c in doc['inputs']) if doc.get('inputs') else ''}):", "",
                  "| prompt | task | all pairs: median (min-max) | predicted | answer | others (cores) | " +
                  " | ".join(f"{k} pair{'s' if k > 1 else ''}: max dev / differs" for k in WINDOWS) + " |",
                  "|---|---|---|---|---|---|" + "---|" * len(WINDOWS)]
        for r in doc["rows"]:
            cells = [f"{r['by_k'][str(k)]['max_dev']:.1%} / {r['by_k'][str(k)]['differs']:.0%}" if str(k) in r["by_k"]
                     else "-" for k in WINDOWS]
            pred = f"{r['predicted']:.2f}x" if r.get("predicted") else "-"
            lines.append(f"| {r['prompt']} | {r['task']} | {r['median']:.2f}x ({min(r['ratios']):.2f}-{max(r['ratios']):.2f}) "
                         f"| {pred} | {r['answer']} | {r['others']:.2f} | " + " | ".join(cells) + " |")
        lines.append("")
    s = summarise([r for doc in docs for r in doc["rows"]])
    lines += ["max dev: the farthest a window's median lies from all pairs' median; differs: the share of windows "
              "whose answer (from their spread) is not all pairs' answer. Over all rows: " +
              "; ".join(f"{k} pair{'s' if k != '1' else ''}: medians within {v['max_dev']:.1%}, "
                        f"{v['differs']:.0%} of windows answer otherwise" for k, v in s["by_k"].items()) +
              f". The smallest window that never answers otherwise: {s['enough'] or 'none'} pairs; "
              f"generate's default --runs is {RUNS} (integrations.compare.RUNS, whose docstring says why).", ""]
    return "\n".join(lines)


def write_report(docs: list, results_md: Path) -> None:
    text = results_md.read_text(encoding="utf-8") if results_md.is_file() else "# Results\n"
    section = report(docs)
    if SECTION in text:
        head, rest = text.split(SECTION, 1)
        tail = rest.split("\n## ", 1)
        text = head + section + ("\n## " + tail[1] if len(tail) > 1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    results_md.write_text(text, encoding="utf-8")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m", help="GGUF path or a lookupkit.models name")
    ap.add_argument("--text", type=Path, default=SHARED / "corpora" / "wiki.test.raw", help="held-out paragraphs")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--skip", type=int, default=0, help="paragraphs skipped before the first prompt")
    ap.add_argument("--tasks", default="wiki,copy")
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--draft", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--policy", choices=("lookupkit", "llama.cpp"), default="lookupkit")
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--curve", type=Path, help="a calibrate curve: the prediction beside each row")
    ap.add_argument("--out", type=Path, help="results JSON (default: bench/results/generate-verdict-<date>.json); "
                    "a run is added to the runs it already holds")
    ap.add_argument("--inputs", action="append", default=[], help="a command that made --cache or --curve (recorded "
                    "for the report; repeat for each)")
    ap.add_argument("--report", action="store_true", help="write the section of bench/RESULTS.md from every run in --out")
    args = ap.parse_args(argv)
    args.command = COMMAND + " " + " ".join(argv if argv is not None else os.sys.argv[1:])
    if not args.text.is_file():
        raise SystemExit(f"error: {args.text} not found: give --text (WikiText-103 test paragraphs, ../shared/corpora)")
    doc = run(args)
    out = args.out or RESULTS / f"generate-verdict-{doc['date']}.json"
    runs = json.loads(out.read_text(encoding="utf-8"))["runs"] if out.is_file() else []
    runs.append(doc)
    out.write_text(json.dumps({"bench": "generate-verdict", "runs": runs}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(runs)} runs)")
    if args.report:
        write_report(runs, RESULTS.parent / "RESULTS.md")


if __name__ == "__main__":
    main()
