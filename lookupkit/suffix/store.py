"""A suffix index alone on disk (no 2-gram table), opened in O(1) by mapping it: what bench/suffix_replay
builds from raw ids. The index's file format is the .lkc version-3 section (formats.lkc_suffix, built by
lookup-create --suffix-index, opened as StaticCache.suffix); this container goes once the bench builds
.lkc files instead.

File: b"LKSUFX01" | u64 LE header length | header (UTF-8 JSON: n, arrays' dtype, length, offset; padded with
spaces to HEADER bytes in all) | arrays from offset HEADER, each at a 64-byte aligned offset: text (int32),
sa (int32 below 2^31 positions), starts (the SA's dtype), second (int32, every SAMPLE-th row's second token).

`build_file` writes the same file from the text in chunks without holding the text or a second SA in
memory: the peak is libdivsufsort's (3 packed bytes + a 3n-entry int32 SA = 15 bytes per token).
"""

from __future__ import annotations

import json
import os
import struct
from typing import Iterable

import numpy as np

from ..errors import FormatError, InputError
from ..files import atomic_writer, map_file
from .build import (MAX_ID, MAX_TEXT, SAMPLE, SEPARATOR, SuffixIndex, pack3, sa_dtype, second_tokens, sort_packed,
                    starts_from_counts)

MAGIC = b"LKSUFX01"
HEADER = 4096  # the arrays start here
_ALIGN = 64
_NAMES = ("text", "sa", "starts", "second")


def _layout(specs: dict[str, tuple[np.dtype, int]]) -> tuple[bytes, dict[str, int]]:
    """The padded header and each array's offset in the file."""
    arrays, offset = {}, 0
    for k in _NAMES:
        dt, n = specs[k]
        arrays[k] = {"dtype": np.dtype(dt).newbyteorder("<").str, "len": n, "offset": offset}
        offset += -(-n * np.dtype(dt).itemsize // _ALIGN) * _ALIGN
    blob = json.dumps({"n": specs["text"][1], "arrays": arrays}, sort_keys=True).encode()
    blob += b" " * (HEADER - len(MAGIC) - 8 - len(blob))
    return MAGIC + struct.pack("<Q", len(blob)) + blob, {k: HEADER + a["offset"] for k, a in arrays.items()}


def _bytes(a: np.ndarray) -> memoryview:
    """The array's bytes, little-endian, without a copy where it already is (the SA is most of the memory)."""
    a = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False)
    return memoryview(a).cast("B")


def _put(f, offsets: dict[str, int], name: str, a: np.ndarray) -> None:
    f.seek(offsets[name])
    f.write(_bytes(a))


def save(index: SuffixIndex, path: str | os.PathLike) -> int:
    """Write the index atomically; returns the file size."""
    header, offsets = _layout({k: (getattr(index, k).dtype, len(getattr(index, k))) for k in _NAMES})
    with atomic_writer(path) as f:
        f.write(header)
        for k in _NAMES:
            _put(f, offsets, k, getattr(index, k))
        return f.tell()


def build_file(chunks: Iterable[np.ndarray], n: int, path: str | os.PathLike) -> int:
    """Build and write the index of a corpus text given as consecutive chunks (n ids in all, the last one
    SEPARATOR, as corpus_text makes them): each chunk is packed and written, then dropped; returns the size."""
    if n > MAX_TEXT:
        raise InputError(f"a suffix index holds at most {MAX_TEXT} tokens (+ 1 per document), got {n}")
    packed = np.empty(3 * n, np.uint8)
    counts = np.zeros(0, np.int64)  # counts[t + 1]: occurrences of t, grown to the largest id seen
    done, last = 0, SEPARATOR
    with atomic_writer(path) as f:
        f.write(b"\0" * HEADER)
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype=np.int32)
            if len(chunk) == 0:
                continue
            if done + len(chunk) > n or chunk.min() < SEPARATOR or chunk.max() > MAX_ID:
                raise InputError(f"suffix index chunks hold more than {n} ids or ids outside -1..{MAX_ID}")
            pack3(chunk, packed[3 * done:3 * (done + len(chunk))])
            seen = np.bincount(chunk + 1)
            if len(seen) > len(counts):
                counts = np.concatenate([counts, np.zeros(len(seen) - len(counts), np.int64)])
            counts[:len(seen)] += seen
            f.write(_bytes(chunk))
            done, last = done + len(chunk), int(chunk[-1])
        if done != n or last != SEPARATOR:
            raise InputError(f"suffix index chunks hold {done} ids ending in {last}; {n} ending in SEPARATOR expected")
        starts = starts_from_counts(counts)
        header, offsets = _layout({"text": (np.int32, n), "sa": (sa_dtype(n), n), "starts": (starts.dtype, len(starts)),
                                   "second": (np.int32, -(-n // SAMPLE))})
        sa = sort_packed(packed) if n else np.zeros(0, np.int32)
        second = second_tokens(packed, sa)
        del packed
        _put(f, offsets, "sa", sa)
        del sa
        _put(f, offsets, "starts", starts)
        _put(f, offsets, "second", second)
        size = f.tell()
        f.seek(0)
        f.write(header)
        return size


def open_index(path: str | os.PathLike) -> SuffixIndex:
    """The index at `path`, mapped read-only (header checks only: O(1) whatever the size)."""
    mm = map_file(path, "suffix index")
    if mm[:8] != MAGIC:
        raise FormatError(f"{path} is not a lookupkit suffix index (magic {bytes(mm[:8])!r})")
    (size,) = struct.unpack("<Q", mm[8:16])
    try:
        header = json.loads(mm[16:16 + size])
        views = {}
        for k in _NAMES:
            a = header["arrays"][k]
            end = HEADER + a["offset"] + a["len"] * np.dtype(a["dtype"]).itemsize
            if a["len"] and end > len(mm):
                raise ValueError(f"array {k} runs past the end of the file")
            views[k] = (np.frombuffer(mm, dtype=np.dtype(a["dtype"]), count=a["len"], offset=HEADER + a["offset"])
                        if a["len"] else np.zeros(0, np.dtype(a["dtype"])))  # an empty last array may lie past the end
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"suffix index {path} is truncated or corrupted ({exc}); rebuild it") from None
    return SuffixIndex(**views)
