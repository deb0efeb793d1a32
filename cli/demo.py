"""`lookupkit demo`: the whole job on data every machine has — no download, nothing from ../shared.

Builds a static cache from this Python's standard-library sources with the bundled gpt-2 vocabulary,
opens it (O(1), mmap), then replays lookupkit's own source code as if a model were writing it:
llama.cpp's lookup-stats loop without and with the static cache, and one draft from the Python API.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from .common import guarded, print_json, progress


PROMPTS = ("from collections import", "for i in range(len", "if __name__ ==")


def _own_sources() -> str:
    """lookupkit's own .py files, concatenated: text no standard-library file contains."""
    import lookupkit

    root = Path(lookupkit.__file__).parent
    return "".join(p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py")))


@guarded
def demo(
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", metavar="DIR", help="Where the demo cache and "
                                             "token cache go (default $LOOKUPKIT_CACHE_DIR or ~/.cache/lookupkit)."),
    n_ctx: int = typer.Option(1024, "-c", "--ctx-size", help="Replay chunk size."),
    n_draft: int = typer.Option(8, "--draft", help="Tokens drafted per step."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build the cache again even if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Build, open and draft from a static cache of Python's stdlib; replay lookupkit's own code."""
    from ..build import build_static
    from ..cachedir import default_root, ensure_dir
    from ..corpora import StdlibCorpus
    from ..drafter import Drafter
    from ..replay import check_args, replay
    from ..static import StaticCache
    from ..tokenizer import Tokenizer

    say = (lambda *a: None) if as_json else typer.echo
    tok = Tokenizer.default()
    ids = tok.encode(_own_sources())
    check_args(len(ids), n_ctx, n_draft)  # before the (slow) first build
    root = ensure_dir(cache_dir or default_root(), "the demo's cache directory")
    path = root / f"demo-stdlib-{tok.name}.lkc"
    built = None
    if rebuild or not path.exists():
        say(f"building {path} from this Python's standard library ({tok.name} vocabulary) ...")
        built = build_static([StdlibCorpus()], tok, path, cache_dir=root,
                             progress=None if as_json else (lambda b: progress(True, b)))
    t = time.perf_counter()
    cache = StaticCache.open(path, expect_vocab=tok.fingerprint)
    t_open = time.perf_counter() - t
    say(f"opened {path.name}: {cache.n_keys:,} 2-grams, {cache.n_pairs:,} pairs, {path.stat().st_size / 1e6:.1f} MB "
        f"in {t_open * 1e3:.3f} ms")

    rows = {}
    for label, static in (("no static cache", None), ("stdlib static cache", cache)):
        trace, _ = replay(ids, n_ctx=n_ctx, n_draft=n_draft, static=static, engine="fast")
        rows[label] = trace.summary()
    say(f"\nreplay of lookupkit's own source ({len(ids):,} tokens, -c {n_ctx} --draft {n_draft}):")
    say(f"  {'':22} {'drafted':>9} {'accepted':>9} {'accept %':>9} {'tok/verify':>10} {'µs/token':>9}")
    for label, s in rows.items():
        say(f"  {label:22} {s['n_drafted']:>9,} {s['n_accept']:>9,} {s['accept'] or 0:>9.3f} "
            f"{s['tokens_per_verify']:>10.3f} {s['us_per_drafted_token'] or 0:>9.3f}")

    drafter = Drafter(static=cache)
    examples = []
    for prompt in PROMPTS:
        drafter.reset(learn=False)
        draft = drafter.draft(tok.encode(prompt, add_special=False).tolist(), n_draft)
        examples.append({"prompt": prompt, "draft": draft, "text": tok.decode(draft)})
    say("\ndrafts from the static cache alone (Drafter API):")
    for e in examples:
        say(f"  {e['prompt']!r:32} -> {e['text']!r}")
    if as_json:
        print_json({"cache": str(path), "built": built, "open_ms": t_open * 1e3, "n_keys": cache.n_keys,
                    "n_pairs": cache.n_pairs, "replay": rows, "examples": examples})
    cache.close()


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
