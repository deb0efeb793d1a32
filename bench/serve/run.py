"""What the serving bench runs, in which order, and what it writes.

Per task, every row's server is started fresh (all of them at once, so rows interleave): an untimed warm-up each
(first allocations of a task-sized batch; arbitrary ids, not one of the task's prompts), then every prompt once on
every row, the rows' order rotated prompt by prompt — the same requests in the same order through the same client
(client.complete) on every server. A prompt is never repeated on one server: llama-server's ngram-mod keeps its
table across requests, so a repeat would not be an independent sample. Then at 1, 2 and 4 concurrent clients
(--clients), fresh servers with 4 slots each, the same prompts per level (all levels --repeats times, each on fresh
servers: the report pools a row's repeats). Then (--parts sessions, not by default) conversations on prose and code
with the prompt cache, the same sessions at each client count on fresh 4-slot servers (sessions.py). Then start-up:
time to /health and RSS with each static cache (warm page cache), and the 541 MB cache's resident and proportional
memory in one and in two `lookupkit serve` processes. The results JSON is rewritten after every part; the load
average is recorded around every round.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

from lookupkit.errors import InputError, LookupkitError
from lookupkit.rules import DEFAULT_CTX
from lookupkit.bench import llama_server
from lookupkit.bench.models import bench_dir
from lookupkit.bench.harness import RESULTS, command, git_state, machine, warm_file, write_text
from lookupkit.bench.serve import client
from lookupkit.bench.llama_server import llama_server_cmd
from lookupkit.bench.serve.bounds import PLAIN
from lookupkit.bench.serve.replay import replay_row
from lookupkit.bench.serve.servers import Server, lookupkit_cmd
from lookupkit.bench.serve.sessions import conversations, run_session, session_sets, slot_ctx
from lookupkit.bench.serve.tasks import (SESSION_TASKS, STARTUP_CACHES, TASK_CACHE, TASKS, cache_commands, prompts,
                                         session_plan, sessions)

# lookupkit calibrate --slots 4 --max-k 64 --reps 20 on this model (the AMD VM): the one-sequence curve and the
# 4-slot surface: it prices a one-client server's steps within 5 % in 5 of 6 repeats (bench.serve.step_cost)
CURVE = RESULTS / "calibration-gemma-3-270m-2026-12-07-amd-slots4-k64-reps20.curve.json"
POLICY_DRAFT = 64  # the policy rows' --draft here: CURVE's largest k (not lookup-stats' rules.POLICY_DRAFT: a
# replay's default, where no curve says what longer batches cost)
SLOTS = 4  # slots of the concurrency servers (-np), -c SLOTS x CTX_PER_SLOT
CTX_PER_SLOT = 1024
WARMUP_IDS = list(range(1000, 1320))  # the warm-up prompt: 320 arbitrary ids (a task-sized prompt batch,
WARMUP_NEW = 32  # none of the tasks' text) and 32 tokens generated, not recorded


def rows(curve: Path, n_draft: int = POLICY_DRAFT) -> list[dict]:
    """The rows: name, kind, and the flags after the common ones ({lkc}/{lcs}: the task's static cache)."""
    policy = ["--policy", "lookupkit", "--verify-cost", str(curve), "--draft", str(n_draft)]
    return [
        {"name": "server:none", "kind": "llama-server", "args": []},
        {"name": "server:ngram-mod", "kind": "llama-server", "args": ["--spec-type", "ngram-mod"]},
        {"name": "server:ngram-simple", "kind": "llama-server", "args": ["--spec-type", "ngram-simple"]},
        {"name": "server:ngram-cache", "kind": "llama-server", "args": ["--spec-type", "ngram-cache", "-lcs", "{lcs}"]},
        {"name": "lk:plain", "kind": "lookupkit", "args": ["--draft", "0"]},
        {"name": "lk:policy", "kind": "lookupkit", "args": policy},
        {"name": "lk:policy-static", "kind": "lookupkit", "args": [*policy, "-lcs", "{lkc}"]},
    ]


def learn_rows(curve: Path, n_draft: int, base: str = "lk:policy-static") -> list[dict]:
    """`base` (lk:policy-static, or lk:policy: the context alone) learning from what it served: --learn dynamic
    and --learn history."""
    args = [r for r in rows(curve, n_draft) if r["name"] == base][0]["args"]
    return [{"name": f"{base}-learn-{how}", "kind": "lookupkit", "args": [*args, "--learn", how]} for how in LEARN]


def cache_rows(curve: Path, n_draft: int, caches: Path, names: list[str]) -> list[dict]:
    """lk:policy drafting from another static cache in --caches (NAME.lkc, with NAME.policy.json as its table if
    there is one) on every task: e.g. a cache of the model's own outputs (lookupkit model-corpus)."""
    base = [r for r in rows(curve, n_draft) if r["name"] == "lk:policy"][0]["args"]
    out = []
    for name in names:
        lkc, table = caches / f"{name}.lkc", caches / f"{name}.policy.json"
        if not lkc.is_file():
            raise InputError(f"--cache-rows: {lkc} not found")
        out.append({"name": f"lk:policy-{name}", "kind": "lookupkit", "args": [
            *base, "-lcs", str(lkc), *(["--policy-table", str(table)] if table.is_file() else [])]})
    return out


def agent_rows(curve: Path, n_draft: int, table: list[dict]) -> list[dict]:
    """The agent task's rows: llama-server none and ngram-mod (its table kept across requests), and
    lookupkit plain and the policy with learning off (the task's static cache) and with each way it learns."""
    base = [r for r in table if r["name"] in ("server:none", "server:ngram-mod", "lk:plain", "lk:policy-static")]
    return base + [r for r in learn_rows(curve, n_draft) if r["name"] not in {b["name"] for b in table}] + \
        [r for r in table if "-learn-" in r["name"]]


PARTS = ("tasks", "concurrency", "sessions", "startup")
LEARN = ("dynamic", "history")  # lookupkit serve --learn: what the server may learn from what it served


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.binary = llama_server.built() if args.quick else llama_server.build(jobs=args.threads)
        if self.binary is None:
            raise InputError("llama-server is not built: python -m lookupkit.bench.llama_server builds it")
        self.logs = bench_dir() / "serve" / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def server(self, row: dict, task_cache: str | None, parallel: int = 1, ctx: int = DEFAULT_CTX) -> Server:
        a = self.args
        sub = {"{lkc}": str(a.caches / f"{task_cache}.lkc"), "{lcs}": str(a.caches / f"{task_cache}.lcs")}
        extra = [sub.get(x, x) for x in row["args"]]
        if row["kind"] == "llama-server":
            make = lambda port: llama_server_cmd(self.binary, a.model, port, a.threads, ctx, parallel, extra)  # noqa: E731
        else:
            make = lambda port: lookupkit_cmd(a.model, port, a.threads, ctx, parallel, extra)  # noqa: E731
        return Server(make, self.logs / (row["name"].replace(":", "-") + ".log"), row["name"])

    def start(self, servers: dict) -> dict:
        ready = {}
        for name, s in servers.items():
            s.__enter__()
            ready[name] = {"t_ready_s": s.t_ready_s, **s.memory_ready}
            client.complete(s.port, self.warmup, WARMUP_NEW)
            log(f"  {name}: ready in {s.t_ready_s:.2f} s, RSS {s.memory_ready.get('VmRSS', 0) / 2**20:.0f} MiB")
        return ready

    def rounds(self, task: str, items: list, table: list[dict], send) -> dict:
        """Fresh servers for the task; per item (a prompt, a session) every row once, rows rotated item by item:
        send(port, item, i) -> the records of its requests."""
        servers = {r["name"]: self.server(r, TASK_CACHE[task]) for r in table}
        runs = []
        try:
            ready = self.start(servers)
            for i, item in enumerate(items):
                load, first = os.getloadavg()[0], len(runs)
                shift = i % len(table)
                for row in table[shift:] + table[:shift]:
                    for rec in send(servers[row["name"]].port, item, i):
                        rec.update(row=row["name"], task=task, load1=load)
                        runs.append(rec)
                speed = {}
                for r in runs[first:]:
                    n, t = speed.get(r["row"], (0, 0.0))
                    speed[r["row"]] = (n + r["n_gen"], t + r["wall_s"])
                log(f"{task} {i} (load {os.getloadavg()[0]:.1f}): " + ", ".join(
                    f"{row} {n / t:.0f}" for row, (n, t) in speed.items()) + " tok/s")
            memory = {n: s.memory() for n, s in servers.items()}
        finally:
            for s in servers.values():
                s.stop()
        return {"ready": ready, "memory_after": memory, "runs": runs}

    def task(self, task: str, ids: list[list[int]], table: list[dict]) -> dict:
        """Every prompt once on every row."""
        return self.rounds(task, ids, table, lambda port, prompt, i: [
            {**client.complete(port, prompt, self.args.n_new), "prompt": i, "n_prompt": len(prompt)}])

    def agent(self, sess: list[dict], table: list[dict]) -> dict:
        """Every session on every row, then each lookupkit row's served log replayed."""
        out = self.rounds("agent", sess, table, lambda port, one, i: [
            {**rec, "prompt": f"{i}.{k}", "session": i} for k, rec in enumerate(run_session(port, one, self.args.agent_new))])
        out["replay"] = {r["name"]: self.replay(r, out["runs"]) for r in table if "lookupkit" in r["args"]}
        return out

    def replay(self, row: dict, runs: list[dict], task: str = "agent", clients: int = 1, rep: int = 0) -> dict:
        """What `lookupkit replay-requests` predicts for one row from the requests and responses it served (in
        repeat `rep`), as `clients` clients sent them, beside what it measured over lk:plain (replay.replay_row)."""
        mine, plain = ([r for r in runs if r["row"] == name] for name in (row["name"], PLAIN))
        log_path = self.logs / f"{task}-{clients}-{row['name'].replace(':', '-')}{f'-r{rep + 1}' * (rep > 0)}.jsonl"
        return replay_row(row, mine, plain, log_path, self.args.model, self.args.caches / f"{TASK_CACHE[task]}.lkc",
                          clients)

    def concurrency(self, task: str, ids: list[list[int]], table: list[dict]) -> list[dict]:
        """At each client count: fresh servers with SLOTS slots, the same prompts, rows alternating; then each
        drafting lookupkit row's served log replayed as that many clients (replay-requests --parallel)."""
        levels = self.levels(task, table, SLOTS * CTX_PER_SLOT,
                             lambda port, clients: client.concurrent(port, ids, self.args.n_new, clients))
        for clients in self.args.clients:
            for rep in range(self.args.repeats):
                at = [lv for lv in levels if lv["clients"] == clients and lv["repeat"] == rep]
                runs = [{**r, "row": lv["row"], "prompt_ids": ids[i], "level_tok_per_s": lv["tok_per_s"]}
                        for lv in at for i, r in enumerate(lv["runs"])]
                for lv in at:
                    row = next(r for r in table if r["name"] == lv["row"])
                    if "--verify-cost" in row["args"]:
                        lv["replay"] = rp = self.replay(row, runs, task, clients, rep)
                        log(f"{task} {clients} clients, repeat {rep + 1}: {row['name']} replay predicts "
                            f"{rp.get('predicted')}, measured {rp.get('measured')}")
        return levels

    def sessions(self, task: str, sess: list[dict], table: list[dict]) -> list[dict]:
        """At each client count: fresh servers with SLOTS slots, every session once with the prompt cache."""
        n_new = self.args.agent_new
        return self.levels(task, table, SLOTS * slot_ctx(sess, n_new),
                           lambda port, clients: conversations(port, sess, n_new, clients))

    def levels(self, task: str, table: list[dict], ctx: int, send) -> list[dict]:
        """--repeats times, per --clients count, per row (the order reversed every other count and every other
        repeat, so that no row always goes first): a fresh server with SLOTS slots and `ctx` tokens of context, an
        untimed warm-up, then send(port, clients) -> the level's record (its `repeat` noted: the report pools them)."""
        out = []
        for rep, (level, clients) in ((r, c) for r in range(self.args.repeats) for c in enumerate(self.args.clients)):
            order = table if (level + rep) % 2 == 0 else table[::-1]
            for row in order:
                with self.server(row, TASK_CACHE[task], SLOTS, ctx) as s:
                    client.complete(s.port, self.warmup, WARMUP_NEW)
                    load = os.getloadavg()[0]
                    rec = send(s.port, clients)
                rec.update(row=row["name"], task=task, load1=load, slots=SLOTS, repeat=rep)
                log(f"{task} {clients} clients{f' (repeat {rep + 1})' if self.args.repeats > 1 else ''}: "
                    f"{row['name']} {rec['tok_per_s']:.1f} tok/s in all")
                out.append(rec)
        return out

    def startup(self) -> dict:
        """Time to ready and RSS, model alone and with each static cache, both servers (warm page cache)."""
        a, out = self.args, []
        lk = {"name": "lk:policy-static", "kind": "lookupkit",
              "args": ["--policy", "lookupkit", "--verify-cost", str(a.curve), "-lcs", "{lkc}"]}
        ls = {"name": "server:ngram-cache", "kind": "llama-server", "args": ["--spec-type", "ngram-cache", "-lcs", "{lcs}"]}
        alone = [{"name": "lk:model", "kind": "lookupkit", "args": []},
                 {"name": "server:model", "kind": "llama-server", "args": []}]
        for label, cache in [(None, None), *STARTUP_CACHES.items()]:
            if cache is not None and not (a.caches / f"{cache}.lkc").is_file():
                log(f"start-up: {cache}.lkc missing, skipped")
                continue
            for ext in ((".lkc", ".lcs") if cache else ()):
                warm_file(a.caches / f"{cache}{ext}")
            for row in (alone if cache is None else [lk, ls]):
                reps = a.startup_reps if row["kind"] == "lookupkit" or label in (None, "25MB") else 1
                for rep in range(reps):
                    with self.server(row, cache) as s:
                        out.append({"row": row["name"], "cache": label, "rep": rep, "t_ready_s": s.t_ready_s,
                                    **s.memory_ready})
                    log(f"start-up {row['name']} {label or 'no cache'}: {s.t_ready_s:.2f} s, "
                        f"RSS {s.memory_ready.get('VmRSS', 0) / 2**20:.0f} MiB")
        return {"runs": out, "sharing": self.sharing()}

    def sharing(self) -> dict | None:
        """The 541 MB cache's Rss/Pss in one `lookupkit serve`, then in each of two serving the same prompts."""
        a = self.args
        cache = a.caches / f"{STARTUP_CACHES['541MB']}.lkc"
        if not cache.is_file():
            return None
        row = {"name": "lk:policy-static", "kind": "lookupkit",
               "args": ["--policy", "lookupkit", "--verify-cost", str(a.curve), "-lcs", "{lkc}"]}
        ids = self.sharing_prompts
        with self.server(row, STARTUP_CACHES["541MB"]) as first:
            for p in ids:
                client.complete(first.port, p, 64)
            alone = first.file_memory(cache)
            with self.server(row, STARTUP_CACHES["541MB"]) as second:
                for p in ids:
                    client.complete(second.port, p, 64)
                both = [first.file_memory(cache), second.file_memory(cache)]
        total = sum(m["pss"] for m in both)
        log(f"541 MB cache: PSS alone {alone['pss'] / 2**20:.1f} MiB, two processes {total / 2**20:.1f} MiB in all")
        return {"cache": str(cache), "requests": len(ids), "n_predict": 64, "alone": alone, "two": both,
                "pss_total_two": total, "ratio": total / alone["pss"] if alone["pss"] else None}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve", description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m", help="a GGUF path or a lookupkit.models name")
    ap.add_argument("--caches", type=Path, help="folder with the static caches (.lkc and .lcs): "
                    + "; ".join(f"{k}: {v}" for k, v in cache_commands().items()))
    ap.add_argument("--code", type=Path, help="folder with the code task's eval.npz (python -m "
                    "lookupkit.bench.suffix_code_task -m gemma-3-270m; default: where it writes, $LOOKUPKIT_CODE_TASK or $LOOKUPKIT_CACHE_DIR/code-task, /django-4.2-5.0)")
    ap.add_argument("--curve", type=Path, default=CURVE, help="the policy's verify-cost curve (lookupkit calibrate)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--prompts", type=int, default=12, help="prompts per task (each sent once to every row)")
    ap.add_argument("--n-new", type=int, default=256, help="tokens generated per request (EOS ignored)")
    ap.add_argument("--sessions", type=int, default=6, help="agent task and sessions part: sessions per task "
                    "(each row runs all of them)")
    ap.add_argument("--agent-new", type=int, default=128, help="agent task and sessions part: tokens per request")
    ap.add_argument("--clients", default="1,2,4", help="concurrent clients of the concurrency and sessions parts "
                    "(servers with 4 slots)")
    ap.add_argument("--session-tasks", default=",".join(SESSION_TASKS), help="the sessions part's conversations")
    ap.add_argument("--concurrency-tasks", default="prose,copy")
    ap.add_argument("--concurrency-prompts", type=int, default=8)
    ap.add_argument("--concurrency-rows", default="server:none,server:ngram-mod,lk:plain,lk:policy",
                    help="the rows of the concurrency part (lookupkit's are replayed as that many clients too)")
    ap.add_argument("--repeats", type=int, default=1, help="the concurrency and sessions parts this many times "
                    "(fresh servers each time; the report pools a row's repeats and shows their min-max)")
    ap.add_argument("--startup-reps", type=int, default=2)
    ap.add_argument("--parts", default="tasks,concurrency,startup", help=f"of {','.join(PARTS)}")
    ap.add_argument("--seed", type=int, default=22, help="chooses the prompts (tune on another seed than the one you report)")
    ap.add_argument("--policy-draft", type=int, default=POLICY_DRAFT, help="the policy rows' --draft")
    ap.add_argument("--learn-rows", action="store_true", help="add --learn-base with --learn dynamic and "
                    "--learn history to every task (the agent task always has lk:policy-static's)")
    ap.add_argument("--learn-base", default="lk:policy-static", choices=("lk:policy-static", "lk:policy"),
                    help="the row --learn-rows adds learning to (lk:policy: the context alone)")
    ap.add_argument("--cache-rows", default="", help="add lk:policy-NAME rows drafting from NAME.lkc in --caches "
                    "(comma-separated NAMEs), with NAME.policy.json as the table if present")
    ap.add_argument("--rows", help="only these rows (comma-separated names), e.g. server:ngram-mod,lk:policy")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="2 prompts x 32 tokens, 1 and 2 clients, no start-up part")
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.n_new, args.clients, args.concurrency_prompts = 2, 32, "1,2", 2
        args.parts = args.parts.replace(",startup", "")
    args.tasks = [t for t in args.tasks.split(",") if t]
    args.concurrency_tasks = [t for t in args.concurrency_tasks.split(",") if t]
    args.parts = [p for p in args.parts.split(",") if p]
    args.session_tasks = [t for t in args.session_tasks.split(",") if t]
    args.clients = [int(c) for c in args.clients.split(",")]
    if set(args.tasks + args.concurrency_tasks) - set(TASKS):
        raise InputError(f"unknown task in --tasks/--concurrency-tasks (tasks: {', '.join(TASKS)})")
    if set(args.session_tasks) - set(SESSION_TASKS) or set(args.parts) - set(PARTS):
        raise InputError(f"unknown --session-tasks or --parts (session tasks: {', '.join(SESSION_TASKS)}; parts: "
                         f"{', '.join(PARTS)})")
    if not 1 <= args.repeats <= 100:
        raise InputError(f"--repeats must be between 1 and 100, got {args.repeats}")
    if args.caches is None or not args.caches.is_dir():
        raise InputError("--caches DIR is required (the static caches): " + "; ".join(cache_commands().values()))
    if not args.curve.is_file():
        raise InputError(f"--curve {args.curve} not found: lookupkit calibrate -m MODEL -o CURVE.json measures one")
    from lookupkit import models
    from lookupkit.bench.suffix_code_task import task_dir

    args.model = models.resolve(args.model)
    args.code = args.code or task_dir()
    return args


