"""llama.cpp's legacy n-gram cache file (`-lcs`/`-lcd`), read and written byte-compatibly.

A file is records until EOF, no header: int32 ngram[4] (padded with -1), int32 ntokens (> 0), then
ntokens x (int32 token, int32 count > 0), little-endian. A trailing fragment of a record is refused as
truncation (llama.cpp's loader silently ignores one shorter than 16 bytes, which would read a 5-byte
file as an empty cache). We write records in canonical order (llama.cpp writes hash order,
so files are compared by content, never byte for byte).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import numpy as np

from lookupkit.counts.tables import NgramTable, StaticTable
from lookupkit.errors import FormatError
from lookupkit.files import atomic_writer, map_file, open_input
from lookupkit.formats.lkc_write import in_memory
from lookupkit.formats.mapped import Mapped


def read(data: bytes | memoryview | np.ndarray, name: str = "legacy cache") -> NgramTable:
    """Parse a legacy file's bytes into a canonical NgramTable (first occurrence of duplicates wins)."""
    from lookupkit.formats.llama_scan import scan, split  # (here: only parsing a legacy file needs kernels)

    raw = np.frombuffer(data, dtype=np.uint8)
    words = raw[: len(raw) // 4 * 4].view("<i4")
    n_records, err, where = scan(words)
    if not err and len(raw) % 4:
        err, where = 1, len(words)
    if err:
        what = {1: "ends inside a record (truncated)", 2: "has a record with ntokens <= 0",
                3: "has a follower count <= 0"}[err]
        other = (", nor a cache of any other known format (it has no .lkc, .lkc.zst or ggngcmap magic)"
                 if where == 0 else "")
        raise FormatError(f"{name} is not a valid llama.cpp n-gram cache: it {what} at byte {4 * where}{other}")
    n_pairs = (int(where) - 5 * n_records) // 2
    ngrams = np.empty((n_records, 4), dtype=np.int32)
    offsets = np.empty(n_records + 1, dtype=np.int64)
    pairs = np.empty((n_pairs, 2), dtype=np.int32)
    split(words, n_records, ngrams, offsets, pairs)
    sizes_ok = _valid_padding(ngrams)
    if not sizes_ok:
        raise FormatError(f"{name} is not a valid llama.cpp n-gram cache: an n-gram is not 1..4 tokens padded with -1")
    return NgramTable.canonical(ngrams, offsets, pairs)


def _valid_padding(ngrams: np.ndarray) -> bool:
    """Each n-gram is n >= 1 real tokens (>= 0) followed by -1 padding."""
    real = ngrams >= 0
    pad = ngrams == -1
    if not np.all(real | pad) or not np.all(real[:, 0]):
        return False
    return bool(np.all(~(pad[:, :-1] & real[:, 1:])))


def encode(table: NgramTable) -> np.ndarray:
    """The file's bytes as one int32 array, records in the table's (canonical) order."""
    n = len(table.ngrams)
    lengths = np.diff(table.offsets)
    out = np.empty(5 * n + 2 * len(table.pairs), dtype="<i4")
    starts = 5 * np.arange(n, dtype=np.int64) + 2 * table.offsets[:-1]
    for j in range(4):
        out[starts + j] = table.ngrams[:, j]
    out[starts + 4] = lengths
    run = np.repeat(np.arange(n, dtype=np.int64), lengths)
    pos = starts[run] + 5 + 2 * (np.arange(len(table.pairs), dtype=np.int64) - table.offsets[:-1][run])
    out[pos] = table.pairs[:, 0]
    out[pos + 1] = table.pairs[:, 1]
    return out


def read_file(path: str | os.PathLike) -> NgramTable:
    """A legacy file's n-grams (1..4 tokens); an empty file is an empty cache, as llama.cpp reads it."""
    path = Path(path)
    with open_input(path, "cache file") as f:
        empty = os.fstat(f.fileno()).st_size == 0
    return read(np.empty(0, np.uint8) if empty else map_file(path, "cache file"), str(path))


def read_static(path: str | os.PathLike) -> StaticTable:
    """A legacy file holding 2-grams only (a static cache, -lcs)."""
    try:
        return StaticTable.from_ngrams(read_file(path))
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") if "not a static cache" in str(exc) else exc from None


def save(table: NgramTable, path: str | os.PathLike) -> None:
    """Write `table` as a legacy file, atomically (a failed save leaves `path` untouched)."""
    with atomic_writer(path) as f:
        f.write(encode(table).tobytes())


def write_file(f: BinaryIO, table: StaticTable, meta: dict | None = None, keys: bool = True) -> None:
    """The registry's writer: the legacy file stores its keys always and metadata never."""
    f.write(encode(table.to_ngrams()).tobytes())


def open_file(path: Path) -> Mapped:
    """Parsed (O(n), as llama.cpp loads it) and its constmap built in memory."""
    mapped = in_memory(read_static(path), format="llama")
    mapped.path = path
    return mapped
