"""Tokenizing and counting in N processes, with the ids and counts of one process.

The driver streams a text source, cuts it at safe cuts (`tokenized.is_cut`: the ids of the pieces
concatenated are the ids of the whole text) into pieces of about PIECE_BYTES, and hands each piece to
the least busy worker (forked, so the tokenizer is shared, not pickled). A worker tokenizes its piece
(BOS only on the document's first piece, EOS and the "\\n" strip only on its last, as the serial path
does) and counts the triples inside it with its own `SpillingCounter`; the driver counts the few
triples that straddle two pieces (the last two ids of one, the first two of the next) and, with a
token store, writes the ids in order with a checkpoint at every cut. Counting is a sum, so any
assignment of pieces to workers gives the same counts. With jobs=1 the tasks run in the driver.

A worker that dies (killed, out of memory) fails the build with one line naming it; the caller's
temporary directory and atomic writer leave nothing behind.
"""

from __future__ import annotations

import copy
import hashlib
import multiprocessing as mp
import os
import queue
import signal
import traceback
from dataclasses import dataclass

import numpy as np

from lookupkit.counts.runs import merge_range
from lookupkit.counts.spill import SpillingCounter
from lookupkit.errors import InputError, LookupkitError
from lookupkit.tokenizer.store import HEAD_BYTES, Checkpoint, TokenStore
from lookupkit.corpora.stream import Consumed, Utf8Decoder
from lookupkit.create.tokenized import DocTokens, next_cut, tokenizer_mode

PIECE_BYTES = 4 * 2**20
IDS_PIECE = 8 * 2**20  # tokens per counting task for token-id sources


class WorkerDied(LookupkitError):
    """A worker process ended without finishing its task."""


@dataclass
class CountedDoc(DocTokens):
    """A document whose ids were counted as they were made (its parts hold them only if stored)."""

    counted_tokens: int = 0

    @property
    def n_tokens(self) -> int:
        return self.counted_tokens


@dataclass(frozen=True)
class CounterSpec:
    """How every process builds its SpillingCounter."""

    n_vocab: int
    vocab_name: str
    id_bound: int | None
    spill_dir: str
    limit_bytes: int
    chunk_tokens: int

    def make(self) -> SpillingCounter:
        return SpillingCounter(self.n_vocab, self.spill_dir, self.limit_bytes, self.chunk_tokens,
                               vocab_name=self.vocab_name, id_bound=self.id_bound)


class _State:
    def __init__(self, tokenizer, spec: CounterSpec):
        self.tokenizer, self.spec, self.counter = tokenizer, spec, None

    def run(self, task):
        kind = task[0]
        if kind in ("text", "ids"):
            if self.counter is None:
                self.counter = self.spec.make()
            if kind == "text":
                _, idx, data, first, last, want_ids = task
                decoder = Utf8Decoder()
                ids = self.tokenizer.encode_segment(decoder.decode(data, final=True), first=first, last=last)
                replaced = decoder.replaced_bytes
            else:
                _, idx, ids, doc_no, offset = task
                want_ids, replaced = False, 0
                self.counter.n_documents, ids = doc_no, np.asarray(ids)
                self.counter._check_ids(ids, offset)
            ids = np.asarray(ids, dtype=np.int32)
            self.counter.add_document(ids)
            return ("piece", idx, len(ids), ids[:2].copy(), ids[-2:].copy(), replaced, ids if want_ids else None)
        if kind == "finish":
            runs = self.counter.finish() if self.counter is not None else []
            self.counter = None
            return ("runs", runs)
        if kind == "merge":
            _, i, runs, lo, hi, stem = task
            return ("part", i, merge_range(runs, lo, hi, stem))
        raise AssertionError(kind)


def _serve(wid: int, tasks, results, state: _State) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops us
    while True:
        task = tasks.get()
        if task is None:
            return
        try:
            results.put((wid, state.run(task)))
        except BaseException as exc:  # reported, never silent
            results.put((wid, ("error", _describe(exc), traceback.format_exc())))


def _describe(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, OSError) and exc.errno == 28:
        return ("nospace", exc.filename or "")
    if isinstance(exc, LookupkitError):
        return ("lookupkit", str(exc))
    return ("bug", f"{type(exc).__name__}: {exc}")


