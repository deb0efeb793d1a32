"""`lookupkit model NAME`: where a registered real model's GGUF is (assembled from its package once)."""

from __future__ import annotations

import importlib.util
from typing import Optional

import typer

from lookupkit.errors import InputError
from lookupkit.cli.common import guarded, print_json


EXAMPLES = """Examples:

\b
  lookupkit model --list
  lookupkit model gemma-3-270m          # prints the GGUF's path
  GEMMA=$(lookupkit model gemma-3-270m)
"""


@guarded
def model_cmd(
    name: Optional[str] = typer.Argument(None, metavar="NAME", help="A registered model (see --list)."),
    list_all: bool = typer.Option(False, "--list", help="List the models lookupkit knows and their packages."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Print the path of a registered model's GGUF, assembling it into the cache directory the first time."""
    from lookupkit import models

    if list_all == (name is not None):
        raise InputError("give a model name or --list (not both)")
    if list_all:
        rows = [{"name": m.name, "package": m.package, "installed": importlib.util.find_spec(m.module) is not None,
                 "file": m.file, "about": m.about} for m in models.MODELS.values()]
        if as_json:
            print_json(rows)
            return
        for r in rows:
            state = "installed" if r["installed"] else f"not installed: pip install 'lookupkit[{models.EXTRA}]'"
            typer.echo(f"{r['name']:16s} {r['about']} ({r['package']}, {state})")
        return
    path = models.path(name)
    if as_json:
        print_json({"name": name, "path": str(path)})
    else:
        typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.command("model", epilog=EXAMPLES)(model_cmd)
