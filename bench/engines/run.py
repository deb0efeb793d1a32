"""Gemma 3 270M side by side: lookupkit vs llama-server's own n-gram drafting vs transformers, in one run.

Rows (each generates exactly --n-new greedy tokens per prompt, an end-of-generation token does not stop
it; 2 threads): llama-server b11434 (built once by bench/llama_server.py) with no drafting, with
`--spec-type ngram-cache -lcs <lookupkit-built .lcs>`, `ngram-mod` and `ngram-simple`; llama-cpp-python
plain, its `LlamaPromptLookupDecoding`, lookupkit with llama.cpp's rule (context only and with each
static cache) and with lookupkit's policy (the cost curve `lookupkit calibrate` measured on this model,
the policy table learnt on this model's generations when lookupkit ships one; drafts of up to 16 at
every cache size, 8/32/64 with the last cache); transformers plain, its `prompt_lookup_num_tokens` and
lookupkit's `LookupGenerate`. Two floors of greedy divergence: a plain row whose batches hold 32 tokens
(llama-cpp-python `plain-b32`, llama-server `none-b32`).

Tasks: `wiki` (the first 250 words of a WikiText-103 *valid* paragraph of >= 250 words, held out from
the caches' train corpus; text as WikiText stores it, " @-@ " etc. not undone), and `copy` (the same, a
blank line, and its own first 12 words again, so that copying pays); bench/generations.py's prompts.
Paragraphs: random.Random(--seed).sample of all such paragraphs in file order. Rows run interleaved in
one session, every llama-server loaded at once: per prompt round (one prompt of one task, the tasks
alternating) every row once, their order rotated each round; --reps repetitions of everything. The
results JSON is rewritten after every round; with --deadline no round starts after it (`complete`
says whether every planned generation ran).

    python -m lookupkit.bench.engines --caches DIR --curve curve.json      # model: gemma-3-270m
    python -m lookupkit.bench.engines --quick                               # 2 prompts x 32 tokens

--caches DIR holds gemma-wiki{25,100,541}.lkc and gemma-wiki541-o6.lkc (whichever exist are used; the
missing are reported), built by lookup-create from wiki541.txt.zst (`cache_command`). Writes
bench/results/engines-<date>-vm.json (--quick: engines-quick.json in the bench cache) and, with
--report, bench/ENGINES.md and bench/plots/engines.png (bench/engines/report.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from lookupkit.errors import InputError
from lookupkit.bench import llama_server
from lookupkit.bench.engines.rows import CACHES, SERVER_LCS, hf_rows, lcpp_rows, public, rule_cache, server_rows
from lookupkit.bench.engines.costs import lcs_load_costs, lookupkit_open_costs, replay_prediction
from lookupkit.bench.generations import PROMPT_WORDS, paragraphs, prompt_text
from lookupkit.bench.models import bench_dir
from lookupkit.bench.harness import RESULTS, SHARED, command, entry, git_state, loadavg, machine, write_text

VALID = SHARED / "corpora" / "wiki.valid.tokens"
TASKS = ("wiki", "copy")  # bench/generations.py's prompt_text makes both


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Session:
    """What the engines bench and its code-task variant (code_engines) set up before their rows and write
    after each: the results path, work and log folders, the verify-cost curve (calibrated when not given),
    llama-server's binary (None: its rows skipped), and the checkpointed results with their load averages."""

    def __init__(self, args, name: str):
        from lookupkit.verify_cost import VerifyCost, load_curve

        self.date = datetime.date.today().isoformat()
        self.out = args.output or (bench_dir() / f"{name}-quick.json" if args.quick
                                   else RESULTS / f"{name}-{self.date}-vm.json")
        self.work = bench_dir() / name
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.t_start, start = time.time(), loadavg()
        self.load = {"start": start, "before_runs": start}
        self.curve_path = args.curve or calibrated_curve(args.model, self.out.with_suffix(".curve.json"), args.max_k,
                                                         args.calibrate_reps, args.threads)
        self.cost = VerifyCost.of(self.curve_path)
        self.calibration = load_curve(self.curve_path)
        self.calibration.pop("raw_s", None)
        self.binary = None
        if "llama-server" in args.engines:
            self.binary = llama_server.built() if args.quick else llama_server.build(jobs=args.threads)
            if self.binary is None:
                log("llama-server is not built: --quick skips its rows (python -m lookupkit.bench.llama_server builds it)")
        self.result: dict = {}

    def runs_begin(self) -> None:
        self.load["before_runs"] = loadavg()

    def checkpoint(self, runs, **extra) -> None:
        self.result.update(runs=runs, wall_s=time.time() - self.t_start, **extra)
        self.result["loadavg"] = {**self.load, "now": loadavg()}
        write_text(self.out, json.dumps(self.result) + "\n")


