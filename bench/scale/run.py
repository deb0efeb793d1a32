"""Scale test: build caches from synthetic corpora of growing size within one memory budget.

    python -m lookupkit.bench.scale                       # 30M..610M tokens, 3 runs (1 above --repeat-max)
    python -m lookupkit.bench.scale --sizes 4M,8M --runs 1 --budget 256MiB

Generates the largest corpus once (`gen.ZipfMarkov`, int32 ids; every smaller size is its
prefix) under ~/.cache/lookupkit/bench/scale (never in the repository), measures the growth of
distinct 2-grams at each size, then runs `lookup-create --tokens ... --memory-budget B -j J --json`
for every size, `--runs` times (once for sizes above `--repeat-max` tokens), recording wall time,
the phases, the driver's peak RSS (VmHWM) and the largest worker's (RUSAGE_CHILDREN), and the
process tree's peak (wait4). Results go to results.json in that directory, a table to bench/SCALE.md
(between markers, so the rest of the file is kept) and bench/plots/scale.png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
from pathlib import Path

import numpy as np

from lookupkit.bench.harness import bench_dir, machine, output_dir, write_text
from lookupkit.bench.measure import run, script
from lookupkit.bench.scale.gen import ZipfMarkov, fit_power, generate, growth
from lookupkit.files import atomic_writer

DATA = bench_dir() / "scale"
SIZES = "30.5M,61M,122M,244M,610M"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"


def _count(text: str) -> int:
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    t = text.strip().upper()
    return int(float(t[:-1]) * mult[t[-1]]) if t[-1] in mult else int(t)


def prefix_file(full: Path, n: int) -> Path:
    """The first `n` ids of `full` as their own file (the builds read whole files)."""
    path = full.with_name(f"{full.stem}-{n}.i32")
    if path.exists() and path.stat().st_size == 4 * n:
        return path
    with open(full, "rb") as src, atomic_writer(path) as dst:
        left = 4 * n
        while left:
            chunk = src.read(min(left, 64 << 20))
            dst.write(chunk)
            left -= len(chunk)
    return path


def corpus(sizes: list[int], g: ZipfMarkov) -> dict[int, Path]:
    full = DATA / f"zm-s{g.seed}-{max(sizes)}.i32"
    if not (full.exists() and full.stat().st_size == 4 * max(sizes)):
        print(f"generating {max(sizes):,} ids -> {full}", file=sys.stderr)
        generate(full, max(sizes), g)
    return {n: (full if n == max(sizes) else prefix_file(full, n)) for n in sizes}


class TreeSampler(threading.Thread):
    """Every 0.1 s, the resident memory of this process's children and their descendants, split into
    anonymous (RssAnon: what the build allocated) and file-backed (RssFile: mapped pages of the token
    file and the output, clean page cache the kernel can drop): peaks of the driver's and of the sum."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.peak = {"driver_anon": 0, "driver_file": 0, "tree_anon": 0, "tree_total": 0}

    def run(self):
        import psutil

        me = psutil.Process()
        while not self.stop.wait(0.1):
            anon = total = 0
            for child in me.children(recursive=True):
                a, f = _rss(child.pid)
                anon, total = anon + a, total + a + f
                if child.ppid() == me.pid:
                    self.peak["driver_anon"] = max(self.peak["driver_anon"], a)
                    self.peak["driver_file"] = max(self.peak["driver_file"], f)
            self.peak["tree_anon"] = max(self.peak["tree_anon"], anon)
            self.peak["tree_total"] = max(self.peak["tree_total"], total)


def _rss(pid: int) -> tuple[int, int]:
    anon = file = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
                elif line.startswith(("RssFile:", "RssShmem:")):
                    file += int(line.split()[1]) * 1024
    except OSError:
        pass
    return anon, file


