"""Gemma 3 270M on the code task (issue 15): the policy with the suffix source beside the same row without it.

The engines bench (bench/engines/run.py) on the django 4.2 -> 5.0 code task of bench/suffix_code_task.py, in one
run with its machinery (rows interleaved and rotated per prompt, every llama-server loaded at once, the
results rewritten after every round, --deadline). Rows, each generating exactly --n-new greedy tokens per
prompt (an end-of-generation token does not stop them; 2 threads): llama-server b11434 with no drafting,
`ngram-mod`, `ngram-simple` and `ngram-cache -lcs` of the 2-gram code cache (`lookupkit convert`);
llama-cpp-python plain; lookupkit with llama.cpp's rule on the 2-gram cache; lookupkit's policy on the
orders-2-6 cache with its suffix index, at each --policy-drafts n_draft, once with a table learnt without
the index (its suffix rows are zero: the policy gets no index, policy.chain.make_policy, and makes no suffix
lookup) and once with a table learnt with it (the suffix source on). Same cache, same curve, same prompts:
the two rows differ in the suffix source alone.

Prompts: eval.npz's files (one document per file, keys in path order) with an odd index in that order (the
even ones tuned the tables: never reported) and at least --prompt-tokens + --n-new ids;
random.Random(--seed).sample of --prompts of them; a prompt is BOS and the file's first --prompt-tokens ids.
After the timed rounds, every llama-cpp-python row generates each prompt of the first repetition once more,
untimed, with the logits rows of every batch: each emitted token must be the argmax of its row in its batch
(as tests/test_real_model.py checks), the tokens must equal the timed run's, and the drafted tokens' sources
are counted (the row without the suffix source must draft none from it).

    python -m lookupkit.bench.code_engines --data DATA/code --caches CACHES --curve curve.json --report
    python -m lookupkit.bench.code_engines --data DIR --caches DIR --quick            # 2 prompts x 32 tokens

--data DIR: eval.npz, table-sx.json, table-nosx.json (`lookupkit tune-policy` on the even-indexed eval files,
with and without the index); --caches DIR: code-o6-sx.lkc (`lookup-create --orders 2-6 --suffix-index` of
the earlier release) and code-2.lkc (2-gram only). Writes bench/results/code-engines-<date>-vm.json
(--quick: code-engines-quick.json in the bench cache) and, with --report, bench/ENGINES_CODE.md
(bench/code_engines/report.py; --quick: ENGINES_CODE-quick.md in the bench cache).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from lookupkit.errors import InputError
from lookupkit.bench import llama_server
from lookupkit.bench.engines.rows import public, server_rows
from lookupkit.bench.engines.run import Session, deadline_of, expected_runs, log, run_all, to_lcs, versions
from lookupkit.bench.models import bench_dir
from lookupkit.bench.harness import entry, command, git_state, machine

TASK = "code"
CACHE_SX, CACHE_2 = "code-o6-sx.lkc", "code-2.lkc"  # in --caches
EVAL, TABLE_SX, TABLE_NOSX = "eval.npz", "table-sx.json", "table-nosx.json"  # in --data
LABEL_SX, LABEL_2 = "code-o6-sx", "code-2"  # the rows' cache labels
ENGINES = ("llama-server", "llama-cpp-python")


# -- prompts ---------------------------------------------------------------------------------------

def select_prompts(eval_npz: Path, k: int, seed: int, prompt_tokens: int, n_new: int) -> list[dict]:
    """k of the odd-indexed files of eval_npz (index in key order) holding >= prompt_tokens + n_new ids,
    random.Random(seed).sample'd: {index, key, n_tokens, ids (the first prompt_tokens, no BOS)} each."""
    try:
        with np.load(eval_npz) as z:
            keys = sorted(z.files)
            odd = [(i, key, z[key]) for i, key in enumerate(keys) if i % 2 == 1]
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the code task's eval ids {eval_npz}: {exc}") from None
    fit = [(i, key, ids) for i, key, ids in odd if len(ids) >= prompt_tokens + n_new]
    if len(fit) < k:
        raise InputError(f"{eval_npz}: {len(fit)} odd-indexed files hold >= {prompt_tokens} + {n_new} ids, "
                         f"{k} asked for")
    return [{"index": i, "key": key, "n_tokens": len(ids), "ids": [int(t) for t in ids[:prompt_tokens]]}
            for i, key, ids in random.Random(seed).sample(fit, k)]


