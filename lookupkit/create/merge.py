"""lookup-merge's work: caches added together (llama.cpp's lookup-merge), over any cache format.

Inputs may be llama.cpp legacy files (-lcs/-lcd, n-grams of 1..4 tokens) or static caches in any
format lookupkit reads (lkc, lkc.zst, ggngcmap). Counts of the same (n-gram, follower) are added and
saturate at 2^31-1. OUT is written atomically as a legacy file, or in a static format (by extension
or format) when every n-gram is a 2-gram. Caches built for different vocabularies are refused.

When every input holds 2-grams only (static caches, -lcs files), the merge streams with bounded
memory, as `lookup-create` counts: each input's (2-gram, follower, count) triples are read in blocks
(the pairs stay mapped), sorted into runs of at most a third of the memory budget (RUN_BYTES per
triple while sorting) and spilled to a work directory (`counts.runs.write_run`), k-way merged into the
table (`counts.runs.merge_range`, its buffers sized by `merge_block` so they stay within the same third
whatever the number of runs), and the table is streamed to OUT (`formats.streamed.write_parts`, the
constmap built by `constmap_build`). The bytes are those of the in-memory merge. What grows with the
caches is O(2-grams), never O(pairs): an input's key list while it is read (16 B per 2-gram) and the
output's constmap (`memory_budget.check_write`, 38 B per 2-gram). Legacy inputs are read whole, as
llama.cpp reads them (the format has no index); inputs with 1-, 3- or 4-grams (dynamic caches) are
merged in memory. lkc.zst and legacy outputs are written from an in-memory table by their writers.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lookupkit import formats
from lookupkit.create.memory_budget import check_write, disk_errors, plan_memory, work_dir
from lookupkit.counts.bigrams import CHUNK_TOKENS, PACK_BITS
from lookupkit.counts.dict_cache import merge_tables
from lookupkit.counts.runs import merge_block, merge_range, write_run
from lookupkit.counts.tables import NgramTable, StaticTable
from lookupkit.errors import FormatError, InputError, VocabMismatchError
from lookupkit.formats import llama
from lookupkit.formats.streamed import write_parts
from lookupkit.static import StaticCache, read_table

BLOCK_PAIRS = 1 << 22  # pairs turned into triples at a time
RUN_BYTES = 48  # per triple while a run is sorted: k0 + count held, k1 (wide), order, sorted copies


def output_format(out: Path, format: str | None = None) -> str:
    """OUT's format: `format`, else from its extension; any other name (llama.cpp's usual .bin) means the
    legacy file."""
    if format:
        return formats.format_for_path(out, format)
    try:
        return formats.format_for_path(out)
    except InputError:
        return "llama"


def read_ngrams(path: Path) -> NgramTable:
    """A cache file of any format as n-grams: a legacy file as llama.cpp reads it (1..4-grams), any other
    through `static.read_table`."""
    return llama.read_file(path) if formats.detect(path) == "llama" else read_table(path).to_ngrams()


def _merge_in_memory(inputs: list[_Input], out: Path, fmt: str, vocab: dict | None) -> tuple[int, int]:
    merged = merge_tables([inp.table if inp.table is not None else read_ngrams(inp.path) for inp in inputs])
    if fmt == "llama":
        llama.save(merged, out)
    else:
        if len(merged.ngrams) and not (merged.sizes == 2).all():
            raise InputError(f"{out}: the {fmt} format holds 2-grams only, but the inputs hold n-grams of sizes "
                             f"{sorted(set(merged.sizes.tolist()))}; write a legacy file (.lcd) instead")
        meta = _meta(vocab, [inp.path for inp in inputs])
        formats.write_table(StaticTable.from_ngrams(merged), out, format=fmt, meta=meta)
    return len(merged.ngrams), len(merged.pairs)


def _meta(vocab, inputs) -> dict:
    return {"vocab": vocab, "corpus": {"merged_from": [str(p) for p in inputs]}}


class _Input:
    """One input's keys, run offsets and (mapped) pairs, in its own order."""

    def __init__(self, path: Path):
        self.path, self.cache, self.table = path, None, None
        self.static = True
        if formats.detect(path) == "llama":
            table = self.table = llama.read_file(path)
            self.static = not len(table.ngrams) or bool((table.sizes == 2).all())
            self.keys, self.offsets, self.pairs, self.vocab = table.ngrams[:, :2], table.offsets, table.pairs, None
        else:
            self.cache = StaticCache.open(path)
            self.keys, self.offsets = self.cache.layout()
            self.pairs, self.vocab = self.cache.pairs, self.cache.meta.get("vocab")

    def max_id(self) -> int:
        top = int(self.keys.max()) if len(self.keys) else -1
        for s in range(0, len(self.pairs), BLOCK_PAIRS):
            top = max(top, int(np.asarray(self.pairs[s:s + BLOCK_PAIRS, 0]).max()))
        return top

    def blocks(self, packed: bool, block: int):
        """Sort keys (n, 1|2) uint64 and counts of the triples, about `block` pairs (whole runs) at a time."""
        lengths = np.diff(self.offsets)
        i, n = 0, len(self.keys)
        while i < n:
            j = int(np.searchsorted(self.offsets, self.offsets[i] + block, "right")) - 1
            j = min(n, max(j, i + 1))
            a, b = int(self.offsets[i]), int(self.offsets[j])
            ln = lengths[i:j]
            t = self.keys[i:j].astype(np.uint64)
            p = np.asarray(self.pairs[a:b])
            t0, t1 = np.repeat(t[:, 0], ln), np.repeat(t[:, 1], ln)
            t2 = p[:, 0].astype(np.uint64)
            if packed:
                keys = ((t0 << np.uint64(2 * PACK_BITS)) | (t1 << np.uint64(PACK_BITS)) | t2).reshape(-1, 1)
            else:
                keys = np.stack([(t0 << np.uint64(32)) | t1, t2], axis=1)
            yield keys, p[:, 1].astype(np.int64)
            i = j

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def _sorted_run(chunks: list, packed: bool, name: str) -> tuple[np.ndarray, np.ndarray]:
    keys = np.concatenate([k for k, _ in chunks])
    counts = np.concatenate([c for _, c in chunks])
    order = np.argsort(keys[:, 0], kind="stable") if packed else np.lexsort((keys[:, 1], keys[:, 0]))
    keys, counts = keys[order], counts[order]
    if len(keys) > 1:
        same = keys[1:, 0] == keys[:-1, 0]
        if not packed:
            same &= keys[1:, 1] == keys[:-1, 1]
        if same.any():
            raise FormatError(f"{name}: corrupted cache: a (2-gram, follower) is listed twice")
    return keys, counts


