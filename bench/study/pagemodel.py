"""Which 4 KiB pages of a static cache does a replay need? A model, to explain static-cache memory.

Collects every static 2-gram the fast drafter looks up during a replay (the 2-gram ending at each
drafted position) and counts the distinct pages those lookups reach: the constmap's probe words
(`data` and `checks`), and the pairs of each present 2-gram's run, whole (what a scan touches) or only
along binary searches (what counting candidates touches), in the file's canonical run order and in a
hottest-2-gram-first order. The kernel's fault-around and readahead add pages beyond these.

    python -m lookupkit.bench.study.pagemodel CACHE.lkc EVAL.i32 [--ctx 4096] [--draft 8]
"""

from __future__ import annotations

import argparse

import numpy as np

from lookupkit.bench.harness import entry
from lookupkit.formats.constmap_probe import probes
from lookupkit.corpora import read_token_file
from lookupkit.replay import replay
from lookupkit.rules import DEFAULT_CTX
from lookupkit.static.cache import StaticCache

PAGE = 4096


def looked_up_keys(ids: np.ndarray, trace, n_ctx: int) -> np.ndarray:
    """Distinct (t0, t1) the drafter looks up: at every drafted position and the one where drafting stopped."""
    keys = []
    ends = np.cumsum(trace.n_drafted)
    for i in range(len(trace.pos)):
        chunk, pos, k = int(trace.chunk[i]), int(trace.pos[i]), int(trace.n_drafted[i])
        seq = np.concatenate([ids[chunk * n_ctx: chunk * n_ctx + pos], trace.tokens[ends[i] - k: ends[i]]])
        for s in range(max(pos, 2), pos + k + 1):
            keys.append((int(seq[s - 2]), int(seq[s - 1])))
    return np.unique(np.array(keys, dtype=np.int32).reshape(-1, 2), axis=0)


def _search_pages(base: int, toks: np.ndarray, target: int, pages: set) -> None:
    lo, hi = 0, len(toks)
    while lo < hi:
        mid = (lo + hi) // 2
        pages.add((base + mid) * 8 // PAGE)
        if toks[mid] < target:
            lo = mid + 1
        else:
            hi = mid


def model(cache: StaticCache, keys: np.ndarray, probes_per_key: int = 3) -> dict:
    cm = cache.cmap
    cm_pages, whole, searched, searched_hot = set(), set(), set(), set()
    offs, lens = cache.find_many(keys)
    run_offsets = cache.layout()[1]
    all_offs, all_lens = run_offsets[:-1], np.diff(run_offsets)
    totals = np.add.reduceat(cache.pairs[:, 1].astype(np.int64), all_offs) if len(all_offs) else all_offs
    hot_start = np.zeros(len(totals), np.int64)
    order = np.argsort(-totals, kind="stable")
    hot_start[order] = np.concatenate([[0], np.cumsum(all_lens[order])[:-1]])
    rank = np.searchsorted(all_offs, offs)
    rng = np.random.default_rng(0)
    toks = cache.pairs[:, 0]
    for (t0, t1), o, n, r in zip(keys.tolist(), offs.tolist(), lens.tolist(), rank.tolist()):
        _, *slots = probes(t0, t1, *cm.hash_args)
        for h in slots:
            cm_pages.add(("data", int(h) * 8 // PAGE))
            cm_pages.add(("checks", int(h) * 8 // PAGE))
        if n:
            whole.update(range(o * 8 // PAGE, ((o + n) * 8 - 1) // PAGE + 1))
            for _ in range(probes_per_key):
                target = int(toks[o + rng.integers(n)])
                _search_pages(o, toks[o:o + n], target, searched)
                _search_pages(int(hot_start[r]), toks[o:o + n], target, searched_hot)
    mb = lambda pages: round(len(pages) * PAGE / 1e6, 1)  # noqa: E731
    return {"looked_up": len(keys), "present": int((lens > 0).sum()), "constmap_mb": mb(cm_pages),
            "constmap_total_mb": round(2 * cm.data.nbytes / 1e6, 1), "pairs_whole_runs_mb": mb(whole),
            "pairs_binary_search_mb": mb(searched), "pairs_binary_search_hot_first_mb": mb(searched_hot),
            "pairs_total_mb": round(cache.pairs.nbytes / 1e6, 1)}


def _main(argv) -> None:
    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.study.pagemodel", description=__doc__.split("\n")[0])
    p.add_argument("cache")
    p.add_argument("eval_tokens")
    p.add_argument("--ctx", type=int, default=DEFAULT_CTX)
    p.add_argument("--draft", type=int, default=8)
    a = p.parse_args(argv)
    cache = StaticCache.open(a.cache)
    ids = read_token_file(a.eval_tokens)
    trace, _ = replay(ids, n_ctx=a.ctx, n_draft=a.draft, static=cache, engine="fast")
    print(model(cache, looked_up_keys(ids, trace, a.ctx)))


def main(argv=None) -> None:
    entry(_main, argv)


if __name__ == "__main__":
    main()
