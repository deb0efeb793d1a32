"""`lookupkit tokenize`: a corpus' ids exactly as lookup-create counts them, as raw int32.

For replays (`lookup-stats --tokens`), for llama.cpp's own tools, and for the benchmark, which feeds
the same ids to lookupkit and to llama.cpp.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from lookupkit.create.memory_budget import parse_size
from lookupkit.create.outputs import kept_if_complete
from lookupkit.corpora import HFDataset, StdlibCorpus, TextFile
from lookupkit.cli.common import guarded, print_json, progress
from lookupkit.cli.create import Cut, _tokenizer


EXAMPLES = """Examples:

\b
  lookupkit tokenize -f corpus.txt -m ggml-vocab-qwen2.gguf -o ids.i32
  lookupkit tokenize -f wiki541.txt.zst -m qwen2.gguf --max-bytes 25MB -o wiki25.i32
  lookupkit tokenize --default-corpus -o stdlib.i32 --json

The ids are lookup-create's (BOS and special tokens as llama.cpp adds them): lookup-create --tokens reads them.
"""


@guarded
def tokenize(
    out: Path = typer.Option(..., "-o", "--output", metavar="OUT", help="Output: raw little-endian int32 ids."),
    files: List[Path] = typer.Option([], "-f", "--file", metavar="FILE", help="Text corpus (.txt or .zst); repeatable."),
    datasets: List[str] = typer.Option([], "--dataset", metavar="SPEC", help="Hugging Face dataset or local path."),
    default_corpus: bool = typer.Option(False, "--default-corpus", help="Python's standard-library sources."),
    model: Optional[Path] = typer.Option(None, "-m", "--model", metavar="VOCAB", help="GGUF vocabulary, "
                                         "tokenizer.json or a model name `lookupkit model --list` knows (default: the bundled gpt-2)."),
    max_bytes: Optional[str] = typer.Option(None, "--max-bytes", metavar="SIZE", help="Only the first N bytes of text."),
    cut: Cut = typer.Option(Cut.line, "--cut", help="End --max-bytes at a line end (line) or exactly (byte)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", metavar="DIR", help="Token cache directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Tokenize a corpus as llama.cpp's lookup-create does and write the ids (int32 LE)."""
    sources = ([TextFile(f) for f in files] + [HFDataset(d) for d in datasets]
               + ([StdlibCorpus()] if default_corpus else []))
    from lookupkit.create import export_tokens

    limit = parse_size(max_bytes) if max_bytes is not None else None
    with kept_if_complete(out) as done:  # a Ctrl-C after the rename: the ids are complete, so a success
        summary = export_tokens(sources, _tokenizer(model), out, None if as_json else (lambda: progress(True)),
                                max_bytes=limit, cut=cut.value, cache_dir=cache_dir)
        if as_json:
            print_json(summary)
        else:
            typer.echo(f"wrote {summary['output']}: {summary['tokens']:,} tokens ({summary['vocab']}) from "
                       f"{summary['bytes']:,} bytes in {summary['seconds']:.1f} s")
    if done.interrupted_after_write:
        typer.echo(f"note: interrupted after {out} was completely written; the file is kept", err=True)


def register(app: typer.Typer) -> None:
    app.command("tokenize", epilog=EXAMPLES)(tokenize)
