"""`lookup-merge A B ... OUT`: llama.cpp's lookup-merge (counts added), over any cache format.

A thin layer over `lookupkit.create.merge` (which says how inputs are read, checked and streamed): flags
in, one line out. Inputs may be llama.cpp legacy files or static caches in any format; OUT's format
follows --format, else its extension, else llama.cpp's legacy file.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from lookupkit.create.memory_budget import DEFAULT_MEMORY_BUDGET, parse_memory_budget, size_text
from lookupkit.create.merge import merge_caches, output_format
from lookupkit.create.outputs import kept_if_complete
from lookupkit.errors import InputError
from lookupkit.rules import COUNT_MAX
from lookupkit.cli.common import guarded, run

EXAMPLES = f"""Examples:

\b
  lookup-merge a.lkc b.lkc ab.lkc                          # two static caches, counts added
  lookup-merge part1.lcs part2.lcs part3.lcs all.lcs       # llama.cpp's legacy files, as its lookup-merge
  lookup-merge day1.lcd day2.lcd week.lcd                  # dynamic caches (n-grams of 1..4 tokens)
  lookup-merge a.lkc b.ggngcmap ab.bin --format lkc        # any input format; OUT's from --format
  lookup-merge big-*.lkc all.lkc --memory-budget 4GiB --temp-dir /scratch

Counts of one (n-gram, follower) are added and saturate at {COUNT_MAX:,}; caches of different vocabularies
are refused. Caches of 2-grams are merged streamed, within --memory-budget; others in memory.
"""

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(help="Merge n-gram caches A B ... into OUT (counts added), as llama.cpp's lookup-merge.",
             epilog=EXAMPLES)
@guarded
def merge(
    paths: List[Path] = typer.Argument(..., metavar="A B ... OUT", help="Input caches, then the output file."),
    format: Optional[str] = typer.Option(None, "--format", metavar="FORMAT", help="Output format: llama, lkc, lkc.zst or ggngcmap "
                                                                "(default: from OUT's extension, else llama)."),
    memory_budget: Optional[str] = typer.Option(None, "--memory-budget", metavar="SIZE", help="Memory for merging "
                                                f"2-gram caches (default {size_text(DEFAULT_MEMORY_BUDGET)}); sorted runs "
                                                "beyond it are spilled "
                                                "to --temp-dir."),
    temp_dir: Optional[Path] = typer.Option(None, "--temp-dir", metavar="DIR", help="Where spilled runs go "
                                            "(default: $TMPDIR or /tmp); removed afterwards."),
) -> None:
    if len(paths) < 2:
        raise InputError("usage: lookup-merge A [B ...] OUT (at least one input and the output)")
    *inputs, out = paths
    fmt = output_format(out, format)
    with kept_if_complete(out) as done:  # a Ctrl-C after the rename: the file is complete, so a success
        n_keys, n_pairs = merge_caches(inputs, out, fmt, memory_budget=parse_memory_budget(memory_budget),
                                       temp_dir=temp_dir)
        typer.echo(f"{out}: {n_keys} n-grams, {n_pairs} (token, count) pairs ({fmt})", err=True)
    if done.interrupted_after_write:
        typer.echo(f"note: interrupted after {out} was completely written; the file is kept", err=True)


def main() -> None:
    run(app)


if __name__ == "__main__":
    main()
