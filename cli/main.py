"""`lookupkit`: the umbrella command (inspect, verify, convert, tokenize, demo, calibrate, generate, model-corpus, serve,
replay-requests, state-merge, model, tune-policy, bench), in the plain help style of lookup-create and lookup-stats (examples after the options)."""

from __future__ import annotations

import typer

from lookupkit.cli import (bench_cmd, cache_cmds, calibrate_cmd, demo, generate_cmd, model_cmd, model_corpus_cmd,
                           replay_requests_cmd, serve_cmd, state_merge_cmd, tokenize_cmd, tune_cmd)
from lookupkit.cli.common import run

EXAMPLES = """Examples:

\b
  lookupkit demo                                     # build, open, draft and replay on this Python's stdlib
  lookupkit inspect wiki.lkc                         # header and statistics
  lookupkit verify wiki.lkc                          # every checksum and bound
  lookupkit convert wiki.lcs wiki.lkc -m qwen2.gguf  # between .lcs, .ggngcmap and .lkc
  lookupkit tokenize -f corpus.txt -m qwen2.gguf -o ids.i32
  lookupkit calibrate -m gemma-3-270m -o gemma.curve.json
  lookupkit generate -m gemma-3-270m -lcs gemma-wiki100.lkc -f prompt.txt
  lookupkit model-corpus -m gemma-3-270m -f prompts.txt -o gemma-own.txt   # the model's own outputs, to lookup-create
  lookupkit serve -m gemma-3-270m -lcs gemma-wiki100.lkc --parallel 2
  lookupkit state-merge replica1.lkh replica2.lkh -o fleet.lkh   # a fleet's served histories, to start warm
  lookupkit tune-policy --cache wiki100-o6.lkc --tokens heldout.i32 -o tables.json
  lookupkit model gemma-3-270m
  lookupkit bench --quick

`lookupkit COMMAND --help` has each command's flags and examples; lookup-create, lookup-stats and
lookup-merge are commands of their own, as in llama.cpp.
"""

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, epilog=EXAMPLES,
                  help="lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches.")
cache_cmds.register(app)
demo.register(app)
tokenize_cmd.register(app)
calibrate_cmd.register(app)
generate_cmd.register(app)
model_corpus_cmd.register(app)
serve_cmd.register(app)
replay_requests_cmd.register(app)
state_merge_cmd.register(app)
model_cmd.register(app)
tune_cmd.register(app)
bench_cmd.register(app)


def main() -> None:
    run(app)
