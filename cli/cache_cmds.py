"""`lookupkit inspect | verify | convert`: look into, check and convert static cache files (inspect and verify
also take a served history's state file, `.lkh`: one verify for every file inspect reads).

Each command is a library call (StaticCache, formats) plus printing; errors become one line and exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import typer

from lookupkit import formats
from lookupkit.errors import InputError
from lookupkit.formats import lkc_suffix
from lookupkit.static import StaticCache
from lookupkit.cli.common import guarded, print_json

INSPECT_PATH = typer.Argument(..., help="cache file (.lkc, .lkc.zst, .ggngcmap, .lcs) or a history state (.lkh)")
HISTORY_SUFFIX = ".lkh"  # lookupkit serve --state's files (formats/history_state.py)
JSON = typer.Option(False, "--json", help="print JSON instead of text")


def _describe(cache: StaticCache) -> dict:
    meta = cache.meta
    return {"file": str(cache.path), "bytes": cache.path.stat().st_size, "format": cache.format,
            "format_version": meta.get("format_version"), "tool": meta.get("tool"), "vocab": meta.get("vocab"),
            "corpus": meta.get("corpus"), "build": meta.get("build"), "sections": meta.get("sections"),
            "keys_stored": cache.has_keys, "stats": cache.stats(), "suffix_index": _suffix_of(meta)}


def _suffix_of(meta: dict) -> dict | None:
    """The suffix index's size from the header (no section read): positions, documents, bytes per position."""
    info = meta.get("suffix")
    if info is None:
        return None
    size = sum(meta["sections"][s]["length"] for s in lkc_suffix.NAMES)
    return {**info, "bytes": size, "bytes_per_position": round(size / max(info["n"], 1), 3)}


def _print_text(info: dict) -> None:
    echo = typer.echo
    st = info["stats"]
    tool = info["tool"] or {}
    version = f" v{info['format_version']}" if info["format_version"] else ""
    echo(f"file        {info['file']} ({info['bytes']:,} bytes)")
    written_by = f", written by {tool.get('name')} {tool.get('version')}" if tool else ""
    echo(f"format      {info['format']}{version}{written_by}")
    vocab = info["vocab"] or {}
    echo("vocab       " + (f"{vocab.get('name')}, {vocab.get('n_vocab')} tokens, fingerprint {vocab.get('fingerprint')}"
                           if vocab else "not recorded (this format stores no vocabulary)"))
    for src in (info["corpus"] or {}).get("sources", []):
        echo(f"corpus      {src.get('source')}: {src.get('bytes')} bytes, {src.get('tokens')} tokens, "
             f"sha256 {str(src.get('sha256'))[:16]}")
    more = (info["corpus"] or {}).get("more_sources")
    if isinstance(more, dict):
        echo(f"corpus      and {more.get('count')} more sources: {more.get('bytes')} bytes, {more.get('tokens')} tokens")
    if info["build"]:
        echo("build       " + ", ".join(f"{k}={v}" for k, v in info["build"].items()))
    echo(f"keys        {'stored' if info['keys_stored'] else 'not stored (recovered from the constmap when needed)'}")
    for name, sec in (info["sections"] or {}).items():
        echo(f"section     {name:15} offset {sec['offset']:>12,}  {sec['length']:>13,} B  {sec.get('dtype')} "
             f"{sec.get('shape')}  sha256 {sec['sha256'][:16]}")
    ix = info["suffix_index"]
    if ix is not None:
        echo(f"suffix      {ix['n']:,} positions ({ix['n_documents']:,} documents, ids up to {ix['max_id']:,}), "
             f"{ix['bytes']:,} B = {ix['bytes_per_position']:.2f} B per position")
    echo(f"2-grams     {st['n_keys']:,}" if st["n_keys"] is not None else "2-grams     not recorded")
    echo(f"pairs       {st['n_pairs']:,} (token, count); {st['n_tokens']:,} positions counted; max count "
         f"{st['max_count']:,}" + (f"; {100 * st['count_one_pairs']:.1f}% of pairs seen once" if "count_one_pairs" in st
                                  else ""))
    if "unavailable" in st:
        echo(f"followers   per 2-gram: unavailable ({st['unavailable']})")
        return
    pct = ", ".join(f"{k} {v}" for k, v in st["followers_percentiles"].items())
    echo(f"followers   per 2-gram: mean {st['mean_followers']:.2f}, {pct}, max {st['max_followers']:,}")
    echo("            <= k followers   2-grams     pairs")
    for row in st["followers_cdf"]:
        echo(f"            {row['followers']:>13,}   {100 * row['keys']:6.2f}%   {100 * row['pairs']:6.2f}%")


