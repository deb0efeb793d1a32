"""Tokenized corpora kept on disk, so each corpus is tokenized once per vocabulary.

An entry is one document's token ids as independent zstd frames of little-endian int32, followed by
a JSON index: the frames, the document's size and sha256, and checkpoints (byte offset, token offset,
sha256 of the bytes before it) at line ends where the tokenizer may cut. A later build whose bytes
match an entry up to a checkpoint reuses the tokens before it (see lookupkit/create/tokenized.py).

File: b"LKTOK001" | frames | index (UTF-8 JSON) | u64 LE index length | b"LKTOK001", the `.lkt` layout
that lookupkit.formats.token_store writes and reads (formats/SPEC.md); this module is the cache around it.
Name: `<lookup>-<key>.lkt` in `$LOOKUPKIT_CACHE_DIR/tokens` (default ~/.cache/lookupkit/tokens), where
key = sha256(document sha256, vocab fingerprint, mode) and lookup = sha256(sha256 of the first
HEAD_BYTES, vocab fingerprint, mode)[:16], the part a prefix of the same corpus shares. Entries are
read through an mmap of the compressed file, frame by frame; writes are atomic. An entry that does
not parse is ignored (it is a cache); a frame that fails its zstd checksum is a FormatError.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import zstandard

from ..files import atomic_writer
from ..files import default_root, ensure_dir
from ..errors import FormatError, InputError
from ..formats import token_store

FRAME_TOKENS = 2**20  # ids per frame as written (a reader takes frames of any size)
HEAD_BYTES = 2**20


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    """The first `token` ids are the ids of the first `byte` bytes, whose sha256 is `sha256` and
    whose decoding replaced `replaced` invalid UTF-8 bytes."""

    byte: int
    token: int
    sha256: str
    replaced: int


class Entry:
    """One stored token stream, mapped read-only."""

    def __init__(self, path: Path, mm: mmap.mmap, index: dict):
        self.path = path
        self._mm = mm
        self.index = index
        self.n_tokens: int = index["n_tokens"]
        self.n_bytes: int = index["n_bytes"]
        self.sha256: str = index["sha256"]
        self.checkpoints = [Checkpoint(*c) for c in index["checkpoints"]]
        self._frames = index["frames"]  # [offset, length, n_tokens]

    @classmethod
    def open(cls, path: Path) -> "Entry | None":
        """The entry at `path`, or None if it is not a complete, consistent entry."""
        try:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        try:
            index = token_store.read_index(mm)
        except FormatError:
            mm.close()
            return None
        return cls(path, mm, index)

    def arrays(self, stop: int | None = None) -> Iterator[np.ndarray]:
        """The first `stop` ids (all by default), one decompressed frame at a time."""
        stop = self.n_tokens if stop is None else stop
        dctx = zstandard.ZstdDecompressor()
        done = 0
        for frame in self._frames:
            if done >= stop:
                break
            try:
                ids = token_store.read_frame(self._mm, frame, dctx, f"token cache entry {self.path}")
            except FormatError as exc:
                raise FormatError(f"{exc}; delete it or build with --no-token-cache") from None
            yield ids[:stop - done]
            done += len(ids)

    def close(self) -> None:
        self._mm.close()


class EntryWriter:
    """Streams ids into a new entry; `finish()` names it, and leaving the `with` block commits it.

    Leaving the block without `finish()` (or by an exception) leaves nothing behind.
    """

    def __init__(self, store: "TokenStore", lookup: str, vocab: str, mode: str):
        self._store, self._lookup, self._vocab, self._mode = store, lookup, vocab, mode
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self.checkpoints: list[Checkpoint] = []
        self.n_tokens = 0
        self._final: dict | None = None
        self.entry: Entry | None = None

    def __enter__(self) -> "EntryWriter":
        ensure_dir(self._store.root, "the token cache directory")
        self._tmp = self._store.root / f".incoming-{uuid.uuid4().hex}.lkt"
        self._writer = atomic_writer(self._tmp)
        self._file = token_store.Writer(self._writer.__enter__())
        return self

    def add(self, ids: np.ndarray) -> None:
        if len(ids):
            self._pending.append(np.asarray(ids, dtype="<i4"))
            self._pending_n += len(ids)
            self.n_tokens += len(ids)
            while self._pending_n >= FRAME_TOKENS:
                self._flush(FRAME_TOKENS)

    def checkpoint(self, cp: Checkpoint) -> None:
        self.checkpoints.append(cp)

    def finish(self, n_bytes: int, sha256: str, **info) -> None:
        """Record the document's size and identity; the entry is committed when the block exits."""
        self._final = {"n_bytes": n_bytes, "sha256": sha256, **info}

    def _flush(self, n: int) -> None:
        ids = np.concatenate(self._pending)
        frame, rest = ids[:n], ids[n:]
        self._file.frame(frame)
        self._pending, self._pending_n = ([rest] if len(rest) else []), len(rest)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self._final is None:
            exc_type, exc = InputError, InputError("token store entry abandoned")
        if exc_type is not None:
            self._writer.__exit__(exc_type, exc, tb)
            return
        if self._pending_n:
            self._flush(self._pending_n)
        self._file.close(vocab=self._vocab, mode=self._mode, **self._final,
                         checkpoints=[[c.byte, c.token, c.sha256, c.replaced] for c in self.checkpoints])
        self._writer.__exit__(None, None, None)
        final = self._store.root / f"{self._lookup}-{_digest(self._final['sha256'], self._vocab, self._mode)}.lkt"
        try:
            os.replace(self._tmp, final)
        except OSError as exc:
            raise InputError(f"cannot store tokens in {final}: {exc.strerror or exc}") from None
        self.entry = Entry.open(final)


class TokenStore:
    """The token cache directory (`root`/tokens)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root or default_root()) / "tokens"

    @staticmethod
    def lookup_key(head_sha256: str, vocab: str, mode: str) -> str:
        return _digest(head_sha256, vocab, mode)[:16]

    def candidates(self, lookup: str, vocab: str, mode: str) -> list[Entry]:
        """Stored entries whose first HEAD_BYTES match, longest first."""
        if not self.root.is_dir():
            return []
        found = [e for p in sorted(self.root.glob(f"{lookup}-*.lkt")) if (e := Entry.open(p)) is not None]
        good = [e for e in found if e.index.get("vocab") == vocab and e.index.get("mode") == mode]
        for e in found:
            if e not in good:
                e.close()
        return sorted(good, key=lambda e: -e.n_bytes)

    def writer(self, lookup: str, vocab: str, mode: str) -> EntryWriter:
        return EntryWriter(self, lookup, vocab, mode)