# -- rows ------------------------------------------------------------------------------------------

def code_rows(statics: dict, tables: dict, cost, policy_drafts, rule_n: int) -> list[dict]:
    """The llama-cpp-python rows: plain, llama.cpp's rule on the 2-gram cache, and per n_draft the policy on
    the orders-2-6 cache without (tables["nosx"]) and with (tables["sx"]) the suffix source. Refuses tables
    that do not make that difference: a no-suffix table that has learnt the source, a suffix table that has
    not, a cache without the index."""
    from lookupkit import Drafter
    from lookupkit.policy.confidence import load as load_table
    from lookupkit.policy.chain import suffix_on

    static = statics[LABEL_SX]
    if static.suffix is None:
        raise InputError(f"{static.name} has no suffix index: build it with lookup-create --orders 2-6 --suffix-index")
    for key, want in (("nosx", False), ("sx", True)):
        if suffix_on(load_table(tables[key])[0]) != want:
            raise InputError(f"{tables[key]} has {'learnt' if not want else 'not learnt'} the suffix source: learn "
                             f"it with lookupkit tune-policy on a cache {'without' if not want else 'with'} the index")

    def policy_drafter(table):
        return lambda: Drafter(static=static, policy="lookupkit", verify_cost=cost, policy_table=table)

    rows = [{"name": "lcpp:plain", "engine": "llama-cpp-python", "kind": "plain", "plain": True},
            {"name": "lk:rule-code2", "engine": "llama-cpp-python", "kind": "lookupkit", "policy": "llama.cpp",
             "cache": LABEL_2, "n_draft": rule_n, "drafter": lambda: Drafter(static=statics[LABEL_2])}]
    for n in policy_drafts:
        for key, other in (("nosx", "sx"), ("sx", "nosx")):
            rows.append({"name": f"lk:policy-{key}-n{n}", "engine": "llama-cpp-python", "kind": "lookupkit",
                         "policy": "lookupkit", "cache": LABEL_SX, "policy_table": str(tables[key]),
                         "suffix": key == "sx", "pair": f"lk:policy-{other}-n{n}", "rule_row": "lk:rule-code2",
                         "n_draft": n, "drafter": policy_drafter(tables[key])})
    return rows


def table_about(path: Path) -> dict:
    """What a policy table says it was learnt on, its cache's list of sources cut to their token count."""
    about = dict(json.loads(path.read_text()).get("about") or {})
    if isinstance(about.get("cache_corpus"), dict):
        about["cache_corpus"] = {"n_tokens": about["cache_corpus"].get("n_tokens")}
    return about


# -- the greedy check ------------------------------------------------------------------------------

def greedy_emitted(prompt_len: int, batches: list) -> tuple[list[int], bool]:
    """What a greedy verify loop emits from its batches ((first position, tokens, argmax of each logits row)
    in order): per batch the argmax as far as it agrees with the draft, plus one. The flag says whether the
    batches chain up (each starts at the last emitted token, one logits row per token)."""
    out, chained = [], True
    for n, (pos, toks, greedy) in enumerate(batches):
        start_ok = (pos == prompt_len - 1 and len(toks) == 1) if n == 0 else (
            pos == prompt_len + len(out) - 1 and int(toks[0]) == out[-1])
        chained &= start_ok and len(greedy) == len(toks)
        draft = toks[1:]
        j = next((i for i in range(len(draft)) if greedy[i] != draft[i]), len(draft))
        out.extend(int(t) for t in greedy[:j + 1])
    return out, chained


def counting_sources(drafter) -> Counter:
    """Count the sources (rules.SOURCE_NAMES) of every token drafter.draft returns from now on."""
    sources, inner = Counter(), drafter.draft

    def draft(*args, **kwargs):
        out = inner(*args, **kwargs)
        sources.update(drafter.last_sources)
        return out

    drafter.draft = draft
    return sources