def _history_state(path: Path) -> dict | None:
    """A `.lkh` file's header and each tenant's counts, every check of formats/history_state.py passed; None if
    the file neither starts with its magic nor is named `.lkh` (a damaged `.lkh` is refused as one)."""
    from lookupkit.files import open_input
    from lookupkit.formats import history_state

    with open_input(path, "file") as f:
        if f.read(len(history_state.MAGIC)) != history_state.MAGIC and path.suffix.lower() != HISTORY_SUFFIX:
            return None
    logs, head = history_state.read(path)
    tenants = [{"id": t.id, "budget": t.budget, "n_positions": len(t.log),
                "n_sequences": int((t.log == -1).sum()), "learnt": t.learnt, "last_used_ms": t.last_used_ms}
               for t in logs]
    return {"file": str(path), "bytes": path.stat().st_size,
            **{k: head[k] for k in ("format", "format_version", "vocab", "budget", "tenant_budget", "tool")},
            "n_vocab": head.get("n_vocab"),
            "tenants": tenants, "n_positions": sum(t["n_positions"] for t in tenants),
            "n_sequences": sum(t["n_sequences"] for t in tenants), "learnt": sum(t["learnt"] for t in tenants)}


def _print_history(info: dict) -> None:
    tool, tenants = info["tool"], info["tenants"]
    typer.echo(f"file        {info['file']} ({info['bytes']:,} bytes)")
    typer.echo(f"format      lkh v{info['format_version']} (a served history), written by {tool.get('name')} "
               f"{tool.get('version')}; checksums verified")
    typer.echo(f"vocab       fingerprint {info['vocab']}" if info["vocab"] else "vocab       not recorded")
    typer.echo(f"history     {info['n_positions']:,} of {info['budget']:,} positions: {info['n_sequences']:,} "
               f"sequences kept, {info['learnt']:,} learnt in all")
    shared = [t for t in tenants if t["id"] == "global"]
    typer.echo("tenants     " + ("one history shared by every client (--learn-scope global or a version 1 file)"
                                 if shared else f"{len(tenants):,}, kept apart (a request drafts only from its own "
                                                f"tenant's), {info['tenant_budget']:,} positions each at most"))
    for t in tenants:
        typer.echo(f"  {t['id']:22} {t['n_positions']:>12,} of {t['budget']:,} positions, {t['n_sequences']:,} "
                   f"sequences kept, {t['learnt']:,} learnt")


@guarded
def inspect(path: Path = INSPECT_PATH, json: bool = JSON) -> None:
    """Print a cache file's header and statistics (followers per 2-gram as a CDF), or a history state's."""
    history = _history_state(path)
    if history is not None:
        print_json(history) if json else _print_history(history)
        return
    with StaticCache.open(path) as cache:
        info = _describe(cache)
    print_json(info) if json else _print_text(info)


