"""`lookupkit generate`: does drafting pay on my model? Greedy generation with and without it, same loop.

Loads the GGUF with llama-cpp-python (with llama-server's context defaults, open_model), tokenizes the
prompt with the model itself (BOS as llama.cpp adds it), then runs `--runs` pairs of lookupkit's greedy
loop (integrations.llama_generate), plain and drafted from the caches, interleaved, every run timing
the same number of tokens, and reports the median speed-up with its spread, what was drafted and
accepted, what the verify cost predicts, and a verdict that says "uncertain" when it cannot be trusted
(integrations.compare says why each rule). compare's untimed warm-up comes first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lookupkit.errors import InputError
from lookupkit.files import open_input
from lookupkit.rules import MAX_DRAFT, check_n_draft
from lookupkit.cli.common import guarded, print_json, progress
from lookupkit.cli.model_options import (DRAFT, GENERATE_CTX, LCD, LCS, MODEL, POLICY, POLICY_TABLE, THREADS,
                                         VERIFY_COST, PolicyName)
from lookupkit.integrations.compare import MAX_RUNS, RUNS


EXAMPLES = """Examples:

\b
  lookupkit generate -m gemma-3-270m -lcs gemma-wiki100.lkc -f prompt.txt
  lookupkit generate -m gemma-3-270m -lcs gemma-wiki100.lkc -p 'The Roman Empire' -n 128 --runs 9 --json
  lookupkit generate -m gemma-3-270m -lcs gemma-wiki100.lkc -f prompt.txt --policy lookupkit --verify-cost gemma.curve.json --draft 64

