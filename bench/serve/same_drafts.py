"""Whether a change left what `lookupkit serve` drafts and emits as it was: a restructuring must not move a token.

Serves the serving bench's task prompts (the same seed, 1 client, greedy, on a 4-slot server with the policy rows'
flags) with the `lookupkit` of the Python given, so an older checkout installed in its own venv runs the very same
requests; writes per request a hash of the tokens it emitted and what it drafted and had accepted (the server's own
`draft_n` / `draft_n_accepted`). With --compare, says request by request whether a run of the other tree matched.
At one client a quantised model's output depends only on the batches drafting makes, so equal drafts give equal
tokens on one machine.

    python -m lookupkit.bench.serve.same_drafts --python /tmp/old/venv/bin/python -o before.json
    python -m lookupkit.bench.serve.same_drafts -o after.json --compare before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from lookupkit.bench.harness import command, entry, git_state, load_results, machine, write_text
from lookupkit.bench.serve import client
from lookupkit.bench.serve.run import CTX_PER_SLOT, CURVE, SLOTS, rows
from lookupkit.bench.serve.servers import Server, lookupkit_cmd
from lookupkit.bench.serve.tasks import TASK_CACHE, prompts
from lookupkit.errors import InputError

ROWS = ("lk:policy", "lk:policy-static")


def run(argv) -> None:
    from lookupkit import models
    from lookupkit.bench.engines.run import _vocab_tokenizer
    from lookupkit.bench.suffix_code_task import task_dir

    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve.same_drafts", description=__doc__.split("\n")[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter whose `lookupkit serve` is run")
    p.add_argument("--caches", type=Path, required=True, help="the serving bench's cache folder")
    p.add_argument("--code", type=Path, help="the code task's folder (default: the bench cache's)")
    p.add_argument("-m", "--model", default="gemma-3-270m")
    p.add_argument("--tasks", default="prose,copy,code")
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--n-new", type=int, default=256)
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument("--compare", type=Path, help="an earlier run's output: exit 1 unless every request matches")
    a = p.parse_args(argv)
    before = None if a.compare is None else load_results(a.compare, "same-drafts", "a same_drafts run",
                                                          "python -m lookupkit.bench.serve.same_drafts")["requests"]
    if not Path(a.python).is_file():
        raise InputError(f"--python {a.python} not found: give the interpreter of the checkout to serve with")
    model = models.resolve(a.model)
    tokenize = _vocab_tokenizer(Path(model))
    bos = tokenize("")[0]
    by_name = {r["name"]: r for r in rows(CURVE)}
    out = {}
    for task in a.tasks.split(","):
        ids = prompts(task, a.prompts, a.seed, tokenize, bos, a.code or task_dir(), a.n_new)
        lkc = a.caches / f"{TASK_CACHE[task]}.lkc"
        if not lkc.is_file():
            raise InputError(f"{lkc} not found: bench/RESULTS.md says how the serving bench's caches are made")
        for name in ROWS:
            extra = [x.replace("{lkc}", str(lkc)) for x in by_name[name]["args"]]
            cmd = lambda port, extra=extra: lookupkit_cmd(model, port, 2, SLOTS * CTX_PER_SLOT, SLOTS, extra,  # noqa: E731
                                                          python=a.python)
            with Server(cmd, name=name) as s:
                got = [client.complete(s.port, q, a.n_new) for q in ids]
            out[f"{name}/{task}"] = [{"tokens_sha256": hashlib.sha256(json.dumps(r["tokens"]).encode()).hexdigest(),
                                      "n": r["n_gen"], "drafted": r["drafted"], "accepted": r["accepted"]} for r in got]
            print(f"{name} {task}: drafted {sum(r['drafted'] or 0 for r in got)}, accepted "
                  f"{sum(r['accepted'] or 0 for r in got)}", flush=True)
    write_text(a.output, json.dumps({"kind": "same-drafts", "date": time.strftime("%Y-%m-%d"), "git": git_state(),
                                     "python": a.python, "machine": machine(),
                                     "command": command("lookupkit.bench.serve.same_drafts", argv),
                                     "requests": out}, indent=1))
    if before is not None:
        differ = [(k, i) for k in out for i, r in enumerate(out[k]) if before.get(k, [])[i:i + 1] != [r]]
        n = sum(len(v) for v in out.values())
        print(f"{n - len(differ)} of {n} requests identical to {a.compare}" + (f"; differ: {differ}" if differ else ""))
        if differ:
            sys.exit(1)


if __name__ == "__main__":
    entry(run)
