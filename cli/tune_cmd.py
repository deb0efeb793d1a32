"""`lookupkit tune-policy`: learn the policy's confidence tables on your own held-out text or model.

A thin layer over `lookupkit.replay.tuning`: flags in, a tables JSON (for `--policy-table`, or
`Drafter(policy_table=...)`) and one summary line out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lookupkit.cli.common import guarded, print_json, progress
from lookupkit.rules import DEFAULT_CTX

EXAMPLES = """Examples:

\b
  lookupkit tune-policy --cache wiki100-o6.lkc --tokens heldout.i32 -o tables.json
  lookupkit tune-policy --cache wiki100-o6.lkc --tokens wiki541.qwen2.i32 --slice 60000000:400000 -o tables.json
  lookupkit tune-policy --cache gemma-wiki100.lkc --generations gens.json --task wiki -o gemma-tables.json
  lookup-stats -f eval.txt -lcs wiki100-o6.lkc --policy lookupkit --policy-table tables.json

The cache should be built with lookup-create --orders 2-6, and the text held out from what the cache
was built from and from what you evaluate on. --generations is python -m lookupkit.bench.generations'
JSON: only generated positions are scored, as an engine drafts there.
"""


@guarded
def tune_policy(
    cache: Path = typer.Option(..., "--cache", metavar="FILE", help="Static cache the tables are learnt with "
                               "(built with lookup-create --orders)."),
    tokens: Optional[Path] = typer.Option(None, "--tokens", metavar="FILE", help="Held-out token ids (.i32 or .npy)."),
    generations: Optional[Path] = typer.Option(None, "--generations", metavar="FILE", help="A model's generations "
                                               "(python -m lookupkit.bench.generations' JSON), instead of --tokens."),
    task: Optional[str] = typer.Option(None, "--task", metavar="wiki|copy", help="--generations: learn on this "
                                       "task's sequences only (default: all)."),
    slice_: Optional[str] = typer.Option(None, "--slice", metavar="START:COUNT", help="--tokens: use only these "
                                         "(default: all)."),
    ctx_size: int = typer.Option(DEFAULT_CTX, "-c", "--ctx-size", metavar="N", help="Replay chunk size (lookup-stats' -c)."),
    out: Path = typer.Option(..., "-o", "--output", metavar="OUT", help="Where the tables JSON goes (written "
                             "atomically)."),
    as_json: bool = typer.Option(False, "--json", help="Print what the tables were learnt on as JSON."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bar."),
) -> None:
    """Learn lookupkit's policy tables (P(a source's candidate is accepted)) on held-out text or generations."""
    from lookupkit.corpora import read_token_file
    from lookupkit.policy import confidence
    from lookupkit.replay import tuning
    from lookupkit.static import StaticCache

    ids = read_token_file(tokens) if tokens is not None else None
    with StaticCache.open(cache) as static:
        if ids is not None:
            static.check_ids(ids)
        with progress(not (quiet or as_json)) as bar:
            task_id = n_stages = None

            def on_stage(description: str, stages: int) -> None:
                nonlocal task_id, n_stages
                if task_id is None:
                    task_id, n_stages = bar.add_task(description, total=stages, rate=""), stages
                else:
                    bar.update(task_id, advance=1, description=description)

            tables, about = tuning.tune(static, tokens=ids, tokens_name=str(tokens), generations_file=generations,
                                        task=task, slice_=slice_, n_ctx=ctx_size, on_stage=on_stage)
            if task_id is not None:
                bar.update(task_id, completed=n_stages)
    confidence.save(tables, out, about)
    if as_json:
        print_json({"output": str(out), **about})
    else:
        typer.echo(f"wrote {out}: learnt on {about['n_tokens']:,} held-out tokens with {about['cache']} "
                   f"(orders {about['cache_orders']}" + (", suffix index" if about["cache_suffix_index"] else "") + ")")


def register(app: typer.Typer) -> None:
    app.command("tune-policy", epilog=EXAMPLES)(tune_policy)
