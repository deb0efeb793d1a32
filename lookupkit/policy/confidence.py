"""The policy's confidence table: P(a source's candidate is the next token), learnt from data, never guessed.

`learn` replays held-out token ids as lookup-stats does (chunks of n_ctx, the context cache growing
within a chunk, each chunk merged into the dynamic cache) and, at every position, asks every source for
its candidate and notes whether it was the true next token, per (source and order, share bin, total
bin). `table` turns those counts into probabilities, each bin pulled towards its source's overall rate
by `prior` pseudo-observations (sparse bins say little) and then made non-decreasing in the share (more
of the evidence agreeing never makes a candidate less likely) by isotonic regression, which keeps each
bin's average calibrated where a running maximum would inflate noisy bins (the policy then drafted as if
verification were dearer than it was). Tables are JSON: the bundled default
(lookupkit/data/policy-default.json) was learnt by `lookupkit tune-policy` (replay.tuning) on text held
out from every evaluation; learn your own for another domain. The suffix source's rows (policy.suffix_source)
are learnt when the static cache has a suffix index; tables written before it existed (lookupkit-policy-1)
load with those rows zero, and the policy never drafts from a source its table has not learnt (nor after
matches shorter than the first length bin its suffix rows have learnt: replay.tuning.gate_suffix).
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path

import numpy as np

from ..counts import flat as fc
from ..counts.match_index import clear_index, ensure_room, index_position, new_index
from ..errors import FormatError, InputError
from ..files import atomic_writer, open_input
from ..kernels import kernel
from ..rules import SOURCE_NAMES, DEFAULT_CTX
from ..static.source import grow_memo, new_memo, static_arrays
from ..static.high_orders import no_high
from .chain import (AGREE_MAX, N_CANDIDATES, N_SOURCES, P_BINS, SHARE_BINS, SRC_SUFFIX, TOTAL_BINS, candidates,
                     choose, make_policy, own_state, source_code)
from .suffix_source import reset as reset_suffix, suffix_arrays

FORMAT = "lookupkit-policy-2"
FORMAT_1 = "lookupkit-policy-1"  # before the suffix source: SRC_SUFFIX rows, read with the suffix rows zero
DEFAULT = "policy-default.json"
PRIOR = 8.0


@kernel
def _observe_chunk(truth, first, ctx, dyn, st, memo, pol, dummy, hits, trials, stage):
    """Every position from `first` on of one chunk (all are counted into the caches): stage 0, each source's
    candidate against the true next token; stage 1, the chosen candidate (by its table bin and agreeing
    sources) against it."""
    cand = pol.cand
    for i in range(1, truth.shape[0]):
        if i < first:
            fc.count_position(ctx, truth, i)
            index_position(pol.index, truth, i)
            continue
        candidates(truth, i, dummy, 0, 0, ctx, dyn, st, memo, pol.high, pol.index, pol.suffix, pol.history, 1, cand)
        if stage == 0:
            for src in range(trials.shape[0]):
                tok = cand[src, 0]
                if tok >= 0:
                    trials[src, cand[src, 1], cand[src, 2]] += 1
                    hits[src, cand[src, 1], cand[src, 2]] += tok == truth[i]
        else:
            tok, _, p_bin, agree = choose(pol, cand, 0)  # no evidence: every trust factor is 1
            if tok >= 0:
                trials[p_bin, agree, 0] += 1
                hits[p_bin, agree, 0] += tok == truth[i]
        fc.count_position(ctx, truth, i)
        index_position(pol.index, truth, i)


def _replay_counts(chunks, n_ctx, static, dynamic, pol, shape, stage, history=None) -> tuple[np.ndarray, np.ndarray]:
    """Counts over `chunks` ((ids, first position counted) pairs, each a fresh context after the ones before
    were merged into the dynamic cache, as lookup-stats and a serving engine do; and learnt into `history`,
    a draft.history.History whose view pol drafts from, if one is given)."""
    st = static_arrays(static)
    ctx = fc.FlatCache(4 * n_ctx, 4 * n_ctx, fc.LAX)
    dyn = fc.FlatCache.from_table(dynamic, 8 * n_ctx, 8 * n_ctx, fc.STRICT)
    memo = new_memo()
    hits, trials = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    dummy = np.zeros(1, np.int32)
    pol = own_state(pol, new_index(n_ctx))
    for ids, first in chunks:
        pol = pol._replace(index=ensure_room(pol.index, ids, 0, len(ids)))
        ctx.reserve(4 * len(ids), 4 * len(ids))
        _observe_chunk(ids, first, ctx.c, dyn.c, st, memo, pol, dummy, hits, trials, stage)
        dyn.merge(ctx)
        if history is not None:
            history.learn(ids)
        ctx.clear()
        clear_index(pol.index)
        reset_suffix(pol.suffix)
        memo = grow_memo(memo)
    return hits, trials


def learn(tokens, n_ctx: int = DEFAULT_CTX, static=None, dynamic=None, prior: float = PRIOR) -> tuple[np.ndarray, np.ndarray]:
    """(table, agree) learnt on `tokens` (held-out ids), replayed lookup-stats' way in chunks of n_ctx: the
    first half gives each source's table, the second half how often the chosen candidate is right given
    its table bin and the sources agreeing with it (so neither stage is scored on the data it was fitted to)."""
    first, second, n_ctx = halves(tokens, n_ctx)
    table = learn_sources(first, n_ctx, static, dynamic, prior)
    return table, learn_agree(table, second, n_ctx, static, dynamic, prior)


def learn_generations(sequences, prompt_lens, static=None, dynamic=None, prior: float = PRIOR) -> tuple[np.ndarray, np.ndarray]:
    """(table, agree) learnt on a model's own generations: each sequence is a prompt (its first prompt_lens[i]
    tokens, counted into the context cache only) and what the model generated after it, where an engine
    drafts. Sequences follow one another as an engine serves them (each learnt into the dynamic cache);
    the first half of them gives the per-source tables, the second half the agreement table."""
    first, second, n_ctx = generation_halves(sequences, prompt_lens)
    table = learn_sources(first, n_ctx, static, dynamic, prior)
    return table, learn_agree(table, second, n_ctx, static, dynamic, prior)


def halves(tokens, n_ctx: int) -> tuple[list, list, int]:
    """Held-out ids as the two halves' chunks ((ids, first position counted) pairs) and the chunk size."""
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    if len(tokens) <= 2 * n_ctx + 2:
        raise InputError(f"learning a confidence table needs more than two chunks of {n_ctx} tokens, got {len(tokens)}")
    half = len(tokens) // 2
    chunks = [(part[c * n_ctx:(c + 1) * n_ctx], 1) for part in (tokens[:half], tokens[half:])
              for c in range((len(part) - 1) // n_ctx)]
    n_first = (half - 1) // n_ctx
    return chunks[:n_first], chunks[n_first:], n_ctx


def generation_halves(sequences, prompt_lens) -> tuple[list, list, int]:
    """A model's generations as the two halves' chunks (each drafted after its prompt) and the longest."""
    chunks = [(np.ascontiguousarray(s, dtype=np.int32), int(p)) for s, p in zip(sequences, prompt_lens)]
    if len(chunks) < 2 or any(not 1 <= p < len(s) for s, p in chunks):
        raise InputError("learning from generations needs at least two sequences, each longer than its prompt")
    half = len(chunks) // 2
    return chunks[:half], chunks[half:], max(len(s) for s, _ in chunks)


def _policy(table, static, history=None):
    """A policy of one drafted token with `table` (its suffix source as make_policy gates it)."""
    high = static.high if static is not None else no_high()
    return make_policy((table, np.zeros((P_BINS, AGREE_MAX + 1))), lambda k: 1.0, 1, high,
                       getattr(static, "suffix", None), history.view() if history is not None else None)


def learn_sources(first, n_ctx, static, dynamic, prior: float = PRIOR, history=None) -> np.ndarray:
    """Stage 1: each source's table, from every position of the chunks (the suffix source's whatever the
    table: its rows are what is learnt). history: a draft.history.History the chunks are learnt into one
    after another; the table then has the history's row too (N_CANDIDATES rows: a study, not a table file)."""
    pol = _policy(np.zeros((N_CANDIDATES, SHARE_BINS, TOTAL_BINS)), static, history)
    pol = pol._replace(suffix=suffix_arrays(getattr(static, "suffix", None), 1))
    shape = (N_CANDIDATES if history is not None else N_SOURCES, SHARE_BINS, TOTAL_BINS)
    hits, trials = _replay_counts(first, n_ctx, static, dynamic, pol, shape, 0, history)
    return _shrunk(hits, trials, prior)


def learn_agree(table, second, n_ctx, static, dynamic, prior: float = PRIOR) -> np.ndarray:
    """Stage 2: P(the chosen candidate is right) by its table bin and the sources agreeing with it, the
    candidates being those the policy drafts from with `table` (its suffix gate included)."""
    pol = _policy(table, static)
    hits2, trials2 = _replay_counts(second, n_ctx, static, dynamic, pol, (P_BINS, AGREE_MAX + 1, 1), 1)
    centres = (np.arange(P_BINS) + 0.5) / P_BINS
    h2, t2 = hits2[..., 0] + prior * centres[:, None], trials2[..., 0] + prior  # sparse cells: the table's own p
    agree = h2 / t2
    for j in range(agree.shape[1]):
        agree[:, j] = _isotonic(h2[:, j] / t2[:, j], t2[:, j])
    return agree


def _isotonic(p: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to p in weighted least squares (pool adjacent violators):
    unlike a running maximum, it does not lift noisy bins above their evidence."""
    blocks = []  # [value, weight, length]
    for v, wt in zip(p.tolist(), w.tolist()):
        blocks.append([v, wt, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.repeat([b[0] for b in blocks], [b[2] for b in blocks])


def _shrunk(hits, trials, prior: float) -> np.ndarray:
    """Probabilities from counts: shrunk towards each source's rate, non-decreasing in share."""
    hits, trials = hits.astype(float), trials.astype(float)
    rate = hits.sum(axis=(1, 2)) / np.maximum(trials.sum(axis=(1, 2)), 1)
    h, t = hits + prior * rate[:, None, None], trials + prior
    p = h / t
    for src in range(p.shape[0]):
        for tb in range(p.shape[2]):
            p[src, :, tb] = _isotonic(p[src, :, tb], t[src, :, tb])  # share bins ascend along axis 1
    return p


def save(tables: tuple, path: str | os.PathLike, about: dict | None = None) -> Path:
    """Write (table, agree) as JSON (atomically); `about` records what they were learnt on."""
    table, agree = tables
    names = [SOURCE_NAMES[int(source_code(s))] for s in range(N_SOURCES)]
    names[SRC_SUFFIX:SRC_SUFFIX + 2] = ["sx (unanimous)", "sx (majority)"]
    doc = {"format": FORMAT, "share_bins": SHARE_BINS, "total_bins": TOTAL_BINS, "p_bins": P_BINS,
           "agree_max": AGREE_MAX, "sources": names, "about": about or {},
           "table": np.round(table, 6).tolist(), "agree": np.round(agree, 6).tolist()}
    path = Path(path)
    with atomic_writer(path) as f:
        f.write((json.dumps(doc) + "\n").encode())
    return path


@functools.lru_cache(maxsize=1)
def _default() -> tuple[np.ndarray, np.ndarray]:
    with resources.as_file(resources.files("lookupkit") / "data" / DEFAULT) as p:
        table, agree = load(p)
    table.flags.writeable = agree.flags.writeable = False  # shared by every caller
    return table, agree


def for_model(model) -> Path | None:
    """The table learnt on a registered model's own generations (lookupkit/data/policy-<name>.json), for a
    model name or a path to its GGUF file (matched by the registry's file name); None if none is shipped."""
    from .. import models

    name = str(model)
    by_file = {m.file: m.name for m in models.MODELS.values()}
    name = by_file.get(Path(name).name, name)
    if name not in models.MODELS:
        return None
    with resources.as_file(resources.files("lookupkit") / "data" / f"policy-{name}.json") as p:
        return Path(p) if Path(p).is_file() else None


def load(path: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(table, agree) written by `save`; None: the bundled default (read once per process: every policy
    Drafter, server slot and sweep point asks for it)."""
    if path is None:
        return _default()
    remedy = "learn one with lookupkit tune-policy"
    try:
        with open_input(path, "policy table") as f:
            doc = json.loads(f.read().decode("utf-8"))
        table, agree = np.array(doc["table"], dtype=np.float64), np.array(doc["agree"], dtype=np.float64)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"{path} is not a lookupkit policy table ({exc}); {remedy}") from None
    if doc.get("format") == FORMAT_1 and table.shape[:1] == (SRC_SUFFIX,):
        table = np.concatenate([table, np.zeros((N_SOURCES - SRC_SUFFIX, *table.shape[1:]))])  # never drafts
    shapes = (N_SOURCES, SHARE_BINS, TOTAL_BINS), (P_BINS, AGREE_MAX + 1)
    if (doc.get("format") not in (FORMAT, FORMAT_1) or (table.shape, agree.shape) != shapes
            or not all(np.all((a >= 0) & (a <= 1)) for a in (table, agree))):
        raise FormatError(f"{path} is not a {FORMAT} table of shapes {shapes} holding probabilities; {remedy}")
    return table, agree
