"""`lookupkit demo`: the whole job on data every machine has — no download, no data outside this repository.

Builds a static cache from this Python's standard-library sources with the bundled gpt-2 vocabulary,
opens it (O(1), mmap), then replays lookupkit's own source code as if a model were writing it:
llama.cpp's lookup-stats loop without and with the static cache, then lookupkit's policy on the same
caches (the cache is built with orders 2-6), and one draft from the Python API. It ends with what the
numbers mean: tokens per verify call and the expected speed-up at a stated verify cost, and a verdict
on each comparison.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from lookupkit import _version
from lookupkit.formats.lkc_orders import OrderParams
from lookupkit.errors import LookupkitError
from lookupkit.verify_cost import DEFAULT_COST, VerifyCost
from lookupkit.files import default_root, ensure_dir
from lookupkit.rules import POLICY_DRAFT, check_replay
from lookupkit.static import StaticCache
from lookupkit.cli.common import guarded, print_json, progress

PROMPTS = ("from collections import", "for i in range(len", "if __name__ ==")
ORDERS = (3, 4, 5, 6)
POLICY_ROW = "stdlib + lookupkit policy"
LEGEND = (
    "  drafted     tokens guessed from the caches (context = this text so far; static = the stdlib corpus)",
    "  accepted    guesses the 'model' confirmed (here the real text: a replay knows what comes next)",
    "  tok/verify  tokens produced per verify call = 1 + accepted per call; plain decoding makes 1.00",
    "  speed-up    (accepted + calls) / (calls + C x drafted): each drafted token widens the verify batch,",
    f"              costing C of a decoding step (C = {DEFAULT_COST} here; `lookup-stats --verify-cost` for yours)",
)


def _own_sources() -> str:
    """lookupkit's own .py files, concatenated: text no standard-library file contains."""
    root = Path(_version.__file__).parent  # the library's own folder (lookupkit/)
    return "".join(p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py")))


EXAMPLES = """Examples:

\b
  lookupkit demo                    # build (once), open, draft and replay; a verdict on each comparison
  lookupkit demo --draft 16 -c 2048
  lookupkit demo --json --cache-dir /tmp/lk
"""


@guarded
def demo(
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", metavar="DIR", help="Where the demo cache and "
                                             "token cache go (default $LOOKUPKIT_CACHE_DIR or ~/.cache/lookupkit)."),
    n_ctx: int = typer.Option(1024, "-c", "--ctx-size", help="Replay chunk size."),
    n_draft: int = typer.Option(POLICY_DRAFT, "--draft", help="Most tokens drafted per step, in every row "
                                "(default: lookup-stats --policy lookupkit's)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build the cache again even if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Build, open and draft from a static cache of Python's stdlib; replay lookupkit's own code."""
    # The build, the tokenizer and the kernels are imported here: `lookupkit inspect` imports this module too.
    from lookupkit.create import build_static
    from lookupkit.compile_notice import COMPILE_S
    from lookupkit.corpora import StdlibCorpus
    from lookupkit.draft import Drafter
    from lookupkit.policy.confidence import load as load_tables
    from lookupkit.replay.run import policy_over
    from lookupkit.replay import replay
    from lookupkit.replay.sweep import expected_speedup
    from lookupkit.tokenizer import Tokenizer

    say = (lambda *a: None) if as_json else typer.echo
    tok = Tokenizer.default()
    ids = tok.encode(_own_sources())
    check_replay(len(ids), n_ctx, n_draft)  # before the (slow) first build
    root = ensure_dir(cache_dir or default_root(), "the demo's cache directory")
    path = root / f"demo-stdlib-{tok.name}.lkc"
    built = None
    if rebuild or not path.exists() or _lacks_orders(path):
        say(f"building {path} from this Python's standard library ({tok.name} vocabulary, orders 2-6) ...")
        built = build_static([StdlibCorpus()], tok, path, cache_dir=root, orders=OrderParams(ORDERS),
                             progress=None if as_json else (lambda: progress(True)))
    t = time.perf_counter()
    cache = StaticCache.open(path, expect_vocab=tok)
    t_open = time.perf_counter() - t
    say(f"opened {path.name}: {cache.n_keys:,} 2-grams, {cache.n_pairs:,} pairs, {path.stat().st_size / 1e6:.1f} MB "
        f"in {t_open * 1e3:.3f} ms (mmap: nothing is read but the header)")
    say("loading the compiled drafting kernels (numba compiles them once after an install: "
        f"~{COMPILE_S} s the first time) ...")
    t = time.perf_counter()
    replay(ids[:n_ctx + 1], n_ctx=n_ctx, n_draft=n_draft, static=cache)
    say(f"  ready in {time.perf_counter() - t:.1f} s")

    rows = {}
    policy = policy_over(cache, load_tables(), VerifyCost.of(DEFAULT_COST), n_draft)  # no suffix index here
    for label, static, pol in (("no static cache", None, None), ("stdlib static cache", cache, None),
                               (POLICY_ROW, cache, policy)):
        trace, _ = replay(ids, n_ctx=n_ctx, n_draft=n_draft, static=static, engine="fast", policy=pol)
        rows[label] = {**trace.summary(), **expected_speedup(trace, DEFAULT_COST)}
    say(f"\nreplay of lookupkit's own source as if a model were writing it ({len(ids):,} tokens; llama.cpp's "
        f"lookup-stats loop, -c {n_ctx}, up to {n_draft} drafted tokens per verify call):")
    say(f"  {'':26} {'drafted':>9} {'accepted':>9} {'accept %':>9} {'tok/verify':>10} {'speed-up':>9} {'µs/token':>9}")
    for label, s in rows.items():
        say(f"  {label:26} {s['n_drafted']:>9,} {s['n_accept']:>9,} {s['accept'] or 0:>9.1f} "
            f"{s['tokens_per_verify']:>10.3f} {s['speedup']:>8.3f}x {s['us_per_drafted_token'] or 0:>9.3f}")
    for line in LEGEND:
        say(line)
    verdict = _verdict(rows["no static cache"], rows["stdlib static cache"])
    policy_verdict = _policy_verdict(rows["stdlib static cache"], rows[POLICY_ROW])
    say(f"\n{verdict}\n{policy_verdict}")

    drafter = Drafter(static=cache)
    examples = []
    for prompt in PROMPTS:
        drafter.reset(learn=False)
        draft = drafter.draft(tok.encode(prompt, add_special=False).tolist(), n_draft)
        examples.append({"prompt": prompt, "draft": draft, "text": tok.decode(draft)})
    say("\ndrafts from the static cache alone (Drafter API; llama.cpp's rule drafts a 2-gram's top follower only "
        "when it holds >= 50 % of its followers, so many prompts get none):")
    for e in examples:
        say(f"  {e['prompt']!r:32} -> {e['text']!r}")
    if as_json:
        print_json({"cache": str(path), "built": built, "open_ms": t_open * 1e3, "n_keys": cache.n_keys,
                    "n_pairs": cache.n_pairs, "verify_cost": DEFAULT_COST, "replay": rows, "verdict": verdict,
                    "policy_verdict": policy_verdict,
                    "examples": examples})
    cache.close()


def _verdict(without: dict, with_cache: dict) -> str:
    """What the cache did, in the table's terms, each comparison naming what it is made against: adding the
    static cache against drafting from the context alone, then drafting with it against plain decoding."""
    change = "raises" if with_cache["tokens_per_verify"] > without["tokens_per_verify"] else "does not raise"
    pays = "pays" if with_cache["speedup"] > without["speedup"] else "does not pay"
    plain = "pays" if with_cache["speedup"] > 1 else "does not pay"
    return (f"verdict: the static cache, against drafting from the context alone, {change} the tokens per verify "
            f"call ({without['tokens_per_verify']:.3f} -> {with_cache['tokens_per_verify']:.3f}) and moves acceptance "
            f"{without['accept'] or 0:.1f} % -> {with_cache['accept'] or 0:.1f} % (it also drafts where the context "
            f"had nothing): the expected speed-up over plain decoding goes {without['speedup']:.3f}x -> "
            f"{with_cache['speedup']:.3f}x, so adding it {pays} at C = {DEFAULT_COST}. Against plain decoding "
            f"(no drafting), drafting with it {plain} at C = {DEFAULT_COST} and would up to C = "
            f"{with_cache['break_even_cost'] or 0:.2f}.")


def _policy_verdict(rule: dict, policy: dict) -> str:
    """lookupkit's policy against llama.cpp's rule on the same caches (both as speed-ups over plain decoding)."""
    better = policy["speedup"] > rule["speedup"]
    return (f"verdict: lookupkit's policy (--policy lookupkit, drafting only what pays at C = {DEFAULT_COST}), "
            f"against llama.cpp's rule on the same caches, {'pays more' if better else 'does not pay more'}: expected "
            f"speed-up over plain decoding {rule['speedup']:.3f}x -> {policy['speedup']:.3f}x, with "
            f"{policy['n_drafted']:,} drafted tokens instead of {rule['n_drafted']:,} at {policy['accept'] or 0:.1f} % "
            "acceptance.")


def _lacks_orders(path: Path) -> bool:
    """A demo cache from before --orders existed (it is rebuilt with them)."""
    try:
        with StaticCache.open(path) as cache:
            return len(cache.orders) == 1
    except LookupkitError:
        return True


def register(app: typer.Typer) -> None:
    app.command("demo", epilog=EXAMPLES)(demo)
