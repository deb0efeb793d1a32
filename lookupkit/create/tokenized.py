"""A text source's token ids, tokenized once per corpus and vocabulary through the token store.

A document is tokenized as llama.cpp's lookup-create does it: the consumed bytes, exactly one
trailing "\\n" stripped, `add_special` and `parse_special` on. The text is encoded in segments of
about SEGMENT_BYTES that end at cuts the tokenizer declares safe (`tokenizer.SAFE_CUT`, checked here
on the bytes around each cut), so the ids equal encoding the whole text; each cut becomes a store
checkpoint (byte offset, token offset, sha256 and replaced-byte count of the bytes before it).

Reuse: the document's first HEAD_BYTES select stored entries of the same corpus; the longest is
followed checkpoint by checkpoint while the sha256 of the bytes so far matches (no second pass:
the hash is computed as the bytes stream by). The ids before the last matching checkpoint are
reused and only the rest is tokenized, exactly as a standalone file holding these bytes would be
(BOS only at the start, EOS and the "\\n" strip only at the end). A document that grows past the
stored one or differs from it is stored anew.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from lookupkit._version import __version__
from lookupkit.tokenizer.encode import SAFE_CUT
from lookupkit.tokenizer.store import HEAD_BYTES, Checkpoint, Entry, EntryWriter, TokenStore
from lookupkit.corpora.sources import TextFile
from lookupkit.corpora.stream import Consumed, TextBudget, Utf8Decoder

SEGMENT_BYTES = 2**20
_ASCII_GRAPHIC = range(0x21, 0x7F)
_LETTERS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def tokenizer_mode(tokenizer) -> str:
    """What decides the stored ids besides the vocabulary: call flags and the tokenizer's code."""
    module = sys.modules[type(tokenizer).__module__]
    files = {inspect.getsourcefile(module)}
    for value in vars(module).values():
        owner = value if inspect.ismodule(value) else sys.modules.get(getattr(value, "__module__", "") or "")
        if owner is not None and owner.__name__.split(".")[0] == "lookupkit" and hasattr(owner, "__file__"):
            files.add(owner.__file__)
    code = hashlib.sha256()
    for path in sorted(f for f in files if f):
        with open(path, "rb") as f:
            code.update(f.read())
    engine = getattr(tokenizer, "version", None)  # the llama-cpp-python fallback: ids are that build's tokenizer's
    return (f"lookup-create:add_special=1:parse_special=1:strip_nl=1:lookupkit={__version__}:code={code.hexdigest()[:16]}"
            + (f":llama-cpp-python={engine}" if engine else ""))


def is_cut(b: bytes | bytearray, c: int) -> bool:
    """b[c-1] is a "\\n" where the tokenizer may cut: ASCII bytes around it, confirmed by SAFE_CUT."""
    if not 2 <= c <= len(b) - 2 or b[c - 1] != 0x0A:
        return False
    ok = (b[c - 2] in _ASCII_GRAPHIC and b[c] in _LETTERS) or (b[c] == 0x20 and b[c + 1] in _LETTERS)
    return ok and SAFE_CUT.match(b[c - 2:c + 2].decode("ascii", "replace"), 1) is not None


def next_cut(b: bytes | bytearray, start: int) -> int | None:
    """The first safe cut at or after index `start` with 2 bytes known after it, or None."""
    i = max(start - 1, 0)
    while (i := b.find(b"\n", i, len(b) - 2)) >= 0:
        if is_cut(b, i + 1):
            return i + 1
        i += 1
    return None


@dataclass
class DocTokens:
    """One document's ids (stored entries and in-memory arrays, in order) and its provenance."""

    source: str
    n_bytes: int = 0
    sha256: str = ""
    replaced_bytes: int = 0
    cut: bool = False
    reused_tokens: int = 0
    parts: list = field(default_factory=list)  # (Entry, stop) or np.ndarray

    @property
    def n_tokens(self) -> int:
        return sum(p[1] if isinstance(p, tuple) else len(p) for p in self.parts)

    def arrays(self) -> Iterator[np.ndarray]:
        for part in self.parts:
            if isinstance(part, tuple):
                yield from part[0].arrays(part[1])
            elif len(part):
                yield part

    def close(self) -> None:
        """Unmap the stored entries this document's ids come from (the arrays stay valid only until then)."""
        for part in self.parts:
            if isinstance(part, tuple):
                part[0].close()


