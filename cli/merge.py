"""`lookup-merge A B ... OUT`: llama.cpp's lookup-merge (counts added), over any cache format.

Inputs may be llama.cpp legacy files (-lcs/-lcd, n-grams of 1..4 tokens) or static caches in any
format lookupkit reads (lkc, lkc.zst, ggngcmap). Counts of the same (n-gram, follower) are added and
saturate at 2^31-1. OUT is written atomically as a legacy file, or in a static format (by extension
or --format) when every n-gram is a 2-gram. Caches built for different vocabularies are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .. import formats
from ..counts.dict_cache import merge_tables
from ..counts.tables import NgramTable, StaticTable
from ..errors import InputError, VocabMismatchError
from ..formats import llama
from ..static import StaticCache
from .common import guarded, run

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(help="Merge n-gram caches A B ... into OUT (counts added), as llama.cpp's lookup-merge.")
@guarded
def merge(
    paths: List[Path] = typer.Argument(..., metavar="A B ... OUT", help="Input caches, then the output file."),
    format: Optional[str] = typer.Option(None, "--format", help="Output format: llama, lkc, lkc.zst or ggngcmap "
                                                                "(default: from OUT's extension, else llama)."),
) -> None:
    if len(paths) < 2:
        raise InputError("usage: lookup-merge A [B ...] OUT (at least one input and the output)")
    *inputs, out = paths
    tables, vocab = [], None
    for path in inputs:
        table, meta_vocab = read_any(path)
        vocab = _same_vocab(vocab, meta_vocab, path)
        tables.append(table)
    merged = merge_tables(tables)
    fmt = formats.format_for_path(out, format) if format else _format_of(out)
    if fmt == "llama":
        llama.save(merged, out)
    else:
        if len(merged.ngrams) and not (merged.sizes == 2).all():
            raise InputError(f"{out}: the {fmt} format holds 2-grams only, but the inputs hold n-grams of sizes "
                             f"{sorted(set(merged.sizes.tolist()))}; write a legacy file (.lcd) instead")
        meta = {"vocab": vocab, "corpus": {"merged_from": [str(p) for p in inputs]}}
        formats.write_table(StaticTable.from_ngrams(merged), out, format=fmt, meta=meta)
    typer.echo(f"{out}: {len(merged.ngrams)} n-grams, {len(merged.pairs)} (token, count) pairs ({fmt})", err=True)


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