class Workers:
    """`jobs` forked worker processes (jobs == 1: tasks run inline), least-busy dispatch."""

    MAX_IN_FLIGHT = 2

    def __init__(self, jobs: int, tokenizer, spec: CounterSpec):
        self.jobs, self.state = jobs, _State(tokenizer, spec)
        self.procs, self.tasks, self.busy, self.done = [], [], [], []
        if jobs > 1:
            ctx = mp.get_context("fork")
            self.results = ctx.Queue()
            for wid in range(jobs):
                q = ctx.Queue()  # (a feeder thread: put never blocks the driver on a busy worker)
                p = ctx.Process(target=_serve, args=(wid, q, self.results, self.state), daemon=True,
                                name=f"lookupkit-worker-{wid}")
                p.start()
                self.procs.append(p)
                self.tasks.append(q)
                self.busy.append(0)

    def submit(self, task, wid: int | None = None) -> list:
        """Queue `task` (on worker `wid`, or the least busy); returns the results that came back meanwhile."""
        if self.jobs == 1:
            self.done.append(_checked(self.state.run(task)))
            return self._drain()
        got = []
        while wid is None and min(self.busy) >= self.MAX_IN_FLIGHT:
            got.append(self._get())
        wid = min(range(self.jobs), key=self.busy.__getitem__) if wid is None else wid
        self.tasks[wid].put(task)
        self.busy[wid] += 1
        return got + self._drain()

    def _drain(self) -> list:
        out, self.done = self.done, []
        return out

    def wait_all(self) -> list:
        """Every outstanding result."""
        got = self._drain()
        while sum(self.busy):
            got.append(self._get())
        return got

    def broadcast(self, task) -> list:
        """Run `task` once on every worker; their results (plus any outstanding ones)."""
        if self.jobs == 1:
            return self.submit(task)
        got = self.wait_all()
        for wid in range(self.jobs):
            self.submit(task, wid)
        return got + self.wait_all()

    def _get(self):
        while True:
            try:
                wid, result = self.results.get(timeout=0.5)
            except queue.Empty:
                for wid, p in enumerate(self.procs):
                    if not p.is_alive():
                        raise WorkerDied(f"worker process {wid} (pid {p.pid}) died ({_exit_reason(p.exitcode)}) "
                                         "during the build; nothing was written") from None
                continue
            self.busy[wid] -= 1
            return _checked(result)

    def close(self) -> None:
        for q, p in zip(self.tasks, self.procs):
            if p.is_alive():
                try:
                    q.put(None)
                except OSError:
                    pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _checked(result):
    if result[0] != "error":
        return result
    (what, text), trace = result[1], result[2]
    if what == "nospace":
        raise InputError(f"no space left on device writing temporary files{' in ' + os.path.dirname(text) if text else ''}"
                         " (temporary files removed; free space or set TMPDIR to a larger disk)")
    if what == "lookupkit":
        raise InputError(text)
    raise RuntimeError(f"a worker failed: {text}\n{trace}")


class Boundaries:
    """Orders the pieces' results and keeps the triples that straddle two pieces of a document."""

    def __init__(self):
        self.pending: dict[int, tuple] = {}
        self.next = 0  # the next piece to take in order
        self.issued = 0  # pieces handed out so far
        self.tail = np.empty(0, np.int32)
        self.joints: list[np.ndarray] = []  # short id arrays whose triples all straddle a cut

    def start_document(self) -> None:
        self.tail = np.empty(0, np.int32)

    def add(self, result, on_piece=None) -> None:
        _, idx, n, head, tail, replaced, ids = result
        self.pending[idx] = (n, head, tail, replaced, ids)
        while self.next in self.pending:
            n, head, tail, replaced, ids = self.pending.pop(self.next)
            joint = np.concatenate([self.tail, head])
            if len(self.tail) and len(joint) >= 3:
                self.joints.append(joint)
            self.tail = np.concatenate([self.tail, tail])[-2:] if n < 2 else tail
            if on_piece is not None:
                on_piece(self.next, n, replaced, ids)
            self.next += 1