# -- prompts ---------------------------------------------------------------------------------------

def select_paragraphs(path: Path, n: int, seed: int) -> list[str]:
    if not path.is_file():
        raise InputError(f"{path} not found: the bench takes its prompts from WikiText-103 valid (../shared/corpora)")
    paras = paragraphs(path)
    if len(paras) < n:
        raise InputError(f"{path} has {len(paras)} paragraphs of >= {PROMPT_WORDS} words, {n} asked for")
    return random.Random(seed).sample(paras, n)


# -- caches and the cost curve -----------------------------------------------------------------------

def find_caches(folder: Path | None) -> tuple[dict, list[str]]:
    """{label: path} of the CACHES files in folder, and the labels missing."""
    found = {c: folder / f for c, (f, _) in CACHES.items() if folder and (folder / f).is_file()}
    return found, [c for c in CACHES if c not in found]


def to_lcs(lkc: Path, out_dir: Path) -> Path:
    """llama.cpp's .lcs of a lookupkit cache (`lookupkit convert`), cached beside the bench's other files."""
    out = out_dir / (lkc.stem + ".lcs")
    if out.is_file() and out.stat().st_mtime >= lkc.stat().st_mtime:
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "lookupkit", "convert", str(lkc), str(out)], capture_output=True, text=True)
    if proc.returncode:
        raise InputError(f"lookupkit convert {lkc} {out} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return out


def calibrated_curve(model: Path, out: Path, max_k: int, reps: int, threads: int) -> Path:
    """Run `lookupkit calibrate -m MODEL -o OUT --max-k K` (the command a user runs); returns OUT."""
    cmd = [sys.executable, "-m", "lookupkit", "calibrate", "-m", str(model), "-o", str(out), "--max-k", str(max_k),
           "--reps", str(reps), "--threads", str(threads)]
    log("calibrating: " + " ".join(cmd[2:]))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise InputError(f"lookupkit calibrate failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return out


# -- measurements ----------------------------------------------------------------------------------

def open_servers(rows, binary, model, threads, logs) -> dict:
    servers = {}
    for row in rows:
        s = llama_server.Server(binary, model, row["args"], threads=threads, log=logs / (row["name"].replace(":", "-") + ".log"))
        servers[row["name"]] = s.__enter__()
        log(f"{row['name']}: ready in {s.t_ready_s:.2f} s, RSS {s.memory_ready.get('VmRSS', 0) / 2**20:.0f} MiB")
    return servers


def run_all(args, prompts: dict, rows: list[dict], runners: dict, cost, statics: dict, checkpoint) -> list[dict]:
    """Every row on every prompt, rows rotated per prompt, the tasks alternating prompt by prompt; one
    record per generation. checkpoint(runs) after every round; no round starts after args.deadline."""
    runs = []
    n_rows = len(rows)
    for rep in range(args.reps):
        for i in range(args.prompts):
            for task in args.tasks:
                if args.deadline and time.time() > args.deadline:
                    log(f"deadline passed: stopping before rep {rep} {task} prompt {i}")
                    return runs
                prompt = prompts[task][i]
                shift = (i + rep * 7) % n_rows
                for row in rows[shift:] + rows[:shift]:
                    if row["engine"] == "transformers" and i >= args.hf_prompts:
                        continue
                    n = args.hf_n_new if row["engine"] == "transformers" else args.n_new
                    load0 = loadavg()[0]
                    rec = runners[row["engine"]](row, prompt, n)
                    rec.update(row=row["name"], task=task, prompt=i, rep=rep, n_prompt=len(prompt), load1=load0)
                    if row["engine"] == "llama-cpp-python":
                        rec.update(replay_prediction(row, prompt, rec, cost, statics, args.policy_table))
                    runs.append(rec)
                done = [r for r in runs if (r["rep"], r["task"], r["prompt"]) == (rep, task, i)]
                log(f"rep {rep} {task} prompt {i} (load {loadavg()[0]:.1f}): " + ", ".join(
                    f"{r['row']} {r['n_gen'] / r['t_gen_s']:.0f}" for r in done if r["t_gen_s"] > 0) + " tok/s")
                checkpoint(runs)
    return runs


def versions() -> dict:
    from importlib import metadata

    out = {"llama.cpp (llama-server)": f"b{llama_server.VERSION.split('.')[0]} ({llama_server.PACKAGE} {llama_server.VERSION})"}
    for dist in ("lookupkit", "llama-cpp-python", "torch", "transformers", "gguf", "accelerate", "numpy", "numba"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# -- the run ---------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.engines", description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m", help="a GGUF path or a lookupkit.models name "
                    "(default gemma-3-270m: Gemma 3 270M Q4_K_M, assembled from its package)")
    ap.add_argument("--caches", type=Path, help="folder with gemma-wiki{25,100,541}.lkc, gemma-wiki541-o6.lkc")
    ap.add_argument("--curve", type=Path, help="lookupkit calibrate curve of this model (default: measure one)")
    ap.add_argument("--max-k", type=int, default=64, help="calibrate --max-k when the bench measures the curve")
    ap.add_argument("--calibrate-reps", type=int, default=20)
    ap.add_argument("--engines", default="llama-server,llama-cpp-python,transformers")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n-new", type=int, default=256)
    ap.add_argument("--hf-prompts", type=int, default=4, help="prompts per task for the (slow) transformers rows")
    ap.add_argument("--hf-n-new", type=int, default=128)
    ap.add_argument("--hf-cost", type=float, default=0.1, help="the policy's constant verify cost in transformers")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rule-n", type=int, default=8, help="n_draft of llama.cpp's rule (llama-server's ngram-cache: 8)")
    ap.add_argument("--policy-n", type=int, default=16, help="the policy's n_draft at every cache size")
    ap.add_argument("--policy-drafts", default="8,32,64", help="more n_draft for the policy with the largest cache")
    ap.add_argument("--policy-table", type=Path, help="policy confidence table (default: the one learnt on this "
                    "model's own generations if lookupkit ships one, policy.confidence.for_model, else the bundled one)")
    ap.add_argument("--load-reps", type=int, default=2, help="llama-server starts per .lcs for the load cost")
    ap.add_argument("--deadline", help="HH:MM (local time): start no prompt round after it; the results say so")
    ap.add_argument("--quick", action="store_true", help="2 prompts x 32 tokens, 1 rep; llama-server only if built")
    ap.add_argument("-o", "--output", type=Path)
    ap.add_argument("--report", action="store_true", help="render bench/ENGINES.md and bench/plots/engines.png")
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.n_new, args.hf_prompts, args.hf_n_new, args.reps = 2, 32, 1, 16, 1
        args.calibrate_reps, args.load_reps = 2, 1
    args.deadline = deadline_of(args.deadline)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.policy_drafts = [int(x) for x in args.policy_drafts.split(",") if x.strip()]
    bad = set(args.engines) - {"llama-server", "llama-cpp-python", "transformers"}
    if bad:
        raise InputError(f"unknown engine {sorted(bad)[0]!r} (engines: llama-server, llama-cpp-python, transformers)")
    if set(args.tasks) - set(TASKS):
        raise InputError(f"unknown task {sorted(set(args.tasks) - set(TASKS))[0]!r} (tasks: {', '.join(TASKS)})")
    from lookupkit import models

    args.model = models.resolve(args.model)
    if args.policy_table is None:
        from lookupkit.policy.confidence import for_model

        args.policy_table = for_model(args.model)
    return args


def main(argv=None) -> None:
    entry(lambda args: _main(parse_args(args)), argv)


def _main(args) -> None:
    from lookupkit import StaticCache

    caches, missing = find_caches(args.caches)
    log(f"static caches: {', '.join(str(p) for p in caches.values()) or 'none'}; missing: {missing or 'none'}")
    statics = {"ctx": None, **{c: StaticCache.open(p) for c, p in caches.items()}}
    sess = Session(args, "engines")
    date, work, logs, cost, binary = sess.date, sess.work, sess.logs, sess.cost, sess.binary
    log(f"policy table: {args.policy_table or 'the bundled default'}")

    runners, rows = {}, []
    lcpp = None
    if "llama-cpp-python" in args.engines or binary:
        from lookupkit.bench.engines.runners import LlamaCppRunner

        lcpp = LlamaCppRunner(args.model, args.threads)
    paras = select_paragraphs(VALID, args.prompts, args.seed)
    tokenize = lcpp.tokenize if lcpp else _vocab_tokenizer(args.model)
    prompts = {t: [tokenize(prompt_text(p, t)) for p in paras] for t in args.tasks}

    lcs, load_costs, servers = {}, [], {}
    if binary:
        lcs = {c: to_lcs(p, work / "lcs") for c, p in caches.items() if rule_cache(c) == c}
        load_costs = lcs_load_costs(binary, args.model, lcs, args.threads, args.load_reps, logs)
        log("llama-server start to ready: " + ", ".join(f"{r['cache']} .lcs {r['t_ready_s']:.2f} s"
                                                         for r in load_costs))
        srows = server_rows(lcs.get(SERVER_LCS) or next(iter(lcs.values()), None))
        servers = open_servers(srows, binary, args.model, args.threads, logs)
        rows += srows
        runners["llama-server"] = lambda row, p, n: servers[row["name"]].complete(p, n)
    if "llama-cpp-python" in args.engines:
        rows += lcpp_rows({c: statics[c] for c in caches}, cost, args.policy_drafts, args.policy_n, args.rule_n,
                          args.policy_table)
        runners["llama-cpp-python"] = lcpp.run
    hf_load_s = None
    if "transformers" in args.engines:
        from lookupkit.bench.engines.runners import TransformersRunner

        hf = TransformersRunner(args.model, args.threads)
        hf_load_s = hf.t_load_s
        log(f"transformers loaded the GGUF in {hf_load_s:.1f} s")
        rows += hf_rows({c: statics[c] for c in caches}, args.hf_cost, args.policy_n, args.rule_n)
        runners["transformers"] = hf.run
    sess.result = result = {
        "kind": "engines", "date": date, "quick": args.quick, "complete": False,
        "git": git_state(), "machine": machine(gate=True, log=log), "versions": versions(),
        "command": command("lookupkit.bench.engines"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "caches": {c: str(p) for c, p in caches.items()}, "caches_missing": missing,
        "lcs": {c: str(p) for c, p in lcs.items()},
        "calibration": {"source": str(sess.curve_path), **sess.calibration},
        "prompts": {t: [{"index": i, "n_tokens": len(p), "head": paras[i].split()[:8]} for i, p in enumerate(ps)]
                    for t, ps in prompts.items()},
        "prompt_tokens": prompts, "rows": [public(r) for r in rows],
        "server_ready": {n: s.t_ready_s for n, s in servers.items()}, "lcs_load": load_costs,
        "lookupkit_open": lookupkit_open_costs(caches, 5), "hf_load_s": hf_load_s,
    }

    checkpoint = sess.checkpoint
    try:
        for row in rows:  # warm-up (kernels, numba caches, first allocations): not recorded
            runners[row["engine"]](row, prompts[args.tasks[0]][0], 8)
        sess.runs_begin()
        runs = run_all(args, prompts, rows, runners, cost, statics, checkpoint)
        checkpoint(runs, complete=len(runs) == expected_runs(args, rows),
                   server_memory_after={n: llama_server.proc_memory(s.proc.pid) for n, s in servers.items()})
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)
    log(f"wrote {sess.out}")
    if args.report:
        from lookupkit.bench.engines.report import render

        render(sess.out)


def expected_runs(args, rows) -> int:
    per = sum(min(args.hf_prompts, args.prompts) if r["engine"] == "transformers" else args.prompts for r in rows)
    return per * len(args.tasks) * args.reps


def deadline_of(text: str | None) -> float | None:
    if not text:
        return None
    try:
        hh, mm = (int(x) for x in text.split(":"))
        now = datetime.datetime.now()
        when = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    except ValueError:
        raise InputError(f"--deadline takes HH:MM, got {text!r}") from None
    return when.timestamp()


def _vocab_tokenizer(model: Path):
    from llama_cpp import Llama

    llm = Llama(model_path=os.fspath(model), vocab_only=True, verbose=False)
    return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)


if __name__ == "__main__":
    main()
