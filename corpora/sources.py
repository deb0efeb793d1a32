"""Corpus sources: text files (plain or zstd-compressed, read streaming) and token-id files.

A text source is one document (llama.cpp's lookup-create reads one whole file): it yields the raw
bytes in blocks and is validated on its first block (missing, directory, empty, binary), so a bad
corpus fails before any heavy work. A token source yields int32 (or int64) id arrays read from an
mmap; ids are range-checked against the vocabulary by the counter.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np
import zstandard

from lookupkit.errors import InputError
from lookupkit.rules import token_ids
from lookupkit.files import ZSTD_MAGIC, open_input

BLOCK = 4 * 2**20
ZSTD_INPUT = 2**20  # compressed bytes per step (output is ~3-5x for text)
NPY_MAGIC = b"\x93NUMPY"
TOKEN_SLICE = 4 * 2**20


def validated(blocks: Iterator[bytes], name: str) -> Iterator[bytes]:
    """Pass blocks through after checking the first one: not empty, no NUL bytes (binary)."""
    first = next(blocks, b"")
    if not first:
        raise InputError(f"corpus {name} is empty")
    if b"\x00" in first:
        raise InputError(f"corpus {name} looks binary (it contains NUL bytes); a corpus must be text")
    yield first
    yield from blocks


class TextFile:
    """A text corpus file; `.zst` (detected by its magic bytes) is decompressed while streaming."""

    kind = "file"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = str(path)

    def check(self) -> None:
        """Fail now (InputError) if the file cannot be a corpus."""
        blocks = self.blocks()
        next(blocks)
        blocks.close()

    @property
    def size(self) -> int | None:
        """Uncompressed size for progress bars: the file size, or what a zstd file's first frame records
        (the whole size for a single-frame file), or None."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(18)
                if not head.startswith(ZSTD_MAGIC):
                    return os.fstat(f.fileno()).st_size
        except OSError:
            return None
        try:
            size = zstandard.frame_content_size(head)
        except zstandard.ZstdError:
            return None
        return size if size >= 0 else None

    def blocks(self) -> Iterator[bytes]:
        return validated(self._raw_blocks(), self.name)

    def _raw_blocks(self) -> Iterator[bytes]:
        if self.path.is_dir():
            raise InputError(f"corpus {self.path} is a directory; pass the files inside it with -f")
        with open_input(self.path, "corpus") as f:
            try:
                compressed = f.read(4) == ZSTD_MAGIC
                if not compressed and self.path.suffix == ".zst":
                    raise InputError(f"corpus {self.path} is named .zst but is not a zstd stream (no zstd magic)")
                f.seek(0)
                yield from _zstd_blocks(f, self.path) if compressed else iter(lambda: f.read(BLOCK), b"")
            except OSError as exc:
                raise InputError(f"cannot read corpus {self.path}: {exc.strerror or exc}") from None

    def describe(self) -> str:
        return str(self.path)


def _zstd_blocks(f, path: Path) -> Iterator[bytes]:
    """Decompress zstd frames one after another; a stream that ends inside a frame is an error."""
    make = zstandard.ZstdDecompressor(max_window_size=2**31).decompressobj
    obj, pending = make(), b""
    try:
        while True:
            data = pending or f.read(ZSTD_INPUT)
            pending = b""
            if not data:
                break
            if obj.eof:
                obj = make()
            out = obj.decompress(data)
            if obj.eof:
                pending = obj.unused_data
            if out:
                yield out
    except zstandard.ZstdError as exc:
        raise InputError(f"cannot decompress corpus {path}: {exc}") from None
    if not obj.eof:
        raise InputError(f"corpus {path} is a truncated zstd stream (it ends inside a frame)")


class TokenFile:
    """Pre-tokenized ids: raw little-endian int32 (.i32 or any other name) or a 1-D .npy array."""

    kind = "tokens"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.name = str(path)
        self._ids: np.ndarray | None = None

    def ids(self) -> np.ndarray:
        """The ids as a read-only memory map (opened once, validated for shape and dtype)."""
        if self._ids is None:
            self._ids = self._open()
        return self._ids

    def check(self) -> None:
        self.ids()

    @property
    def n_tokens(self) -> int:
        return len(self.ids())

    def arrays(self) -> Iterator[np.ndarray]:
        ids = self.ids()
        for start in range(0, len(ids), TOKEN_SLICE):
            yield ids[start:start + TOKEN_SLICE]

    def describe(self) -> str:
        return str(self.path)

    def _open(self) -> np.ndarray:
        p = self.path
        if p.is_dir():
            raise InputError(f"token file {p} is a directory, not a file")
        with open_input(p, "token file") as f:
            head = f.read(len(NPY_MAGIC))
        ids = self._open_npy() if head == NPY_MAGIC else self._open_raw()
        if len(ids) == 0:
            raise InputError(f"token file {p} holds no tokens (empty token stream)")
        return ids

    def _open_raw(self) -> np.ndarray:
        size = self.path.stat().st_size
        if size % 4:
            raise InputError(f"token file {self.path} is {size} bytes, not a multiple of 4: "
                             "expected raw little-endian int32 ids (.i32) or a .npy array")
        if size == 0:
            return np.empty(0, dtype="<i4")
        return np.memmap(self.path, dtype="<i4", mode="r")

    def _open_npy(self) -> np.ndarray:
        try:
            ids = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise InputError(f"token file {self.path} is not a readable .npy array: {exc}") from None
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.dtype.itemsize not in (4, 8):
            raise InputError(f"token file {self.path} holds a {ids.ndim}-D {ids.dtype} array; "
                             "expected a 1-D int32 or int64 array of token ids")
        return ids


def read_token_file(path: str | os.PathLike) -> np.ndarray:
    """Token ids (--tokens): raw little-endian int32 (.i32 or any name) or a 1-D integer .npy, validated."""
    return token_ids(TokenFile(path).ids(), f"token file {path}")
