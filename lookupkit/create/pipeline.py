"""The lookup-create pipeline: corpus sources → token ids (via the token store) → 2-gram counts → file.

Four timed phases, each with an optional progress bar: tokenize (text sources through the token
store, or, with jobs > 1 and nothing stored yet, tokenized and counted at once by worker processes;
token files are used as they are), count (exact follower counts of what was not counted yet, in
sorted runs spilled to a work directory beyond the memory budget), merge (a k-way merge of the runs,
one key range per task), write (streamed from the merged parts: formats.streamed); `orders` and `index`
(the suffix index: lookupkit.suffix.write, built into the work directory, copied in by the writer) come
after counting, while the documents' ids are at hand. Every source is one document, as if each had been
given to llama.cpp's lookup-create on its own and the caches merged. The summary reports sizes,
seconds per phase and the process's peak RSS.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from lookupkit._version import __version__
from lookupkit.create.memory_budget import check_write, children_peak_rss, disk_errors, plan_memory, work_dir
from lookupkit.create.parallel import (Boundaries, CountedDoc, CounterSpec, Workers, count_ids, stored_lookup,
                                      tokenize_count)
from lookupkit.create.tokenized import DocTokens, token_doc, tokenize_source, tokenizer_mode
from lookupkit.corpora.stream import TextBudget
from lookupkit.counts.bigrams import CHUNK_TOKENS
from lookupkit.counts.high_orders import count_order, follower_bits
from lookupkit.counts.runs import key_ranges
from lookupkit.errors import InputError
from lookupkit.files import atomic_writer, check_writable
from lookupkit.formats import BY_NAME, format_for_path
from lookupkit.formats.streamed import write_parts
from lookupkit.formats.lkc_orders import HighOrders, OrderParams
from lookupkit.files import peak_rss_bytes
from lookupkit.rules import COUNT_MAX, ID_MAX
from lookupkit.suffix import write as suffix_write
from lookupkit.tokenizer.store import TokenStore

LISTED_SOURCES = 32  # sources listed one by one in a cache's header (header_corpus)

ProgressFactory = Callable[[], "contextlib.AbstractContextManager"]  # a rich Progress with a {rate} column


def build_static(sources: Sequence, tokenizer, out_path: str | os.PathLike, format: str | None = None,
                 keys: bool = True, progress: ProgressFactory | None = None, *, max_bytes: int | None = None,
                 cut: str = "line", cache_dir: str | os.PathLike | None = None, token_cache: bool = True,
                 chunk_tokens: int = CHUNK_TOKENS, jobs: int = 1, memory_budget: int | None = None,
                 temp_dir: str | os.PathLike | None = None, ray: str | None = None,
                 orders: OrderParams | None = None, suffix_index: bool = False) -> dict:
    """Build a static 2-gram cache from `sources` and write it to `out_path`; returns the summary.

    `max_bytes` limits the text read across the sources in order, cut at the last line end within it
    (`cut="line"`) or after exactly `max_bytes` bytes (`cut="byte"`). Tokens are
    cached under `cache_dir` (default $LOOKUPKIT_CACHE_DIR or ~/.cache/lookupkit) unless
    `token_cache` is False, in which case they go to a temporary directory removed afterwards.
    `tokenizer` None (token-id sources only): the cache records no vocabulary and accepts any id in
    0..2^31-1, as llama.cpp does. `jobs` processes tokenize and count; counting holds about
    `memory_budget` bytes (default DEFAULT_MEMORY_BUDGET) and spills sorted runs to `temp_dir` (default: the
    system's) beyond it; `ray` ("local" or a cluster address) runs tokenizing and counting as Ray tasks.
    Every combination writes the same bytes. `orders` (formats.lkc_orders.OrderParams) also counts the
    higher orders lookupkit's policy drafts from, into a version-2 .lkc; their counting needs the ids of
    every document in the driver, so text is then tokenized by the driver (jobs still count 2-grams).
    `suffix_index` also builds the corpus' suffix index (version 3 .lkc; the same driver rule), sorted within
    `memory_budget` (lookupkit.suffix.write.BYTES_PER_TOKEN_TO_BUILD per position, in parts merged out of
    core beyond it; a budget too small for a part is refused once the corpus is tokenized, before counting).
    """

    t_start = time.perf_counter()
    out_path = Path(out_path)
    check_writable(out_path)
    fmt = format_for_path(out_path, format)
    if not sources:
        raise InputError("no corpus given: pass a text file, a dataset, token ids or the default corpus")
    if max_bytes is not None and any(s.kind == "tokens" for s in sources):
        raise InputError("--max-bytes limits text sources; it cannot be combined with token-id files")
    if tokenizer is None and any(s.kind != "tokens" for s in sources):
        raise InputError("text sources need a vocabulary to be tokenized with")
    plan = plan_memory(jobs, memory_budget, chunk_tokens)
    if orders is not None and (not BY_NAME[fmt].has_orders or ray is not None):
        raise InputError("--orders above 2 writes a .lkc file and runs locally (no --ray); "
                         f"got {'--ray' if ray is not None else fmt + ' output'}")
    if suffix_index and (not BY_NAME[fmt].has_suffix or ray is not None):
        raise InputError("--suffix-index writes a .lkc file and runs locally (no --ray); "
                         f"got {'--ray' if ray is not None else fmt + ' output'}")
    for source in sources:
        source.check()
    scratch = contextlib.nullcontext(cache_dir) if token_cache else tempfile.TemporaryDirectory(prefix="lookupkit-")
    with scratch as root, work_dir(temp_dir) as work:
        phases: dict[str, float] = {}
        peaks: dict[str, int] = {}
        spec = CounterSpec(*_vocab_bounds(tokenizer, sources), spill_dir=work, limit_bytes=plan.per_job,
                           chunk_tokens=plan.chunk_tokens)
        if orders is not None:
            orders = dataclasses.replace(orders, follower_bits=follower_bits(spec.id_bound or spec.n_vocab))
        if suffix_index:
            suffix_write.check_ids(tokenizer.n_vocab - 1 if tokenizer is not None else (spec.id_bound or 1) - 1)
        high = suffix = None
        if ray is not None:
            from lookupkit.create.ray_tasks import count_on_ray

            with _timed(phases, peaks, "tokenize"):
                docs, skipped, parts = count_on_ray(ray, sources, tokenizer, spec, TextBudget(max_bytes, cut), plan, work)
        else:
            docs, skipped, parts, high, suffix = _count_local(sources, tokenizer, TokenStore(root),
                                                              TextBudget(max_bytes, cut), plan, spec, work, token_cache,
                                                              progress, phases, peaks, orders, suffix_index)
        n_tokens = sum(d.n_tokens for d in docs)
        n_keys = sum(p.n_keys for p in parts)
        if n_tokens == 0:
            raise InputError("empty token stream: the corpus produced no tokens")
        if n_keys == 0:
            raise InputError(f"no 2-grams: the corpus has {n_tokens} tokens, and a 2-gram with a follower "
                             "needs 3 tokens in one document")
        check_write(plan, n_keys)
        meta = _meta(tokenizer, docs, n_tokens, max_bytes, cut)
        with _timed(phases, peaks, "write"), _bar(progress, False, "write", None), disk_errors(work):
            write_parts(parts, out_path, fmt, {**meta, "corpus": header_corpus(meta["corpus"])}, keys, high, suffix)
    phases["total"] = time.perf_counter() - t_start
    merge = phases.pop("merge", 0.0)
    phases["count"] = phases.get("count", 0.0) + merge  # (the summary's phases: tokenize, count, write)
    orders_s, index_s = phases.pop("orders", None), phases.pop("index", None)
    return {
        "output": str(out_path), "format": fmt, "file_bytes": out_path.stat().st_size,
        "vocab": meta["vocab"], "sources": meta["corpus"]["sources"], "skipped_sources": skipped,
        "n_bytes": sum(d.n_bytes for d in docs), "n_tokens": n_tokens,
        "reused_tokens": sum(d.reused_tokens for d in docs), "n_2grams": n_keys,
        "n_pairs": sum(p.n_pairs for p in parts),
        "replaced_bytes": sum(d.replaced_bytes for d in docs), "max_bytes": max_bytes, "cut": cut,
        "token_cache": str(TokenStore(root).root) if token_cache else None,
        "jobs": plan.jobs, "memory_budget": plan.total, "ray": ray, "merge_seconds": round(merge, 3),
        "orders": ([2, *orders.orders] if orders else [2]), "orders_seconds": orders_s and round(orders_s, 3),
        "n_high_order_keys": {n: len(k) for n, (k, _) in high.maps.items()} if high else {},
        "suffix_index": suffix and {"positions": suffix.header["n"], "documents": suffix.header["n_documents"],
                                    "bytes": sum(suffix.nbytes(s) for s in suffix.shapes), "seconds": round(index_s, 3),
                                    "sorted_in_parts": suffix.parts, "merge_compared_tokens": suffix.compared},
        "seconds": {k: round(v, 3) for k, v in phases.items()}, "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_bytes_by_end_of": peaks, "workers_peak_rss_bytes": children_peak_rss(),
    }


def _vocab_bounds(tokenizer, sources) -> tuple[int, str, int | None]:
    """(n_vocab, vocabulary name for errors, id bound) of the counters, as `_counter` decided them."""
    if tokenizer is None:
        top = max((int(a.max()) for s in sources for a in s.arrays() if len(a)), default=0)
        return ID_MAX + 1, "int32 token ids", top + 1
    name = f"the {tokenizer.name} vocabulary"
    if getattr(tokenizer, "bundled", False):
        name = f"the bundled {tokenizer.name} vocabulary (used because no -m was given; pass -m VOCAB)"
    return tokenizer.n_vocab, name, None


def _count_local(sources, tokenizer, store, text_budget, plan, spec, work, token_cache, progress, phases, peaks,
                 orders=None, suffix_index=False):
    """Tokenize and count in `plan.jobs` processes; merge by key range. Returns (docs, skipped, parts, the
    higher orders or None, the suffix index's lookupkit.suffix.write.Part or None)."""
    high = suffix = None
    workers = Workers(plan.jobs, tokenizer, spec)
    try:
        with disk_errors(work):
            bounds, docs, skipped = Boundaries(), [], []
            with _timed(phases, peaks, "tokenize"):
                fresh = []
                for i, source in enumerate(sources):  # text nobody stored yet: tokenized and counted at once
                    if (plan.jobs > 1 and orders is None and not suffix_index and source.kind != "tokens"
                            and tokenizer.cuttable
                            and not text_budget.exhausted):
                        lookup, stored = stored_lookup(source, text_budget, tokenizer, store if token_cache else None)
                        if not stored:
                            fresh.append(i)
                            doc = _parallel_doc(source, text_budget, tokenizer, store, lookup, token_cache, workers,
                                                bounds, progress)
                            (docs.append(doc) if doc.n_bytes else skipped.append(source.describe()))
                            continue
                    d, s = _tokenize([source], tokenizer, store, text_budget, progress)
                    docs += d
                    skipped += s
            if suffix_index:  # (before counting: a refusal costs no more than the tokenizing)
                suffix_write.part_positions(_positions(docs), plan.total)
            try:
                with _timed(phases, peaks, "count"):
                    _count_docs([(n, d) for n, d in enumerate(docs) if not isinstance(d, CountedDoc)], workers,
                                bounds, progress)
                    runs = [r for res in workers.broadcast(("finish",)) for r in res[1]]
                    runs += _joints(bounds, spec)
                if orders is not None:
                    with _timed(phases, peaks, "orders"), _bar(progress, False, "orders", None):
                        ids = [list(d.arrays()) for d in docs]
                        high = HighOrders(orders, {n: count_order(ids, n, orders) for n in orders.orders})
                if suffix_index:
                    suffix = _suffix_part(docs, work, plan.total, progress, phases, peaks)
            finally:
                for doc in docs:
                    doc.close()
            with _timed(phases, peaks, "merge"):
                ranges = key_ranges(runs, plan.ranges, spec.id_bound or spec.n_vocab)
                got = []
                for i, (lo, hi) in enumerate(ranges):
                    got += workers.submit(("merge", i, runs, lo, hi, os.path.join(work, f"part-{i:04d}")))
                got += workers.wait_all()
                parts = [part for _, _, part in sorted(got, key=lambda r: r[1])]
                for r in runs:
                    r.remove()
    finally:
        workers.close()
    return docs, skipped, parts, high, suffix


def _suffix_part(docs, work, budget, progress, phases, peaks):
    """The suffix index of the documents (one SEPARATOR after each), built into the work directory."""
    n = _positions(docs)
    with _timed(phases, peaks, "index"), _bar(progress, False, "index", n) as advance:
        return suffix_write.build_part((d.arrays() for d in docs), n, os.path.join(work, "suffix.raw"), advance,
                                       budget)


def _positions(docs) -> int:
    """The suffix index's text length: every id and one SEPARATOR per document."""
    return sum(d.n_tokens for d in docs) + len(docs)


def _parallel_doc(source, text_budget, tokenizer, store, lookup, token_cache, workers, bounds, progress):
    size = _text_total([source], text_budget)
    with _bar(progress, True, "tokenize+count", size) as advance:
        if not token_cache:
            return tokenize_count(source, text_budget, tokenizer, workers, bounds, None, advance)
        with store.writer(lookup, tokenizer.fingerprint, tokenizer_mode(tokenizer)) as writer:
            doc = tokenize_count(source, text_budget, tokenizer, workers, bounds, writer, advance)
            if not doc.n_bytes:
                writer.finish(0, doc.sha256)
        if writer.entry is not None:
            writer.entry.close()
        return doc


def _count_docs(docs, workers, bounds, progress) -> None:
    total = sum(d.n_tokens for _, d in docs)
    with _bar(progress if total else None, False, "count", total) as advance:
        for n, doc in docs:
            count_ids(_advancing(doc.arrays(), advance), workers, bounds, n)


def _joints(bounds: Boundaries, spec: CounterSpec) -> list:
    """The runs of the triples that straddle two pieces (counted here, in the driver)."""
    counter = spec.make()
    for joint in bounds.joints:
        counter.add_document(joint)
    return counter.finish()


def _tokenize(sources, tokenizer, store, text_budget, progress) -> tuple[list[DocTokens], list[str]]:
    docs, skipped = [], []
    total = _text_total(sources, text_budget)
    has_text = any(s.kind != "tokens" for s in sources)
    with _bar(progress if has_text else None, True, "tokenize", total) as advance:
        for source in sources:
            if text_budget.exhausted:
                skipped.append(source.describe())
            elif source.kind == "tokens":
                docs.append(token_doc(source))
            else:
                doc = tokenize_source(source, text_budget, tokenizer, store, advance)
                if doc.n_bytes:
                    docs.append(doc)
                else:  # --max-bytes ended before this source's first line end
                    skipped.append(source.describe())
    return docs, skipped


def _text_total(sources, text_budget) -> int | None:
    """Bytes of text the sources will give under --max-bytes (None if a size is unknown): a bar's total."""
    sizes = [s.size for s in sources if s.kind != "tokens"]
    if None in sizes:
        return None
    return sum(sizes) if text_budget.left is None else min(sum(sizes), max(text_budget.left, 0))


def _advancing(arrays, advance):
    for ids in arrays:
        yield ids
        advance(len(ids))


def _source_entry(d: DocTokens) -> dict:
    return {"source": d.source, "bytes": d.n_bytes, "tokens": d.n_tokens, "sha256": d.sha256,
            "replaced_bytes": d.replaced_bytes, "cut": d.cut}


def header_corpus(corpus: dict) -> dict:
    """The corpus as the file's header keeps it: the first LISTED_SOURCES sources one by one, the rest in one
    entry (count, bytes, tokens, replaced bytes, whether any was cut, sha256 of their sha256s in order). The
    header is parsed at every open: a code base's files listed one by one put the open beyond the 1 ms target
    (bench/RESULTS.md: Figures the code's comments rely on)."""
    sources = corpus["sources"]
    if len(sources) <= LISTED_SOURCES:
        return corpus
    rest = sources[LISTED_SOURCES:]
    digest = hashlib.sha256("".join(str(x["sha256"]) for x in rest).encode()).hexdigest()
    more = {"count": len(rest), "bytes": sum(x["bytes"] for x in rest), "tokens": sum(x["tokens"] for x in rest),
            "replaced_bytes": sum(x["replaced_bytes"] for x in rest), "cut": any(x["cut"] for x in rest),
            "sha256_of_sha256s": digest}
    return {**corpus, "sources": sources[:LISTED_SOURCES], "more_sources": more}


def _meta(tokenizer, docs: list[DocTokens], n_tokens: int, max_bytes: int | None, cut: str) -> dict:
    vocab = None if tokenizer is None else {"name": tokenizer.name, "n_vocab": tokenizer.n_vocab,
                                            "fingerprint": tokenizer.fingerprint}
    return {
        "vocab": vocab,
        "corpus": {"sources": [_source_entry(d) for d in docs], "n_tokens": n_tokens},
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
    """A progress bar for one phase; yields advance(n), to be called with work done (bytes tokenized, tokens
    counted), never with work read. The `rate` field is that work per wall second since the phase began
    (MB/s of text, M tok/s): pieces come back from the workers in bursts, and an estimate over a short
    window of bursts (rich's TransferSpeedColumn) showed many times the real rate. At the end the total becomes
    what was done (a --max-bytes line cut, an unknown size): completed never jumps."""
    if progress is None:
        yield lambda n: None
        return
    unit = "MB/s" if bytes_mode else "M tok/s"
    with progress() as bar:
        task = bar.add_task(label, total=total, rate="")
        t0, done = time.perf_counter(), [0]

        def advance(n: int) -> None:
            done[0] += n
            rate = done[0] / max(time.perf_counter() - t0, 1e-9)
            bar.update(task, advance=n, rate=f"{rate / 1e6:.1f} {unit}")

        yield advance
        end = max(done[0], 1)
        bar.update(task, total=end, completed=end)


def export_tokens(sources: Sequence, tokenizer, out_path: str | os.PathLike, progress: ProgressFactory | None = None,
                  *, max_bytes: int | None = None, cut: str = "line", cache_dir: str | os.PathLike | None = None) -> dict:
    """Write the corpus' ids (lookup-create's tokenization) as raw little-endian int32 to `out_path`.

    Documents are concatenated in source order; the ids are those lookup-create counts, so
    `lookup-create --tokens OUT` on one source builds the same cache as from the text.
    """

    t_start = time.perf_counter()
    out_path = Path(out_path)
    check_writable(out_path)
    if not sources:
        raise InputError("no corpus given: pass a text file, a dataset or the default corpus")
    for source in sources:
        source.check()
    docs, skipped = _tokenize(sources, tokenizer, TokenStore(cache_dir), TextBudget(max_bytes, cut), progress)
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
