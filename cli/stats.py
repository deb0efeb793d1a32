"""`lookup-stats`: llama.cpp's replay evaluation of prompt-lookup drafting, plus what llama.cpp lacks.

Prints llama.cpp's seven lines in its formats (to stdout), then draft calls, coverage, tokens per
verify, accepted counts per draft position, drafts and acceptance per source, cache open times and
peak RSS. -c is used as given (llama.cpp pads it up to a multiple of 32). A missing -lcd is an error
(llama.cpp silently starts empty, which hides a mistyped path).
"""

from __future__ import annotations

import math
import shlex
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from lookupkit.create.tokenized import tokenize_text_file
from lookupkit.corpora import read_token_file
from lookupkit.policy.confidence import load as load_tables
from lookupkit.verify_cost import DEFAULT_COST
from lookupkit.errors import InputError
from lookupkit.files import atomic_writer
from lookupkit.formats import llama, read_ngrams
from lookupkit.files import peak_rss_bytes
from lookupkit.replay.run import Replay
from lookupkit.replay.suffix_run import MAX_LEN as SUFFIX_MAX_LEN
from lookupkit.replay.sweep import SWEPT_MAX, default_grid, expected_speedup, sweep as run_sweep, sweep_table
from lookupkit.verify_cost import VerifyCost, speedup
from lookupkit.replay.trace import ReplayTrace
from lookupkit.rules import DEFAULT_DRAFT, POLICY_DRAFT, SOURCE_DEFAULTS as D, SOURCE_LEGEND, DEFAULT_CTX
from lookupkit.static import StaticCache
from lookupkit.tokenizer import Tokenizer
from lookupkit.cli.common import guarded, print_json, run
from lookupkit.cli.model_options import PolicyName

EXAMPLES = f"""Examples:

\b
  lookup-stats -f eval.txt -lcs static.lkc                          # llama.cpp's rule, --draft {DEFAULT_DRAFT}
  lookup-stats -m qwen2.gguf -f eval.txt -lcs wiki.lkc -c 4096 --draft 8 --json
  lookup-stats --tokens eval.i32 -lcs wiki.lkc -lcd dynamic.lcd --dump steps.txt
  lookup-stats -f eval.txt -lcs wiki-o6.lkc --policy lookupkit      # --draft {POLICY_DRAFT}, drafts what pays
  lookup-stats -f eval.txt -lcs wiki.lkc --verify-cost gemma.curve.json   # the speed-up on your model
  lookup-stats -f eval.txt -lcs wiki.lkc --sweep                    # a grid of replays, one table
  lookup-stats -f eval.txt --source ngram                           # the longest earlier match, no cache
  lookup-stats -f eval.txt -lcs code-sx.lkc --source suffix         # the longest match in the corpus

Without --verify-cost the verdict is given at a verify cost of {DEFAULT_COST} per drafted token
(`lookupkit calibrate` measures yours).
"""

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


class Source(str, Enum):
    lookup = "lookup"
    ngram = "ngram"
    suffix = "suffix"


class Engine(str, Enum):
    fast = "fast"
    reference = "reference"


@app.command(help="Replay a text (or token ids) as lookup-stats does and report how well drafting works.",
             epilog=EXAMPLES)
