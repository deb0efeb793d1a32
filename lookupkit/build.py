"""The lookup-create pipeline: corpus sources → token ids (via the token store) → 2-gram counts → file.

Three timed phases, each with an optional progress bar: tokenize (text sources through the token
store; token files are used as they are), count (exact follower counts, streamed from the store),
write (any format, through formats.write_table). Every source is one document, as if each had been
given to llama.cpp's lookup-create on its own and the caches merged. The summary reports sizes,
seconds per phase and the process's peak RSS.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ._version import __version__
from .corpora.stream import Budget
from .corpora.tokenized import DocTokens, tokenize_source, tokenizer_mode
from .counts.bigrams import CHUNK_TOKENS, FollowerCounter
from .errors import InputError
from .files import atomic_writer
from .formats import format_for_path, write_table
from .memory import peak_rss_bytes
from .rules import COUNT_MAX, ID_MAX
from .tokenizer.store import TokenStore

ProgressFactory = Callable[[bool], "contextlib.AbstractContextManager"]  # bytes_mode -> rich Progress


def build_static(sources: Sequence, tokenizer, out_path: str | os.PathLike, format: str | None = None,
                 keys: bool = True, progress: ProgressFactory | None = None, *, max_bytes: int | None = None,
                 cut: str = "line", cache_dir: str | os.PathLike | None = None, token_cache: bool = True,
                 chunk_tokens: int = CHUNK_TOKENS) -> dict:
    """Build a static 2-gram cache from `sources` and write it to `out_path`; returns the summary.

    `max_bytes` limits the text read across the sources in order, cut at the last line end within it
    (`cut="line"`) or after exactly `max_bytes` bytes (`cut="byte"`). Tokens are
    cached under `cache_dir` (default $LOOKUPKIT_CACHE_DIR or ~/.cache/lookupkit) unless
    `token_cache` is False, in which case they go to a temporary directory removed afterwards.
    `tokenizer` None (token-id sources only): the cache records no vocabulary and accepts any id in
    0..2^31-1, as llama.cpp does.
    """

    t_start = time.perf_counter()
    out_path = Path(out_path)
    _check_output(out_path)
    fmt = format_for_path(out_path, format)
    if not sources:
        raise InputError("no corpus given: pass a text file, a dataset, token ids or the default corpus")
    if max_bytes is not None and any(s.kind == "tokens" for s in sources):
        raise InputError("--max-bytes limits text sources; it cannot be combined with token-id files")
    if tokenizer is None and any(s.kind != "tokens" for s in sources):
        raise InputError("text sources need a vocabulary to be tokenized with")
    for source in sources:
        source.check()
    scratch = contextlib.nullcontext(cache_dir) if token_cache else tempfile.TemporaryDirectory(prefix="lookupkit-")
    with scratch as root:
        phases: dict[str, float] = {}
        peaks: dict[str, int] = {}
        with _timed(phases, peaks, "tokenize"):
            docs, skipped = _tokenize(sources, tokenizer, TokenStore(root), Budget(max_bytes, cut), progress)
        n_tokens = sum(d.n_tokens for d in docs)
        try:
            if n_tokens == 0:
                raise InputError("empty token stream: the corpus produced no tokens")
            with _timed(phases, peaks, "count"):
                table = _count(docs, _counter(tokenizer, docs, chunk_tokens), n_tokens, progress)
        finally:
            for doc in docs:
                doc.close()  # unmap the stored tokens before the write phase needs the memory
        if table.n_keys == 0:
            raise InputError(f"no 2-grams: the corpus has {n_tokens} tokens, and a 2-gram with a follower "
                             "needs 3 tokens in one document")
        meta = _meta(tokenizer, docs, n_tokens, max_bytes, cut)
        with _timed(phases, peaks, "write"), _bar(progress, False, "write", None):
            write_table(table, out_path, fmt, meta, keys)
    phases["total"] = time.perf_counter() - t_start
    return {
        "output": str(out_path), "format": fmt, "file_bytes": out_path.stat().st_size,
        "vocab": meta["vocab"], "sources": meta["corpus"]["sources"], "skipped_sources": skipped,
        "n_bytes": sum(d.n_bytes for d in docs), "n_tokens": n_tokens,
        "reused_tokens": sum(d.reused_tokens for d in docs), "n_2grams": table.n_keys, "n_pairs": table.n_pairs,
        "replaced_bytes": sum(d.replaced_bytes for d in docs), "max_bytes": max_bytes, "cut": cut,
        "token_cache": str(TokenStore(root).root) if token_cache else None,
        "seconds": {k: round(v, 3) for k, v in phases.items()}, "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_bytes_by_end_of": peaks,
    }


def _check_output(path: Path) -> None:
    """Fail before the long work if the output cannot be written (atomic_writer re-checks at the end)."""
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {path}: permission denied")


def _tokenize(sources, tokenizer, store, budget, progress) -> tuple[list[DocTokens], list[str]]:
    docs, skipped = [], []
    sizes = [s.size for s in sources if s.kind != "tokens"]
    total = None if None in sizes else min(sum(sizes), budget.left if budget.left is not None else sum(sizes))
    has_text = any(s.kind != "tokens" for s in sources)
    with _bar(progress if has_text else None, True, "tokenize", total) as advance:
        for source in sources:
            if budget.exhausted:
                skipped.append(source.describe())
            elif source.kind == "tokens":
                docs.append(_token_doc(source))
            else:
                doc = tokenize_source(source, budget, tokenizer, store, advance)
                if doc.n_bytes:
                    docs.append(doc)
                else:  # the budget ended before this source's first line end
                    skipped.append(source.describe())
    return docs, skipped


def _token_doc(source) -> DocTokens:
    """A token-id file as a document (its sha256 is that of the ids as little-endian int32/int64)."""
    ids = source.ids()
    sha = hashlib.sha256()
    for part in source.arrays():
        sha.update(np.ascontiguousarray(part, dtype=part.dtype.newbyteorder("<")).data)
    return DocTokens(source.describe(), n_bytes=ids.nbytes, sha256=sha.hexdigest(), parts=[ids])


def _counter(tokenizer, docs: list[DocTokens], chunk_tokens: int) -> FollowerCounter:
    """A counter checking ids against the tokenizer's vocabulary, or, with none, only against int32."""
    if tokenizer is None:
        top = max((int(a.max()) for d in docs for a in d.arrays() if len(a)), default=0)
        return FollowerCounter(ID_MAX + 1, chunk_tokens, vocab_name="int32 token ids", id_bound=top + 1)
    name = f"the {tokenizer.name} vocabulary"
    if getattr(tokenizer, "bundled", False):
        name = f"the bundled {tokenizer.name} vocabulary (used because no -m was given; pass -m VOCAB)"
    return FollowerCounter(tokenizer.n_vocab, chunk_tokens, vocab_name=name)