def greedy_checks(llm, rows: list[dict], prompts: list, runs: list[dict], n_new: int) -> list[dict]:
    """Every llama-cpp-python row on every prompt of the first repetition once more, untimed, with the
    logits rows of each batch: emitted tokens against the batches' argmax and against the timed run."""
    from lookupkit.integrations.llama_cpp import generate

    timed = {(r["row"], r["prompt"]): r["tokens"] for r in runs if r["rep"] == 0}
    out = []
    for row in rows:
        if row["engine"] != "llama-cpp-python":
            continue
        for i, prompt in enumerate(prompts):
            if (row["name"], i) not in timed:
                continue
            drafter = row["drafter"]() if row.get("drafter") else None
            sources = counting_sources(drafter) if drafter is not None else Counter()
            batches = []
            g = generate(llm, prompt, n_new, drafter=drafter, n_draft=row.get("n_draft", 1), stop_at_eos=False,
                         on_batch=lambda pos, toks, logits: batches.append((pos, toks.copy(), logits.argmax(axis=1))))
            emitted, chained = greedy_emitted(len(prompt), batches)
            out.append({"row": row["name"], "prompt": i, "batches": len(batches),
                        "greedy": chained and emitted[:len(g.tokens)] == g.tokens,
                        "same_as_timed": g.tokens == timed[(row["name"], i)], "sources": dict(sources)})
    return out