Needs llama-cpp-python (pip install 'lookupkit[llama]').
"""


@guarded
def generate_cmd(
    model: str = MODEL,
    lcs: Optional[Path] = LCS,
    lcd: Optional[Path] = LCD,
    policy: PolicyName = POLICY,
    policy_table: Optional[Path] = POLICY_TABLE,
    verify_cost: Optional[str] = VERIFY_COST,
    n_draft: int = DRAFT,
    n_predict: int = typer.Option(256, "-n", "--n-predict", help="Most tokens to generate in each run (every run "
                                  "generates as many as the first plain run did: it stops at EOS, unless --ignore-eos)."),
    runs: int = typer.Option(RUNS, "--runs", help="Pairs of runs (plain and drafted, interleaved): the verdict is "
                             "their median speed-up, with the spread."),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="Time -n tokens in every run, past EOS."),
    threads: int = THREADS,
    n_ctx: int = GENERATE_CTX,
    prompt: Optional[str] = typer.Option(None, "-p", "--prompt", help="The prompt text."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="A file holding the prompt text (UTF-8)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bars."),
) -> None:
    """Generate greedily without and with drafting (the same loop, --runs pairs) and say whether drafting pays."""
    from lookupkit import models
    from lookupkit.integrations.engines import drafter_factory
    from lookupkit.integrations.compare import compare
    from lookupkit.static import StaticCache
    from lookupkit.verify_cost import VerifyCost

    text = _prompt_text(prompt, file)
    _check_numbers(n_draft, n_predict, runs, MAX_RUNS, threads, n_ctx)
    cost = VerifyCost.of(verify_cost) if verify_cost is not None else None
    path = models.resolve(model)
    from lookupkit.integrations.llama_model import model_vocab, open_model

    vocab = model_vocab(path)  # a file that is not GGUF is refused here, before anything loads
    static = StaticCache.open(lcs, expect_vocab=vocab) if lcs is not None else None
    if lcd is not None:
        from lookupkit.formats import read_ngrams

        lcd_table = read_ngrams(lcd)  # read once; every drafted run starts from it afresh
    else:
        lcd_table = None
    make_drafter, policy_table = drafter_factory(path, static=static, dynamic=lcd_table, policy=policy.value,
                                                 policy_table=policy_table, verify_cost=cost)
    llm = open_model(path, n_ctx=n_ctx, threads=threads, n_draft=n_draft)
    try:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        if len(ids) + n_predict > n_ctx:
            raise InputError(f"the prompt has {len(ids)} tokens and -n is {n_predict}: -c {n_ctx} is too small "
                             f"(give -c {len(ids) + n_predict} or more)")
        with progress(not (quiet or as_json)) as bar:
            task = bar.add_task("runs", total=2 * runs, rate="")

            def on_run(name, pair, g):
                bar.update(task, advance=1, description=f"{name} {pair + 1}/{runs}",
                           rate=f"{g.tokens_per_s or 0:.1f} tok/s")

            result = compare(llm, ids, n_predict, make_drafter, n_draft=n_draft, runs=runs, cost=cost,
                             ignore_eos=ignore_eos, on_run=on_run)
        report = _report(result, llm, path=str(path), lcs=lcs and str(lcs), lcd=lcd and str(lcd),
                         policy=policy.value, policy_table=policy_table and str(policy_table),
                         verify_cost=cost.describe() if cost is not None else None, n_draft=n_draft,
                         threads=threads, n_ctx=n_ctx, ignore_eos=ignore_eos)
    finally:
        llm.close()
    if as_json:
        print_json(report)
    else:
        _print(report)


def _prompt_text(prompt: str | None, file: Path | None) -> str:
    if (prompt is None) == (file is None):
        raise InputError("give the prompt with exactly one of -p TEXT or -f FILE")
    if file is not None:
        with open_input(file, "prompt file") as f:
            raw = f.read()
        try:
            prompt = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"prompt file {file} is not UTF-8 text (byte {exc.start})") from None
    if not prompt.strip():
        raise InputError("the prompt is empty: give some text with -p or -f")
    return prompt


def _check_numbers(n_draft: int, n_predict: int, runs: int, max_runs: int, threads: int, n_ctx: int) -> None:
    try:
        check_n_draft(n_draft)
    except InputError:
        raise InputError(f"--draft must be between 1 and {MAX_DRAFT}, got {n_draft}") from None
    if n_predict < 1:
        raise InputError(f"-n must be at least 1, got {n_predict}")
    if not 1 <= runs <= max_runs:
        raise InputError(f"--runs must be between 1 and {max_runs}, got {runs}")
    if threads < 1:
        raise InputError(f"-t must be at least 1, got {threads}")
    if n_ctx < 16:
        raise InputError(f"-c must be at least 16, got {n_ctx}")


def _spread(values: list) -> dict:
    import statistics

    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _report(c, llm, **about) -> dict:
    """The comparison as one JSON-able dict: every run, the paired speed-ups and the verdict."""
    first = c.plain[0]
    eos = first.eog
    sums = {k: sum(g.summary()[k] for g in c.drafted) for k in ("calls", "drafted", "accepted")}
    return {**about, "prompt_tokens": first.prompt_len, "runs": len(c.plain), "timed_tokens": c.timed,
            "order": c.order, "others_cores": c.others,
            "plain": {"tokens_per_s": _spread([g.tokens_per_s or 0 for g in c.plain]),
                      "runs": [g.summary() for g in c.plain]},
            "drafted": {"tokens_per_s": _spread([g.tokens_per_s or 0 for g in c.drafted]), **sums,
                        "acceptance": sums["accepted"] / sums["drafted"] if sums["drafted"] else None,
                        "accepted_per_call": sums["accepted"] / sums["calls"] if sums["calls"] else None,
                        "runs": [g.summary() for g in c.drafted]},
            "speedups": c.ratios, "speedup": _spread(c.ratios),
            "predicted_speedup": c.predicted, "no_prediction": c.no_prediction,
            "verdict": c.verdict.text, "answer": c.verdict.answer, "reasons": c.verdict.reasons,
            "first_divergence": c.first_divergence(), "text_of": "plain run 1", "text_eos": eos,
            "text": llm.detokenize(first.tokens[:eos + 1] if eos is not None else first.tokens).decode("utf-8", "replace")}


def _print(r: dict) -> None:
    p, d = r["plain"], r["drafted"]
    caches = ", ".join(x for x in (r["lcs"] and f"-lcs {r['lcs']}", r["lcd"] and f"-lcd {r['lcd']}") if x)
    typer.echo(f"{r['path']}: prompt {r['prompt_tokens']} tokens, {r['threads']} threads, -c {r['n_ctx']}, greedy; "
               f"{r['runs']} pairs of runs (plain and drafted, interleaved), {r['timed_tokens']} tokens timed in each")
    eos = r["text_eos"]
    cut = f", cut at its EOS (token {eos + 1})" if eos is not None and eos + 1 < r["timed_tokens"] else ""
    typer.echo(f"--- text of plain run 1 (the model's greedy continuation{cut}) ---")
    typer.echo(r["text"].rstrip())
    div = r["first_divergence"]
    typer.echo("--- the drafted runs' texts: " + ("identical to it ---" if div is None else
               f"differ from generated token {div + 1} on, counting from 1 (batch shape changes a quantised "
               "model's arithmetic) ---"))
    for name, s in (("plain", p), ("drafted", d)):
        t = s["tokens_per_s"]
        typer.echo(f"{name:8s} {t['median']:7.1f} tok/s median ({t['min']:.1f}-{t['max']:.1f} over {r['runs']} runs)")
    acc = f"{d['acceptance']:.0%}" if d["acceptance"] is not None else "n/a"
    per_call = f"{d['accepted_per_call']:.2f}" if d["accepted_per_call"] is not None else "n/a"
    how = "llama.cpp's rule" if r["policy"] == PolicyName.llama.value else (
        f"lookupkit's policy ({Path(r['policy_table']).name if r['policy_table'] else 'bundled tables'})")
    typer.echo(f"drafting: {how}, --draft {r['n_draft']}, {caches or 'context only'}: over {r['runs']} drafted runs "
               f"{d['calls']} calls, {d['drafted']} drafted, {d['accepted']} accepted ({acc}), "
               f"{per_call} accepted per call")
    sp = r["speedup"]
    typer.echo(f"measured speed-up {sp['median']:.2f}x (median of {r['runs']} pairs, {sp['min']:.2f}x-{sp['max']:.2f}x); "
               f"other processes used {r['others_cores']:.2f} cores meanwhile")
    if r["predicted_speedup"] is not None:
        typer.echo(f"predicted speed-up {r['predicted_speedup']:.2f}x (these calls' drafted and accepted tokens "
                   f"at --verify-cost {r['verify_cost']})")
    elif r["no_prediction"]:
        typer.echo(f"no prediction: {r['no_prediction']}")
    else:
        typer.echo("no prediction: give --verify-cost CURVE.json (lookupkit calibrate) to set one beside the measurement")
    typer.echo(r["verdict"])


def register(app: typer.Typer) -> None:
    app.command("generate", epilog=EXAMPLES)(generate_cmd)
