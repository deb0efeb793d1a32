"""`lookupkit replay-requests`: would learning pay on my traffic? A log of requests and responses replayed
through one server slot, learning as `lookupkit serve --learn` would, beside the same replay learning
nothing; with a `lookupkit calibrate` curve, the decode-time speed-up the server should measure."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lookupkit.cli.common import guarded, print_json
from lookupkit.cli.model_options import (DRAFT, LCD, LCS, MODEL, POLICY, POLICY_TABLE, VERIFY_COST, LearnMode,
                                         PolicyName)
from lookupkit.rules import check_n_draft, DEFAULT_CTX, PARALLEL_MAX


EXAMPLES = """Examples:

\b
  lookupkit replay-requests served.jsonl -m gemma-3-270m --policy lookupkit --learn history --verify-cost gemma.curve.json
  lookupkit replay-requests served.jsonl -m gemma-3-270m --learn dynamic --json

The log: one JSON object per line, {"prompt": [token ids], "response": [token ids]}, optionally "max_tokens":
the request's budget (no draft runs past it; without it, the response's length).
"""


@guarded
def replay_requests_cmd(
    log: Path = typer.Argument(..., metavar="LOG.jsonl", help="The requests, in the order they were served."),
    model: str = MODEL,
    lcs: Optional[Path] = LCS,
    lcd: Optional[Path] = LCD,
    policy: PolicyName = POLICY,
    policy_table: Optional[Path] = POLICY_TABLE,
    verify_cost: Optional[str] = VERIFY_COST,
    n_draft: int = DRAFT,
    n_ctx: int = typer.Option(DEFAULT_CTX, "-c", "--ctx-size", help="The slot's context (the server's -c / --parallel)."),
    learn: Optional[LearnMode] = typer.Option(None, "--learn", help="What each request teaches the next, as "
                                              "`lookupkit serve --learn` (default: history with --policy lookupkit, "
                                              "else dynamic; history needs --policy lookupkit)."),
    history_budget: Optional[int] = typer.Option(None, "--history-budget", metavar="N", help="--learn history: "
                                                 "tokens kept (as the server's)."),
    parallel: int = typer.Option(1, "--parallel", min=1, max=PARALLEL_MAX, metavar="N", help="Replay as N clients "
                                 "send it: N requests in flight, each in its slot, the drafts of a step priced together "
                                 "as the server prices them; predicts the aggregate decode speed-up (needs --verify-cost)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
) -> None:
    """Replay a request log with what a server learns carried across requests, beside learning nothing."""
    from lookupkit import models
    from lookupkit.errors import InputError
    from lookupkit.integrations.engines import drafter_factory
    from lookupkit.replay.requests import predicted, read_log, replay_parallel, replay_requests, summary
    from lookupkit.tokenizer.vocab import fingerprint, load
    from lookupkit.verify_cost import VerifyCost

    check_n_draft(n_draft)
    learn = learn or (LearnMode.history if policy.value == "lookupkit" else LearnMode.dynamic)
    if learn.value == "history" and policy.value != "lookupkit":
        raise InputError("--learn history drafts through lookupkit's policy: add --policy lookupkit")
    path = models.resolve(model)
    vocab = load(path)
    requests = read_log(log, n_vocab=len(vocab.tokens))
    cost = VerifyCost.of(verify_cost) if verify_cost is not None else None
    if parallel > 1 and cost is None:
        raise InputError("--parallel prices each step's drafts by what they cost together: give --verify-cost "
                         "CURVE.json (lookupkit calibrate --slots N)")
    static = dynamic = None
    if lcs is not None:
        from lookupkit.static import StaticCache

        static = StaticCache.open(lcs, expect_vocab=fingerprint(vocab))
    if lcd is not None:
        from lookupkit.formats import read_ngrams

        dynamic = read_ngrams(lcd)
    results = {}
    for mode in dict.fromkeys(("off", learn.value)):
        history = None
        if mode == "history":
            from lookupkit.draft.history import History
            from lookupkit.rules import HISTORY_BUDGET

            history = History(HISTORY_BUDGET if history_budget is None else history_budget, vocab=fingerprint(vocab))
        make, _ = drafter_factory(path, static=static, dynamic=dynamic, policy=policy.value, policy_table=policy_table,
                                  verify_cost=cost, history=history)
        if parallel > 1:
            traces, steps = replay_parallel(requests, make, n_draft, mode, cost, parallel, n_ctx=n_ctx)
        else:
            traces, steps = replay_requests(requests, make(), n_draft, mode, n_ctx=n_ctx), None
        results[mode] = {**summary(traces, cost), **({"aggregate": {
            **steps, "predicted_speedup": steps["plain_cost"] / steps["cost"]}} if steps else {}), "per_request": [
            {"n_prompt": t.n_prompt, "n_response": t.n_response, "calls": len(t.drafted), "drafted": sum(t.drafted),
             "accepted": sum(t.accepted), **({"predicted_speedup": t.predicted_speedup(cost)} if cost else {})}
            for t in traces]}
    if as_json:
        print_json({"log": str(log), "learn": learn.value, "n_draft": n_draft, "policy": policy.value, "parallel": parallel,
                    "verify_cost": cost.describe() if cost else None, "results": results})
        return
    typer.echo(f"{log}: {len(requests)} requests, {results['off']['tokens']:,} response tokens after the first of each")
    for mode, r in results.items():
        rate = r["accepted"] / r["drafted"] if r["drafted"] else 0.0
        line = (f"  --learn {mode:<8} {r['calls']:,} verify steps, {r['accepted']:,} of {r['drafted']:,} drafted "
                f"tokens accepted ({rate:.1%})")
        if "aggregate" in r:
            line += (f"; {parallel} clients: predicted aggregate decode speed-up {r['aggregate']['predicted_speedup']:.2f}x "
                     f"({r['aggregate']['steps']:,} steps against {r['aggregate']['plain_steps']:,} plain)")
        elif "predicted_speedup" in r:
            line += f"; predicted decode speed-up {r['predicted_speedup']:.2f}x"
        typer.echo(line)
    if learn.value != "off" and cost is not None and predicted(results["off"]):
        gain = predicted(results[learn.value]) / predicted(results["off"])
        typer.echo(f"learning ({learn.value}) predicts {gain:.2f}x the speed of learning nothing on this traffic")
    elif cost is None:
        typer.echo("(add --verify-cost CURVE.json from `lookupkit calibrate` for the predicted speed-up)")


def register(app: typer.Typer) -> None:
    app.command("replay-requests", epilog=EXAMPLES)(replay_requests_cmd)
