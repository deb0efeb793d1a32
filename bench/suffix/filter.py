"""Does a binary fuse membership filter over the corpus' n-grams pay in front of the suffix index (issue 15)?

The drafter searches the longest corpus match once per draft call, bounded by the previous match + 1;
on prose the bound mostly fails and the search gallops and bisects, each failing probe a few random
reads of the mapped SA and text. A filter over the n-grams of some orders bounds the match before the
index is touched (the smallest order whose n-gram it does not hold, minus 1). This replays the draft
calls over an evaluation text three ways -- plain, filter-bounded (pyfusefilter's Fuse8 built here, its
lookup compiled beside the search: bench.suffix.filter_kernels), and the oracle that probes only the true
length (the most any filter could save) -- each in a fresh process, once with the page cache dropped
(cold) and again (warm), and checks the filter's bounds against the index's answers at every call.

    python -m lookupkit.bench.suffix.filter --cache CACHES/gemma-wiki541-sx.lkc \
        --eval-ids DATA/wikitest.i32 --orders 2,4,8 --runs 3 --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lookupkit.bench.startup_probe import evict as evict_file

from lookupkit.draft.suffix_source import MAX_LEN, MIN_SHARE
from lookupkit.bench.harness import bench_dir, loadavg, wait_quiet

N_RUN = 16  # run tokens per draft call (bench/suffix_replay's --max-tokens)
TIMED = ("cold", "warm", "search_only_warm")  # a timed process's passes
PAYS = 0.10  # the filter pays if its slowest run beats plain's fastest by more than this share of a draft call


EVICT_TRIES = 40  # fadvise rounds before the child is run whatever is still resident (it reports the share)


def evict(paths: list[Path], how: str) -> str:
    """Drop the files' pages from the page cache: the whole cache ("drop_caches", needs root; else falls
    back) or only these files' pages ("fadvise"); returns which was done."""
    os.sync()
    if how == "drop_caches":
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return "drop_caches"
        except OSError:
            pass
    for _ in range(EVICT_TRIES):  # pages still under writeback are not dropped: retry until none is resident
        for p in paths:
            evict_file(str(p))
        if all(resident(p) == 0 for p in paths):
            break
        time.sleep(0.05)
    return "posix_fadvise(DONTNEED)"


