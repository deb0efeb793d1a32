"""Replay a model's generations with the policy drafting from each source, trust on and off (package docstring).

    python -m lookupkit.bench.sources --generations gens-s22.json --caches DIR [--own gemma-own] [-o out.json]

Per task the sequences are replayed in order through one server slot (replay.requests, as `lookupkit
replay-requests` does: the Drafter, its trust and what it learns kept from one to the next): `context` drafts
from the sequence alone;
`static` adds the task's static cache (bench.serve.tasks.TASK_CACHE); `dynamic` a dynamic cache of the task's
earlier sequences and `history` a History of them (what `lookupkit serve --learn dynamic|history` would have
learnt); `own:NAME` the static cache DIR/NAME.lkc (a cache of the model's own outputs), with DIR/NAME.policy.json
as its table when there is one. Each is priced by the verify-cost curve: the predicted speed-up is the tokens
decoded over the verify steps' cost (replay.requests.summary), in units of one plain step. The
rows are replays of one fixed text each, so they differ only by what each source drafts (no timing noise).
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

from lookupkit.bench.harness import RESULTS, entry, git_state, machine, write_text
from lookupkit.bench.serve.run import CURVE, POLICY_DRAFT as N_DRAFT  # the serving bench's policy rows

TRUST = {"on": True, "off": False}  # the policy's online trust (policy.trust) with its defaults, or none


def replay_task(seqs: list[dict], cost, table_path, static, learn: str, trust: bool) -> dict:
    """One task's sequences in order through one server slot (replay.requests: a Drafter kept across them, as
    `lookupkit serve` keeps one per slot, learning each as `learn` says); predicted speed-up and totals."""
    from lookupkit import Drafter, History
    from lookupkit.replay.requests import replay_requests, summary

    drafter = Drafter(static=static, policy="lookupkit", verify_cost=cost, policy_table=table_path,
                      history=History() if learn == "history" else None, trust=trust)
    requests = [(g["tokens"][:g["prompt_len"]], g["tokens"][g["prompt_len"]:]) for g in seqs]
    out = summary(replay_requests(requests, drafter, N_DRAFT, learn), cost)
    return {"speedup": out["predicted_speedup"], "drafted": out["drafted"], "accepted": out["accepted"],
            "calls": out["calls"], "tokens": out["tokens"]}


def run(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.sources", description=__doc__.splitlines()[0])
    ap.add_argument("--generations", type=Path, required=True, help="python -m lookupkit.bench.sources.generations' JSON")
    ap.add_argument("--caches", type=Path, required=True, help="the serving bench's caches folder")
    ap.add_argument("--own", default="", help="comma-separated NAMEs of further caches in --caches (NAME.lkc)")
    ap.add_argument("--own-tasks", default="prose,copy", help="the tasks the --own caches are of the domain of")
    ap.add_argument("--curve", type=Path, default=CURVE)
    ap.add_argument("--table", type=Path, help="the policy table (default: the model's shipped one)")
    ap.add_argument("-o", "--output", type=Path)
    a = ap.parse_args(argv)
    from lookupkit import StaticCache
    from lookupkit.bench.serve.tasks import TASK_CACHE
    from lookupkit.policy.confidence import for_model
    from lookupkit.verify_cost import VerifyCost
    from lookupkit.replay.tuning import generations

    doc, seqs, _ = generations(a.generations)
    cost = VerifyCost.of(a.curve)
    table_path = a.table or for_model(doc.get("model", ""))
    own = [n for n in a.own.split(",") if n]
    results = {"kind": "sources", "date": datetime.date.today().isoformat(), "git": git_state(), "machine": machine(),
               "generations": str(a.generations), "seed": doc.get("seed"), "model": doc.get("model"),
               "curve": str(a.curve), "table": str(table_path or "the bundled default"), "n_draft": N_DRAFT, "rows": []}
    for task in dict.fromkeys(g["task"] for g in doc["sequences"]):
        mine = [g for g in doc["sequences"] if g["task"] == task]
        configs = [("context", None, "off", table_path), ("static", TASK_CACHE[task], "off", table_path),
                   ("dynamic", None, "dynamic", table_path), ("history", None, "history", table_path)]
        if task in a.own_tasks.split(","):
            for name in own:
                t = a.caches / f"{name}.policy.json"
                configs.append((f"own:{name}", name, "off", t if t.is_file() else table_path))
        for label, cache, learn, tab in configs:
            static = StaticCache.open(a.caches / f"{cache}.lkc") if cache else None
            for trust_name, trust in TRUST.items():
                row = replay_task(mine, cost, tab, static, learn, trust)
                results["rows"].append({"task": task, "config": label, "trust": trust_name, "sequences": len(mine), **row})
                print(f"{task:6} {label:16} trust {trust_name:3}: {row['speedup']:.3f}x predicted, "
                      f"{row['accepted']}/{row['drafted']} accepted", flush=True)
    out = a.output or RESULTS / f"sources-{results['date']}.json"
    write_text(out, json.dumps(results, indent=1))
    print(markdown(results))
    print(f"wrote {out}")


def markdown(results: dict) -> str:
    """Predicted speed-up per task and configuration, trust off and on, and each against the context alone."""
    rows = results["rows"]
    cell = {(r["task"], r["config"], r["trust"]): r for r in rows}
    lines = ["| task | source | trust off | trust on | on / off | vs context (trust on) |", "|---|---|---:|---:|---:|---:|"]
    for task, config in dict.fromkeys((r["task"], r["config"]) for r in rows):
        off, on = cell[(task, config, "off")]["speedup"], cell[(task, config, "on")]["speedup"]
        base = cell[(task, "context", "on")]["speedup"]
        lines.append(f"| {task} | {config} | {off:.3f} | {on:.3f} | {on / off:.3f} | {on / base:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    entry(run, argv)


if __name__ == "__main__":
    main()
