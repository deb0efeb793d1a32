"""Build the suffix index's .lkc sections for lookup-create --suffix-index: each document's ids are packed
(3 bytes per token, in memory) and written to a raw file of the build's work directory as they come, then
the packed text is sorted in memory (not out of core: a corpus whose sort exceeds --memory-budget is
refused); the sections follow the text in that file, and the streamed writer copies them into the .lkc
(formats.streamed). Peak ~15 bytes per token (libdivsufsort on the packed text, lookupkit.suffix.build);
the bytes are those of formats.lkc.write_file given build.build_index of the same documents.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import sys
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import FormatError, InputError
from ..formats.lkc_suffix import MAX_ID, MAX_TEXT, SEPARATOR, header_of, index_dtype, spec
from .build import pack3, second_tokens, sort_packed, starts_from_counts

BYTES_PER_TOKEN_TO_BUILD = 15  # 3 packed bytes + libdivsufsort's int32 SA of 3 entries per token
_COPY = 1 << 24  # bytes per read when copying a built part into the output
_BLOCK = 1 << 22  # ids packed at a time (bounds the temporaries whatever a document's arrays are)


def _blocks(doc: Iterable[np.ndarray], end: np.ndarray):
    """A document's ids in blocks of at most _BLOCK, then `end`."""
    for a in doc:
        a = np.ascontiguousarray(a, dtype="<i4")
        for i in range(0, len(a), _BLOCK):
            yield a[i:i + _BLOCK]
    yield end


def _drop_mapped(a: np.ndarray) -> None:
    """Once packed, let this process's RSS drop the pages behind `a` if it is a view of a read-only file
    mapping (a token file's ids; re-read from the page cache if touched again), so that they do not sit
    beside the sort's 15 bytes per token. Anything else (arrays in memory) is left alone; Linux only."""
    base = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None or not hasattr(mmap, "MADV_DONTNEED") or not sys.platform.startswith("linux"):
        return
    try:
        if not memoryview(base).readonly:
            return
        at = a.ctypes.data - np.frombuffer(base, np.uint8).ctypes.data
    except (ValueError, TypeError):  # (a closed mapping)
        return
    start = at // mmap.PAGESIZE * mmap.PAGESIZE
    stop = min(at + a.nbytes, len(base))
    if stop > start:
        base.madvise(mmap.MADV_DONTNEED, start, stop - start)


@dataclass
class Part:
    """A built suffix index in a raw file of the work directory, ready to be copied into a .lkc."""

    path: str
    header: dict
    shapes: dict[str, tuple[str, int]]  # section: (dtype, rows)
    offsets: dict[str, int]  # where each section starts in the raw file
    sha256: dict[str, str]

    def nbytes(self, sec: str) -> int:
        dtype, n = self.shapes[sec]
        return np.dtype(dtype).itemsize * n

    def copy(self, sec: str, out) -> None:
        """Write section `sec` to the stream `out` (bounded memory)."""
        left = self.nbytes(sec)
        with open(self.path, "rb") as f:
            f.seek(self.offsets[sec])
            while left:
                block = f.read(min(_COPY, left))
                if not block:
                    raise FormatError(f"{self.path}: the built suffix index is truncated")
                out.write(block)
                left -= len(block)


def check_budget(n: int, budget: int) -> None:
    """Refuse a build whose sort cannot fit `budget` bytes (before it starts)."""
    need = BYTES_PER_TOKEN_TO_BUILD * n
    if n > MAX_TEXT:
        raise InputError(f"--suffix-index holds at most {MAX_TEXT:,} positions, the corpus has {n:,}; "
                         "build it from a part of the corpus")
    if need > budget:
        raise InputError(f"--memory-budget {budget / 2**20:,.0f} MiB is too small for the suffix index of {n:,} "
                         f"positions: its sort needs {math.ceil(need / 2**20):,} MiB ({BYTES_PER_TOKEN_TO_BUILD} "
                         f"bytes per token); pass --memory-budget {math.ceil(need / 2**20)}MiB or more")


def check_ids(top: int) -> None:
    if top > MAX_ID:
        raise InputError(f"token id {top:,} is too large for --suffix-index (ids up to {MAX_ID:,}, the 3-byte "
                         "packing of its sort); leave out --suffix-index")


def build_part(documents: Iterable[Iterable[np.ndarray]], n: int, path: str, advance=lambda k: None) -> Part:
    """Build the suffix index of `documents` (each an iterable of id arrays; n = their ids + one SEPARATOR
    each) into the raw file `path`: the text is packed and written chunk by chunk, then sorted."""
    check_budget(n, 2**62)
    packed = np.empty(3 * n, np.uint8)
    counts = np.zeros(1, np.int64)  # counts[t + 1]: occurrences of t
    end = np.array([SEPARATOR], np.int32)
    done, docs, text_hash = 0, 0, hashlib.sha256()
    with open(path, "wb") as f:
        for doc in documents:
            for chunk in _blocks(doc, end):
                if done + len(chunk) > n:
                    raise InputError(f"the suffix index's documents hold more than the {n} ids announced")
                if chunk is not end:
                    if int(chunk.min()) < 0:
                        raise InputError(f"a suffix index holds token ids >= 0, got {int(chunk.min())}")
                    check_ids(int(chunk.max()))
                pack3(chunk, packed[3 * done:3 * (done + len(chunk))])
                seen = np.bincount(chunk + 1)
                if len(seen) > len(counts):
                    counts = np.concatenate([counts, np.zeros(len(seen) - len(counts), np.int64)])
                counts[:len(seen)] += seen
                text_hash.update(chunk.data)
                f.write(chunk.data)
                done += len(chunk)
                advance(len(chunk))
                _drop_mapped(chunk)
            docs += 1
        if done != n:
            raise InputError(f"the suffix index's documents hold {done} ids, {n} were announced")
        starts = starts_from_counts(counts) if n else np.zeros(2, np.int32)
        sa = sort_packed(packed) if n else np.zeros(0, np.int32)
        second = second_tokens(packed, sa)
        del packed
        arrays = {"suffix_sa": sa, "suffix_starts": starts, "suffix_second": second}
        header = header_of(n, docs if n else 0, len(counts) - 2 if n else -1)
        shapes = {"suffix_text": ("<i4", n)}
        offsets, sha = {"suffix_text": 0}, {"suffix_text": text_hash.hexdigest()}
        for sec, a in arrays.items():
            a = np.ascontiguousarray(a).astype(spec(sec, index_dtype(n)), copy=False)
            offsets[sec] = f.tell()
            shapes[sec] = (a.dtype.str, len(a))
            raw = a.reshape(-1).view(np.uint8)
            sha[sec] = hashlib.sha256(raw).hexdigest()
            f.write(raw.data)
        del sa, arrays
    return Part(path, header, shapes, offsets, sha)
