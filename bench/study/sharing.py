"""N processes map the same cache and replay at once: what does each extra process cost?

Every child replays, reports, and then waits; while all of them are alive the parent reads each
one's /proc/PID/smaps_rollup, so PSS splits the shared file pages among the N mappers as the kernel
accounts them. Compared with N × the RSS of a single process, this is the page-sharing claim, measured.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lookupkit.bench.measure import python_module


def smaps_rollup(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:", "Private_Clean:", "Private_Dirty:", "Shared_Clean:"):
                out[parts[0][:-1].lower()] = int(parts[1]) * 1024
    out["uss"] = out.pop("private_clean") + out.pop("private_dirty")
    return out


def measure_sharing(n: int, eval_tokens: Path, cache: Path, n_ctx: int, n_draft: int) -> dict:
    cmd = python_module("lookupkit.bench.startup_probe", "replay", str(eval_tokens), "--lcs", str(cache),
                        "--ctx", str(n_ctx), "--draft", str(n_draft), "--hold")
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    try:
        reports = []
        for p in procs:
            reports.append(json.loads(p.stdout.readline()))
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("sharing probe did not become ready")
        mem = [smaps_rollup(p.pid) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.stdin.write("\n")
                p.stdin.flush()
        for p in procs:
            p.wait(timeout=60)
    return {"n_procs": n, "pss_total": sum(m["pss"] for m in mem), "rss_total": sum(m["rss"] for m in mem),
            "uss": [m["uss"] for m in mem], "pss": [m["pss"] for m in mem], "rss": [m["rss"] for m in mem],
            "shared_clean": [m["shared_clean"] for m in mem], "peak_rss": [r["peak_rss"] for r in reports],
            "rss_base": [r["rss_base"] for r in reports]}
