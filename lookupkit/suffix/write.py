"""Build the suffix index's .lkc sections for lookup-create --suffix-index: each document's ids are written to
a raw file of the build's work directory as they come; then the text (mapped back from that file) is sorted
within --memory-budget: in memory when its 15 bytes per position fit (libdivsufsort on the packed text,
lookupkit.suffix.build), else out of core in parts of budget / 15 positions merged over the mapped text
(lookupkit.suffix.merge). The sections follow the text in that file, and the streamed writer copies them
into the .lkc (formats.streamed); the bytes are those of formats.lkc_write.write_file given build.build_index of
the same documents, whatever the budget.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import FormatError, InputError
from ..formats.lkc_suffix import MAX_ID, MAX_TEXT, SEPARATOR, header_of, index_dtype, spec
from . import merge
from .build import drop_mapped, pack_text, second_tokens, sort_packed, starts_from_counts

BYTES_PER_TOKEN_TO_BUILD = 15  # 3 packed bytes + libdivsufsort's int32 SA of 3 entries per token
MIN_PART_POSITIONS = 1 << 16  # the smallest part sorted out of core (a budget below 1 MiB is refused)
_COPY = 1 << 24  # bytes per read when copying a built part into the output
_BLOCK = 1 << 22  # ids packed at a time (bounds the temporaries whatever a document's arrays are)


def _blocks(doc: Iterable[np.ndarray], end: np.ndarray):
    """A document's ids in blocks of at most _BLOCK, then `end`."""
    for a in doc:
        a = np.ascontiguousarray(a, dtype="<i4")
        for i in range(0, len(a), _BLOCK):
            yield a[i:i + _BLOCK]
    yield end


@dataclass
class Part:
    """A built suffix index in a raw file of the work directory, ready to be copied into a .lkc."""

    path: str
    header: dict
    shapes: dict[str, tuple[str, int]]  # section: (dtype, rows)
    offsets: dict[str, int]  # where each section starts in the raw file
    sha256: dict[str, str]
    parts: int = 1  # sorted in memory, or in this many parts merged out of core
    compared: int = 0  # tokens the out-of-core merge compared

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


def part_positions(n: int, budget: int) -> int:
    """The positions sorted in one part within `budget` bytes (all n when they fit: the in-memory sort);
    refuses a text beyond the format or a budget that cannot sort a useful part (before the build starts)."""
    if n > MAX_TEXT:
        raise InputError(f"--suffix-index holds at most {MAX_TEXT:,} positions, the corpus has {n:,}; "
                         "build it from a part of the corpus")
    part = budget // BYTES_PER_TOKEN_TO_BUILD
    if part < min(n, MIN_PART_POSITIONS):
        need = BYTES_PER_TOKEN_TO_BUILD * min(n, MIN_PART_POSITIONS)
        raise InputError(f"--memory-budget {budget / 2**20:,.1f} MiB is too small for the suffix index of {n:,} "
                         f"positions: its sort needs {BYTES_PER_TOKEN_TO_BUILD} bytes per position of a part of at "
                         f"least {min(n, MIN_PART_POSITIONS):,}; pass --memory-budget {math.ceil(need / 2**20)}MiB "
                         "or more")
    return max(1, min(n, part))


def check_ids(top: int) -> None:
    if top > MAX_ID:
        raise InputError(f"token id {top:,} is too large for --suffix-index (ids up to {MAX_ID:,}, the 3-byte "
                         "packing of its sort); leave out --suffix-index")


def build_part(documents: Iterable[Iterable[np.ndarray]], n: int, path: str, advance=lambda k: None,
               budget: int = 2**62) -> Part:
    """Build the suffix index of `documents` (each an iterable of id arrays; n = their ids + one SEPARATOR
    each) into the raw file `path`: the ids are written as they come, then sorted within `budget` (in memory,
    or out of core in parts: lookupkit.suffix.merge; the rows file sits beside `path`)."""
    per_part = part_positions(n, budget)
    counts = np.zeros(1, np.int64)  # counts[t + 1]: occurrences of t
    end = np.array([SEPARATOR], np.int32)
    done, docs, text_hash = 0, 0, hashlib.sha256()
    with open(path, "w+b") as f:
        for doc in documents:
            for chunk in _blocks(doc, end):
                if done + len(chunk) > n:
                    raise InputError(f"the suffix index's documents hold more than the {n} ids announced")
                if chunk is not end:
                    if int(chunk.min()) < 0:
                        raise InputError(f"a suffix index holds token ids >= 0, got {int(chunk.min())}")
                    check_ids(int(chunk.max()))
                seen = np.bincount(chunk + 1)
                if len(seen) > len(counts):
                    counts = np.concatenate([counts, np.zeros(len(seen) - len(counts), np.int64)])
                counts[:len(seen)] += seen
                text_hash.update(chunk.data)
                f.write(chunk.data)
                done += len(chunk)
                advance(len(chunk))
                drop_mapped(chunk)
            docs += 1
        if done != n:
            raise InputError(f"the suffix index's documents hold {done} ids, {n} were announced")
        f.flush()
        dtype = np.dtype(spec("suffix_sa", index_dtype(n)))
        shapes = {"suffix_text": ("<i4", n), "suffix_sa": (dtype.str, n)}
        offsets, sha = {"suffix_text": 0, "suffix_sa": f.tell()}, {"suffix_text": text_hash.hexdigest()}
        sa_hash = hashlib.sha256()

        def put(rows: np.ndarray) -> None:
            raw = np.ascontiguousarray(rows).astype(dtype, copy=False).view(np.uint8)
            sa_hash.update(raw)
            f.write(raw.data)

        text = np.memmap(path, "<i4", "r", shape=(n,)) if n else np.zeros(0, np.int32)
        parts, compared = -(-n // per_part) if n else 1, 0
        if per_part >= n:
            packed = pack_text(text, 0, n, _BLOCK)
            sa = sort_packed(packed) if n else np.zeros(0, np.int32)
            second = second_tokens(packed, sa)
            del packed
            put(sa)
            del sa
        else:
            rows, bounds, tail_work = merge.sort_parts(text, per_part, os.path.dirname(path) or ".", _BLOCK)
            try:
                second, compared = merge.merge_rows(text, rows, bounds, dtype, put, tail_work, remedy=(
                    f"pass --memory-budget {math.ceil(BYTES_PER_TOKEN_TO_BUILD * n / 2**20)}MiB or more to sort "
                    "it in one part"))
            finally:
                os.remove(rows)
        del text
        sha["suffix_sa"] = sa_hash.hexdigest()
        starts = starts_from_counts(counts) if n else np.zeros(2, np.int32)
        for sec, a in (("suffix_starts", starts), ("suffix_second", second)):
            a = np.ascontiguousarray(a).astype(spec(sec, index_dtype(n)), copy=False)
            offsets[sec] = f.tell()
            shapes[sec] = (a.dtype.str, len(a))
            raw = a.reshape(-1).view(np.uint8)
            sha[sec] = hashlib.sha256(raw).hexdigest()
            f.write(raw.data)
        header = header_of(n, docs if n else 0, len(counts) - 2 if n else -1)
    return Part(path, header, shapes, offsets, sha, parts, compared)
