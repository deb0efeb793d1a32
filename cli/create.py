"""`lookup-create`: build a static 2-gram cache from a corpus, as llama.cpp's llama-lookup-create does.

A thin layer over `lookupkit.create.build_static`: flags in, a summary (or JSON) out. Flags follow
llama.cpp where it has them (-m, -f, -lcs, -c).
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from lookupkit.create.memory_budget import DEFAULT_MEMORY_BUDGET, parse_memory_budget, parse_size, size_text
from lookupkit.create.outputs import kept_if_complete
from lookupkit.corpora import HFDataset, StdlibCorpus, TextFile, TokenFile
from lookupkit.errors import InputError
from lookupkit.formats.lkc_orders import OrderParams
from lookupkit.rules import MAX_STATIC_ORDER
from lookupkit.cli.common import guarded, print_json, progress, run

EXAMPLES = """Examples:

\b
  lookup-create -f corpus.txt -lcs static.lkc
  lookup-create -m ggml-vocab-qwen2.gguf -f wiki541.txt.zst --max-bytes 25MB -lcs wiki25.lkc
  lookup-create -f a.txt -f b.txt -lcs ab.lcs              # two documents, llama.cpp's legacy format
  lookup-create --dataset wikitext:wikitext-103-raw-v1:train -m qwen2.gguf -lcs wt103.lkc
  lookup-create --tokens corpus.i32 -lcs static.ggngcmap   # ids already tokenized
  lookup-create --default-corpus -lcs demo.lkc             # Python's standard library sources
  lookup-create -m gemma.gguf -f code.txt --orders 2-6 --suffix-index -lcs code.lkc   # + longest matches

