"""`lookupkit state-merge`: several replicas' `--state` files into one (serve.state.merge_states), so a
replica started with `--state OUT` drafts what the whole fleet served, each tenant still from its own.

Written atomically (temp file, fsync, rename): a kill -9 leaves the inputs and no partial output. A
foreign input (another vocabulary, another scope) or a damaged one is one line, exit 2, nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lookupkit.cli.common import guarded

EXAMPLES = """Examples:

\b
  lookupkit state-merge replica1.lkh replica2.lkh -o fleet.lkh
  lookupkit state-merge r*.lkh -o fleet.lkh --history-budget 2097152
  lookupkit serve -m gemma-3-270m --policy lookupkit --learn history --state fleet.lkh   # starts warm
"""


@guarded
def state_merge(
    states: list[Path] = typer.Argument(..., help="the replicas' state files (.lkh), any number"),
    out: Path = typer.Option(..., "-o", "--output", help="the merged state file (.lkh; replaced atomically)"),
    history_budget: Optional[int] = typer.Option(None, "--history-budget", metavar="N", help="tokens the merged "
                                                 "state keeps (default: the largest input's)"),
    tenant_budget: Optional[int] = typer.Option(None, "--tenant-budget", metavar="N", help="tokens each tenant "
                                                "keeps (default: the largest input's, within --history-budget)"),
) -> None:
    """Merge replicas' history states: per tenant its newest sequences first, within the budgets."""
    from lookupkit.serve.state import merge_states

    typer.echo(f"wrote {out}: {merge_states(states, out, history_budget, tenant_budget)}")


def register(app: typer.Typer) -> None:
    app.command("state-merge", epilog=EXAMPLES)(state_merge)