def build_once(ids: Path, budget: str, jobs: int) -> dict:
    out = DATA / "out.lkc"
    tmp = DATA / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    sampler = TreeSampler()
    sampler.start()
    try:
        r = run(script("lookup-create", "--tokens", str(ids), "-lcs", str(out), "--memory-budget", budget,
                       "-j", str(jobs), "--temp-dir", str(tmp), "--no-token-cache", "--json"), timeout=7200)
    finally:
        sampler.stop.set()
        sampler.join()
    s = r.output
    row = {"wall_s": round(r.seconds, 2), "tree_peak_rss": r.peak_rss, "driver_peak_rss": s["peak_rss_bytes"],
           "workers_peak_rss": s["workers_peak_rss_bytes"], "seconds": s["seconds"],
           "merge_s": s.get("merge_seconds"), "n_2grams": s["n_2grams"], "n_pairs": s["n_pairs"],
           "file_bytes": s["file_bytes"], "peaks_by_phase": s["peak_rss_bytes_by_end_of"], "sampled": sampler.peak}
    out.unlink()
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.scale", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=SIZES, help="token counts (K/M/G suffixes), comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeat-max", default="250M", help="sizes above this many tokens run once")
    ap.add_argument("--budget", default="1GiB")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--growth", action="store_true", help="also measure distinct 2-grams at each size with numpy "
                    "(slow; the builds report them anyway)")
    ap.add_argument("--no-report", action="store_true", help="write results.json only")
    ap.add_argument("--out-dir", type=Path, default=None, help="where SCALE.md and plots/ go (default: the repo's bench/ in a source checkout, else the bench cache)")
    ap.add_argument("--report-only", action="store_true", help="the table and plot from an earlier results.json")
    a = ap.parse_args(argv)
    if a.report_only:
        return report(json.loads((DATA / "results.json").read_text()), a.out_dir)
    sizes = sorted(_count(s) for s in a.sizes.split(","))
    g = ZipfMarkov(seed=a.seed)
    files = corpus(sizes, g)
    results_path = DATA / "results.json"
    res = json.loads(results_path.read_text()) if results_path.exists() else {}
    res.update({"generator": g.params(), "budget": a.budget, "jobs": a.jobs, "machine": machine()})
    res["builds"] = {}
    if a.growth:
        ids = np.fromfile(files[max(sizes)], "<i4")
        res["growth"] = growth(ids, sizes)
        del ids
        print(json.dumps(res["growth"]), file=sys.stderr)
    write_text(results_path, json.dumps(res, indent=1))
    for n in sizes:
        runs = a.runs if n <= _count(a.repeat_max) else 1
        rows = []
        for i in range(runs):
            row = build_once(files[n], a.budget, a.jobs)
            print(f"{n:,} tokens run {i + 1}/{runs}: {json.dumps(row)}", file=sys.stderr)
            rows.append(row)
            res["builds"][str(n)] = rows
            write_text(results_path, json.dumps(res, indent=1))
    shutil.rmtree(DATA / "tmp", ignore_errors=True)
    if not a.no_report:
        report(res, a.out_dir)


def _med(rows, get):
    return statistics.median(get(r) for r in rows)


