"""After a restart, are the first requests as fast as before it? (issue 23)

`lookupkit serve --policy lookupkit --learn history --state FILE` serves --prompts code-task prompts three
times: pass 1 on a fresh history, pass 2 the same prompts again (drafted from what pass 1 taught), then the
server is stopped with SIGTERM (it saves the history), started again from FILE, and pass 3 sends them once
more. Pass 3 should run as pass 2 did; a fourth row, a server started with --state-reset, shows what a
restart without the state gives. Decode tokens/s from the server's timings; time to ready of each start.

    python -m lookupkit.bench.serve.restart --caches DIR [-o OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from lookupkit.errors import LookupkitError
from lookupkit.rules import DEFAULT_CTX
from lookupkit.bench.harness import RESULTS, command, git_state, machine, write_text
from lookupkit.bench.serve import client
from lookupkit.bench.serve.run import CURVE, POLICY_DRAFT, log
from lookupkit.bench.serve.servers import Server, lookupkit_cmd
from lookupkit.bench.serve.tasks import TASK_CACHE, prompts


def one_pass(server: Server, ids: list, n_new: int) -> dict:
    runs = [client.complete(server.port, p, n_new) for p in ids]
    gen = sum(r["n_gen"] - 1 for r in runs)
    return {"decode_tok_per_s": gen / sum(r["t_gen_s"] for r in runs),
            "drafted": sum(r["drafted"] or 0 for r in runs), "accepted": sum(r["accepted"] or 0 for r in runs),
            "wall_tok_per_s": sum(r["n_gen"] for r in runs) / sum(r["wall_s"] for r in runs)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve.restart", description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("--caches", type=Path, required=True, help="the serving bench's caches (code-django42.lkc)")
    ap.add_argument("--code", type=Path, help="the code task's folder (default as the serving bench's)")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--n-new", type=int, default=128)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("-o", "--output", type=Path, default=RESULTS / "serve-restart.json")
    args = ap.parse_args(argv)
    args.argv = argv  # recorded as the command
    try:
        run(args)
    except LookupkitError as exc:
        sys.exit(f"error: {exc}")


def run(args) -> None:
    from lookupkit import models
    from lookupkit.bench.engines.run import _vocab_tokenizer
    from lookupkit.bench.suffix_code_task import task_dir

    model = models.resolve(args.model)
    tokenize = _vocab_tokenizer(model)
    code = args.code or task_dir()
    ids = prompts("code", args.prompts, args.seed, tokenize, tokenize("")[0], code, args.n_new)
    flags = ["--policy", "lookupkit", "--verify-cost", str(CURVE), "--draft", str(POLICY_DRAFT),
             "-lcs", str(args.caches / f"{TASK_CACHE['code']}.lkc"), "--learn", "history"]
    out = {"command": command("lookupkit.bench.serve.restart", args.argv), "git": git_state(),
           "machine": machine(gate=True), "flags": flags, "prompts": args.prompts, "n_new": args.n_new}
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "served.lkh"
        make = lambda extra: (lambda port: lookupkit_cmd(model, port, 2, DEFAULT_CTX, 1, [*flags, "--state", str(state), *extra]))  # noqa: E731
        with Server(make([]), Path(tmp) / "1.log", "first") as s:
            out["ready_fresh_s"] = s.t_ready_s
            out["pass1"] = one_pass(s, ids, args.n_new)
            out["pass2"] = one_pass(s, ids, args.n_new)
        out["state_bytes"] = state.stat().st_size
        with Server(make([]), Path(tmp) / "2.log", "restarted") as s:
            out["ready_restart_s"] = s.t_ready_s
            out["pass3"] = one_pass(s, ids, args.n_new)
        with Server(make(["--state-reset"]), Path(tmp) / "3.log", "reset") as s:
            out["ready_reset_s"] = s.t_ready_s
            out["pass_reset"] = one_pass(s, ids, args.n_new)
    for k in ("pass1", "pass2", "pass3", "pass_reset"):
        log(f"{k}: {out[k]['decode_tok_per_s']:.1f} decode tok/s, {out[k]['accepted']}/{out[k]['drafted']} accepted")
    out["restart_over_before"] = out["pass3"]["decode_tok_per_s"] / out["pass2"]["decode_tok_per_s"]
    write_text(args.output, json.dumps(out, indent=1) + "\n")
    log(f"after the restart {out['restart_over_before']:.2f}x the speed before it; wrote {args.output}")


if __name__ == "__main__":
    main()