@guarded
def stats(
    file: Optional[Path] = typer.Option(None, "-f", "--file", metavar="FILE", help="Text to replay, tokenized with -m."),
    model: Optional[Path] = typer.Option(None, "-m", "--model", metavar="VOCAB", help="Vocabulary for -f: GGUF, HF "
                                         "tokenizer.json or a known model name (default: the bundled gpt-2, as lookup-create)."),
    tokens: Optional[Path] = typer.Option(None, "--tokens", metavar="FILE", help="Token ids to replay (.i32 raw int32 "
                                          "or .npy)."),
    lcs: Optional[Path] = typer.Option(None, "-lcs", "--lookup-cache-static", metavar="FILE", help="Static cache (lkc, "
                                       "ggngcmap or llama.cpp legacy)."),
    lcd: Optional[Path] = typer.Option(None, "-lcd", "--lookup-cache-dynamic", metavar="FILE", help="Dynamic cache "
                                       "(legacy) to start from (must exist)."),
    ctx_size: int = typer.Option(DEFAULT_CTX, "-c", "--ctx-size", metavar="N", help="Chunk size in tokens (used as given)."),
    n_draft: Optional[int] = typer.Option(None, "--draft", "--draft-max", "--draft-n", metavar="N", help="Maximum "
                                          f"drafted tokens per call (default {D['lookup']['n_draft']}; "
                                          f"{D['policy']['n_draft']} with --policy lookupkit, which drafts "
                                          f"only what pays of them; {D['ngram']['n_draft']} for --source ngram, "
                                          f"{D['suffix']['n_draft']} for --source suffix)."),
    source: Source = typer.Option(Source.lookup, "--source", help="lookup: llama.cpp's caches; ngram: the longest "
                                  "earlier match in the sequence; suffix: the run after the longest match in the "
                                  "static cache's corpus (-lcs built with --suffix-index)."),
    engine: Engine = typer.Option(Engine.fast, "--engine", help="fast (compiled) or reference (readable Python)."),
    policy: PolicyName = typer.Option(PolicyName.llama, "--policy", help="llama.cpp: its drafting rule, exactly; "
                                      f"lookupkit: draft only what pays at --verify-cost (default {DEFAULT_COST}), from every "
                                      "cache including a static cache's higher orders (lookup-create --orders)."),
    policy_table: Optional[Path] = typer.Option(None, "--policy-table", metavar="FILE", help="--policy lookupkit: "
                                                "confidence tables (default: the bundled ones, learnt on held-out "
                                                "Wikipedia text; lookupkit tune-policy learns others)."),
    min_match: Optional[int] = typer.Option(None, "--ngram-min-match", metavar="N", help="--source ngram/suffix: "
                                            "draft nothing below this match length (default "
                                            f"{D['ngram']['min_match']}/{D['suffix']['min_match']})."),
    max_match: Optional[int] = typer.Option(None, "--ngram-max-match", metavar="N", help="--source ngram: longest "
                                            f"match length considered (default {D['ngram']['max_match']})."),
    verify_cost: Optional[str] = typer.Option(None, "--verify-cost", metavar="C|CURVE.json", help="Extra cost of each "
                                              "drafted position in a verify batch, relative to one decoding step, or "
                                              "the curve `lookupkit calibrate -o` measured on your model: report the "
                                              f"expected speed-up (the verdict is given at {DEFAULT_COST} without it)."),
    sweep: bool = typer.Option(False, "--sweep", help=f"Replay a grid (--draft 1..{SWEPT_MAX} x thresholds, "
                               f"--ngram-min-match 1..{SWEPT_MAX}, or the policy's verify costs) and print one table; "
                               "a given --draft/--ngram-min-match is held fixed."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
    dump: Optional[Path] = typer.Option(None, "--dump", metavar="FILE", help="Write one line per draft call (.steps format)."),
    save_dynamic: Optional[Path] = typer.Option(None, "--save-dynamic", metavar="FILE", help="Write the final dynamic cache "
                                                "(legacy format)."),
) -> None:
    ngram, sfx = source is Source.ngram, source is Source.suffix
    use_policy = policy is PolicyName.lookupkit
    _check_combination(ngram, sfx, engine, sweep, lcs=lcs, lcd=lcd, save_dynamic=save_dynamic, dump=dump,
                       ngram_min_match=min_match, ngram_max_match=max_match)
    if use_policy and (ngram or sfx or engine is Engine.reference):
        raise InputError("--policy lookupkit drafts from the lookup caches (and a suffix index, if the static "
                         "cache has one) with the fast engine: not with --source ngram/suffix or --engine reference")
    if policy_table is not None and not use_policy:
        raise InputError("--policy-table is only used with --policy lookupkit")
    tables = load_tables(policy_table) if use_policy else None
    cost = VerifyCost.parse(verify_cost) if verify_cost is not None else None
    ids, vocab = _input_tokens(file, model, tokens)
    kind = "policy" if use_policy else source.value
    one = Replay(kind, n_draft, ctx_size, min_match, max_match, engine.value, tables, cost)  # checks its parameters
    static, dynamic, t_static, t_load = _load_caches(lcs, lcd, vocab, ids)
    one.check_caches(static)
    if sweep:
        given = dict(file=file, model=model, tokens=tokens, lcs=lcs, lcd=lcd, ctx_size=ctx_size, n_draft=n_draft,
                     policy_table=policy_table, min_match=min_match, max_match=max_match, verify_cost=verify_cost)
        rows = run_sweep(ids, static, dynamic, default_grid(kind, n_draft, min_match, max_match),
                         n_ctx=ctx_size, source=kind, verify_cost=cost, tables=tables)
        _print_sweep(rows, as_json, command=_sweep_command(kind=kind, **given), source=kind, n_ctx=ctx_size, n_input=len(ids),
                     verify_cost=cost and cost.describe(), t_load_ms=t_load * 1e3)
        return
    trace, final_dynamic = one.run(ids, static, dynamic)
    trace.t_load_s = t_load
    trace.extra.update(peak_rss_mb=peak_rss_bytes() / 1e6)
    if static is not None:
        trace.extra.update(t_static_open_ms=t_static * 1e3)
    if cost is not None:
        trace.extra.update(expected_speedup(trace, cost))
    if dump:
        _write_lines(dump, trace.steps_lines())
    if save_dynamic:
        llama.save(final_dynamic, save_dynamic)
    if as_json:
        print_json(trace.summary())
        return
    lines = report_lines(trace)
    if source is Source.lookup:
        other = one.other().run(ids, static, dynamic)[0]
        lines.append(verdict_line(trace, one.verdict_cost, use_policy, other, given=cost is not None))
    typer.echo("\n".join(lines))


def _load_caches(lcs: Path | None, lcd: Path | None, vocab, ids):
    """(static, dynamic table, static open seconds, both loads' seconds = llama.cpp's t_draft_flat)."""
    llama.read(b"")  # load the compiled legacy reader first, so JIT start-up is not timed as file loading
    t0 = time.perf_counter()
    static = _open_static(lcs, vocab, ids) if lcs else None
    t_static = time.perf_counter() - t0
    dynamic = _load_dynamic(lcd) if lcd else None
    return static, dynamic, t_static, time.perf_counter() - t0


def verdict_line(trace: ReplayTrace, cost: VerifyCost, use_policy: bool, other: ReplayTrace, given: bool) -> str:
    """In words: does drafting pay at this verify cost (against plain decoding), and which policy to use
    (against the other one, replayed on the same caches)."""
    at = f"verify cost {cost.describe()}" + ("" if given else " (the default; --verify-cost for yours)")
    s = speedup(trace.n_drafted, trace.n_accepted, cost) or 1.0
    s_other = speedup(other.n_drafted, other.n_accepted, cost) or 1.0
    names = [("lookupkit's policy", "--policy lookupkit"), ("llama.cpp's rule", "--policy llama.cpp")]
    (this, _), (that, that_flag) = names if use_policy else names[::-1]
    pays = "pays" if s > 1 else "does not pay"
    use = ("keep this policy" if s >= s_other else f"use {that_flag}") if max(s, s_other) > 1 else "do not draft"
    return (f"verdict      = at {at}: drafting with {this} {pays} against plain decoding (S = {s:.3f}x); "
            f"{that} on the same caches makes {s_other:.3f}x: {use}")


def _sweep_command(*, kind: str, **given) -> str:
    """The lookup-stats command line that runs this sweep again (quoted for a shell)."""
    flags = {"file": "-f", "model": "-m", "tokens": "--tokens", "lcs": "-lcs", "lcd": "-lcd", "ctx_size": "-c",
             "n_draft": "--draft", "policy_table": "--policy-table", "min_match": "--ngram-min-match",
             "max_match": "--ngram-max-match", "verify_cost": "--verify-cost"}
    words = ["lookup-stats"]
    for name, flag in flags.items():
        if given[name] is not None:
            words += [flag, str(given[name])]
    words += {"policy": ["--policy", "lookupkit"], "ngram": ["--source", "ngram"], "lookup": []}[kind]
    return shlex.join(words + ["--sweep"])


def _print_sweep(rows: list[dict], as_json: bool, **about) -> None:
    if as_json:
        print_json({**about, "rows": rows})
    else:
        typer.echo(f"sweep: {about['command']}  (-c {about['n_ctx']}, {about['n_input']} tokens, {len(rows)} replays)")
        typer.echo(sweep_table(rows))


def _check_combination(ngram: bool, sfx: bool, engine: Engine, sweep: bool, **given) -> None:
    """Refuse flags that the chosen mode would silently ignore."""
    names = {"lcs": "-lcs", "lcd": "-lcd", "save_dynamic": "--save-dynamic", "dump": "--dump",
             "ngram_min_match": "--ngram-min-match", "ngram_max_match": "--ngram-max-match"}
    used = {k for k, v in given.items() if v is not None}
    untaken = {src: {f"ngram_{k}" for k in ("min_match", "max_match") if k not in D[src]} for src in D}
    rules = [(ngram, {"lcs", "lcd", "save_dynamic"} | untaken["ngram"], "--source ngram (it drafts from the sequence "
              "alone)"),
             (sfx, {"lcd", "save_dynamic"} | untaken["suffix"], "--source suffix (it drafts from the suffix index "
              "alone, matches of up to " f"{SUFFIX_MAX_LEN} tokens)"),
             (not ngram and not sfx, untaken["lookup"], "--source lookup"),
             (sweep, {"dump", "save_dynamic"}, "--sweep (they describe one replay)")]
    for active, flags, mode in rules:
        bad = sorted(used & flags)
        if active and bad:
            raise InputError(f"{', '.join(names[k] for k in bad)} cannot be used with {mode}")
    if sfx and sweep:
        raise InputError("--sweep replays --source lookup or ngram (for --source suffix, run --draft and "
                         "--ngram-min-match values one by one)")
    if engine is Engine.reference and (ngram or sfx or sweep):
        raise InputError("--engine reference replays --source lookup only, one replay at a time (no --sweep)")


def _input_tokens(file: Path | None, model: Path | None, tokens: Path | None):
    """The replay input and the Tokenizer it was tokenized with (None for --tokens)."""
    if (file is None) == (tokens is None):
        raise InputError("give exactly one input: -f FILE [-m VOCAB] or --tokens FILE")
    if tokens is not None:
        if model is not None:
            raise InputError("-m is only used to tokenize -f; --tokens are already ids")
        return read_token_file(tokens), None
    tok = Tokenizer.from_file(model) if model is not None else Tokenizer.default()
    return tokenize_text_file(file, tok), tok


def _open_static(path: Path, vocab, ids):
    static = StaticCache.open(path, expect_vocab=vocab)
    static.check_ids(ids)
    return static


def _load_dynamic(path: Path):
    if not path.exists():
        raise InputError(f"-lcd {path} does not exist (lookup-stats only reads it; --save-dynamic writes one)")
    return read_ngrams(path, "-lcd")


def _write_lines(path: Path, lines) -> None:
    with atomic_writer(path) as f:
        for line in lines:
            f.write(line.encode() + b"\n")


def _c(x: float, spec: str) -> str:
    """Format like C's printf, except that a ratio without data (0/0, x/0: a replay that drafted
    nothing, where llama.cpp prints "-nan" or "inf") prints "n/a"."""
    if math.isnan(x) or math.isinf(x):
        return "n/a"
    return format(x, spec)


def _pct(x: float, spec: str) -> str:
    text = _c(x, spec)
    return text if text == "n/a" else text + "%"


def _ratio(a: float, b: float) -> float:
    """a / b with IEEE semantics for b == 0, as the C code computes it."""
    if b:
        return a / b
    return math.nan if a == 0 else math.copysign(math.inf, a)


def report_lines(trace: ReplayTrace) -> list[str]:
    """llama.cpp's seven lines (same formats), then lookupkit's extras."""
    s = trace.summary()
    t_us = trace.t_draft_s * 1e6
    lines = [
        f"n_draft      = {s['n_draft']}",
        f"n_predict    = {s['n_predict']}",
        f"n_drafted    = {s['n_drafted']}",
        f"t_draft_flat = {trace.t_load_s * 1e3:.2f} ms",
        f"t_draft      = {t_us * 1e-3:.2f} ms, {_c(_ratio(t_us, s['n_drafted']), '.2f')} us per token, "
        f"{_c(_ratio(s['n_drafted'], 1e-6 * t_us), '.2f')} tokens per second",
        f"n_accept     = {s['n_accept']}",
        f"accept       = {_pct(_ratio(100.0 * s['n_accept'], s['n_drafted']), '.3f')}",
        "",
        f"draft_calls  = {s['draft_calls']}",
        f"drafted      = {s['drafted_steps']} calls "
        f"({_pct(_ratio(100.0 * s['drafted_steps'], s['draft_calls']), '.2f')} coverage)",
        f"tok/verify   = {_c(s['tokens_per_verify'] or math.nan, '.4f')} (accepted + 1 per call)",
        "accepted at draft position k (calls whose first k drafted tokens were all accepted):",
        "  " + " ".join(f"{k}:{n}" for k, n in enumerate(s["accepted_per_position"], 1)),
    ]
    if s["per_source"]:
        lines.append("per source    drafted   accepted   accept")
        lines += [f"  {name:<8} {v['drafted']:>10} {v['accepted']:>10} {v['accept']:>7.3f}%"
                  for name, v in s["per_source"].items()]
        lines.append("  (" + SOURCE_LEGEND + ")")
    if "verify_cost" in s:
        at = f"{s['verify_cost']:g}" if isinstance(s["verify_cost"], float) else s["verify_cost"]
        lines.append(f"speed-up     = {_c(s['speedup'] or math.nan, '.3f')}x over plain decoding at verify cost {at} "
                     f"(breaks even at a constant cost of {_c(s['break_even_cost'] or math.nan, '.3f')})")
    lines.append("S(C)         = " + ", ".join(f"{c}: {_c(v or math.nan, '.3f')}" for c, v in s["expected_speedup"].items())
                 + "  (expected speed-up at verify cost C per drafted token)")
    if "t_static_open_ms" in s:
        lines.append(f"t_static_open= {s['t_static_open_ms']:.2f} ms")
    lines.append(f"peak_rss     = {s['peak_rss_mb']:.1f} MB")
    return lines


def main() -> None:
    run(app)


if __name__ == "__main__":
    main()
