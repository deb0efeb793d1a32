"""`lookupkit model-corpus`: the model's own greedy outputs of a prompt set, as a corpus for lookup-create
(integrations.model_corpus says why and how)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lookupkit.errors import InputError
from lookupkit.rules import ENGINE_DRAFT, check_n_draft
from lookupkit.cli.common import guarded, print_json, progress
from lookupkit.cli.model_options import GENERATE_CTX, MODEL, THREADS, VERIFY_COST

EXAMPLES = """Examples:

\b
  lookupkit model-corpus -m gemma-3-270m -f ../shared/corpora/wiki541.txt.zst --prompts 600 -o gemma-own.txt
  lookup-create -m gemma-3-270m -f gemma-own.txt -lcs gemma-own.lkc
  lookupkit serve -m gemma-3-270m -lcs gemma-own.lkc --policy lookupkit

Prompts: each line of -f with at least --prompt-words words (WikiText's one paragraph per line) gives one,
its first --prompt-words words; --skip passes over the first ones (prompts for another purpose). Keep the
prompts apart from the text you will measure drafting on. Needs llama-cpp-python (pip install 'lookupkit[llama]').
"""


@guarded
def model_corpus_cmd(
    model: str = MODEL,
    file: Path = typer.Option(..., "-f", "--file", help="Text (plain or .zst) to take the prompts from."),
    output: Path = typer.Option(..., "-o", "--output", help="The corpus to write (the outputs, a blank line between)."),
    n_prompts: int = typer.Option(200, "--prompts", help="How many prompts to continue."),
    prompt_words: int = typer.Option(250, "--prompt-words", help="Words of each prompt (a line needs that many)."),
    skip: int = typer.Option(0, "--skip", help="Eligible lines to pass over first."),
    n_predict: int = typer.Option(256, "-n", "--n-predict", help="Most tokens generated per prompt (EOS ends one)."),
    n_draft: int = typer.Option(ENGINE_DRAFT, "--draft", help="Drafting speeds the loop up (lookupkit's policy, "
                                "from the context); 0 generates plainly."),
    verify_cost: Optional[str] = VERIFY_COST,
    threads: int = THREADS,
    n_ctx: int = GENERATE_CTX,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bar."),
) -> None:
    """Write a corpus of the model's own greedy outputs of a prompt set (for a static cache that drafts what the model says)."""
    from lookupkit import models
    from lookupkit.integrations.engines import drafter_factory
    from lookupkit.integrations.model_corpus import prompts, write_corpus
    from lookupkit.verify_cost import VerifyCost

    if n_predict < 1 or threads < 1 or n_draft < 0 or n_ctx < 16:
        raise InputError(f"-n and -t must be >= 1, --draft >= 0 and -c >= 16 (got {n_predict}, {threads}, {n_draft}, "
                         f"{n_ctx})")
    if n_draft:
        check_n_draft(n_draft)
    texts = list(prompts(file, prompt_words, n_prompts, skip))  # read (and refused if bad) before the model loads
    if not texts:
        raise InputError(f"{file} has no line of {prompt_words} words or more after --skip {skip}: no prompt")
    path = models.resolve(model)
    make = None
    if n_draft:
        cost = VerifyCost.of(verify_cost) if verify_cost is not None else None
        make, _ = drafter_factory(path, policy="lookupkit", verify_cost=cost)
    from lookupkit.integrations.llama_model import open_model

    llm = open_model(path, n_ctx=n_ctx, threads=threads, n_draft=n_draft)
    try:
        with progress(not (quiet or as_json)) as bar:
            task = bar.add_task("prompts", total=n_prompts, rate="")

            def on_document(run):
                bar.update(task, completed=run.documents, rate=f"{run.tokens / max(run.seconds, 1e-9):.1f} tok/s")

            run = write_corpus(llm, texts, output, n_predict, make, max(n_draft, 1), on_document)
    finally:
        llm.close()
    report = {"output": str(output), "documents": run.documents, "tokens": run.tokens, "seconds": round(run.seconds, 1),
              "model": str(path), "prompts_from": str(file), "prompt_words": prompt_words, "skip": skip,
              "n_predict": n_predict, "interrupted": run.interrupted}
    if as_json:
        print_json(report)
    else:
        print(f"wrote {output}: {run.documents} documents, {run.tokens} tokens of {Path(path).name}'s greedy output "
              f"in {run.seconds:.0f} s" + (" (interrupted: the finished documents are kept)" if run.interrupted else ""))
        if run.documents < n_prompts and not run.interrupted:
            print(f"note: {file} gave {run.documents} prompts of the {n_prompts} asked for")
    if run.interrupted:
        raise typer.Exit(130)


def register(app: typer.Typer) -> None:
    app.command("model-corpus", epilog=EXAMPLES)(model_corpus_cmd)