Each source is one document (own BOS, one trailing newline stripped), as if built alone and merged.
Sources are taken in this order: -f files, --dataset, --tokens, --default-corpus.
Tokenized text is cached (zstd int32) in --cache-dir, so prefixes of one corpus tokenize once.
"""

ORDER_DEFAULTS = OrderParams(orders=())  # what --order-min-total/--order-min-share default to


class Cut(str, Enum):
    line = "line"
    byte = "byte"


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(help="Count every 2-gram's followers in a corpus and write a static cache (-lcs).", epilog=EXAMPLES)
@guarded
def create(
    lcs: Path = typer.Option(..., "-lcs", "--lookup-cache-static", metavar="OUT", help="Output file; the format follows its "
                             "extension (.lkc, .lkc.zst, .ggngcmap, .lcs) unless --format is given."),
    files: List[Path] = typer.Option([], "-f", "--file", metavar="FILE", help="Text corpus (.txt, or zstd .zst); repeatable."),
    datasets: List[str] = typer.Option([], "--dataset", metavar="SPEC", help="Hugging Face dataset name[:config[:split]] or a local "
                                       "parquet/arrow/text file or directory (column 'text'); repeatable."),
    tokens: List[Path] = typer.Option([], "--tokens", metavar="FILE", help="Token ids: raw little-endian int32 (.i32) or a 1-D "
                                      ".npy; repeatable."),
    default_corpus: bool = typer.Option(False, "--default-corpus", help="Use this Python's standard-library "
                                        "sources as the corpus (no download)."),
    model: Optional[Path] = typer.Option(None, "-m", "--model", metavar="VOCAB", help="Vocabulary: a GGUF file, a HF "
                                         "tokenizer.json or a model name `lookupkit model --list` knows (default: the bundled gpt-2 vocabulary for text; for "
                                         "--tokens alone, none is recorded)."),
    format: Optional[str] = typer.Option(None, "--format", metavar="FORMAT", help="lkc, lkc.zst, ggngcmap or llama."),
    max_bytes: Optional[str] = typer.Option(None, "--max-bytes", metavar="SIZE", help="Use only the first N bytes of text "
                                            "(25MB = 25*10^6, 25MiB = 25*2^20, or a byte count), cut at a line end."),
    cut: Cut = typer.Option(Cut.line, "--cut", help="Where --max-bytes ends the text: at the last line end "
                            "within it (line: how the WikiText-103 prefixes of lookupkit's benchmarks, 25/100 MB of wiki541, were cut) "
                            "or after exactly N bytes (byte)."),
    no_keys: bool = typer.Option(False, "--no-keys", help="lkc only: leave out the key sections (smaller file; "
                                 "it cannot be listed or converted without the corpus)."),
    ctx_size: Optional[int] = typer.Option(None, "-c", "--ctx-size", metavar="N", help="Accepted for llama.cpp compatibility; "
                                           "unused (the static cache does not depend on it)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", metavar="DIR", help="Token cache directory (default "
                                             "$LOOKUPKIT_CACHE_DIR or ~/.cache/lookupkit)."),
    no_token_cache: bool = typer.Option(False, "--no-token-cache", help="Neither read nor keep cached tokens."),
    jobs: Optional[int] = typer.Option(None, "-j", "--jobs", metavar="N", help="Processes that tokenize and count "
                                       "(default: this machine's cores); the file is the same for any N."),
    memory_budget: Optional[str] = typer.Option(None, "--memory-budget", metavar="SIZE", help="Memory for counting and "
                                                f"writing, shared by the jobs (default {size_text(DEFAULT_MEMORY_BUDGET)}); sorted partial counts "
                                                "beyond it are spilled to --temp-dir and merged."),
    temp_dir: Optional[Path] = typer.Option(None, "--temp-dir", metavar="DIR", help="Where spilled counts go "
                                            "(default: $TMPDIR or /tmp); removed afterwards."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="local|ADDRESS", help="Tokenize, count and merge as Ray "
                                      "tasks: 'local' starts a Ray instance for the build, an address joins a "
                                      "cluster (pip install 'lookupkit[ray]')."),
    orders: str = typer.Option("2", "--orders", metavar="2|2-N|2,N,...", help="n-gram orders to store: 2 is llama.cpp's "
                               "static cache (the default: the file is unchanged); 2-6 adds orders 3..6 for "
                               "lookupkit's policy (--policy lookupkit), a version-2 .lkc; a list starting at 2, "
                               f"such as 2,3,5, stores those; orders up to {MAX_STATIC_ORDER}."),
    order_min_total: int = typer.Option(ORDER_DEFAULTS.min_total, "--order-min-total", metavar="N",
                                        help="--orders: keep an n-gram of order >= 3 only if seen at least N times."),
    order_min_share: float = typer.Option(ORDER_DEFAULTS.min_share, "--order-min-share", metavar="S",
                                          help="--orders: ... and if its top follower holds at least this share (0..1) "
                                          "of its followers."),
    suffix_index: bool = typer.Option(False, "--suffix-index", help="Also store the corpus' suffix index (its ids "
                                      "and suffix array, ~8 bytes per token; a version-3 .lkc) for drafting from "
                                      "the longest match anywhere in the corpus. Its sort takes 15 bytes per "
                                      "token in memory; beyond --memory-budget it runs out of core in parts (the same "
                                      "file); ids up to 16,777,214."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (no progress bars)."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bars and no summary."),
) -> None:
    limit = parse_size(max_bytes) if max_bytes is not None else None
    order_params = _order_params(orders, order_min_total, order_min_share)
    budget = parse_memory_budget(memory_budget)
    sources = ([TextFile(f) for f in files] + [HFDataset(d) for d in datasets] + [TokenFile(t) for t in tokens]
               + ([StdlibCorpus()] if default_corpus else []))
    if not sources:
        raise InputError("no corpus given: pass -f FILE, --dataset SPEC, --tokens FILE or --default-corpus")
    only_ids = all(isinstance(s, TokenFile) for s in sources)
    tokenizer = None if model is None and only_ids else _tokenizer(model)  # ids alone: record no vocabulary
    show = not (quiet or as_json)
    from lookupkit.create import build_static  # the pipeline and its kernels: not for --help or a bad flag

    with kept_if_complete(lcs) as done:  # a Ctrl-C after the rename: the file is complete, so a success
        summary = build_static(sources, tokenizer, lcs, format, keys=not no_keys,
                               progress=(lambda: progress(True)) if show else None,
                               max_bytes=limit, cut=cut.value, cache_dir=cache_dir, token_cache=not no_token_cache,
                               jobs=(os.cpu_count() or 1) if jobs is None else jobs, memory_budget=budget,
                               temp_dir=temp_dir, ray=ray, orders=order_params, suffix_index=suffix_index)
        if as_json:
            print_json(summary)
        elif not quiet:
            typer.echo("\n".join(summary_lines(summary)))
        if hasattr(tokenizer, "speed_line"):  # llama.cpp encoded the text: never silently
            typer.echo(tokenizer.speed_line(), err=True)
    if done.interrupted_after_write:
        typer.echo(f"note: interrupted after {lcs} was completely written; the file is kept", err=True)


def _order_params(text: str, min_total: int, min_share: float) -> OrderParams | None:
    from lookupkit.counts.high_orders import parse_orders

    listed = parse_orders(text)
    if len(listed) == 1:
        return None
    if min_total < 1:
        raise InputError(f"--order-min-total must be at least 1, got {min_total}")
    if not 0.0 <= min_share <= 1.0:
        raise InputError(f"--order-min-share must be between 0 and 1, got {min_share}")
    return OrderParams(listed[1:], min_total, min_share)


def _tokenizer(model: Path | None):
    """The vocabulary's tokenizer; one lookupkit does not encode goes through llama-cpp-python if
    installed, announced on stderr (and its speed after a build)."""
    from importlib.util import find_spec

    from lookupkit.tokenizer.encode import FALLBACK, Tokenizer

    if model is None:
        return Tokenizer.default()
    tok = Tokenizer.from_file(model, fallback=FALLBACK if find_spec("llama_cpp") else None)
    if hasattr(tok, "speed_line"):
        typer.echo(f"note: {model}: {tok.reason}; encoding it through llama-cpp-python {tok.version} "
                   "(exact, whole texts, one core)", err=True)
    return tok


def summary_lines(s: dict) -> list[str]:
    """The human summary of a build (the JSON summary holds the same numbers and more)."""
    sec = s["seconds"]
    lines = [
        f"wrote {s['output']} ({s['format']}, {s['file_bytes']:,} bytes)",
        (f"  vocab      {s['vocab']['name']} ({s['vocab']['n_vocab']:,} tokens, {s['vocab']['fingerprint'][:16]})"
         if s["vocab"] else "  vocab      none recorded (token ids without -m: any id 0..2^31-1 accepted)"),
        f"  corpus     {len(s['sources'])} document(s), {s['n_bytes']:,} bytes, {s['n_tokens']:,} tokens "
        f"({s['reused_tokens']:,} from the token cache)",
        f"  cache      {s['n_2grams']:,} 2-grams, {s['n_pairs']:,} (token, count) pairs",
        f"  time       tokenize {sec['tokenize']:.1f} s, count {sec['count']:.1f} s (merge "
        f"{s.get('merge_seconds', 0):.1f} s), write {sec['write']:.1f} s, total {sec['total']:.1f} s "
        f"({s['jobs']} job(s){', ray ' + s['ray'] if s.get('ray') else ''})",
        f"  peak RSS   {s['peak_rss_bytes'] / 1e6:,.0f} MB",
    ]
    if s.get("n_high_order_keys"):
        kept = ", ".join(f"{n}: {k:,}" for n, k in s["n_high_order_keys"].items())
        lines.insert(4, f"  orders     {kept} n-grams kept for --policy lookupkit ({s['orders_seconds']:.1f} s)")
    if s.get("suffix_index"):
        ix = s["suffix_index"]
        lines.insert(-2, f"  index      suffix index of {ix['positions']:,} positions ({ix['documents']:,} "
                         f"document(s)), "
                         f"{ix['bytes']:,} bytes ({ix['bytes'] / max(ix['positions'], 1):.2f} per position), "
                         f"{ix['seconds']:.1f} s" + (f", sorted in {ix['sorted_in_parts']} parts merged out of core"
                                                      if ix.get("sorted_in_parts", 1) > 1 else ""))
    if s["replaced_bytes"]:
        lines.append(f"  warning    {s['replaced_bytes']:,} bytes of invalid UTF-8 were replaced with U+FFFD")
    if any(src["cut"] for src in s["sources"]) or s["skipped_sources"]:
        where = "a line end" if s["cut"] == "line" else "a byte"
        lines.append(f"  max-bytes  cut at {where} ({s['max_bytes']:,} allowed); "
                     f"skipped: {', '.join(s['skipped_sources']) or 'none'}")
    return lines


def main() -> None:
    run(app)
