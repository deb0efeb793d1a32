"""`lookupkit generate`: does drafting pay on my model? Greedy generation with and without it, same loop.

Loads the GGUF with llama-cpp-python (with llama-server's context defaults, open_model), tokenizes the prompt with the model itself (BOS as llama.cpp adds
it), runs lookupkit's greedy loop (integrations.llama_generate) once without drafting and once drafting
from the caches, and reports both speeds, the speed-up, what was drafted and accepted, and a verdict.
A short untimed warm-up comes first, so neither run pays for llama.cpp's first-decode set-up.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from lookupkit.errors import InputError
from lookupkit.files import open_input
from lookupkit.rules import ENGINE_DRAFT
from lookupkit.cli.common import guarded, print_json, progress

PAYS, LOSES = 1.05, 0.95  # speed-ups above / below which the verdict is "pays" / "does not pay"
MAX_GEN_DRAFT = 256  # --draft beyond this is refused: a verify batch that long is never cheaper than its tokens
WARMUP_TOKENS = 4


class PolicyName(str, Enum):
    llama = "llama.cpp"
    lookupkit = "lookupkit"


EXAMPLES = """Examples:

\b
  lookupkit generate -m gemma-3-270m -lcs gemma-wiki100.lkc -f prompt.txt
  lookupkit generate -m gemma-3-270m -lcs gemma-wiki100.lkc -p 'The Roman Empire' -n 128 --json
  lookupkit generate -m gemma-3-270m -lcs gemma-wiki100.lkc -f prompt.txt --policy lookupkit --verify-cost gemma.curve.json --draft 64