def token_doc(source) -> DocTokens:
    """A token-id file as a document (its sha256 is that of the ids as little-endian int32/int64)."""
    ids = source.ids()
    sha = hashlib.sha256()
    for part in source.arrays():
        sha.update(np.ascontiguousarray(part, dtype=part.dtype.newbyteorder("<")).data)
    return DocTokens(source.describe(), n_bytes=ids.nbytes, sha256=sha.hexdigest(), parts=[ids])


def tokenize_source(source, text_budget: TextBudget, tokenizer, store: TokenStore | None,
                    on_bytes: Callable[[int], None] | None = None) -> DocTokens:
    """Tokenize (or reuse) one text source as consumed under `text_budget`; store=None: in memory only.

    `on_bytes(n)` is told of bytes once they are done (tokenized, or reused from the store), never when
    they are read: a progress bar fed by it shows the tokenizer's rate, not the reader's."""
    return _Tokenization(source, text_budget, tokenizer, store, on_bytes or (lambda n: None)).run()


def tokenize_text_file(path, tokenizer) -> np.ndarray:
    """Ids of a text file (-f) as llama.cpp's lookup tools get them: the whole file, one trailing "\\n"
    cut, special tokens added and parsed (lookup-create's document rule), in memory, no token store."""
    doc = tokenize_source(TextFile(path), TextBudget(None), tokenizer, None)
    return np.concatenate([np.asarray(a, dtype=np.int32) for a in doc.arrays()] or [np.empty(0, np.int32)])


