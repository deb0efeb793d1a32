"""`lookup-merge A B ... OUT`: llama.cpp's lookup-merge (counts added), over any cache format.

Inputs may be llama.cpp legacy files (-lcs/-lcd, n-grams of 1..4 tokens) or static caches in any
format lookupkit reads (lkc, lkc.zst, ggngcmap). Counts of the same (n-gram, follower) are added and
saturate at 2^31-1. OUT is written atomically as a legacy file, or in a static format (by extension
or --format) when every n-gram is a 2-gram. Caches built for different vocabularies are refused.

When every input holds 2-grams only (static caches, -lcs files), the merge streams with bounded
memory, as `lookup-create` counts: each input's (2-gram, follower, count) triples are read in blocks
(the pairs stay mapped), sorted into runs of at most a third of `--memory-budget` (RUN_BYTES per
triple while sorting) and spilled to a work directory (`counts.runs.write_run`), k-way merged into the
table (`counts.runs.merge_range`, its buffers sized by `merge_block` so they stay within the same third
whatever the number of runs), and the table is streamed to OUT (`formats.lkc_stream.write_parts`, the
constmap built by `vmap_build`). The bytes are those of the in-memory merge. What grows with the
caches is O(2-grams), never O(pairs): an input's key list while it is read (16 B per 2-gram) and the
output's constmap (`budget.check_write`, 38 B per 2-gram). Legacy inputs are read whole, as llama.cpp
reads them (the format has no index); inputs with 1-, 3- or 4-grams (dynamic caches) are merged in
memory as before. lkc.zst and legacy outputs are written from an in-memory table by their writers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer

from lookupkit import budget as budgets
from lookupkit import formats
from lookupkit.corpora import parse_size
from lookupkit.counts.bigrams import CHUNK_TOKENS, PACK_BITS
from lookupkit.counts.dict_cache import merge_tables
from lookupkit.counts.runs import merge_block, merge_range, write_run
from lookupkit.counts.tables import NgramTable, StaticTable
from lookupkit.errors import FormatError, InputError, VocabMismatchError
from lookupkit.formats import llama
from lookupkit.formats.lkc_stream import write_parts
from lookupkit.static import StaticCache
from lookupkit.cli.common import guarded, run

BLOCK_PAIRS = 1 << 22  # pairs turned into triples at a time
RUN_BYTES = 48  # per triple while a run is sorted: k0 + count held, k1 (wide), order, sorted copies

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(help="Merge n-gram caches A B ... into OUT (counts added), as llama.cpp's lookup-merge.")
@guarded
def merge(
    paths: List[Path] = typer.Argument(..., metavar="A B ... OUT", help="Input caches, then the output file."),
    format: Optional[str] = typer.Option(None, "--format", help="Output format: llama, lkc, lkc.zst or ggngcmap "
                                                                "(default: from OUT's extension, else llama)."),
    memory_budget: Optional[str] = typer.Option(None, "--memory-budget", metavar="SIZE", help="Memory for merging "
                                                "2-gram caches (default 1GiB); sorted runs beyond it are spilled "
                                                "to --temp-dir."),
    temp_dir: Optional[Path] = typer.Option(None, "--temp-dir", metavar="DIR", help="Where spilled runs go "
                                            "(default: $TMPDIR or /tmp); removed afterwards."),
) -> None:
    if len(paths) < 2:
        raise InputError("usage: lookup-merge A [B ...] OUT (at least one input and the output)")
    *inputs, out = paths
    fmt = formats.format_for_path(out, format) if format else _format_of(out)
    limit = _budget(memory_budget)
    n_keys, n_pairs = merge_static(inputs, out, fmt, memory_budget=limit, temp_dir=temp_dir)
    typer.echo(f"{out}: {n_keys} n-grams, {n_pairs} (token, count) pairs ({fmt})", err=True)


def _budget(text: str | None) -> int | None:
    if text is None:
        return None
    if text.strip().startswith("-"):
        raise InputError(f"--memory-budget {text} is negative; give a size like 1GiB or 800MB")
    return parse_size(text)


def _merge_in_memory(inputs, out: Path, fmt: str) -> tuple[int, int]:
    tables, vocab = [], None
    for path in inputs:
        table, meta_vocab = read_any(path)
        vocab = _same_vocab(vocab, meta_vocab, path)
        tables.append(table)
    merged = merge_tables(tables)
    if fmt == "llama":
        llama.save(merged, out)
    else:
        if len(merged.ngrams) and not (merged.sizes == 2).all():
            raise InputError(f"{out}: the {fmt} format holds 2-grams only, but the inputs hold n-grams of sizes "
                             f"{sorted(set(merged.sizes.tolist()))}; write a legacy file (.lcd) instead")
        formats.write_table(StaticTable.from_ngrams(merged), out, format=fmt, meta=_meta(vocab, inputs))
    return len(merged.ngrams), len(merged.pairs)


def _meta(vocab, inputs) -> dict:
    return {"vocab": vocab, "corpus": {"merged_from": [str(p) for p in inputs]}}


class _Input:
    """One input's keys, run offsets and (mapped) pairs, in its own order."""

    def __init__(self, path: Path):
        self.path, self.cache = path, None
        self.static = True
        if formats.detect(path) == "llama":
            table = llama.read_file(path)
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