def main(argv=None) -> None:
    try:
        args = parse_args(argv)
        args.argv = argv  # recorded as the command
        _main(args)
    except LookupkitError as exc:
        sys.exit(f"error: {exc}")
    except KeyboardInterrupt:
        sys.exit("interrupted: the results written so far are kept")


def _main(args) -> None:
    from lookupkit.bench.engines.run import _vocab_tokenizer, versions

    date = datetime.date.today().isoformat()
    out = args.output or (bench_dir() / "serve-quick.json" if args.quick else RESULTS / f"serve-{date}-vm.json")
    bench = Bench(args)
    tokenize = _vocab_tokenizer(args.model)
    bos = tokenize("")[0]
    bench.warmup = [bos] + WARMUP_IDS
    ids = {t: prompts(t, args.prompts, args.seed, tokenize, bos, args.code, args.n_new) for t in args.tasks if t != "agent"}
    sess = sessions(args.sessions, args.seed, bos, args.code, args.n_new, args.prompts) if "agent" in args.tasks else []
    conc_ids = {t: prompts(t, args.prompts + args.concurrency_prompts, args.seed, tokenize, bos, args.code,
                           args.n_new)[args.prompts:] for t in args.concurrency_tasks}
    conv = session_sets(args, tokenize, bos) if "sessions" in args.parts else {}
    bench.sharing_prompts = ids.get("prose", next(iter(ids.values()), []))[:4]
    table = rows(args.curve, args.policy_draft) + (learn_rows(args.curve, args.policy_draft, args.learn_base)
                                                   if args.learn_rows else [])
    table += cache_rows(args.curve, args.policy_draft, args.caches, [n for n in args.cache_rows.split(",") if n])
    if args.rows:
        wanted = args.rows.split(",")
        unknown = set(wanted) - {r["name"] for r in table}
        if unknown:
            raise InputError(f"unknown row {sorted(unknown)[0]!r} (rows: {', '.join(r['name'] for r in table)})")
        table = [r for r in table if r["name"] in wanted]
    result = {"kind": "serve", "date": date, "quick": args.quick, "complete": False, "git": git_state(),
              "machine": machine(), "versions": versions(),
              "command": command("lookupkit.bench.serve", args.argv),
              "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "cache_commands": cache_commands(), "task_cache": TASK_CACHE, "policy_draft": args.policy_draft,
              "rows": table, "prompt_tokens": ids, "tasks": {}, "concurrency": {}, "session_prompts": conv,
              "sessions": {}, "startup": None}

    def save():
        result["loadavg_end"] = os.getloadavg()
        write_text(out, json.dumps(result) + "\n")

    t0 = time.time()
    if "tasks" in args.parts:
        for task in args.tasks:
            if task == "agent":
                agent_table = agent_rows(args.curve, args.policy_draft, table)
                log(f"task agent: {len(sess)} sessions of {len(session_plan())} requests x {args.agent_new} tokens, "
                    f"{len(agent_table)} rows")
                result["tasks"]["agent"] = bench.agent(sess, agent_table)
                result["agent_sessions"] = sess
            else:
                log(f"task {task}: {len(ids[task])} prompts x {args.n_new} tokens, {len(table)} rows")
                result["tasks"][task] = bench.task(task, ids[task], table)
            save()
    if "concurrency" in args.parts:
        conc = [r for r in table if r["name"] in args.concurrency_rows.split(",")]
        result["concurrency_prompts"] = conc_ids
        for task in args.concurrency_tasks:
            result["concurrency"][task] = bench.concurrency(task, conc_ids[task], conc)
            save()
    if "sessions" in args.parts:
        conv_table = agent_rows(args.curve, args.policy_draft, table)
        for task, convs in conv.items():
            log(f"sessions {task}: {len(convs)} sessions of {len(session_plan())} requests x {args.agent_new} tokens, "
                f"{len(conv_table)} rows, clients {args.clients}")
            result["sessions"][task] = bench.sessions(task, convs, conv_table)
            save()
    if "startup" in args.parts:
        result["startup"] = bench.startup()
    result.update(complete=True, wall_s=time.time() - t0)
    save()
    log(f"wrote {out}")