class _Tokenization:
    def __init__(self, source, text_budget, tokenizer, store, on_bytes):
        self.source, self.text_budget, self.tok, self.store, self.on_bytes = source, text_budget, tokenizer, store, on_bytes
        self.vocab, self.mode = tokenizer.fingerprint, tokenizer_mode(tokenizer)
        self.sha, self.hashed = hashlib.sha256(), 0
        self.buf, self.buf_start = bytearray(), 0   # bytes from the anchor on, not yet encoded
        self.anchor = Checkpoint(0, 0, self.sha.hexdigest(), 0)
        self.entry: Entry | None = None             # the stored entry being followed (reuse mode)
        self.ahead: deque[Checkpoint] = deque()     # its checkpoints beyond the anchor
        self.tokenizing = False
        self.writer: EntryWriter | None = None
        self.fresh: list[np.ndarray] = []           # ids encoded while no writer is open
        self.decoder: Utf8Decoder | None = None
        self.first = True
        self.scan_from = 0
        self.reported = 0                           # bytes told to on_bytes so far

    def run(self) -> DocTokens:
        consumed = Consumed(self.source.blocks(), self.text_budget)
        blocks = iter(consumed)
        head = bytearray()
        for block in blocks:  # the first HEAD_BYTES select the stored entries to follow
            head += block
            if len(head) >= HEAD_BYTES:
                break
        self.lookup = TokenStore.lookup_key(hashlib.sha256(head[:HEAD_BYTES]).hexdigest(), self.vocab, self.mode)
        candidates = self.store.candidates(self.lookup, self.vocab, self.mode) if head and self.store else []
        if candidates:
            self.entry, self.ahead = candidates[0], deque(candidates[0].checkpoints)
            for other in candidates[1:]:
                other.close()
        try:
            if head:
                self._feed(bytes(head))
            for block in blocks:
                self._feed(block)
            doc = self._finish()
            self._report(doc.n_bytes)
        except BaseException:
            if self.writer is not None:
                self.writer.__exit__(*sys.exc_info())
            raise
        doc.cut = consumed.cut
        return doc

    # -- streaming -------------------------------------------------------------------------
    def _feed(self, block: bytes) -> None:
        self.buf += block
        if not self.tokenizing:
            self._follow_entry()
        if self.tokenizing:
            self._encode_ready_segments()

    def _follow_entry(self) -> None:
        end = self.buf_start + len(self.buf)
        if self.entry is None:
            return self._start_tokenizing(store=self.store is not None)
        while self.ahead and self.ahead[0].byte + 2 <= end:
            cp = self.ahead.popleft()
            self._hash_to(cp.byte)
            if self.sha.copy().hexdigest() != cp.sha256 or not self._is_cut(cp.byte - self.buf_start):
                return self._start_tokenizing(store=True)  # the bytes differ from the stored corpus
            del self.buf[:cp.byte - self.buf_start]
            self.buf_start, self.anchor = cp.byte, cp
            self._report(cp.byte)
        if end > self.entry.n_bytes:
            self._start_tokenizing(store=True)  # longer than the stored corpus: store the longer one

    def _start_tokenizing(self, store: bool) -> None:
        self.tokenizing = True
        self.first = self.anchor.byte == 0
        self.decoder = Utf8Decoder()
        if store:
            self.writer = self.store.writer(self.lookup, self.vocab, self.mode).__enter__()
            if self.anchor.token:
                for ids in self.entry.arrays(self.anchor.token):
                    self.writer.add(ids)
                for cp in self.entry.checkpoints:
                    if cp.byte <= self.anchor.byte:
                        self.writer.checkpoint(cp)

    def _encode_ready_segments(self) -> None:
        if not self.tok.cuttable:
            return
        while (cut := self._next_cut()) is not None:
            pos = self.buf_start + cut
            self._encode(bytes(self.buf[:cut]), last=False)
            hashable = self.hashed <= pos  # False only just after a mismatch: those bytes were hashed
            self._hash_to(pos)
            del self.buf[:cut]
            self.buf_start, self.scan_from = pos, 0
            self._report(pos)
            if hashable and self.writer is not None:
                self.writer.checkpoint(Checkpoint(pos, self.writer.n_tokens, self.sha.copy().hexdigest(),
                                                  self.anchor.replaced + self.decoder.replaced_bytes))

    def _next_cut(self) -> int | None:
        """Index in buf of the first safe cut at least SEGMENT_BYTES in, with 2 bytes known after it."""
        i = max(self.scan_from, SEGMENT_BYTES - 1)
        while (i := self.buf.find(b"\n", i, len(self.buf) - 2)) >= 0:
            if self._is_cut(i + 1):
                return i + 1
            i += 1
        self.scan_from = max(self.scan_from, len(self.buf) - 3)
        return None

    def _is_cut(self, c: int) -> bool:
        return is_cut(self.buf, c)

    def _encode(self, raw: bytes, last: bool) -> None:
        ids = self.tok.encode_segment(self.decoder.decode(raw, final=last), first=self.first, last=last)
        self.first = False
        if self.writer is not None:
            self.writer.add(ids)
        else:
            self.fresh.append(ids)

    def _report(self, pos: int) -> None:
        """The bytes before `pos` are done: tell on_bytes of those it has not heard of."""
        if pos > self.reported:
            self.on_bytes(pos - self.reported)
            self.reported = pos

    def _hash_to(self, pos: int) -> None:
        if pos > self.hashed:
            self.sha.update(memoryview(self.buf)[self.hashed - self.buf_start:pos - self.buf_start])
            self.hashed = pos

    # -- end of the document -------------------------------------------------------------------
    def _finish(self) -> DocTokens:
        end = self.buf_start + len(self.buf)
        self._hash_to(end)
        doc = DocTokens(self.source.describe(), n_bytes=end, sha256=self.sha.hexdigest())
        if end == 0:
            return doc
        if not self.tokenizing and end == self.entry.n_bytes and doc.sha256 == self.entry.sha256:
            doc.replaced_bytes = self.entry.index.get("replaced_bytes", 0)
            doc.reused_tokens = self.entry.n_tokens
            doc.parts = [(self.entry, self.entry.n_tokens)]
            return doc
        if not self.tokenizing:
            self._start_tokenizing(store=False)  # a prefix of the stored corpus: tokenize the tail only
        strip = 1 if self.buf.endswith(b"\n") else 0
        self._encode(bytes(self.buf[:len(self.buf) - strip]), last=True)
        doc.replaced_bytes = self.anchor.replaced + self.decoder.replaced_bytes
        if self.writer is None:
            doc.reused_tokens = self.anchor.token
            if self.anchor.token:
                doc.parts.append((self.entry, self.anchor.token))
            elif self.entry is not None:
                self.entry.close()
            doc.parts += self.fresh
            return doc
        if self.entry is not None:
            doc.reused_tokens = self.anchor.token
            self.entry.close()
        self.writer.finish(end, doc.sha256, replaced_bytes=doc.replaced_bytes, source=doc.source)
        self.writer.__exit__(None, None, None)
        doc.parts = [(self.writer.entry, self.writer.entry.n_tokens)]
        return doc
