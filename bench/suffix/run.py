"""Issue 15's benchmark in one run: what the suffix index costs and what drafting from it pays.

    python -m lookupkit.bench.suffix --report            # 25/100/541 MB WikiText + the django code task
    python -m lookupkit.bench.suffix --quick -o /tmp/q.json --work /tmp/qwork   # seconds, tiny inputs

Per corpus of token ids: `lookup-create --tokens ... -j 2` in four VARIANTS, each timed with the peak RSS of
its process tree; the index's bytes per token from the .lkc header; StaticCache.open(path).suffix timed in
fresh processes and in this one; `lookupkit tune-policy` tables learnt on held-out ids with the --orders 2-6
cache (no suffix rows: never drafts from the index) and with the cache holding the index; `lookup-stats
--json` replays of other ids with llama.cpp's rule (once: S(C) at every C) and the policy without and with
the source (once AT each C: its decisions depend on C), then repeated replays at TIMED_COST for µs per call.
lookup-stats and tune-policy run in this process through their own command functions (kernels load once,
repeated replays are warm); builds and fresh opens are child processes. Caches and tables are reused when
their sidecar JSON says the same command made them from the same inputs (--rebuild: again); the results
JSON is written after each corpus; --report renders bench/SUFFIX.md and its section of bench/RESULTS.md.

The inputs are Gemma 3 ids in --data (default $LOOKUPKIT_BENCH_DATA, else the cache dir's bench/data), made once with
(G = `lookupkit model gemma-3-270m`'s GGUF, S = ../shared/corpora):

    lookupkit tokenize -f S/wiki541.txt.zst -m G -o wiki541.i32      # and --max-bytes 25MB / 100MB:
    lookupkit tokenize -f S/wiki541.txt.zst -m G --max-bytes 25MB -o wiki25.i32        # wiki25/100.i32
    lookupkit tokenize -f S/wiki.test.raw -m G -o wikitest.i32
    lookupkit tokenize -f S/wiki.valid.tokens -m G -o wikivalid.i32
    python -m lookupkit.bench.suffix_code_task -m gemma-3-270m       # then copy its corpus.npz, eval.npz to code/
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from lookupkit.bench.suffix import report as report_suffix
from lookupkit.bench.measure import last_json, run_tree, script
from lookupkit.bench.harness import RESULTS, command, git_state, machine, write_text
from lookupkit.files import default_root
from lookupkit.rules import DEFAULT_CTX

DATA = Path(os.environ.get("LOOKUPKIT_BENCH_DATA") or default_root() / "bench" / "data")  # where the prepared ids are
PROSE = ("25MB=wiki25.i32", "100MB=wiki100.i32", "541MB=wiki541.i32")
COSTS = (0.0, 0.1, 0.25, 0.5)  # the verify costs reported (each in lookupkit.verify_cost.REPORTED_COSTS)
TIMED_COST = 0.25  # the cost the repeated (timed) replays draft for: the code task's target cost
RULE_DRAFT = 8  # llama.cpp's rule: --draft 8, its default thresholds
POLICY_DRAFT = 16  # the policy's draft limit in this study (lookup-stats' own default is rules.POLICY_DRAFT)
MEMORY_BUDGET = "1GiB"  # lookup-create's default: the 541 MB index (15 bytes per token in memory) sorts out of core
VARIANTS = {"2gram": [], "2gram+index": ["--suffix-index"], "o6": ["--orders", "2-6"],
            "o6+index": ["--orders", "2-6", "--suffix-index"]}
CACHE, TUNE_CACHE = "o6+index", "o6"  # the cache the replays read; the one the no-source table learns on
QUICK_VARIANTS = (TUNE_CACHE, CACHE)  # --quick builds only these, with -j 1 (worker start-up is most of a tiny build)
QUICK_PROSE_IDS, QUICK_HELD_OUT = 200_000, 20_000
OPEN_PROBE = ("import sys, time; import lookupkit.suffix; from lookupkit.static import StaticCache\n"
              "t = time.perf_counter(); c = StaticCache.open(sys.argv[1]); s = c.suffix\n"
              "dt = time.perf_counter() - t; c.close(); print(dt)")


def cell(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": len(xs)}


def in_process(app, words: list[str]) -> dict:
    """Run a lookupkit command (a typer app) in this process, as its console script would; its JSON output.
    The kernels stay loaded between calls, so repeated replays are warm."""
    out, err = io.StringIO(), io.StringIO()  # stderr: the no-source rows' expected warning, shown on a failure
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = app(words, standalone_mode=False)
    if code:
        raise RuntimeError(f"exit {code}: {' '.join(words)}\n{err.getvalue()[-2000:]}")
    return last_json(out.getvalue())


def signature(cmd: list[str], inputs: list[Path]) -> dict:
    return {"command": cmd, "inputs": [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in inputs]}


def reused(out: Path, sig: dict, rebuild: bool, runs: int = 1) -> dict | None:
    """The recorded measurement of `out` if its sidecar says the same command made it from the same inputs."""
    side = out.with_name(out.name + ".made.json")
    if rebuild or not out.exists() or not side.exists():
        return None
    rec = json.loads(side.read_text())
    return rec["measured"] if rec.get("signature") == sig and len(rec["measured"].get("runs", [1])) >= runs else None


def remember(out: Path, sig: dict, measured: dict) -> None:
    write_text(out.with_name(out.name + ".made.json"), json.dumps({"signature": sig, "measured": measured}, indent=1))


def build(name: str, tokens: list[Path], work: Path, variant: str, a) -> dict:
    """One lookup-create variant (timed a.build_runs times unless reused): seconds, peaks, sizes."""
    out = work / f"{name}-{variant}.lkc"
    cmd = script("lookup-create", *[w for t in tokens for w in ("--tokens", str(t))], "-lcs", str(out),
                 *VARIANTS[variant], "-j", str(a.jobs),
                 "--memory-budget", a.memory_budget, "--json")
    sig = signature(cmd, tokens)
    got = reused(out, sig, a.rebuild, a.build_runs)
    if got is not None:
        return {**got, "reused": True}
    runs = []
    for _ in range(a.build_runs):
        load = os.getloadavg()[0]
        r = run_tree(cmd, work)
        s = r.pop("output")
        runs.append({**r, "peak_tree_rss": max(r["sampled_tree_rss"], s["peak_rss_bytes"]),
                     "peak_tree_pss": max(r["sampled_tree_pss"], s["peak_rss_bytes"]),
                     "driver_peak_rss": s["peak_rss_bytes"], "workers_peak_rss": s.get("workers_peak_rss_bytes"),
                     "phases": s.get("seconds"), "index_seconds": (s.get("suffix_index") or {}).get("seconds"),
                     "load_before": load})
    measured = {"command": shown(cmd, tokens), "file": str(out), "file_bytes": out.stat().st_size,
                "n_tokens": s["n_tokens"], "n_documents": len(s["sources"]), "runs": runs,
                "seconds": cell([r["seconds"] for r in runs]),
                "peak_tree_rss": cell([r["peak_tree_rss"] for r in runs]),
                "peak_tree_pss": cell([r["peak_tree_pss"] for r in runs]),
                "driver_peak_rss": cell([r["driver_peak_rss"] for r in runs]), "date": _now()}
    remember(out, sig, measured)
    return {**measured, "reused": False}


def shown(cmd: list[str], tokens: list[Path]) -> str:
    """The command as text, its --tokens files named once as a pattern when there are many (the code task)."""
    if len(tokens) <= 3:
        return " ".join(cmd)
    rest = [w for w in cmd[1:] if w != "--tokens" and w not in {str(t) for t in tokens}]
    return " ".join([cmd[0], "--tokens", f"{tokens[0].parent}/*.i32 ({len(tokens)} files, one --tokens each)", *rest])


def index_size(path: Path, n_tokens: int) -> dict:
    """The suffix index's four sections' bytes (from the .lkc header), per corpus token and per position."""
    from lookupkit.formats import lkc_layout as lkc, lkc_suffix
    from lookupkit.static import StaticCache

    with StaticCache.open(path) as c:
        meta = c.meta
    with open(path, "rb") as f:
        header_bytes = lkc.PREAMBLE.unpack(f.read(lkc.PREAMBLE.size))[3]
    sections = {s: meta["sections"][s]["length"] for s in lkc_suffix.NAMES}
    total = sum(sections.values())
    return {"sections": sections, "bytes": total, "corpus_tokens": n_tokens, "positions": meta["suffix"]["n"],
            "documents": meta["suffix"]["n_documents"], "bytes_per_token": total / n_tokens,
            "bytes_per_position": total / meta["suffix"]["n"], "header_bytes": header_bytes}


def fresh_opens(path: Path, runs: int) -> list[float]:
    """ms of StaticCache.open(path).suffix in `runs` new processes (lookupkit.suffix imported before the clock)."""
    return [1e3 * float(subprocess.run([sys.executable, "-c", OPEN_PROBE, str(path)], check=True, text=True,
                                       capture_output=True, cwd="/").stdout) for _ in range(runs)]


def open_times(path: Path, fresh: int, repeated: int, control: Path | None) -> dict:
    """StaticCache.open(path).suffix: ms in `fresh` new processes and µs repeated `repeated` times in this one
    (warm page cache both); the same fresh opens of `control` (the 2-gram-only file: the same header, no index)."""
    from lookupkit.static import StaticCache

    ms = fresh_opens(path, fresh)
    import lookupkit.suffix  # noqa: F401  (its import is not the open)
    us = []
    for _ in range(repeated):
        t = time.perf_counter()
        c = StaticCache.open(path)
        assert c.suffix is not None
        us.append(1e6 * (time.perf_counter() - t))
        c.close()
    return {"fresh_process_ms": cell(ms), "in_process_us": cell(us),
            "control_fresh_process_ms": control and cell(fresh_opens(control, fresh))}


def tune(cache: Path, held_out: Path, a) -> dict:
    """`lookupkit tune-policy` on the held-out ids with `cache` (reused by sidecar)."""
    out = cache.with_suffix(".policy.json")
    from lookupkit.cli.main import app

    words = ["tune-policy", "--cache", str(cache), "--tokens", str(held_out), "-c", str(DEFAULT_CTX), "-o", str(out),
             "--json"]
    sig = signature(["lookupkit", *words], [cache, held_out])
    got = reused(out, sig, a.rebuild)
    if got is None:
        t = time.perf_counter()
        about = in_process(app, words)
        got = {"command": shlex.join(["lookupkit", *words]), "table": str(out), "seconds": time.perf_counter() - t,
               "about": about}
        remember(out, sig, got)
    about = {k: v for k, v in got["about"].items() if k != "cache_corpus"}  # (the cache's sources: in its header)
    return {**got, "about": about}


def stats(cache: Path, ids: Path, table: Path | None, cost: float | None) -> dict:
    """One `lookup-stats --json` replay: llama.cpp's rule (table None) or the policy drafting for `cost`."""
    flags = (["--draft", str(RULE_DRAFT)] if table is None else
             ["--policy", "lookupkit", "--policy-table", str(table), "--draft", str(POLICY_DRAFT),
              "--verify-cost", f"{cost:g}"])
    from lookupkit.cli.stats import app

    words = ["--tokens", str(ids), "-lcs", str(cache), "-c", str(DEFAULT_CTX), *flags, "--json"]
    j = in_process(app, words)
    return {"command": shlex.join(["lookup-stats", *words]), "calls": j["draft_calls"], "n_drafted": j["n_drafted"],
            "n_accept": j["n_accept"],
            "accepted_per_call": j["accepted_per_call"], "tokens_per_verify": j["tokens_per_verify"],
            "S": j["expected_speedup"], "us_per_call": j["t_draft_ms"] * 1e3 / max(1, j["draft_calls"]),
            "us_per_token": j["t_draft_ms"] * 1e3 / max(1, j["draft_calls"] + j["n_accept"]),
            "per_source": j["per_source"], "load": os.getloadavg()[0]}