# -- the run ---------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.code_engines", description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m", help="a GGUF path or a lookupkit.models name")
    ap.add_argument("--data", type=Path, required=True, help=f"folder with {EVAL}, {TABLE_SX}, {TABLE_NOSX}")
    ap.add_argument("--caches", type=Path, required=True, help=f"folder with {CACHE_SX} and {CACHE_2}")
    ap.add_argument("--curve", type=Path, help="lookupkit calibrate curve of this model (default: measure one)")
    ap.add_argument("--max-k", type=int, default=64, help="calibrate --max-k when the bench measures the curve")
    ap.add_argument("--calibrate-reps", type=int, default=20)
    ap.add_argument("--engines", default=",".join(ENGINES), help="llama-cpp-python always runs (lookupkit's rows)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=256, help="ids of the file in the prompt (after BOS)")
    ap.add_argument("--n-new", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rule-n", type=int, default=8, help="n_draft of llama.cpp's rule (llama-server's ngram-cache: 8)")
    ap.add_argument("--policy-drafts", default="16,32", help="the policy's n_draft values (each with and without sx)")
    ap.add_argument("--deadline", help="HH:MM (local time): start no prompt round after it; the results say so")
    ap.add_argument("--quick", action="store_true", help="2 prompts x 32 tokens, 1 rep; llama-server only if built")
    ap.add_argument("-o", "--output", type=Path)
    ap.add_argument("--report", action="store_true", help="render bench/ENGINES_CODE.md (--quick: in the bench cache)")
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.n_new, args.reps, args.calibrate_reps = 2, 32, 1, 2
    if min(args.prompts, args.prompt_tokens, args.n_new, args.reps) < 1:
        raise InputError("--prompts, --prompt-tokens, --n-new and --reps must be at least 1")
    args.deadline = deadline_of(args.deadline)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if set(args.engines) - set(ENGINES):
        bad = sorted(set(args.engines) - set(ENGINES))[0]
        raise InputError(f"unknown engine {bad!r} (engines: {', '.join(ENGINES)})")
    try:
        args.policy_drafts = sorted({int(x) for x in args.policy_drafts.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--policy-drafts takes whole numbers separated by commas, got {args.policy_drafts!r}") \
            from None
    args.files = {"eval": args.data / EVAL, "sx": args.data / TABLE_SX, "nosx": args.data / TABLE_NOSX,
                  LABEL_SX: args.caches / CACHE_SX, LABEL_2: args.caches / CACHE_2}
    absent = [str(p) for p in args.files.values() if not p.is_file()]
    if absent:
        raise InputError(f"the code task is not prepared: {', '.join(absent)} missing (see this module's docstring)")
    from lookupkit import models

    args.model = models.resolve(args.model)
    # what engines.run_all reads: one task, no transformers rows, each policy row names its own table
    args.tasks, args.hf_prompts, args.hf_n_new, args.policy_table = [TASK], 0, 0, None
    return args


def main(argv=None) -> None:
    entry(lambda args: _main(parse_args(args)), argv)


def _main(args) -> None:
    from lookupkit import StaticCache
    from lookupkit.bench.engines.runners import LlamaCppRunner

    f = args.files
    statics = {"ctx": None, LABEL_2: StaticCache.open(f[LABEL_2]), LABEL_SX: StaticCache.open(f[LABEL_SX])}
    sess = Session(args, "code-engines")
    date, work, logs, cost, binary = sess.date, sess.work, sess.logs, sess.cost, sess.binary
    lcpp = LlamaCppRunner(args.model, args.threads)
    chosen = select_prompts(f["eval"], args.prompts, args.seed, args.prompt_tokens, args.n_new)
    prompts = [[lcpp.llm.token_bos(), *p["ids"]] for p in chosen]
    heads = [lcpp.llm.detokenize(p["ids"]).decode("utf-8", "replace").split("\n", 1)[0] for p in chosen]
    log("prompts: " + ", ".join(f"{p['index']} ({h.removeprefix('# file: ')})" for p, h in zip(chosen, heads)))
    with ExitStack() as stack:  # every llama-server started is stopped, whatever happens
        rows, runners, servers, lcs = [], {}, {}, None
        if binary:
            # a folder per cache path: another code-2.lkc (a test's) never passes for this one's .lcs
            lcs = to_lcs(f[LABEL_2], work / "lcs" / hashlib.sha256(str(f[LABEL_2].resolve()).encode()).hexdigest()[:16])
            for row in server_rows(lcs):
                if not row.get("floor"):  # the greedy check below stands in for the floor rows
                    s = stack.enter_context(llama_server.Server(binary, args.model, row["args"], threads=args.threads,
                                                                log=logs / (row["name"].replace(":", "-") + ".log")))
                    log(f"{row['name']}: ready in {s.t_ready_s:.2f} s")
                    servers[row["name"]] = s
                    rows.append(row)
            runners["llama-server"] = lambda row, p, n: servers[row["name"]].complete(p, n)
        rows += code_rows(statics, {"sx": f["sx"], "nosx": f["nosx"]}, cost, args.policy_drafts, args.rule_n)
        runners["llama-cpp-python"] = lcpp.run
        sess.result = {
            "kind": "code-engines", "date": date, "quick": args.quick, "complete": False,
            "git": git_state(), "machine": machine(gate=True, log=log), "versions": versions(),
            "command": command("lookupkit.bench.code_engines"),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "files"},
            "files": {k: str(p) for k, p in f.items()}, "lcs": str(lcs) if lcs else None,
            "tables_about": {k: table_about(f[k]) for k in ("sx", "nosx")},
            "caches": {c: {"orders": statics[c].orders, "suffix_index": statics[c].suffix is not None,
                           "bytes": f[c].stat().st_size} for c in (LABEL_2, LABEL_SX)},
            "calibration": {"source": str(sess.curve_path), **sess.calibration},
            "prompts": [{"index": p["index"], "key": p["key"], "n_tokens": p["n_tokens"], "head": h}
                        for p, h in zip(chosen, heads)],
            "prompt_tokens": prompts, "rows": [public(r) for r in rows],
            "server_ready": {n: s.t_ready_s for n, s in servers.items()},
        }
        checkpoint = sess.checkpoint
        for row in rows:  # warm-up (kernels, numba caches, first allocations): not recorded
            runners[row["engine"]](row, prompts[0], 8)
        sess.runs_begin()
        runs = run_all(args, {TASK: prompts}, rows, runners, cost, statics, checkpoint)
        checkpoint(runs, complete=len(runs) == expected_runs(args, rows),
                   server_memory_after={n: llama_server.proc_memory(s.proc.pid) for n, s in servers.items()})
    log("greedy check: every llama-cpp-python row once more on the first repetition's prompts, untimed")
    checkpoint(runs, greedy_checks=greedy_checks(lcpp.llm, rows, prompts, runs, args.n_new))
    log(f"wrote {sess.out}")
    if args.report:
        from lookupkit.bench.code_engines.report import HERE, render

        print(render(sess.out, bench_dir() / "ENGINES_CODE-quick.md" if args.quick else HERE / "ENGINES_CODE.md"))


if __name__ == "__main__":
    main()