def tokenize_count(source, text_budget, tokenizer, workers: Workers, bounds: Boundaries, writer, on_bytes,
                   piece_bytes: int | None = None) -> CountedDoc:
    """Tokenize and count one text source in `workers`; `writer` (a token store EntryWriter or None)
    receives the ids in order. `on_bytes(n)` hears of a piece's bytes when its ids come back, not when it is
    read (the driver reads up to MAX_IN_FLIGHT pieces per worker ahead of the tokenizers)."""
    consumed = Consumed(source.blocks(), text_budget)
    sha, buf, start, first = hashlib.sha256(), bytearray(), 0, True
    cuts: dict[int, tuple[int, int, str]] = {}  # piece -> (its bytes, end byte, sha256 of the bytes before it)
    totals = {"tokens": 0, "replaced": 0}
    bounds.start_document()

    def on_piece(idx, n, replaced, ids):
        totals["tokens"] += n
        totals["replaced"] += replaced
        size, end, digest = cuts.pop(idx)
        on_bytes(size)
        if writer is not None:
            writer.add(ids)
            if digest is not None:
                writer.checkpoint(Checkpoint(end, writer.n_tokens, digest, totals["replaced"]))

    def send(data, last, end, size):
        nonlocal first
        idx, bounds.issued = bounds.issued, bounds.issued + 1
        cuts[idx] = (size, end, None if last else sha.hexdigest())
        first, was_first = False, first
        for r in workers.submit(("text", idx, bytes(data), was_first, last, writer is not None)):
            bounds.add(r, on_piece)

    piece_bytes = piece_bytes or PIECE_BYTES
    scan = piece_bytes
    for block in consumed:
        buf += block
        while len(buf) >= scan + 2:
            c = next_cut(buf, scan)
            if c is None:
                scan = max(scan, len(buf) - 3)
                break
            sha.update(memoryview(buf)[:c])
            start += c
            send(buf[:c], False, start, c)
            del buf[:c]
            scan = piece_bytes
    sha.update(buf)
    end = start + len(buf)
    doc = CountedDoc(source.describe(), n_bytes=end, sha256=sha.hexdigest())
    if end:
        strip = 1 if buf.endswith(b"\n") else 0
        send(buf[:len(buf) - strip], True, end, len(buf))
    for r in workers.wait_all():
        bounds.add(r, on_piece)
    doc.cut, doc.replaced_bytes, doc.counted_tokens = consumed.cut, totals["replaced"], totals["tokens"]
    if writer is not None and end:
        writer.finish(end, doc.sha256, replaced_bytes=doc.replaced_bytes, source=doc.source)
    return doc


def count_ids(arrays, workers: Workers, bounds: Boundaries, doc_no: int) -> None:
    """Count one document of token ids (an iterable of int32 arrays) in `workers`."""
    bounds.start_document()
    offset = 0
    for ids in arrays:
        for s in range(0, len(ids), IDS_PIECE):
            piece = np.asarray(ids[s:s + IDS_PIECE])
            idx, bounds.issued = bounds.issued, bounds.issued + 1
            for r in workers.submit(("ids", idx, piece, doc_no, offset)):
                bounds.add(r)
            offset += len(piece)
    for r in workers.wait_all():
        bounds.add(r)


def stored_lookup(source, text_budget, tokenizer, store) -> tuple[str, bool]:
    """The token store's lookup key of `source` (from its first HEAD_BYTES as consumed under `text_budget`,
    which is not charged) and whether the store holds an entry to reuse (store None: never)."""
    head = bytearray()
    blocks = iter(Consumed(source.blocks(), copy.copy(text_budget)))
    for block in blocks:
        head += block
        if len(head) >= HEAD_BYTES:
            break
    blocks.close()
    mode = tokenizer_mode(tokenizer)
    lookup = TokenStore.lookup_key(hashlib.sha256(head[:HEAD_BYTES]).hexdigest(), tokenizer.fingerprint, mode)
    if store is None or not head:
        return lookup, False
    found = store.candidates(lookup, tokenizer.fingerprint, mode)
    for entry in found:
        entry.close()
    return lookup, bool(found)
