"""`lookup-create --ray local` with 1 and 2 workers (Ray CPUs), against the local build with as many jobs.

    python -m lookupkit.bench.scale.ray                      # text 25 MB (qwen2) and 30.5 M synthetic ids, 3 runs
    python -m lookupkit.bench.scale.ray --runs 1 --text-bytes 5MB

Every build is a child process (`lookup-create ... --json`): wall time (including starting and
stopping the local Ray instance), the build's phases, the driver's peak RSS and the process tree's
(wait4; Ray's raylet and workers are not children of the driver, so their memory is reported as the
largest Ray worker's peak read from /proc while the build runs). Every output is checked to be
byte-identical to the local -j 1 build of the same corpus. Results: results-ray.json beside the
scale test's data, and a table in bench/SCALE.md (between its own markers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import threading
from pathlib import Path

import psutil

from lookupkit.bench.measure import run, script
from lookupkit.bench.harness import SHARED, machine, output_dir, write_text
from lookupkit.bench.scale.run import DATA, _count, corpus
from lookupkit.bench.scale.gen import ZipfMarkov

BEGIN, END = "<!-- ray:begin -->", "<!-- ray:end -->"


class RayPeak(threading.Thread):
    """The largest VmHWM of any `ray::` / default_worker process seen while a build runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, threading.Event()

    def run(self):
        while not self.stop.wait(0.2):
            for p in psutil.process_iter(["cmdline"]):
                cmd = " ".join(p.info["cmdline"] or [])
                if cmd.startswith("ray::") or "default_worker.py" in cmd:
                    try:
                        with open(f"/proc/{p.pid}/status") as f:
                            for line in f:
                                if line.startswith("VmHWM:"):
                                    self.peak = max(self.peak, int(line.split()[1]) * 1024)
                    except OSError:
                        pass


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def build(args: list[str], out: Path, ray: bool) -> dict:
    peak = RayPeak()
    if ray:
        peak.start()
    try:
        r = run(script("lookup-create", *args, "-lcs", str(out), "--no-token-cache", "--json"), timeout=3600)
    finally:
        peak.stop.set()
    s = r.output
    row = {"wall_s": round(r.seconds, 2), "seconds": s["seconds"], "driver_peak_rss": s["peak_rss_bytes"],
           "tree_peak_rss": r.peak_rss, "ray_worker_peak_rss": peak.peak if ray else None,
           "local_workers_peak_rss": s["workers_peak_rss_bytes"], "sha256": _digest(out), "n_tokens": s["n_tokens"]}
    out.unlink()
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.scale.ray", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--text-bytes", default="25MB")
    ap.add_argument("--ids", default="30.5M", help="synthetic ids (the scale test's corpus prefix)")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--no-report", action="store_true", help="write results-ray.json only")
    ap.add_argument("--out-dir", type=Path, default=None, help="where SCALE.md and plots/ go (default: the repo's bench/ in a source checkout, else the bench cache)")
    ap.add_argument("--report-only", action="store_true", help="the table from an earlier results-ray.json")
    a = ap.parse_args(argv)
    if a.report_only:
        return report(json.loads((DATA / "results-ray.json").read_text()), a.out_dir)
    vocab = SHARED / "vocab" / "ggml-vocab-qwen2.gguf"
    text = SHARED / "corpora" / "wiki541.txt.zst"
    n_ids = _count(a.ids)
    ids = corpus([n_ids], ZipfMarkov())[n_ids]  # generated (or reused) as the scale test's prefix
    corpora = {f"text {a.text_bytes} (qwen2)": ["-f", str(text), "-m", str(vocab), "--max-bytes", a.text_bytes],
               f"ids {n_ids / 1e6:g} M": ["--tokens", str(ids)]}
    res = {"runs": a.runs, "machine": machine(), "cells": {}}
    out = DATA / "ray-out.lkc"
    for name, args in corpora.items():
        ref = build([*args, "-j", "1"], out, False)["sha256"]
        for w in [int(x) for x in a.workers.split(",")]:
            for mode in ("local", "ray"):
                extra = ["-j", str(w)] + (["--ray", "local"] if mode == "ray" else [])
                rows = [build([*args, *extra], out, mode == "ray") for _ in range(a.runs)]
                assert all(r["sha256"] == ref for r in rows), f"{name} {mode} -j {w}: bytes differ from -j 1"
                res["cells"][f"{name} | {mode} | {w}"] = rows
                print(name, mode, w, [r["wall_s"] for r in rows], flush=True)
                write_text(DATA / "results-ray.json", json.dumps(res, indent=1))
    if not a.no_report:
        report(res, a.out_dir)


def table(res: dict) -> str:
    lines = [f"Medians of {res['runs']} runs (min–max), each a fresh `lookup-create` process; `ray` starts and stops a "
             "local Ray instance with that many CPUs inside the build; all outputs byte-identical to `-j 1`.", "",
             "| corpus | mode | workers | wall s | tokenize+count s | write s | driver peak RSS | largest worker peak RSS |",
             "|---|---|---|---|---|---|---|---|"]
    for key, rows in res["cells"].items():
        name, mode, w = key.split(" | ")
        walls = [r["wall_s"] for r in rows]
        med = lambda f: statistics.median(f(r) for r in rows)  # noqa: E731
        wp = med(lambda r: r["ray_worker_peak_rss"] if mode == "ray" else r["local_workers_peak_rss"])
        lines.append(f"| {name} | {mode} | {w} | {statistics.median(walls):.1f} [{min(walls):.1f}–{max(walls):.1f}] "
                     f"| {med(lambda r: r['seconds']['tokenize'] + r['seconds']['count']):.1f} "
                     f"| {med(lambda r: r['seconds']['write']):.1f} | {med(lambda r: r['driver_peak_rss']) / 2**20:,.0f} MiB "
                     f"| {f'{wp / 2**20:,.0f} MiB' if wp else '– (no workers)'} |")
    return "\n".join(lines)


def report(res: dict, out_dir: Path | None = None) -> None:
    """SCALE.md's section (and the plot) in out_dir, default output_dir(): see lookupkit.bench.harness."""
    out_dir = out_dir or output_dir()
    md = out_dir / "SCALE.md"
    text = md.read_text() if md.exists() else "# Scale test\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    md.write_text(head + BEGIN + "\n" + table(res) + "\n" + END + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()