def quality(cache: Path, ids: Path, tables: dict, timing_runs: int) -> dict:
    """Rows llama.cpp / policy without the source / policy with it: per C the replay's totals and S(C);
    µs per call (lookup-stats' own t_draft over its calls) at TIMED_COST over timing_runs further replays."""
    rule = stats(cache, ids, None, None)
    rows = {"llama.cpp": {"per_cost": {f"{c:g}": {**_totals(rule), "S": rule["S"][f"{c:g}"], "replayed_at": None}
                                       for c in COSTS}, "command": rule["command"]}}
    timed = {name: [] for name in ["llama.cpp", *tables]}
    for name, table in tables.items():
        per = {}
        for c in COSTS:
            r = stats(cache, ids, table, c)
            per[f"{c:g}"] = {**_totals(r), "S": r["S"][f"{c:g}"], "replayed_at": c, "per_source": r["per_source"]}
        rows[name] = {"per_cost": per,
                      "command": r["command"].replace(f"--verify-cost {COSTS[-1]:g}", "--verify-cost C")}
    for _ in range(timing_runs):  # after the replays above: kernels loaded, the cache's pages touched
        timed["llama.cpp"].append(stats(cache, ids, None, None))
        for name, table in tables.items():
            timed[name].append(stats(cache, ids, table, TIMED_COST))
    for name, rs in timed.items():
        rows[name]["us_per_call"] = cell([r["us_per_call"] for r in rs])
        rows[name]["us_per_token"] = cell([r["us_per_token"] for r in rs])
    return rows


