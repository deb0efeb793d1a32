"""Does lookupkit's policy make drafting pay? `python -m lookupkit.bench.policy_pays`.

Side by side in one run, on the same caches: llama.cpp's rule (exact) and lookupkit's policy at each
verify cost C it is asked to draft for, replaying the WikiText-103 test split (qwen2 ids, -c 4096, at most
8 drafted tokens per call) with static caches of 0/25/100/541 MB of ../shared/corpora/wiki541.txt.zst
built with orders 2 (llama.cpp's file) and 2-6 (lookupkit's), and on code: a cache of this Python's
standard library (gpt-2 vocabulary) replaying the sources of an installed package the corpus excludes.
The policy's confidence tables are the bundled ones (`lookupkit tune-policy`: learnt on a held-out slice,
never on these replays). Timing cells are medians of `--runs` replays (min-max kept); build times are
`lookup-create --tokens` from the same ids, so the ratio is that of the counting and writing alone.
Results go to bench/results/policy-<date>.json and the tables (report) on stdout (bench/RESULTS.md quotes
them).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from lookupkit import StaticCache, Tokenizer
from lookupkit.bench.harness import RESULTS, SHARED, bench_dir, entry, git_state, write_text
from lookupkit.bench.policy_pays.report import report
from lookupkit.corpora import read_token_file
from lookupkit.errors import InputError
from lookupkit.policy.confidence import load as load_tables
from lookupkit.replay.loop import replay_fast
from lookupkit.replay.run import policy_over
from lookupkit.rules import DEFAULT_CTX
from lookupkit.verify_cost import REPORTED_COSTS, VerifyCost

WORK = bench_dir()  # where `lookupkit bench` leaves its prefix ids ($LOOKUPKIT_CACHE_DIR honoured)
EVAL = SHARED / "reference" / "wikitext" / "wiki.test.qwen2.i32"
QWEN2 = SHARED / "vocab" / "ggml-vocab-qwen2.gguf"
N_DRAFT = 8  # the most tokens per draft call, for the rule and the policy alike (issue 9's replays)
CREATE = [sys.executable, "-c", "from lookupkit.cli.create import main; main()"]  # lookup-create


def _build(ids: Path, out: Path, orders: str, runs: int) -> dict:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([*CREATE, "--tokens", str(ids), "-m", str(QWEN2),
                        "-lcs", str(out), "--orders", orders, "-j", "1", "-q"], check=True)
        times.append(time.perf_counter() - t)
    return {"seconds": _cell(times), "bytes": out.stat().st_size}


def _cell(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": len(xs)}


def _replay(ids, static, policy, runs: int) -> dict:
    out = None
    times = []
    for _ in range(runs):
        trace, _ = replay_fast(ids, DEFAULT_CTX, N_DRAFT, static=static, policy=policy)
        times.append(trace.t_draft_s * 1e6 / len(trace.n_drafted))
        out = trace
    s = out.summary()
    return {"accepted_per_call": s["accepted_per_call"], "tokens_per_verify": s["tokens_per_verify"],
            "n_drafted": s["n_drafted"], "n_accept": s["n_accept"], "draft_calls": s["draft_calls"],
            "expected_speedup": s["expected_speedup"], "us_per_call": _cell(times),
            "per_source": s["per_source"]}


def _rows(ids, plain, rich, tables, runs: int) -> dict:
    rows = {"llama.cpp": _replay(ids, plain, None, runs)}
    for c in REPORTED_COSTS:  # the report has a row for each
        pol = policy_over(rich, tables, VerifyCost.of(c), N_DRAFT)
        rows[f"lookupkit C={c:g}"] = _replay(ids, rich, pol, runs)
    return rows


def wiki(sizes: list[int], runs: int, tables) -> dict:
    ids = read_token_file(EVAL)
    out = {}
    for size in sizes:
        cell = {}
        plain = rich = None
        if size:
            prefix = WORK / f"prefix-{size}.i32"
            if not prefix.exists():
                print(f"skip {size} MB: {prefix} missing (run `lookupkit bench` once to make it)", file=sys.stderr)
                continue
            two, six = WORK / f"policy-{size}-o2.lkc", WORK / f"policy-{size}-o6.lkc"
            cell["build_o2"] = _build(prefix, two, "2", runs)
            cell["build_o6"] = _build(prefix, six, "2-6", runs)
            plain, rich = StaticCache.open(two), StaticCache.open(six)
        cell["replay"] = _rows(ids, plain, rich, tables, runs)
        out[str(size)] = cell
        print(json.dumps({size: {k: (v["accepted_per_call"], v["expected_speedup"]) for k, v in cell["replay"].items()}}),
              file=sys.stderr)
    return out


def code(runs: int, tables, package: str = "numpy") -> dict:
    """The stdlib cache (gpt-2, orders 2-6 and 2) replaying an installed package's own sources."""
    import importlib

    root = Path(importlib.import_module(package).__file__).parent
    site = Path(sysconfig.get_paths()["purelib"])
    if site not in root.parents:
        raise SystemExit(f"{package} is not under site-packages; the stdlib corpus might contain it")
    tok = Tokenizer.default()
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.rglob("*.py")))
    ids = tok.encode(text)
    two, six = WORK / "policy-stdlib-o2.lkc", WORK / "policy-stdlib-o6.lkc"
    for path, orders in ((two, "2"), (six, "2-6")):
        if not path.exists():
            subprocess.run([*CREATE, "--default-corpus", "-lcs", str(path),
                            "--orders", orders, "-q"], check=True)
    plain, rich = StaticCache.open(two), StaticCache.open(six)
    return {"package": package, "tokens": int(len(ids)), "replay": _rows(ids, plain, rich, tables, runs),
            "bytes_o2": two.stat().st_size, "bytes_o6": six.stat().st_size}


def _main(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.policy_pays", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0,25,100,541")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-code", action="store_true")
    ap.add_argument("-o", "--output", type=Path, default=None)
    ap.add_argument("--report", type=Path, default=None, help="print the tables of an earlier results file")
    a = ap.parse_args(argv)
    if a.report is not None:
        print(report(json.loads(a.report.read_text())))
        return
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
    except ValueError:
        raise InputError(f"--sizes takes MB sizes separated by commas (e.g. 0,25,100,541), got {a.sizes!r}") from None
    tables = load_tables()
    commit = git_state()["commit"]
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": commit,
              "eval": EVAL.name, "n_ctx": DEFAULT_CTX, "n_draft": N_DRAFT, "costs": list(REPORTED_COSTS),
              "wiki": wiki(sizes, a.runs, tables)}
    if not a.skip_code:
        result["code"] = code(a.runs, tables)
    out = a.output or RESULTS / f"policy-{datetime.date.today()}.json"
    write_text(out, json.dumps(result, indent=1) + "\n")
    print(report(result))
    print(f"wrote {out}")


def main(argv=None) -> None:
    entry(_main, argv)


if __name__ == "__main__":
    main()