Needs llama-cpp-python (pip install 'lookupkit[llama]').
"""


@guarded
def generate_cmd(
    model: str = typer.Option(..., "-m", "--model", metavar="MODEL.gguf|NAME", help="A GGUF model, or a name "
                              "`lookupkit model --list` knows (e.g. gemma-3-270m)."),
    lcs: Optional[Path] = typer.Option(None, "-lcs", "--lookup-cache-static", help="Static cache (lkc, ggngcmap or "
                                       "llama.cpp legacy); without it drafts come from the text so far (and -lcd)."),
    lcd: Optional[Path] = typer.Option(None, "-lcd", "--lookup-cache-dynamic", help="Dynamic cache (legacy) to "
                                       "start from (must exist)."),
    policy: PolicyName = typer.Option(PolicyName.llama, "--policy", help="llama.cpp: its drafting rule, exactly; "
                                      "lookupkit: draft only what pays at --verify-cost."),
    policy_table: Optional[Path] = typer.Option(None, "--policy-table", metavar="FILE", help="--policy lookupkit: "
                                                "confidence tables (default: those learnt on this model's own "
                                                "generations if lookupkit ships them, else the bundled ones)."),
    verify_cost: Optional[str] = typer.Option(None, "--verify-cost", metavar="C|CURVE.json", help="Cost of each "
                                              "drafted position relative to one decoding step, or the curve "
                                              "`lookupkit calibrate -o` measured on this model: the policy drafts by "
                                              "it, and the report adds the speed-up it predicts."),
    n_draft: int = typer.Option(ENGINE_DRAFT, "--draft", help=f"Most tokens drafted per call (1..{MAX_GEN_DRAFT})."),
    n_predict: int = typer.Option(256, "-n", "--n-predict", help="Tokens to generate in each run."),
    threads: int = typer.Option(2, "-t", "--threads", help="Threads, for single tokens and batches alike."),
    n_ctx: int = typer.Option(4096, "-c", "--ctx-size", help="Context size (prompt + generated tokens)."),
    prompt: Optional[str] = typer.Option(None, "-p", "--prompt", help="The prompt text."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="A file holding the prompt text (UTF-8)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bars."),
) -> None:
    """Generate greedily without and with drafting (the same loop) and say whether drafting pays."""
    from lookupkit import Drafter, models
    from lookupkit.verify_cost import DEFAULT_COST
    from lookupkit.static import StaticCache
    from lookupkit.verify_cost import VerifyCost

    text = _prompt_text(prompt, file)
    _check_numbers(n_draft, n_predict, threads, n_ctx)
    cost = VerifyCost.of(verify_cost) if verify_cost is not None else None
    path = models.resolve(model)
    from lookupkit.integrations.llama_generate import generate, model_vocab, open_model

    vocab = model_vocab(path)  # a file that is not GGUF is refused here, before anything loads
    static = StaticCache.open(lcs, expect_vocab=vocab) if lcs is not None else None
    if policy_table is not None and policy is not PolicyName.lookupkit:
        raise InputError("--policy-table is only used with --policy lookupkit")
    if policy is PolicyName.lookupkit and policy_table is None:
        from lookupkit.draft.confidence import for_model

        policy_table = for_model(path)
    drafter = Drafter(static=static, dynamic=lcd, policy=policy.value, policy_table=policy_table,
                      verify_cost=cost if cost is not None else DEFAULT_COST)
    llm = open_model(path, n_ctx=n_ctx, threads=threads, n_batch=max(512, n_draft + 1))
    try:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        if len(ids) + n_predict > llm.n_ctx():
            raise InputError(f"the prompt has {len(ids)} tokens and -n is {n_predict}: -c {llm.n_ctx()} is too small "
                             f"(give -c {len(ids) + n_predict} or more)")
        generate(llm, ids, WARMUP_TOKENS, drafter=Drafter(), n_draft=n_draft, stop_at_eos=False)
        runs = {}
        with progress(not (quiet or as_json)) as bar:
            for name, d in (("plain", None), ("drafted", drafter)):
                task = bar.add_task(name, total=n_predict, rate="")
                runs[name] = generate(llm, ids, n_predict, drafter=d, n_draft=n_draft,
                                      on_token=lambda _t, task=task: bar.advance(task))
                bar.update(task, completed=n_predict, rate=f"{runs[name].tokens_per_s or 0:.1f} tok/s")
        report = _report(runs["plain"], runs["drafted"], cost, llm, path=str(path), lcs=lcs, lcd=lcd,
                         policy=policy.value, policy_table=policy_table and str(policy_table), n_draft=n_draft, threads=threads, n_ctx=llm.n_ctx())
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


def _check_numbers(n_draft: int, n_predict: int, threads: int, n_ctx: int) -> None:
    if not 1 <= n_draft <= MAX_GEN_DRAFT:
        raise InputError(f"--draft must be between 1 and {MAX_GEN_DRAFT}, got {n_draft}")
    if n_predict < 1:
        raise InputError(f"-n must be at least 1, got {n_predict}")
    if threads < 1:
        raise InputError(f"-t must be at least 1, got {threads}")
    if n_ctx < 16:
        raise InputError(f"-c must be at least 16, got {n_ctx}")


def _report(plain, drafted, cost, llm, **about) -> dict:
    from lookupkit.verify_cost import speedup as predicted_speedup

    sp = drafted.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s and drafted.tokens_per_s else None
    predicted = None
    if cost is not None and drafted.n_calls:
        try:
            predicted = predicted_speedup(drafted.drafted, drafted.accepted, cost)
        except InputError:
            predicted = None  # the curve does not reach the longest draft
    same = next((i for i, (a, b) in enumerate(zip(plain.tokens, drafted.tokens)) if a != b), None)
    if same is None and len(plain.tokens) != len(drafted.tokens):
        same = min(len(plain.tokens), len(drafted.tokens))
    return {**about, "prompt_tokens": plain.prompt_len, "plain": plain.summary(), "drafted": drafted.summary(),
            "speedup": sp, "predicted_speedup": predicted, "verdict": verdict(sp),
            "first_divergence": same, "text": llm.detokenize(drafted.tokens).decode("utf-8", "replace")}


def verdict(sp: float | None) -> str:
    """The speed-up in words."""
    if sp is None:
        return "not measured (a run took no time)"
    if sp >= PAYS:
        return f"drafting pays on this model: {sp:.2f}x"
    if sp <= LOSES:
        return f"drafting does not pay on this model: {sp:.2f}x (it costs more than it saves)"
    return f"drafting breaks even on this model: {sp:.2f}x (within {round((PAYS - 1) * 100)} %)"


def _print(r: dict) -> None:
    p, d = r["plain"], r["drafted"]
    caches = ", ".join(x for x in (r["lcs"] and f"-lcs {r['lcs']}", r["lcd"] and f"-lcd {r['lcd']}") if x)
    typer.echo(f"{r['path']}: prompt {r['prompt_tokens']} tokens, {r['threads']} threads, -c {r['n_ctx']}, greedy")
    typer.echo(r["text"].rstrip())
    typer.echo("")
    for name, s in (("plain", p), ("drafted", d)):
        typer.echo(f"{name:8s} {s['tokens']:5d} tokens in {s['t_gen_s']:7.2f} s  {s['tokens_per_s'] or 0:7.1f} tok/s  "
                   f"(prompt {s['t_prompt_s']:.2f} s, stop: {s['stop']})")
    acc = f"{d['acceptance']:.0%}" if d["acceptance"] is not None else "n/a"
    per_call = f"{d['accepted_per_call']:.2f}" if d["accepted_per_call"] is not None else "n/a"
    how = "llama.cpp's rule" if r["policy"] == PolicyName.llama.value else (
        f"lookupkit's policy ({Path(r['policy_table']).name if r['policy_table'] else 'bundled tables'})")
    typer.echo(f"drafting: {how}, --draft {r['n_draft']}, {caches or 'context only'}: "
               f"{d['calls']} calls, {d['drafted']} drafted, {d['accepted']} accepted ({acc}), "
               f"{per_call} accepted per call")
    if r["predicted_speedup"] is not None:
        typer.echo(f"the verify cost predicts {r['predicted_speedup']:.2f}x for these drafts")
    div = r["first_divergence"]
    typer.echo("outputs: identical" if div is None else
               f"outputs: differ from generated token {div} on (batch shape changes a quantised model's arithmetic)")
    typer.echo(r["verdict"])


def register(app: typer.Typer) -> None:
    app.command("generate", epilog=EXAMPLES)(generate_cmd)
