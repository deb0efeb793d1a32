"""Judge the suffix-array builders on Gemma 3 token ids (issue 15): libdivsufsort (pydivsufsort, 3 bytes per
token), the in-package numba prefix doubling, and infini-gram 2.6.0's Rust indexer + C++ engine.

    python -m lookupkit.bench.suffix.candidates IDS.i32 --tokens 5586362 --builder divsufsort
    python -m lookupkit.bench.suffix.candidates IDS.i32 --tokens 5586362 --builder infini --work /tmp/ig

Each run is one process (peak RSS is the process'); IDS.i32 is raw little-endian int32 ids (one document).
Prints one JSON line: seconds, peak RSS, bytes per token on disk where there is a file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
from lookupkit.bench.harness import bench_dir, loadavg

HELD_OUT = 200_000  # query contexts come from the ids after the indexed prefix


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def _peak_mb(who=resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def run_ours(ids: np.ndarray, builder: str) -> dict:
    from lookupkit.suffix.build import corpus_text, divsufsort_sa, doubling_sa

    text = corpus_text([ids])
    del ids
    base = _rss_mb()
    fn = divsufsort_sa if builder == "divsufsort" else doubling_sa
    fn(corpus_text([text[:1000]]))  # compile / load the kernels untimed
    t0 = time.perf_counter()
    sa = fn(text)
    dt = time.perf_counter() - t0
    return {"seconds": round(dt, 2), "peak_rss_mb": round(_peak_mb(), 1), "rss_before_mb": round(base, 1),
            "sa_dtype": str(sa.dtype), "n": len(text)}


def clamp16(ids: np.ndarray) -> np.ndarray:
    """ids renumbered by frequency into u16, the 65,534 most frequent kept and the rest one id (65,534): lossy,
    only to time infini-gram's u16 engine on this corpus (its u32 indexer does not run here)."""
    uniq, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
    order = np.argsort(-cnt, kind="stable")
    new = np.empty(len(uniq), np.int64)
    new[order] = np.minimum(np.arange(len(uniq)), 65534)
    return new[inv]


def run_infini(ids: np.ndarray, held_out: np.ndarray, work: str, queries: int, width: str) -> dict:
    """Write the ids as infini-gram's tokenized.0 / offset.0 (its step 1 skips when they exist), run its
    indexer, then time infgram_ntd (longest suffix + next-token distribution) in-process on contexts of
    64 held-out tokens (the ids that follow the indexed prefix in IDS.i32)."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "index"))
    dt = np.uint32 if width == "u32" else np.uint16
    if width == "u16":
        both = clamp16(np.concatenate([ids, held_out]))
        ids, held_out = both[:len(ids)], both[len(ids):]
    doc = np.concatenate([np.array([np.iinfo(dt).max], dt), ids.astype(dt)])
    doc.tofile(os.path.join(work, "index", "tokenized.0"))
    np.array([0], np.uint64).tofile(os.path.join(work, "index", "offset.0"))
    os.makedirs(os.path.join(work, "data"))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "infini_gram.indexing", "--data_dir", os.path.join(work, "data"),
                           "--temp_dir", os.path.join(work, "tmp"), "--save_dir", os.path.join(work, "index"), "--token_dtype", width,
                           "--cpus", "2", "--mem", "2",
                           "--ulimit", str(resource.getrlimit(resource.RLIMIT_NOFILE)[1])], capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if proc.returncode:
        return {"error": proc.stdout[-800:] + proc.stderr[-800:]}
    size = os.path.getsize(os.path.join(work, "index", "table.0"))
    from infini_gram.engine import InfiniGramEngine

    t1 = time.perf_counter()
    eng = InfiniGramEngine(index_dir=os.path.join(work, "index"), eos_token_id=1,
                           vocab_size=2**18 if width == "u32" else 65535, token_dtype=width)
    t_open = time.perf_counter() - t1
    rng = np.random.default_rng(0)
    starts = rng.integers(64, len(held_out), queries)
    ctxs = [held_out[s - 64:s].tolist() for s in starts]
    eng.infgram_ntd(prompt_ids=ctxs[0])
    t2 = time.perf_counter()
    lens = []
    for c in ctxs:
        r = eng.infgram_ntd(prompt_ids=c, max_support=16)
        lens.append(r.get("suffix_len", -1))
    per_call = (time.perf_counter() - t2) / queries
    return {"index_seconds": round(secs, 2), "children_peak_rss_mb": round(_peak_mb(resource.RUSAGE_CHILDREN), 1),
            "table_bytes_per_token": round(size / (len(ids) + 1), 3), "open_ms": round(1000 * t_open, 3),
            "infgram_ntd_us": round(1e6 * per_call, 1), "mean_suffix_len": float(np.mean(lens)), "n": len(ids) + 1, "width": width}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.suffix.candidates", description=__doc__.splitlines()[0])
    ap.add_argument("ids")
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--builder", choices=["divsufsort", "doubling", "infini"], required=True)
    ap.add_argument("--work", default=str(bench_dir() / "infini"))
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--width", choices=["u32", "u16"], default="u32", help="infini-gram token width (u16: clamp16)")
    a = ap.parse_args()
    ids = np.fromfile(a.ids, dtype="<i4", count=a.tokens + HELD_OUT)
    ids, held_out = ids[:a.tokens], ids[a.tokens:]
    res = run_infini(ids, held_out, a.work, a.queries, a.width) if a.builder == "infini" else run_ours(ids, a.builder)
    print(json.dumps({"builder": a.builder, "tokens": a.tokens, "load": loadavg()[0], **res}))


if __name__ == "__main__":
    main()
