"""Tune the policy's confidence tables for a domain or a model: `lookupkit tune-policy`.

policy.confidence learns tables from token ids; this module is the user's job around it: pick the held-out
text (a slice of token ids, or a model's own greedy generations, of which only generated positions are
scored, as an engine drafts there), learn with a static cache built with `lookup-create --orders` (and
its suffix index, if it has one: the suffix source's rows), and
write the tables with an `about` record of what they were learnt on, so that a table can be traced back.

The bundled default (lookupkit/data/policy-default.json) was learnt with

    lookupkit tune-policy --cache wiki100-orders.lkc --tokens wiki541.qwen2.i32 \\
        --slice 60000000:400000 -o lookupkit/data/policy-default.json

where wiki100-orders.lkc is `lookup-create --orders 2-6` of the first 100 MB of wiki541.txt.zst (qwen2;
the benchmarks' WikiText-103-like corpus) and the slice (tokens 60,000,000 .. 60,400,000 of the whole
corpus's ids, about bytes 265-267 MB) lies outside those 100 MB: the tables never see text their cache
was built from, and never the WikiText-103 test split every evaluation replays (the corpus excludes
its articles). Gemma 3 270M's table was learnt on its generations (`python -m lookupkit.bench.generations`)
with `--task wiki`: tables learnt on a mixture with the copying task, where almost every source is
right, were overconfident on prose continuations (bench/RESULTS.md: Figures the code's comments rely on).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..rules import DEFAULT_CTX
from ..files import open_input
from ..verify_cost import speedup
from ..policy import confidence
from ..policy.chain import SRC_SUFFIX, make_policy, suffix_on
from ..policy.suffix_source import min_match_of
from .loop import replay_fast, replay_generation

TASKS = ("wiki", "copy")  # the tasks of bench/generations.py's prompts
GATE_COSTS = (0.0, 0.1, 0.25, 0.5)  # the constant verify costs at which the suffix gate must not lose
GATE_BINS = (0, 3, 6, 8, 12)  # unlearnt first length bins tried: the source drafts after 1, 4, 7, 10, 20 tokens
GATE_DRAFT = 16  # the draft limit of the gate's replays (the engines' policy rows draft 16 and 32)


def parse_slice(text: str) -> tuple[int, int]:
    """--slice START:COUNT as two whole numbers (COUNT >= 1)."""
    try:
        start, count = (int(x) for x in text.split(":"))
    except ValueError:
        start = count = -1
    if start < 0 or count < 1:
        raise InputError(f"--slice takes START:COUNT (whole numbers, COUNT >= 1), got {text!r}")
    return start, count


def sliced(ids: np.ndarray, slice_: str | None, name: str) -> np.ndarray:
    """ids, or their START:COUNT slice."""
    if slice_ is None:
        return ids
    start, count = parse_slice(slice_)
    if start + count > len(ids):
        raise InputError(f"--slice {slice_} reaches past the {len(ids):,} tokens of {name}")
    return ids[start:start + count]


def generations(path: str | os.PathLike, task: str | None = None) -> tuple[dict, list[np.ndarray], list[int]]:
    """A model's generations (`python -m lookupkit.bench.generations`' JSON): the document, the kept
    sequences and their prompt lengths."""
    if task is not None and task not in TASKS:
        raise InputError(f"--task is one of {', '.join(TASKS)}, got {task!r}")
    try:
        with open_input(path, "generations file") as f:
            doc = json.loads(f.read().decode("utf-8"))
        kept = [g for g in doc["sequences"] if task is None or g["task"] == task]
        seqs = [np.asarray(g["tokens"], np.int32) for g in kept]
        lens = [int(g["prompt_len"]) for g in kept]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path} is not a generations file of python -m lookupkit.bench.generations "
                         f"({type(exc).__name__}: {exc})") from None
    if not seqs:
        raise InputError(f"{path} holds no sequences" + (f" of task {task}" if task else ""))
    return doc, seqs, lens


def tune(cache, *, tokens: np.ndarray | None = None, tokens_name: str = "tokens", generations_file=None,
         task: str | None = None, slice_: str | None = None, n_ctx: int = DEFAULT_CTX,
         on_stage=None) -> tuple[tuple, dict]:
    """Learn tables with the StaticCache `cache` on held-out token ids (`tokens`, read from the file named
    `tokens_name`) or on a model's generations (a file); returns (tables, about) for confidence.save.
    on_stage(description, stages): called as each stage begins, with how many there are at most."""
    stages = 3 if getattr(cache, "suffix", None) is not None else 2
    stage = on_stage or (lambda description, n: None)
    if (tokens is None) == (generations_file is None):
        raise InputError("give exactly one of --tokens (held-out ids) or --generations (a model's generations)")
    if generations_file is not None:
        if slice_ is not None:
            raise InputError("--slice cuts --tokens; with --generations choose sequences with --task")
        doc, seqs, lens = generations(generations_file, task)
        ids = np.concatenate(seqs)
        first, second, chunk = confidence.generation_halves(seqs, lens)
        method = (f"model generations: {len(seqs)} sequences of {doc.get('model')} ({doc.get('text')}, seed "
                  f"{doc.get('seed')}, task {task or 'all'}); first half: per-source tables; second half: "
                  "agreement table; generated positions only")
    else:
        if task is not None:
            raise InputError("--task chooses sequences of --generations; it does not apply to --tokens")
        ids = sliced(tokens, slice_, tokens_name)
        seqs, lens = [ids[:len(ids) // 2], ids[len(ids) // 2:]], None
        first, second, chunk = confidence.halves(ids, n_ctx)
        method = "first half: per-source tables; second half: agreement table"
    stage("per-source tables (first half)", stages)
    table = confidence.learn_sources(first, chunk, cache, None)
    if getattr(cache, "suffix", None) is None or not suffix_on(table):
        stage("agreement table (second half)", stages)
        tables, gate = (table, confidence.learn_agree(table, second, chunk, cache, None)), None
    else:
        stage("agreement tables and the suffix source's gate (second half)", stages)
        tables, gate = gate_suffix(table, lambda t: confidence.learn_agree(t, second, chunk, cache, None), cache,
                                   seqs, lens, n_ctx)
    about = {"cache": cache.path.name if cache.path else None, "cache_orders": cache.orders,
             "cache_suffix_index": getattr(cache, "suffix", None) is not None,
             "cache_corpus": cache.meta.get("corpus"), "orders_params": cache.meta.get("orders"),
             "tokens": Path(generations_file or tokens_name).name, "slice": slice_, "n_tokens": int(len(ids)),
             "sha256_of_ids": hashlib.sha256(np.ascontiguousarray(ids).data).hexdigest(), "n_ctx": n_ctx,
             "method": method, "suffix_gate": gate}
    return tables, about


def gate_suffix(table, agree_for, cache, seqs, prompt_lens, n_ctx):
    """The suffix source drafts only after matches long enough to pay on the held-out text. For each gate
    (the first GATE_BINS[i] length bins of the suffix rows zeroed: policy.suffix_source) and for no source
    (the rows zeroed), the agreement table is learnt with it (agree_for(table)) and each half of the held-out
    sequences is replayed at each of GATE_COSTS. A gate is kept only if, at every cost, its ratio to no
    source on the worse half exceeds 1 by more than the two halves differ; of those, the one whose worst such
    bound is highest. None: no source (exactly the tables a cache without the index learns). Why the margin:
    on WikiText prose the source's gains at high costs are smaller than the difference between two held-out
    texts (bench/RESULTS.md: Figures the code's comments rely on).
    Returns ((table, agree), what was measured)."""
    halves = (seqs[:len(seqs) // 2], seqs[len(seqs) // 2:])
    lens = (None, None) if prompt_lens is None else (prompt_lens[:len(seqs) // 2], prompt_lens[len(seqs) // 2:])

    def s_at(tables, cost):
        """S(cost) on each half."""
        pol = make_policy(tables, lambda k: 1 + cost * k, GATE_DRAFT, cache.high, cache.suffix)
        out = []
        for part, part_lens in zip(halves, lens):
            drafted, accepted = [], []
            for i, seq in enumerate(part):
                if part_lens is None:
                    trace, _ = replay_fast(seq, n_ctx, GATE_DRAFT, cache, policy=pol)
                else:
                    trace = replay_generation(seq, part_lens[i], GATE_DRAFT, cache, policy=pol)
                drafted.append(trace.n_drafted)
                accepted.append(trace.n_accepted)
            out.append(speedup(np.concatenate(drafted), np.concatenate(accepted), cost) or 1.0)
        return out

    off = table.copy()
    off[SRC_SUFFIX:SRC_SUFFIX + 2] = 0.0
    off = (off, agree_for(off))
    base = {c: s_at(off, c) for c in GATE_COSTS}
    tried = []
    for bins in GATE_BINS:
        gated = table.copy()
        gated[SRC_SUFFIX:SRC_SUFFIX + 2, :bins] = 0.0
        gated = (gated, agree_for(gated))
        ratios = {f"{c:g}": [a / b for a, b in zip(s_at(gated, c), base[c])] for c in GATE_COSTS}
        bound = min(min(r) - abs(r[0] - r[1]) for r in ratios.values())
        tried.append({"min_match": min_match_of(gated[0][SRC_SUFFIX:SRC_SUFFIX + 2]), "worst_bound": bound,
                      "ratios_by_half": ratios, "tables": gated})
    best = max(tried, key=lambda r: (r["worst_bound"], -r["min_match"]))
    keep = best["worst_bound"] > 1.0
    record = {"costs": list(GATE_COSTS), "n_draft": GATE_DRAFT, "min_match": best["min_match"] if keep else None,
              "tried": [{k: v for k, v in r.items() if k != "tables"} for r in tried]}
    return (best["tables"] if keep else off), record