def merge_caches(inputs, out: Path, fmt: str, memory_budget: int | None = None,
                 temp_dir: str | os.PathLike | None = None) -> tuple[int, int]:
    """Merge the caches `inputs` into `out` (format `fmt`): streamed with bounded memory when they hold 2-grams
    only, in memory otherwise; returns (n-grams, pairs)."""
    plan = plan_memory(1, memory_budget, CHUNK_TOKENS)
    limit = max(plan.total // 3, 1 << 20)
    block = int(max(1 << 12, min(BLOCK_PAIRS, limit // (4 * RUN_BYTES))))  # a block's temporaries: ~4 runs' worth
    top, opened = -1, []
    try:
        for path in inputs:  # every input checked (readable, then one vocabulary) before any work
            opened.append(_Input(path))
        vocab = _common_vocab(opened)
        if not all(inp.static for inp in opened):  # 1-, 3- or 4-grams: a legacy dynamic merge, in memory
            for inp in opened:
                inp.close()
            return _merge_in_memory(opened, out, fmt, vocab)
        for inp in opened:
            top = max(top, inp.max_id())
        packed = top < (1 << PACK_BITS)
        with work_dir(temp_dir) as work, disk_errors(work):
            runs = []
            for n, inp in enumerate(opened):
                chunks, held = [], 0
                for keys, counts in inp.blocks(packed, block):
                    chunks.append((keys, counts))
                    held += RUN_BYTES * len(counts)
                    if held >= limit:  # a run sorted and spilled; the input's next blocks start the next run
                        runs.append(write_run(os.path.join(work, f"in{n}-{len(runs)}"),
                                              *_sorted_run(chunks, packed, str(inp.path))))
                        chunks, held = [], 0
                if chunks:
                    runs.append(write_run(os.path.join(work, f"in{n}-{len(runs)}"),
                                          *_sorted_run(chunks, packed, str(inp.path))))
                inp.close()
            if not sum(r.n for r in runs):
                for r in runs:
                    r.remove()
                return _merge_in_memory(opened, out, fmt, vocab)
            parts = [merge_range(runs, 0, top + 1, os.path.join(work, "part-0000"), merge_block(len(runs), limit))]
            for r in runs:
                r.remove()
            n_keys, n_pairs = sum(p.n_keys for p in parts), sum(p.n_pairs for p in parts)
            check_write(plan, n_keys)
            write_parts(parts, out, fmt, _meta(vocab, inputs))
            return n_keys, n_pairs
    finally:
        for inp in opened:
            inp.close()


def _common_vocab(inputs: list[_Input]) -> dict | None:
    """The inputs' common vocabulary (None if none records one); caches of different vocabularies (by
    fingerprint) cannot be merged, and the refusal names both vocabularies and both files."""
    known, first = None, None
    for inp in inputs:
        vocab = inp.vocab
        if vocab is None or vocab.get("fingerprint") is None:
            continue
        if known is not None and known.get("fingerprint") != vocab["fingerprint"]:
            raise VocabMismatchError(f"{inp.path} was built for {_vocab_name(vocab)} (vocab fingerprint "
                                     f"{vocab['fingerprint']}) but {first} for {_vocab_name(known)} (fingerprint "
                                     f"{known['fingerprint']}); caches of different vocabularies cannot be merged: "
                                     "rebuild one with lookup-create -m VOCAB")
        known, first = vocab, first or inp.path
    return known


def _vocab_name(vocab: dict) -> str:
    size = f" ({vocab['n_vocab']:,} tokens)" if vocab.get("n_vocab") else ""
    return f"the {vocab['name']} vocabulary{size}" if vocab.get("name") else f"another vocabulary{size}"
