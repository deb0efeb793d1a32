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
the section of bench/RESULTS.md from all of them (report: the windows' analysis and that section).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import date
from pathlib import Path

from lookupkit.bench.generations import paragraphs, prompt_text
from lookupkit.bench.harness import RESULTS, SHARED, command, entry, git_state, loadavg, machine, write_text
from lookupkit.bench.verdict.report import analyse, summarise, write_report


def run(args) -> dict:
    from lookupkit import Drafter, models
    from lookupkit.policy.confidence import for_model
    from lookupkit.integrations.compare import compare
    from lookupkit.integrations.llama_model import open_model
    from lookupkit.static import StaticCache
    from lookupkit.verify_cost import VerifyCost

    path = models.resolve(args.model)
    table = for_model(path)
    cost = VerifyCost.of(str(args.curve)) if args.curve else None
    static = StaticCache.open(args.cache) if args.cache else None
    paras = paragraphs(args.text)[args.skip:args.skip + args.prompts]
    mach = machine(gate=True)  # the quiet gate before the timing, not after it
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
            "pairs": args.pairs, "inputs": args.inputs, "machine": mach, "git": git_state(), "rows": rows,
            "summary": summarise(rows)}


def _main(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.verdict", description=__doc__.splitlines()[0])
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
    args.command = command("lookupkit.bench.verdict", argv)
    if not args.text.is_file():
        raise SystemExit(f"error: {args.text} not found: give --text (WikiText-103 test paragraphs, ../shared/corpora)")
    doc = run(args)
    out = args.out or RESULTS / f"generate-verdict-{doc['date']}.json"
    runs = json.loads(out.read_text(encoding="utf-8"))["runs"] if out.is_file() else []
    runs.append(doc)
    write_text(out, json.dumps({"bench": "generate-verdict", "runs": runs}, indent=1) + "\n")
    print(f"wrote {out} ({len(runs)} runs)")
    if args.report:
        write_report(runs, RESULTS.parent / "RESULTS.md")


def main(argv=None) -> None:
    entry(_main, argv)


if __name__ == "__main__":
    main()