def _totals(r: dict) -> dict:
    return {k: r[k] for k in ("calls", "n_drafted", "n_accept", "accepted_per_call", "tokens_per_verify")}


def code_inputs(code: Path, work: Path) -> tuple[list[Path], Path, Path]:
    """The code task's corpus as one .i32 per file of the earlier release (one document each, in key order),
    and the later release's changed files: even-indexed (tuning) and odd-indexed (reporting) concatenated."""
    docs_dir = work / "code-docs"
    docs_dir.mkdir(parents=True, exist_ok=True)
    src = code / "corpus.npz"
    stamp = docs_dir / "from.json"
    want = {p.name: [str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in (src, code / "eval.npz")}
    z = np.load(src)
    docs = [docs_dir / f"{k}.i32" for k in z.files]
    if not stamp.exists() or json.loads(stamp.read_text()) != want:
        for k, p in zip(z.files, docs):
            np.ascontiguousarray(z[k], "<i4").tofile(p)
        e = np.load(code / "eval.npz")
        for parity in (0, 1):
            half = np.concatenate([e[k] for k in e.files[parity::2]]).astype("<i4")
            half.tofile(work / f"code-eval-{'odd' if parity else 'even'}.i32")
        write_text(stamp, json.dumps(want))
    return docs, work / "code-eval-even.i32", work / "code-eval-odd.i32"


def sliced(src: Path, n: int, dst: Path) -> Path:
    """The first n ids of src written to dst (--quick)."""
    ids = np.fromfile(src, "<i4", count=n)
    if not dst.exists() or not np.array_equal(np.fromfile(dst, "<i4"), ids):
        ids.tofile(dst)
    return dst


def study_corpus(name: str, kind: str, tokens: list[Path], tune_ids: Path, eval_ids: Path, work: Path, a) -> dict:
    load = os.getloadavg()[0]
    builds = {v: build(name, tokens, work, v, a) for v in a.variants}
    n = builds[CACHE]["n_tokens"]
    cache = Path(builds[CACHE]["file"])
    tables = {"policy": tune(Path(builds[TUNE_CACHE]["file"]), tune_ids, a), "policy+suffix": tune(cache, tune_ids, a)}
    res = {"name": name, "kind": kind, "corpus_tokens": n, "corpus_files": [str(t) for t in tokens[:3]] + (
        [f"... {len(tokens)} files"] if len(tokens) > 3 else []), "tune_ids": str(tune_ids), "eval_ids": str(eval_ids),
        "tune_tokens": os.path.getsize(tune_ids) // 4, "eval_tokens": os.path.getsize(eval_ids) // 4,
        "builds": builds, "index": index_size(cache, n),
        "open": open_times(cache, a.open_fresh, a.open_repeated, builds.get("2gram") and Path(builds["2gram"]["file"])),
        "tables": tables, "load_before": load}
    res["rows"] = quality(cache, eval_ids, {k: Path(t["table"]) for k, t in tables.items()}, a.timing_runs)
    res["load_after"] = os.getloadavg()[0]
    return res


def corpora(a, work: Path) -> list[tuple]:
    """(name, kind, token files, tuning ids, reported ids) for each corpus this run measures."""
    out = []
    for spec in a.prose:
        name, _, path = spec.partition("=")
        path = Path(path) if os.path.isabs(path) else a.data / path
        if not name or not path.is_file():
            raise SystemExit(f"error: --prose {spec}: give NAME=IDS, IDS an existing file of raw int32 ids")
        tune_ids, eval_ids = a.prose_tune, a.prose_eval
        if a.quick:
            path = sliced(path, QUICK_PROSE_IDS, work / f"quick-{name}.i32")
            tune_ids = sliced(tune_ids, QUICK_HELD_OUT, work / "quick-tune.i32")
            eval_ids = sliced(eval_ids, QUICK_HELD_OUT, work / "quick-eval.i32")
        out.append((name, "prose", [path], tune_ids, eval_ids))
    if a.code is not None and (a.code / "corpus.npz").exists():
        docs, even, odd = code_inputs(a.code, work)
        out.append(("code", "code", docs, even, odd))
    elif a.code is not None:
        print(f"note: {a.code}/corpus.npz missing: no code task (python -m lookupkit.bench.suffix_code_task -m "
              "gemma-3-270m writes it)", file=sys.stderr)
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.suffix", description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="where relative --prose paths and the defaults live")
    ap.add_argument("--prose", action="append", metavar="NAME=IDS", help="a prose corpus as raw int32 ids "
                    f"(repeatable; default {' '.join(PROSE)} under --data)")
    ap.add_argument("--prose-tune", type=Path, help="held-out ids the prose tables learn on "
                    "(default DATA/wikitest.i32)")
    ap.add_argument("--prose-eval", type=Path, help="ids the prose rows report (default DATA/wikivalid.i32)")
    ap.add_argument("--code", type=Path, help="the code task's corpus.npz/eval.npz folder (default DATA/code; "
                    "'none' skips it)")
    ap.add_argument("--work", type=Path, default=default_root() / "bench" / "suffix-study")
    ap.add_argument("-o", "--output", type=Path, help=f"results JSON (default {RESULTS}/suffix-study-<date>-vm.json)")
    ap.add_argument("--build-runs", type=int, default=1)
    ap.add_argument("--timing-runs", type=int, default=3, help=f"replays per row at C = {TIMED_COST} for µs per call")
    ap.add_argument("--open-fresh", type=int, default=21)
    ap.add_argument("--open-repeated", type=int, default=200)
    ap.add_argument("--memory-budget", default=MEMORY_BUDGET)
    ap.add_argument("-j", "--jobs", type=int, default=2, help="lookup-create -j (2: the targets' 2 cores)")
    ap.add_argument("--rebuild", action="store_true", help="make every cache and table again")
    ap.add_argument("--quick", action="store_true", help=f"first {QUICK_PROSE_IDS:,} ids of each prose corpus, "
                    f"{QUICK_HELD_OUT:,} held-out ids, one run each, only the {' and '.join(QUICK_VARIANTS)} builds "
                    "with -j 1 (a test runs it)")
    ap.add_argument("--note", help="a sentence the report prints with the run (e.g. what else loaded the machine)")
    ap.add_argument("--report", action="store_true", help="also write --suffix-md and the section of --results-md")
    ap.add_argument("--from", dest="from_json", type=Path, help="measure nothing: render the report of this "
                    "results JSON")
    ap.add_argument("--suffix-md", type=Path, default=RESULTS.parent / "SUFFIX.md")
    ap.add_argument("--results-md", type=Path, default=RESULTS.parent / "RESULTS.md")
    a = ap.parse_args(argv)
    a.prose = a.prose if a.prose is not None else list(PROSE[:1] if a.quick else PROSE)
    a.prose_tune = a.prose_tune or a.data / "wikitest.i32"
    a.prose_eval = a.prose_eval or a.data / "wikivalid.i32"
    a.code = None if str(a.code) == "none" else (a.code or a.data / "code")
    a.variants = QUICK_VARIANTS if a.quick else tuple(VARIANTS)
    if a.quick:
        a.build_runs, a.timing_runs, a.open_fresh, a.open_repeated, a.jobs = 1, 1, 1, 20, 1
    if min(a.build_runs, a.timing_runs, a.open_fresh, a.open_repeated) < 1:
        ap.error("--build-runs, --timing-runs, --open-fresh and --open-repeated must be >= 1")
    return a


def main(argv=None) -> None:
    try:
        run(sys.argv[1:] if argv is None else list(argv))
    except RuntimeError as exc:  # a step's command failed: its message and stderr tail
        raise SystemExit(f"error: {exc}") from None


def run(argv: list[str]) -> None:
    a = parse_args(argv)
    if a.from_json is not None:
        report_suffix.write(json.loads(a.from_json.read_text()), a.from_json, a.suffix_md, a.results_md)
        return
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = a.output or RESULTS / f"suffix-study-{datetime.date.today().isoformat()}-vm.json"
    for p in [a.prose_tune, a.prose_eval] * bool(a.prose):
        if not p.exists():
            raise SystemExit(f"error: {p} does not exist (held-out ids for the prose corpora)")
    result = {"study": "suffix-study", "started": _now(), "quick": a.quick,
              "command": command("lookupkit.bench.suffix", argv),
              "git": git_state(), "machine": machine(gate=True), "n_ctx": DEFAULT_CTX, "costs": list(COSTS), "timed_cost": TIMED_COST,
              "rule_draft": RULE_DRAFT, "policy_draft": POLICY_DRAFT, "memory_budget": a.memory_budget, "jobs": a.jobs,
              "build_runs": a.build_runs, "timing_runs": a.timing_runs, "note": a.note, "corpora": {}}
    for name, kind, tokens, tune_ids, eval_ids in corpora(a, work):
        print(f"{_now()} {name}: {sum(os.path.getsize(t) for t in tokens) // 4:,} ids", file=sys.stderr)
        result["corpora"][name] = study_corpus(name, kind, tokens, tune_ids, eval_ids, work, a)
        result["targets"] = report_suffix.targets(result)
        out.write_text(json.dumps(result, indent=1) + "\n")  # checkpoint
    result["finished"] = _now()
    result["targets"] = report_suffix.targets(result)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for t in result["targets"]:
        verdict = {True: "met    ", False: "NOT MET", None: "n/a    "}[t["met"]]
        print(f"{verdict} {t['target']}: {t['measured']}")
    print(f"wrote {out}")
    if a.report:
        report_suffix.write(result, out, a.suffix_md, a.results_md)


if __name__ == "__main__":
    main()
