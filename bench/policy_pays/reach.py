"""How far drafts hold on a model's own generations (issue 31, part 2): the evidence for the chain's length rule.

    python -m lookupkit.bench.policy_pays.reach GENS.json --curve CURVE.json [--paragraphs 0:16] [-o OUT.json]

GENS.json is `python -m lookupkit.bench.generations`' output (held-out WikiText-103 *test* paragraphs, tasks wiki
and copy). Two tables per task, on the generated positions of the chosen paragraphs:
* runs: at each position that has an earlier match in the sequence, the longest (m tokens) and how many tokens in a
  row its continuation gets right — P(the first is right), the mean run and P(run >= 8 / 16 / 32 / 64), by m (runs are
  cut by the sequence's end, so the long ones are a lower bound);
* calls: a policy Drafter (the generating model's table, --curve's costs, trust on unless --no-trust) replays each sequence as a server
  would, and its calls are grouped by how many tokens they drafted: what the policy expected them to yield
  (`Drafter.expected`) against what they yielded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lookupkit.bench.harness import entry, write_text
from lookupkit.errors import InputError

MATCH_BINS = (1, 2, 3, 4, 8, 12, 16, 24, 32, 48, 64, 128)
DRAFT_BINS = ((0, 0), (1, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 1024))


def runs_by_match(seq: np.ndarray, start: int) -> list[tuple[int, int]]:
    """(m, run) at each position from `start` on: m the longest suffix of seq[:i] seen earlier (its latest place),
    run how many tokens from i on equal the ones after that place."""
    out, n = [], len(seq)
    prev = np.zeros(n + 1, np.int64)  # prev[j]: common suffix length of seq[:i-1] and seq[:j]
    for i in range(1, n + 1):
        cur = np.zeros(n + 1, np.int64)
        cur[1:i] = np.where(seq[:i - 1] == seq[i - 1], prev[:i - 1] + 1, 0)
        prev = cur
        if start <= i < n and i > 1 and cur[1:i].max() > 0:
            m = int(cur[1:i].max())
            j = 1 + int(np.flatnonzero(cur[1:i] == m)[-1])
            r = 0
            while i + r < n and seq[j + r] == seq[i + r]:
                r += 1
            out.append((m, r))
    return out


def run_table(pairs: list[tuple[int, int]]) -> list[dict]:
    edges = MATCH_BINS + (1 << 30,)
    rows = []
    for lo, hi in zip(edges, edges[1:]):
        rs = np.array([r for m, r in pairs if lo <= m < hi])
        if len(rs):
            rows.append({"m": f"{lo}-{hi - 1}" if hi < 1 << 30 else f">={lo}", "positions": len(rs),
                         "p_first": float(np.mean(rs >= 1)), "mean_run": float(rs.mean()),
                         **{f"p_run_{k}": float(np.mean(rs >= k)) for k in (8, 16, 32, 64)}})
    return rows


def calls(seqs: list[tuple[list[int], int]], curve: Path, n_draft: int, trust: bool = True,
          model: str | None = None) -> list[tuple[int, float, int]]:
    """(drafted, expected, yielded) of every call a policy Drafter makes replaying the sequences (with the table
    lookupkit ships for `model`, the generations' GGUF file name, if any)."""
    from lookupkit import Drafter
    from lookupkit.policy import for_model

    table = for_model(model) if model else None
    out = []
    for tokens, p in seqs:
        prompt, resp = tokens[:p], tokens[p:]
        dr = Drafter(policy="lookupkit", verify_cost=curve, policy_table=table, trust=trust)
        dr.accept(prompt + resp[:1])  # the first token comes from the prompt's evaluation
        i = 1
        while i < len(resp) - 1:
            draft = dr.draft(None, n_draft)
            a = 0
            while a < len(draft) and i + a < len(resp) and draft[a] == resp[i + a]:
                a += 1
            got = min(a + 1, len(resp) - i)
            out.append((len(draft), dr.expected, got))
            dr.accept(resp[i:i + got])
            i += got
    return out


def call_table(rows: list[tuple[int, float, int]]) -> list[dict]:
    out = []
    for lo, hi in DRAFT_BINS:
        sel = [r for r in rows if lo <= r[0] <= hi]
        if sel:
            e, g = sum(r[1] for r in sel), sum(r[2] for r in sel)
            out.append({"drafted": f"{lo}-{hi}", "calls": len(sel), "tokens_drafted": sum(r[0] for r in sel),
                        "expected": e, "yielded": g, "yielded_over_expected": g / e})
    return out


def markdown(res: dict) -> str:
    lines = []
    for task, t in res["tasks"].items():
        lines += [f"**{task}** ({t['sequences']} sequences)", "",
                  "| match m | positions | P(first right) | mean run | P(run >= 8) | >= 16 | >= 32 | >= 64 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['m']} | {r['positions']:,} | {r['p_first']:.3f} | {r['mean_run']:.1f} | {r['p_run_8']:.2f} | "
                  f"{r['p_run_16']:.2f} | {r['p_run_32']:.2f} | {r['p_run_64']:.2f} |" for r in t["runs"]]
        lines += ["", "| call drafted | calls | tokens drafted | expected | yielded | yielded / expected |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['drafted']} | {r['calls']:,} | {r['tokens_drafted']:,} | {r['expected']:,.0f} | {r['yielded']:,} "
                  f"| {r['yielded_over_expected']:.2f} |" for r in t["calls"]]
        lines.append("")
    return "\n".join(lines)


def _main(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.policy_pays.reach", description=__doc__.splitlines()[0])
    ap.add_argument("generations", type=Path)
    ap.add_argument("--curve", type=Path, required=True, help="the model's `lookupkit calibrate` curve")
    ap.add_argument("--paragraphs", default="0:16", help="START:STOP of the paragraphs used (default: 0:16)")
    ap.add_argument("--draft", type=int, default=64)
    ap.add_argument("--no-trust", action="store_true", help="the Drafter without its online trust (policy.trust)")
    ap.add_argument("-o", "--output", type=Path)
    a = ap.parse_args(argv)
    from lookupkit.replay.tuning import generations

    doc = generations(a.generations)[0]
    try:
        lo, hi = (int(x) for x in a.paragraphs.split(":"))
    except ValueError:
        raise InputError(f"--paragraphs takes START:STOP, got {a.paragraphs!r}") from None
    res = {"generations": a.generations.name, "curve": str(a.curve), "paragraphs": [lo, hi], "draft": a.draft,
           "trust": not a.no_trust, "tasks": {}}
    for task in dict.fromkeys(g["task"] for g in doc["sequences"]):
        seqs = [(g["tokens"], g["prompt_len"]) for g in doc["sequences"]
                if g["task"] == task and lo <= g["paragraph"] < hi]
        pairs = [x for tokens, p in seqs for x in runs_by_match(np.asarray(tokens), p)]
        res["tasks"][task] = {"sequences": len(seqs), "runs": run_table(pairs),
                              "calls": call_table(calls(seqs, a.curve, a.draft, not a.no_trust, doc.get("model")))}
    if a.output:
        write_text(a.output, json.dumps(res, indent=1) + "\n")
    print(markdown(res))


def main(argv=None) -> None:
    entry(_main, argv)


if __name__ == "__main__":
    main()