def resident(path: Path) -> float:
    """Share of the file's pages in the page cache (mincore over a fresh mapping, which reads none)."""
    import ctypes

    if os.path.getsize(path) == 0:
        return 0.0
    m = np.memmap(path, np.uint8, "r")
    n = (len(m) + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = np.zeros(n, np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mincore(ctypes.c_void_p(m.ctypes.data), ctypes.c_size_t(len(m)), ctypes.c_void_p(vec.ctypes.data))
    del m
    return float(np.mean(vec & 1)) if rc == 0 else float("nan")


def replay_arrays(index, ev, p0, p1, n_run, mode, flt=None, truth=None):
    """The compiled replay of draft calls at positions p0 .. p1 - 1; (lens, bounds, runs) per call."""
    from lookupkit.bench.suffix import filter_kernels as K

    n = p1 - p0
    lens, bounds, runs = (np.zeros(n, np.int64) for _ in range(3))
    params, fp = flt if flt is not None else (np.zeros((0, 7), np.uint64), np.zeros(1, np.uint8))
    truth = truth if truth is not None else np.zeros(n, np.int64)
    scratch = (np.empty(N_RUN, np.int32), np.empty(N_RUN, np.int64), np.empty(N_RUN, np.int64))
    K.replay(index.text, index.sa, index.starts, index.second, ev, p0, p1, MAX_LEN, n_run, MIN_SHARE, K.MODES[mode],
             params, fp, truth, lens, bounds, runs, *scratch)
    return lens, bounds, runs


def child(a) -> None:
    """One timed process: pass 1 as the page cache left it (cold after evict), pass 2 warm, pass 3 warm
    without the run (the search alone). --advice random: the mappings read one page per fault (MADV_RANDOM)
    instead of the kernel's read-around (read_ahead_kb around each fault)."""
    from lookupkit import StaticCache

    from lookupkit.bench.suffix.filter_build import load_filter

    ev = np.fromfile(a.eval_ids, "<i4").astype(np.int64)
    out = {"variant": a.variant, "advice": a.advice, "load": loadavg()[0],
           "resident_before_open": round(resident(Path(a.cache[0])), 4)}
    mode, flt, raw = a.variant.split(" ")[0], None, None
    if mode == "filtered":
        params, raw = load_filter(Path(a.filter))
        out["filter_resident_before"] = round(resident(Path(a.filter)), 4)
        flt = (params, np.asarray(raw))
    truth = np.load(a.truth) if mode == "oracle" else None
    cache = StaticCache.open(a.cache[0])
    if a.advice == "random":
        for m in (cache._mm, getattr(raw, "_mmap", None)):  # the mappings the passes read
            if m is not None:
                m.madvise(mmap.MADV_RANDOM)
    index = cache.suffix
    replay_arrays(index, ev, 1, 1, N_RUN, mode, flt, truth)  # compiled for these types; reads no index page
    out["resident_after_open"] = round(resident(Path(a.cache[0])), 4)
    for name, n_run in zip(TIMED, (N_RUN, N_RUN, 0)):
        t0 = time.perf_counter()
        replay_arrays(index, ev, a.p0, a.p1, n_run, mode, flt, truth)
        out[name + "_s"] = time.perf_counter() - t0
    print(json.dumps(out))


def probes_of(lens, bounds) -> dict:
    from lookupkit.bench.suffix.filter_kernels import probe_counts

    out = np.zeros((len(lens), 2), np.int64)
    probe_counts(lens, bounds, out)
    return {"probes_per_call": round(float(out[:, 0].mean()), 3), "failing_per_call": round(float(out[:, 1].mean()), 3)}


def accounting(index, ev, p0, p1) -> tuple[dict, tuple]:
    """The plain replay's matches (the truth every variant is checked against) and their probes."""
    lens, bounds, runs = replay_arrays(index, ev, p0, p1, N_RUN, "plain")
    summary = {"calls": len(lens), "match_length_histogram": np.bincount(lens, minlength=MAX_LEN + 1).tolist(),
               "mean_match": round(float(lens.mean()), 3),
               "match_share": {f"<={k}": round(float(np.mean(lens <= k)), 4) for k in (1, 2, 3, 4, 8, 16)},
               "bound_extended": round(float(np.mean(lens == bounds)), 4),  # the whole window occurred: one probe
               "mean_run": round(float(runs.mean()), 3), "probes": {"plain": probes_of(lens, bounds),
               "oracle": {"probes_per_call": round(float(np.mean(lens > 0)), 3), "failing_per_call": 0.0}}}
    return summary, (lens, bounds, runs)


def filter_accounting(index, ev, p0, p1, flt, truth) -> dict:
    """What the filter answers at each call, checked against the index: never a bound below the true match
    (no false negative), the same matches and runs; how often it cut the bound, to the match, to <= 1 (the
    search then reads only the first-token table), and its lookups per call."""
    from lookupkit.bench.suffix.filter_kernels import ORDER

    lens, bounds, runs = truth
    f_lens, f_bounds, f_runs = replay_arrays(index, ev, p0, p1, N_RUN, "filtered", flt)
    false_neg = int(np.sum(f_bounds < lens))
    if false_neg or not np.array_equal(f_lens, lens) or not np.array_equal(f_runs, runs):
        raise AssertionError(f"the filter-bounded search differs from the index's: {false_neg} bounds below the "
                             f"true match, {int(np.sum(f_lens != lens))} lengths differ")
    cut = bounds > f_bounds
    checks = sum(np.mean((k <= bounds) & (k <= f_bounds + 1)) for k in flt[0][:, ORDER].astype(np.int64))
    return {"cut_bound": round(float(np.mean(cut)), 4),
            "bound_exact": round(float(np.mean(cut & (f_bounds == lens))), 4),
            "search_without_index": round(float(np.mean(cut & (f_bounds <= 1))), 4), "false_negatives": false_neg,
            "same_matches_and_runs": True, "checks_per_call": round(float(checks), 3),
            "probes": probes_of(lens, f_bounds)}


def evict_and_run(a, variant: str, advice: str, paths: list[Path], extra: list[str]) -> dict:
    load = wait_quiet(a.max_load, a.patience)
    how = evict(paths, a.evict)
    cmd = [sys.executable, "-m", "lookupkit.bench.suffix.filter", "--child", "--variant", variant, "--advice", advice,
           "--cache", str(paths[0]), "--eval-ids", a.eval_ids, *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())  # not a source folder that shadows the package
    row = {**json.loads(out.stdout.strip().splitlines()[-1]), "load_at_start": load, "evicted_by": how}
    print(json.dumps(row), file=sys.stderr)
    return row


def measure_size(a, cache_path: Path, ev: np.ndarray, designs: list[list[int]], work: Path) -> dict:
    """Filters (built or reused), accounting and the timed processes for one cache."""
    from lookupkit import StaticCache

    from lookupkit.bench.suffix.filter_build import build_filter, load_filter, python_api_costs, save_filter

    cache = StaticCache.open(cache_path)
    index = cache.suffix
    if index is None:
        sys.exit(f"suffix_filter: {cache_path} has no suffix index (build it with lookup-create --suffix-index)")
    p0, p1 = 1, (min(len(ev), 1 + a.positions) if a.positions else len(ev))
    res = {"cache": str(cache_path), "corpus_positions": index.n, "file_bytes": os.path.getsize(cache_path),
           "suffix_bytes": sum(int(getattr(index, k).nbytes) for k in ("text", "sa", "starts", "second")),
           "calls": p1 - p0, "designs": {}}
    res["accounting"], truth = accounting(index, ev, p0, p1)
    truth_path = work / f"{cache_path.stem}.truth.npy"
    np.save(truth_path, truth[0])
    variants = {"plain": [], "oracle": ["--truth", str(truth_path)]}
    for orders in designs:
        label = "filtered " + ",".join(map(str, orders))
        path = work / f"{cache_path.stem}.fuse-{'-'.join(map(str, orders))}"
        if not path.exists():
            params, fp, stats = build_filter(np.asarray(index.text), orders)
            save_filter(path, params, fp)
            Path(f"{path}.json").write_text(json.dumps(stats))
            del params, fp
        params, fp = load_filter(path)
        d = {"filter": json.loads(Path(f"{path}.json").read_text()),
             **filter_accounting(index, ev, p0, p1, (params, np.asarray(fp)), truth)}
        d["python_api"] = python_api_costs(d["filter"], d["checks_per_call"], a.api_keys)
        res["designs"][label] = d
        variants[label] = ["--filter", str(path)]
        del params, fp
    print(json.dumps({k: res[k] for k in ("accounting", "designs")}), file=sys.stderr)  # before the long part
    del index, truth
    cache.close()
    runs = [evict_and_run(a, v, adv, [cache_path] + [Path(x) for x in extra[1:2] if v.startswith("filtered")],
                          [*extra, "--p0", str(p0), "--p1", str(p1)]) | {"run": r}
            for r in range(a.runs) for adv in a.advice.split(",") for v, extra in variants.items()]
    res["runs"] = runs
    calls = p1 - p0
    res["us_per_call"] = {v: {**{f"cold{'' if adv == 'default' else '_' + adv}":
                                 spread([x["cold_s"] for x in runs if x["variant"] == v and x["advice"] == adv], calls)
                                 for adv in a.advice.split(",")},  # warm passes: every run's, whatever its advice
                              **{k: spread([x[k + "_s"] for x in runs if x["variant"] == v], calls) for k in TIMED[1:]}}
                          for v in variants}
    u = res["us_per_call"]
    res["saving"] = {v: {k: round(1 - u[v][k]["median"] / u["plain"][k]["median"], 4) for k in u["plain"]}
                     for v in variants if v != "plain"}  # median against median
    res["clear_saving"] = {v: {k: round(1 - u[v][k]["max"] / u["plain"][k]["min"], 4) for k in u["plain"]}
                           for v in variants if v != "plain"}  # its slowest run against plain's fastest
    return res


def spread(xs: list[float], calls: int) -> dict:
    us = sorted(1e6 * x / calls for x in xs)
    return {"min": round(us[0], 3), "median": round(float(np.median(us)), 3), "max": round(us[-1], 3), "runs": len(us)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.suffix.filter", description=__doc__.splitlines()[0])
    ap.add_argument("--cache", nargs="+", required=True, help="version-3 .lkc files with a suffix index")
    ap.add_argument("--eval-ids", required=True, help="raw little-endian int32 ids of the text being written")
    ap.add_argument("--orders", nargs="+", default=["2,4,8"], help="filter designs: each a list of n-gram orders")
    ap.add_argument("--positions", type=int, default=0, help="draft calls at positions 1..N (0: the whole text)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default=bench_dir() / "suffix-filter", help="where filters and truths are kept")
    ap.add_argument("--out", help="results JSON (then the markdown table is printed)")
    ap.add_argument("--max-load", type=float, default=1.5, help="start a timed process below this 1-minute load")
    ap.add_argument("--patience", type=float, default=300, help="seconds to wait for that load before starting anyway")
    ap.add_argument("--evict", choices=("drop_caches", "fadvise"), default="drop_caches",
                    help="cold runs: drop the whole page cache (root) or only the files' pages")
    ap.add_argument("--advice", default="default", help="mapping advice of the timed processes, comma-separated: "
                    "default (the kernel's read-around) and/or random (MADV_RANDOM: one page per fault)")
    ap.add_argument("--api-keys", type=int, default=200_000, help="keys of the Python-API cost sample")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("--variant", "--filter", "--truth"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    for name in ("--p0", "--p1"):
        ap.add_argument(name, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a)
    from lookupkit.errors import LookupkitError

    from lookupkit.bench.harness import git_state, machine

    try:
        designs = [sorted({int(k) for k in d.split(",")}) for d in a.orders]
    except ValueError:
        designs = [[]]
    if any(not d or d[0] < 2 for d in designs):
        sys.exit("suffix_filter: each --orders is a comma-separated list of n-gram orders >= 2 (e.g. 2,4,8)")
    missing = [p for p in (*a.cache, a.eval_ids) if not os.path.isfile(p)]
    if missing:
        sys.exit(f"suffix_filter: no such file: {missing[0]}")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    ev = np.fromfile(a.eval_ids, "<i4").astype(np.int64)
    res = {"machine": machine(), "git": git_state(), "command": " ".join(["python -m lookupkit.bench.suffix.filter",
           *(argv if argv is not None else sys.argv[1:])]), "designs": designs, "max_len": MAX_LEN, "n_run": N_RUN,
           "eval_ids": a.eval_ids, "eval_tokens": len(ev), "pays_threshold": PAYS,
           "sizes": []}
    try:
        res["sizes"] = [measure_size(a, Path(c), ev, designs, work) for c in a.cache]
    except LookupkitError as e:
        sys.exit(f"suffix_filter: {e}")
    res["loadavg_at_end"] = loadavg()
    res["filter_pays"] = any(v > PAYS for s in res["sizes"] for name, sv in s["clear_saving"].items()
                             if name.startswith("filtered") for k, v in sv.items() if "search_only" not in k)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(markdown(res) if a.out else json.dumps(res, indent=1))


def markdown(res: dict) -> str:
    """The results as the table of bench/SUFFIX_FILTER.md."""
    cols = list(res["sizes"][0]["us_per_call"]["plain"])
    heads = " | ".join(c.replace("_", " ") + " µs/call (min / median / max)" for c in cols)
    rows = [f"| corpus | variant | {heads} | "
            "probes per call (failing) |", "|---|---|" + "---|" * len(cols) + "---|"]
    for s in res["sizes"]:
        for v, u in s["us_per_call"].items():
            pr = s["designs"][v]["probes"] if v in s["designs"] else s["accounting"]["probes"][v]
            cells = [f"{u[k]['min']:.2f} / {u[k]['median']:.2f} / {u[k]['max']:.2f}" for k in cols]
            rows.append(f"| {s['corpus_positions'] / 1e6:.1f} M ids | {v} | {' | '.join(cells)} | "
                        f"{pr['probes_per_call']} ({pr['failing_per_call']}) |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
