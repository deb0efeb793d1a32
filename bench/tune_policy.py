"""Learn the policy's confidence tables on held-out text: `python -m lookupkit.bench.tune_policy`.

The bundled default (lookupkit/data/policy-default.json) was learnt with

    python -m lookupkit.bench.tune_policy --cache wiki100-orders.lkc --tokens wiki541.qwen2.i32 \\
        --slice 60000000:400000 -o lookupkit/data/policy-default.json

where wiki100-orders.lkc is `lookup-create --orders 2-6` of the first 100 MB of
../shared/corpora/wiki541.txt.zst (qwen2) and the slice (tokens 60,000,000 .. 60,400,000 of the whole
corpus's ids, about bytes 265-267 MB) lies outside those 100 MB: the tables never see text their cache
was built from, and never the WikiText-103 test split every evaluation replays (the corpus excludes
its articles). `about` in the JSON records all of this.

For a real model, learn on the model's own greedy generations of held-out prompts instead
(bench/generations.py writes them): only generated positions are scored, as an engine drafts there.

    python -m lookupkit.bench.tune_policy --cache gemma-wiki100.lkc --generations gemma-gens-test.json \
        --task wiki -o lookupkit/data/policy-gemma-3-270m.json

`--task wiki` keeps the continuation task only: tables learnt on a mixture with the copying task, where
almost every source is right, were overconfident on prose continuations (held-out replay with the
calibrated curve, paragraphs 16-31 of the test split, tables tuned on 0-15: S = 1.95 mixed against
2.42 wiki-only on the continuation task, 3.67 both on the copying task; llama.cpp's rule 1.80 and 2.88).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from lookupkit import StaticCache
from lookupkit.corpora import read_token_file
from lookupkit.draft import confidence


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, type=Path, help="static cache (with --orders) the tables are learnt with")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", type=Path, help="held-out token ids (.i32 or .npy)")
    src.add_argument("--generations", type=Path, help="a model's generations (bench/generations.py's JSON)")
    ap.add_argument("--task", help="with --generations: learn on this task's sequences only (wiki or copy)")
    ap.add_argument("--slice", default=None, help="START:COUNT of --tokens to use (default: all)")
    ap.add_argument("-c", "--ctx-size", type=int, default=4096, help="replay chunk size (lookup-stats' -c)")
    ap.add_argument("-o", "--output", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.generations:
        doc = json.loads(a.generations.read_text())
        kept = [g for g in doc["sequences"] if a.task is None or g["task"] == a.task]
        seqs = [np.asarray(g["tokens"], np.int32) for g in kept]
        lens = [g["prompt_len"] for g in kept]
        ids = np.concatenate(seqs)
    else:
        ids = read_token_file(a.tokens)
        if a.slice:
            start, count = (int(x) for x in a.slice.split(":"))
            ids = ids[start:start + count]
    with StaticCache.open(a.cache) as cache:
        if a.generations:
            tables = confidence.learn_generations(seqs, lens, static=cache)
            method = (f"model generations: {len(seqs)} sequences of {doc['model']} ({doc['text']}, seed {doc['seed']}, "
                      f"task {a.task or 'all'}); "
                      "first half: per-source tables; second half: agreement table; generated positions only")
        else:
            tables = confidence.learn(ids, a.ctx_size, static=cache)
            method = "first half: per-source tables; second half: agreement table"
        about = {"cache": a.cache.name, "cache_orders": cache.orders, "cache_corpus": cache.meta.get("corpus"),
                 "orders_params": cache.meta.get("orders"), "tokens": (a.generations or a.tokens).name,
                 "slice": a.slice, "n_tokens": int(len(ids)),
                 "sha256_of_ids": hashlib.sha256(np.ascontiguousarray(ids).data).hexdigest(),
                 "n_ctx": a.ctx_size, "method": method}
    confidence.save(tables, a.output, about)
    print(f"wrote {a.output}: learnt on {len(ids):,} held-out tokens with {a.cache.name} (orders {about['cache_orders']})")


if __name__ == "__main__":
    main()
