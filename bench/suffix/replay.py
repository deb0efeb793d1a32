"""What the suffix index would draft, replayed over an evaluation text (issue 15): at every position, the
longest corpus match of the last --max-len tokens and the run its occurrences agree on, compared with
the tokens that really follow. Also times the calls and the index's build and open.

    lookup-create --tokens wiki25.i32 --suffix-index -lcs wiki25.lkc      # the index: a version-3 .lkc
    python -m lookupkit.bench.suffix.replay --cache wiki25.lkc --eval-ids wikitest.gemma.i32

The index is `StaticCache.open(--cache).suffix`. A --cache that does not exist is built first, by
lookup-create's code (build_static with suffix_index, no vocabulary, --jobs, --memory-budget) from
--corpus-ids (raw little-endian int32 ids, one document: its first --tokens ids) or --corpus-docs (a .npz of
documents, as bench.suffix_code_task writes one, keys in sorted order; empty documents are left out, as
lookup-create refuses empty token files). Prints one JSON object: sizes (the four suffix sections' bytes
per position), build seconds (the index phase) and peak RSS (by the end of that phase), open ms (open +
the suffix views), mean us per call (compiled loop, warm: the second of two passes), the share of
positions whose match is >= 8/16/32 tokens, mean run and mean accepted run, and a suffix-only drafting
loop over the whole text (accepted per call, S(C) at the reported costs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lookupkit import StaticCache
from lookupkit.build import build_static
from lookupkit.build.memory_budget import parse_size
from lookupkit.corpora import TokenFile
from lookupkit.errors import InputError, LookupkitError
from lookupkit.formats.lkc_suffix import NAMES
from lookupkit.kernels import kernel
from lookupkit.suffix.search import continuation_kernel, longest_match_kernel
from lookupkit.verify_cost import speedups

MATCH_BINS = (8, 16, 32)
DRAFT_LOOPS = ((8, 1), (16, 1), (16, 2), (16, 4))  # (n_draft, min_count) of the suffix-only drafter
COUNT_BINS = ((1, 1), (2, 3), (4, 15), (16, 2**62))  # the first run token's count: [positions, share accepted]


@kernel
def _replay(text, sa, starts, second, ev, positions, max_len, max_tokens, min_share, lens, runs, accepted, first, tok, cnt, tot):
    for q in range(positions.shape[0]):
        p = positions[q]
        m, lo, hi = longest_match_kernel(text, sa, starts, second, ev, p, max_len)
        k = continuation_kernel(text, sa, m, lo, hi, max_tokens, min_share, tok, cnt, tot)
        a = 0
        while a < k and p + a < ev.shape[0] and tok[a] == ev[p + a]:
            a += 1
        lens[q], runs[q], accepted[q] = m, k, a
        first[q] = cnt[0] if k > 0 else 0  # the first run token's count: its evidence


@kernel
def _sequential(text, sa, starts, second, ev, positions, max_len, lens):
    """longest_match at consecutive positions, each bounded by the previous length + 1 (as a drafter calls it)."""
    prev = max_len
    for q in range(positions.shape[0]):
        m, lo, hi = longest_match_kernel(text, sa, starts, second, ev, positions[q], min(max_len, prev + 1))
        lens[q] = m
        prev = m


@kernel
def _draft_loop(text, sa, starts, second, ev, max_len, n_draft, min_share, min_count, drafted, accepted, tok, cnt, tot):
    """A suffix-only drafter over the whole evaluation text (one sequence): at each call, the run after the
    longest match (bounded by the last length + the tokens emitted since), cut to n_draft and to the
    prefix whose counts are >= min_count; verify against the text; emit accepted + 1. Returns the calls."""
    n = ev.shape[0]
    p, calls, prev = 1, 0, max_len
    while p < n:
        m, lo, hi = longest_match_kernel(text, sa, starts, second, ev, p, min(max_len, prev))
        k = continuation_kernel(text, sa, m, lo, hi, n_draft, min_share, tok, cnt, tot)
        d = 0
        while d < k and cnt[d] >= min_count:
            d += 1
        a = 0
        while a < d and p + a < n and tok[a] == ev[p + a]:
            a += 1
        drafted[calls], accepted[calls] = d, a
        calls += 1
        p += a + 1
        prev = m + a + 1
    return calls


def draft_loop(index, ev: np.ndarray, max_len: int, n_draft: int, min_share: float, min_count: int) -> dict:
    """Accepted per call and S(C) of the suffix-only drafter (lookupkit.verify_cost.speedups)."""
    drafted, accepted = np.zeros(len(ev), np.int64), np.zeros(len(ev), np.int64)
    scratch = (np.empty(n_draft, np.int32), np.empty(n_draft, np.int64), np.empty(n_draft, np.int64))
    calls = _draft_loop(index.text, index.sa, index.starts, index.second, ev, max_len, n_draft, min_share, min_count,
                        drafted, accepted, *scratch)
    d, a = drafted[:calls], accepted[:calls]
    return {"n_draft": n_draft, "min_count": min_count, "calls": int(calls), "drafted": int(d.sum()),
            "accepted": int(a.sum()), "accepted_per_call": round(float(a.mean()), 4),
            "tokens_per_verify": round(float((a + 1).mean()), 4), "acceptance": round(float(a.sum() / max(1, d.sum())), 4),
            "S": {str(c): (round(v, 4) if v is not None else None) for c, v in speedups(d, a).items()}}


def replay(index, ev: np.ndarray, positions: np.ndarray, max_len: int, max_tokens: int, min_share: float) -> dict:
    out = [np.zeros(len(positions), np.int64) for _ in range(4)]
    scratch = (np.empty(max_tokens, np.int32), np.empty(max_tokens, np.int64), np.empty(max_tokens, np.int64))
    args = (index.text, index.sa, index.starts, index.second, ev)
    _replay(*args, positions[:1], max_len, max_tokens, min_share, *[o[:1] for o in out], *scratch)  # compile
    times = []
    for _ in range(2):  # the first pass pages the index in; the second is the warm figure
        t0 = time.perf_counter()
        _replay(*args, positions, max_len, max_tokens, min_share, *out, *scratch)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    _replay(*args, positions, max_len, 0, min_share, *[o.copy() for o in out], *scratch)
    t_match = time.perf_counter() - t0
    lens, runs, acc, first = out
    by_count = {(f"{lo_}-{hi_}" if hi_ < 2**62 else f"{lo_}+"): [int(np.sum(sel)), round(float(np.mean(acc[sel] > 0)), 4) if np.any(sel) else None]
                for lo_, hi_ in COUNT_BINS for sel in [(runs > 0) & (first >= lo_) & (first <= hi_)]}
    seq = np.arange(1, min(len(ev), 1 + len(positions)), dtype=np.int64)  # consecutive: the previous length bounds
    seq_lens = np.zeros(len(seq), np.int64)
    _sequential(*args, seq[:2], max_len, seq_lens[:2])
    t0 = time.perf_counter()
    _sequential(*args, seq, max_len, seq_lens)
    t_seq = time.perf_counter() - t0
    return {"positions": len(positions), "us_per_call_first": round(1e6 * times[0] / len(positions), 2),
            "us_per_call_warm": round(1e6 * times[1] / len(positions), 2),
            "us_longest_match_only": round(1e6 * t_match / len(positions), 2),
            "us_longest_match_sequential": round(1e6 * t_seq / len(seq), 2), "mean_match": round(float(lens.mean()), 3),
            **{f"match_ge_{b}": round(float(np.mean(lens >= b)), 4) for b in MATCH_BINS},
            "mean_run": round(float(runs.mean()), 3), "mean_accepted": round(float(acc.mean()), 3),
            "run_accept_rate": round(float(acc.sum() / max(1, runs.sum())), 4),
            "first_token_accepted_by_count": by_count,
            "mean_run_given_match_ge_8": round(float(runs[lens >= 8].mean()) if np.any(lens >= 8) else 0.0, 3),
            "mean_accepted_given_match_ge_8": round(float(acc[lens >= 8].mean()) if np.any(lens >= 8) else 0.0, 3)}


def build_cache(a, path: str) -> dict:
    """Build --cache with lookup-create's code from --corpus-ids / --corpus-docs (token files written to a
    temporary directory where the ids need cutting or splitting); returns build_static's summary."""
    with tempfile.TemporaryDirectory(prefix="suffix-replay-") as tmp:
        if a.corpus_docs:
            z = np.load(a.corpus_docs)
            paths = []
            for i, key in enumerate(k for k in sorted(z.files) if len(z[k])):
                paths.append(Path(tmp, f"{i:06d}.npy"))
                np.save(paths[-1], np.asarray(z[key], np.int32))
        elif a.tokens:
            paths = [Path(tmp, "prefix.npy")]
            np.save(paths[0], np.fromfile(a.corpus_ids, dtype="<i4", count=a.tokens))
        else:
            paths = [Path(a.corpus_ids)]
        return build_static([TokenFile(p) for p in paths], None, path, jobs=a.jobs, token_cache=False,
                            memory_budget=parse_size(a.memory_budget), suffix_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.suffix.replay", description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="a version-3 .lkc (lookup-create --suffix-index); built if missing")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--corpus-ids", help="raw int32 ids to build a missing --cache from")
    src.add_argument("--corpus-docs", help="a .npz of documents to build a missing --cache from")
    ap.add_argument("--tokens", type=int, default=0, help="first N ids of --corpus-ids (0: all)")
    ap.add_argument("--jobs", type=int, default=1, help="lookup-create -j when building")
    ap.add_argument("--memory-budget", default="2GB", help="lookup-create --memory-budget when building")
    ap.add_argument("--eval-ids", required=True, help="raw int32 ids (or a .npz of documents, concatenated)")
    ap.add_argument("--positions", type=int, default=50_000, help="evenly spaced evaluation positions")
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--min-share", type=float, default=0.5)
    a = ap.parse_args()
    try:
        print(json.dumps(run(a)))
    except LookupkitError as exc:
        sys.exit(f"suffix_replay: {exc}")