@guarded
def verify(path: Path = INSPECT_PATH, json: bool = JSON) -> None:
    """Check every checksum and every bound of a cache file or a history state (reads all of it); exit 2 if
    anything is wrong."""
    history = _history_state(path)
    if history is not None:
        checks = ["preamble: magic, version, byte order, sizes", "header: sha256, JSON, every field and type",
                  "each tenant's log: place, length, sha256", "every budget within its bounds, counts match the logs",
                  "token ids >= -1" + (f" and < n_vocab {history['n_vocab']:,}" if history["n_vocab"] else
                                       " (the file records no vocabulary size: ids not bounded above)")]
        if json:
            print_json({"file": str(path), "format": "lkh", "tenants": len(history["tenants"]),
                        "n_positions": history["n_positions"], "checks": checks})
            return
        typer.echo(f"ok: {path} (lkh v{history['format_version']}): {len(history['tenants']):,} tenant"
                   f"{'s' * (len(history['tenants']) != 1)}, {history['n_positions']:,} positions")
        for check in checks:
            typer.echo(f"  checked: {check}")
        return
    with StaticCache.open(path) as cache:
        result = cache.verify()
    if json:
        print_json({"file": str(path), **result})
        return
    typer.echo(f"ok: {path} ({result['format']}): {result['n_keys']:,} 2-grams, {result['n_pairs']:,} pairs")
    for check in result["checks"]:
        typer.echo(f"  checked: {check}")


@guarded
def convert(src: Path = typer.Argument(..., help="input cache file (any format)"),
            dst: Path = typer.Argument(..., help="output file (.lkc, .lkc.zst, .ggngcmap, .lcs)"),
            format: Optional[str] = typer.Option(None, "--format", help="lkc | lkc.zst | ggngcmap | llama "
                                                 "(default: from the output's extension)"),
            no_keys: bool = typer.Option(False, "--no-keys", help="lkc: omit the key sections (smaller file; listing, "
                                         "converting and verifying then recover keys from the constmap)"),
            model: Optional[Path] = typer.Option(None, "-m", "--model", help="lkc: record this vocabulary (GGUF or "
                                                 "tokenizer.json) in the output, e.g. for a cache converted from "
                                                 ".lcs/.ggngcmap, which record none"),
            ) -> None:
    """Convert a cache file to another format (through the canonical table, written atomically)."""
    fmt = formats.format_for_path(dst, format)
    if no_keys and not formats.BY_NAME[fmt].keys_optional:
        raise InputError(f"--no-keys applies to lkc output only ({fmt} files never or always store keys)")
    if model is not None and not formats.BY_NAME[fmt].records_meta:
        raise InputError(f"-m applies to lkc output only ({fmt} files cannot record a vocabulary)")
    tok = None
    if model is not None:
        from lookupkit.tokenizer import Tokenizer  # (only here: the encoder loads kernels, converting needs none)

        tok = Tokenizer.from_file(model)
    with StaticCache.open(src) as cache:
        if tok is not None and cache.vocab_fingerprint is not None:
            cache.check_vocab(tok)  # replacing a recorded vocabulary by another would mislabel the cache
        table = cache.to_table()
        meta = {k: cache.meta.get(k) for k in ("vocab", "corpus", "build")}
        src_format = cache.format
        dropped = [what for what, present in (("higher orders", cache.orders != [2]),
                                              ("suffix index", "suffix" in cache.meta)) if present]
    if tok is not None:
        meta["vocab"] = {"name": tok.name, "n_vocab": tok.n_vocab, "fingerprint": tok.fingerprint}
    meta["build"] = {**(meta["build"] or {}), "converted_from": {"format": src_format, "file": src.name}}
    formats.write_table(table, dst, fmt, meta=meta, keys=not no_keys)
    typer.echo(f"wrote {dst} ({fmt}, {dst.stat().st_size:,} bytes): {table.n_keys:,} 2-grams, "
               f"{table.n_pairs:,} pairs")
    if dropped:
        typer.echo(f"note: convert writes the 2-gram table only; the {' and '.join(dropped)} of {src} were "
                   "dropped (rebuild with lookup-create --orders / --suffix-index to keep them)", err=True)
    if not formats.BY_NAME[fmt].records_meta and (meta["vocab"] or meta["corpus"]):
        typer.echo(f"note: {fmt} files cannot record the vocabulary or corpus provenance; they were dropped", err=True)


def register(app: typer.Typer) -> None:
    """Add inspect, verify and convert to the umbrella `lookupkit` app."""
    app.command("inspect")(inspect)
    app.command("verify")(verify)
    app.command("convert")(convert)