def merge_static(inputs, out: Path, fmt: str, memory_budget: int | None = None,
                 temp_dir: str | os.PathLike | None = None) -> tuple[int, int]:
    """Merge caches of 2-grams into `out` (format `fmt`) with bounded memory; returns (2-grams, pairs)."""
    plan = budgets.plan(1, memory_budget, CHUNK_TOKENS)
    limit = max(plan.total // 3, 1 << 20)
    block = int(max(1 << 12, min(BLOCK_PAIRS, limit // (4 * RUN_BYTES))))  # a block's temporaries: ~4 runs' worth
    vocab, top = None, -1
    opened = []
    try:
        for path in inputs:  # every input checked (vocabulary, readable) before any work
            inp = _Input(path)
            opened.append(inp)
            vocab = _same_vocab(vocab, inp.vocab, path)
        if not all(inp.static for inp in opened):  # 1-, 3- or 4-grams: a legacy dynamic merge, in memory
            for inp in opened:
                inp.close()
            return _merge_in_memory(inputs, out, fmt)
        for inp in opened:
            top = max(top, inp.max_id())
        packed = top < (1 << PACK_BITS)
        with budgets.work_dir(temp_dir) as work, budgets.disk_errors(work):
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
                return _merge_in_memory(inputs, out, fmt)
            parts = [merge_range(runs, 0, top + 1, os.path.join(work, "part-0000"), merge_block(len(runs), limit))]
            for r in runs:
                r.remove()
            n_keys, n_pairs = sum(p.n_keys for p in parts), sum(p.n_pairs for p in parts)
            budgets.check_write(plan, n_keys)
            write_parts(parts, out, fmt, _meta(vocab, inputs))
            return n_keys, n_pairs
    finally:
        for inp in opened:
            inp.close()


def read_any(path: Path) -> tuple[NgramTable, dict | None]:
    """A cache file of any format as an NgramTable, plus its vocabulary metadata (None if it has none)."""
    if formats.detect(path) == "llama":
        return llama.read_file(path), None
    with StaticCache.open(path) as cache:
        return cache.to_table().to_ngrams(), cache.meta.get("vocab")


def _same_vocab(known: dict | None, vocab: dict | None, path: Path) -> dict | None:
    """The common vocabulary so far; caches with different vocab fingerprints cannot be merged."""
    if vocab is None or vocab.get("fingerprint") is None:
        return known
    if known is not None and known.get("fingerprint") != vocab["fingerprint"]:
        raise VocabMismatchError(f"{path} was built for vocab fingerprint {vocab['fingerprint']} but an earlier "
                                 f"input for {known['fingerprint']}; caches of different vocabularies cannot be merged")
    return vocab


def _format_of(out: Path) -> str:
    """OUT's format from its extension; any other name (llama.cpp's usual .bin) means the legacy file."""
    try:
        return formats.format_for_path(out)
    except InputError:
        return "llama"


def main() -> None:
    run(app)


if __name__ == "__main__":
    main()