def table(res: dict) -> str:
    lines = [f"Budget `--memory-budget {res['budget']}`, `-j {res['jobs']}`, `lookup-create --tokens` (no "
             "tokenizing), medians of the runs shown (min–max in brackets where > 1 run).", "",
             "| tokens | runs | distinct 2-grams | pairs | file | build s | count+merge s | write s | driver VmHWM "
             "| largest worker VmHWM | driver anon peak | all processes' anon peak (sum) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, rows in sorted(res["builds"].items(), key=lambda kv: int(kv[0])):
        walls = [r["wall_s"] for r in rows]
        rng = f" [{min(walls):.0f}–{max(walls):.0f}]" if len(rows) > 1 else ""
        lines.append(
            f"| {int(n) / 1e6:,.1f} M | {len(rows)} | {rows[0]['n_2grams'] / 1e6:,.2f} M | {rows[0]['n_pairs'] / 1e6:,.1f} M "
            f"| {rows[0]['file_bytes'] / 1e6:,.0f} MB | {_med(rows, lambda r: r['wall_s']):.1f}{rng} "
            f"| {_med(rows, lambda r: r['seconds']['count']):.1f} | {_med(rows, lambda r: r['seconds']['write']):.1f} "
            f"| {_med(rows, lambda r: r['driver_peak_rss']) / 2**20:,.0f} MiB "
            f"| {_med(rows, lambda r: r['workers_peak_rss']) / 2**20:,.0f} MiB "
            f"| {_med(rows, lambda r: r['sampled']['driver_anon']) / 2**20:,.0f} MiB "
            f"| {_med(rows, lambda r: r['sampled']['tree_anon']) / 2**20:,.0f} MiB |")
    rows = [{"tokens": int(n), "keys": r[0]["n_2grams"], "pairs": r[0]["n_pairs"]} for n, r in res["builds"].items()]
    if len(rows) >= 2:
        rows.sort(key=lambda r: r["tokens"])
        a, b = fit_power(rows, "keys")
        pa, pb = fit_power(rows, "pairs")
        lines += ["", f"Synthetic growth (fit over these builds, N = tokens): distinct 2-grams ≈ {a:.3g} · N^{b:.3f}, "
                      f"distinct (2-gram, follower) pairs ≈ {pa:.3g} · N^{pb:.3f}."]
    return "\n".join(lines)


def report(res: dict, out_dir: Path | None = None) -> None:
    """SCALE.md's section (and the plot) in out_dir, default output_dir(): see lookupkit.bench.harness."""
    out_dir = out_dir or output_dir()
    md = out_dir / "SCALE.md"
    text = md.read_text() if md.exists() else f"# Scale test\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    md.write_text(head + BEGIN + "\n" + table(res) + "\n" + END + rest.split(END, 1)[1])
    plot(res, out_dir / "plots" / "scale.png")


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = sorted(res["builds"].items(), key=lambda kv: int(kv[0]))
    x = [int(n) / 1e6 for n, _ in items]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for get, label, style in (
            (lambda r: r["sampled"]["tree_anon"], "all processes, anonymous (sum, sampled)", "o-"),
            (lambda r: r["sampled"]["driver_anon"], "driver, anonymous (sampled)", "s-"),
            (lambda r: r["workers_peak_rss"], "largest worker, VmHWM", "^-"),
            (lambda r: r["driver_peak_rss"], "driver, VmHWM (incl. mapped token file)", "x:")):
        ax1.plot(x, [_med(rows, get) / 2**20 for _, rows in items], style, label=label)
    ax1.axhline(_budget_mib(res["budget"]), color="tab:red", ls="--", label=f"--memory-budget {res['budget']}")
    ax1.set_xlabel("corpus (M tokens)")
    ax1.set_ylabel("MiB")
    ax1.set_ylim(bottom=0)
    ax1.set_title("peak memory against corpus size")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.plot(x, [_med(rows, lambda r: r["wall_s"]) for _, rows in items], "o-", label="build (wall)", color="tab:blue")
    ax2.plot(x, [_med(rows, lambda r: r["seconds"]["write"]) for _, rows in items], "s--", label="write phase",
             color="tab:orange")
    ax2b = ax2.twinx()
    ax2b.plot(x, [rows[0]["n_2grams"] / 1e6 for _, rows in items], "^:", color="tab:purple", label="distinct 2-grams")
    ax2b.set_ylabel("distinct 2-grams (M)", color="tab:purple")
    ax2.set_xlabel("corpus (M tokens)")
    ax2.set_ylabel("seconds")
    ax2.set_title(f"build time (-j {res['jobs']}, loaded 2-core machine)")
    ax2.legend(fontsize=8, loc="upper left")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _budget_mib(text: str) -> float:
    from lookupkit.create.memory_budget import parse_size

    return parse_size(text) / 2**20


if __name__ == "__main__":
    main()