def run(a) -> dict:
    res: dict = {"load_before": os.getloadavg()[0]}
    if not os.path.exists(a.cache):
        if not (a.corpus_ids or a.corpus_docs):
            raise InputError(f"--cache {a.cache} does not exist: build it with lookup-create --tokens IDS "
                             "--suffix-index, or pass --corpus-ids / --corpus-docs to build it here")
        summary = build_cache(a, a.cache)
        res["build_s"] = summary["suffix_index"]["seconds"]
        res["build_peak_rss_mb"] = round(summary["peak_rss_bytes_by_end_of"]["index"] / 2**20, 1)
    t0 = time.perf_counter()
    cache = StaticCache.open(a.cache)
    index = cache.suffix
    res["open_ms"] = round(1000 * (time.perf_counter() - t0), 3)
    if index is None:
        raise InputError(f"{a.cache} holds no suffix index: build it with lookup-create --suffix-index")
    res["corpus_tokens"] = index.n
    res["bytes_per_token"] = round(sum(cache.meta["sections"][s]["length"] for s in NAMES) / max(1, index.n), 3)
    if a.eval_ids.endswith(".npz"):
        z = np.load(a.eval_ids)
        ev = np.concatenate([z[k] for k in sorted(z.files)]).astype(np.int64)
    else:
        ev = np.fromfile(a.eval_ids, dtype="<i4").astype(np.int64)
    positions = np.unique(np.linspace(1, len(ev) - 1, min(a.positions, len(ev) - 1)).astype(np.int64))
    res["eval_tokens"] = len(ev)
    res.update(replay(index, ev, positions, a.max_len, a.max_tokens, a.min_share))
    res["draft_loops"] = [draft_loop(index, ev, a.max_len, d, a.min_share, c) for d, c in DRAFT_LOOPS]
    res["load_after"] = os.getloadavg()[0]
    return res


if __name__ == "__main__":
    main()