def _count(docs, counter: FollowerCounter, n_tokens: int, progress):
    with _bar(progress, False, "count", n_tokens) as advance:
        for doc in docs:
            counter.add_document(_advancing(doc.arrays(), advance))
    return counter.table()


def _advancing(arrays, advance):
    for ids in arrays:
        yield ids
        advance(len(ids))


def _meta(tokenizer, docs: list[DocTokens], n_tokens: int, max_bytes: int | None, cut: str) -> dict:
    vocab = None if tokenizer is None else {"name": tokenizer.name, "n_vocab": tokenizer.n_vocab,
                                            "fingerprint": tokenizer.fingerprint}
    return {
        "vocab": vocab,
        "corpus": {"sources": [{"source": d.source, "bytes": d.n_bytes, "tokens": d.n_tokens, "sha256": d.sha256,
                                "replaced_bytes": d.replaced_bytes, "cut": d.cut} for d in docs],
                   "n_tokens": n_tokens},
        "build": {"tool": f"lookupkit {__version__}", "ngram": 2, "max_bytes": max_bytes, "cut": cut if max_bytes else None,
                  "count_max": COUNT_MAX,
                  "tokenize": tokenizer_mode(tokenizer) if tokenizer is not None else None, "documents": "one per source, no 2-gram across sources"},
    }


@contextlib.contextmanager
def _timed(phases: dict, peaks: dict, name: str):
    """Record the block's wall time in phases[name] and the peak RSS reached by its end in peaks[name]."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = time.perf_counter() - t0
        peaks[name] = peak_rss_bytes()


@contextlib.contextmanager
def _bar(progress: ProgressFactory | None, bytes_mode: bool, label: str, total: int | None):
    """A progress bar for one phase; yields advance(n). Items/s is shown for token phases."""
    if progress is None:
        yield lambda n: None
        return
    with progress(bytes_mode) as bar:
        task = bar.add_task(label, total=total, rate="")
        t0, done = time.perf_counter(), [0]

        def advance(n: int) -> None:
            done[0] += n
            rate = done[0] / max(time.perf_counter() - t0, 1e-9)
            bar.update(task, advance=n, rate=f"{rate / 1e6:.1f} M tok/s")

        yield advance
        end = max(done[0], 1) if total is None else total
        bar.update(task, total=end, completed=end)


def export_tokens(sources: Sequence, tokenizer, out_path: str | os.PathLike, progress: ProgressFactory | None = None,
                  *, max_bytes: int | None = None, cut: str = "line", cache_dir: str | os.PathLike | None = None) -> dict:
    """Write the corpus' ids (lookup-create's tokenization) as raw little-endian int32 to `out_path`.

    Documents are concatenated in source order; the ids are those lookup-create counts, so
    `lookup-create --tokens OUT` on one source builds the same cache as from the text.
    """

    t_start = time.perf_counter()
    out_path = Path(out_path)
    _check_output(out_path)
    if not sources:
        raise InputError("no corpus given: pass a text file, a dataset or the default corpus")
    for source in sources:
        source.check()
    docs, skipped = _tokenize(sources, tokenizer, TokenStore(cache_dir), Budget(max_bytes, cut), progress)
    try:
        n_tokens = 0
        with atomic_writer(out_path) as f:
            for doc in docs:
                for ids in doc.arrays():
                    f.write(np.ascontiguousarray(ids, dtype="<i4").tobytes())
                    n_tokens += len(ids)
    finally:
        for doc in docs:
            doc.close()
    return {"output": str(out_path), "tokens": n_tokens, "bytes": sum(d.n_bytes for d in docs),
            "documents": len(docs), "skipped_sources": skipped, "vocab": tokenizer.name,
            "fingerprint": tokenizer.fingerprint, "seconds": round(time.perf_counter() - t_start, 3),
            "peak_rss_bytes": peak_rss_bytes()}
