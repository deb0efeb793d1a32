"""`lookupkit`: the umbrella command (inspect, verify, convert, tokenize, demo, calibrate, generate, model, bench)."""

from __future__ import annotations

import typer

from lookupkit.cli import bench_cmd, cache_cmds, calibrate_cmd, demo, generate_cmd, model_cmd, tokenize_cmd
from lookupkit.cli.common import run

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
                  help="lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches.")
cache_cmds.register(app)
demo.register(app)
tokenize_cmd.register(app)
calibrate_cmd.register(app)
generate_cmd.register(app)
model_cmd.register(app)
bench_cmd.register(app)


def main() -> None:
    run(app)
