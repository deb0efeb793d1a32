"""Tokenizer throughput for Gemma 3's vocabulary: one core, two processes, and llama.cpp on the same bytes.

    python -m lookupkit.bench.tokenize_corpora.speed [--model GGUF] [--corpus wiki541.txt.zst] [--mb 25] [--runs 3]

The text is the first --mb MB of the corpus cut at a line end, decoded, one trailing "\\n" stripped,
tokenized as lookup-create does (BOS, specials parsed). Rows:

* one core: `Tokenizer.encode` of the whole text, in this process (wall and CPU seconds: on a shared
  machine the CPU figure is what one core delivers);
* two processes: the text cut at the build's safe cuts into 4 MB pieces, encoded by 2 forked workers
  (the tokenizing half of `lookup-create -j 2`); their ids joined must equal the one-core ids;
* `lookup-create -j 1` and `-j 2` end to end (tokenize + count + write, no token cache), one run each;
* llama-cpp-python (llama.cpp's own tokenizer, one `llama_tokenize` call): once, ids compared exactly.

Several runs each, min/max, the load average before and after: the machine is shared, so the figures
are not an idle machine's. Results: bench/results/tokenize-speed-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

from lookupkit.create.memory_budget import parse_size
from lookupkit.create.parallel import PIECE_BYTES
from lookupkit.create.tokenized import next_cut
from lookupkit.corpora import TextFile
from lookupkit.corpora.stream import Consumed, TextBudget
from lookupkit.tokenizer import Tokenizer

from lookupkit.bench.harness import RESULTS, SHARED, git_state, machine, write_text

_TOK = None  # the forked workers' tokenizer (inherited, not pickled)


def corpus_bytes(path: Path, limit: int) -> bytes:
    consumed = Consumed(TextFile(path).blocks(), TextBudget(limit, "line"))
    data = b"".join(consumed)
    return data[:-1] if data.endswith(b"\n") else data


def one_core(tok: Tokenizer, text: str) -> tuple[np.ndarray, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    ids = tok.encode(text)
    return ids, time.perf_counter() - wall, time.process_time() - cpu


def pieces(data: bytes, size: int = PIECE_BYTES) -> list[bytes]:
    out, start = [], 0
    while (c := next_cut(data, start + size)) is not None:
        out.append(data[start:c])
        start = c
    return out + [data[start:]]


def _encode_piece(task):
    k, n, piece = task
    return _TOK.encode_segment(piece.decode("utf-8", "replace"), first=k == 0, last=k == n - 1)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def two_processes(tok: Tokenizer, parts: list[bytes]) -> tuple[np.ndarray, float, float]:
    """Ids, wall seconds, and the workers' CPU seconds (counted once they are reaped)."""
    global _TOK
    _TOK = tok
    cpu0 = _children_cpu()
    pool = mp.get_context("fork").Pool(2)
    start = time.perf_counter()
    ids = pool.map(_encode_piece, [(k, len(parts), p) for k, p in enumerate(parts)], chunksize=1)
    wall = time.perf_counter() - start
    pool.close()
    pool.join()
    return np.concatenate(ids), wall, _children_cpu() - cpu0


def lookup_create(model: Path, corpus: Path, mb: int, jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["lookup-create", "-m", str(model), "-f", str(corpus), "--max-bytes", f"{mb}MB", "-lcs",
               f"{tmp}/x.lkc", "--no-token-cache", "-j", str(jobs), "--json"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
    if proc.returncode:
        return {"error": proc.stderr.strip()[-300:]}
    s = json.loads(proc.stdout)
    return {"jobs": jobs, "wall_s": round(wall, 2), "seconds": s["seconds"], "n_tokens": s["n_tokens"],
            "tokenize_mb_s": round(s["n_bytes"] / s["seconds"]["tokenize"] / 1e6, 2)}


def llama_cpp_ids(model: Path, data: bytes) -> tuple[np.ndarray, float]:
    from lookupkit.tokenizer.llama_engine import LlamaCppTokenizer
    from lookupkit.tokenizer.vocab import load

    tok = LlamaCppTokenizer(model, load(model), "reference")
    start = time.perf_counter()
    ids = tok._tokenize(data, True, True)
    return ids, time.perf_counter() - start


def spread(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.tokenize_corpora.speed", description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: lookupkit.models gemma-3-270m)")
    ap.add_argument("--corpus", type=Path, default=SHARED / "corpora" / "wiki541.txt.zst")
    ap.add_argument("--mb", type=int, default=25)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-llama-cpp", action="store_true")
    ap.add_argument("--no-builds", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / f"tokenize-speed-{date.today()}.json")
    args = ap.parse_args(argv)
    if args.model is None:
        from lookupkit import models

        args.model = models.path("gemma-3-270m")
    result = {"machine": machine(gate=True), "git": git_state(), "model": str(args.model), "corpus": str(args.corpus),
              "mb": args.mb}
    start = time.perf_counter()
    tok = Tokenizer.from_file(args.model)
    result["load_s"] = round(time.perf_counter() - start, 2)
    data = corpus_bytes(args.corpus, parse_size(f"{args.mb}MB"))
    text = data.decode("utf-8", "replace")
    mb = len(data) / 1e6
    result["bytes"] = len(data)
    ids, walls, cpus = None, [], []
    for _ in range(args.runs):
        ids, wall, cpu = one_core(tok, text)
        walls.append(mb / wall)
        cpus.append(mb / cpu)
        print(f"one core: {walls[-1]:.2f} MB/s wall, {cpus[-1]:.2f} MB/s CPU", flush=True)
    result["n_tokens"] = len(ids)
    result["one_core_mb_s_wall"], result["one_core_mb_s_cpu"] = spread(walls), spread(cpus)
    parts, two, two_cpu = pieces(data), [], []
    for _ in range(args.runs):
        got, wall, cpu = two_processes(tok, parts)
        assert np.array_equal(got, ids), "the two-process ids differ from the one-core ids"
        two.append(mb / wall)
        two_cpu.append(mb / cpu)
        print(f"two processes: {two[-1]:.2f} MB/s wall, {two_cpu[-1]:.2f} MB per CPU-second "
              f"({len(parts)} pieces)", flush=True)
    result["two_processes_mb_s_wall"] = spread(two)
    result["two_processes_mb_per_cpu_s"] = spread(two_cpu)  # = one core's rate if they scaled perfectly
    result["two_vs_one_wall_best"] = round(max(two) / max(walls), 2)
    if not args.no_builds:
        result["lookup_create"] = [lookup_create(args.model, args.corpus, args.mb, j) for j in (1, 2)]
        print("lookup-create:", result["lookup_create"], flush=True)
    if not args.no_llama_cpp:
        ref, wall = llama_cpp_ids(args.model, data)
        n = min(len(ref), len(ids))
        bad = np.flatnonzero(ref[:n] != ids[:n])
        result["llama_cpp"] = {"mb_s": round(mb / wall, 3), "seconds": round(wall, 1), "n_tokens": len(ref),
                               "identical": bool(len(ref) == len(ids) and not len(bad)),
                               "first_difference": int(bad[0]) if len(bad) else None}
        print("llama-cpp-python:", result["llama_cpp"], flush=True)
    result["loadavg_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
