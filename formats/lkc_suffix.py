"""The .lkc version-3 sections: a suffix index over the corpus' token ids (SPEC.md, issue 15).

Four sections: `suffix_text` (every document's ids, each document followed by SEPARATOR), `suffix_sa` (its
suffix array), `suffix_starts` (the first-token table: SA rows of first token t are [starts[t + 1],
starts[t + 2])) and `suffix_second` (the second token of every SAMPLE-th SA row), described by the header's
`suffix` object. `parse` checks them against that object in O(1) (no section byte read); `verify` is the
O(n) pass. `build_part` builds the sections from the ids in chunks into a raw file of the build's work
directory (peak ~15 bytes per token: libdivsufsort on 3 bytes per token); the writers copy them in.

The facts below are the format's; lookupkit.suffix (the builder and the search, which load numba) must
agree with them (tests pin it), so that opening a file and inspecting it need no compiled code.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import sys
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from lookupkit.errors import FormatError, InputError

SEPARATOR = -1  # ends every document in suffix_text; sorts below every id
SAMPLE = 32  # suffix_second[k] = second token of SA row k * SAMPLE
MAX_ID = 2**24 - 2  # the builder packs id + 1 into 3 bytes
MAX_TEXT = (2**31 - 1) // 3  # libdivsufsort's int32 SA over 3 bytes per token
BYTES_PER_TOKEN_TO_BUILD = 15  # 3 packed bytes + libdivsufsort's int32 SA of 3 entries per token
ORDER = "lookupkit-suffix-order-1"  # suffixes of suffix_text; SEPARATOR below every id, the end of text lowest
NAMES = ("suffix_text", "suffix_sa", "suffix_starts", "suffix_second")
INDEX_DTYPES = ("<i4", "<i8")  # of suffix_sa and suffix_starts: "<i4" while n < 2^31, else "<i8"
_COPY = 1 << 24  # bytes per read when copying a built part into the output
_BLOCK = 1 << 22  # ids packed at a time (bounds the temporaries whatever a document's arrays are)


def index_dtype(n: int) -> str:
    """The dtype of suffix_sa and suffix_starts for a text of n positions."""
    return INDEX_DTYPES[0] if n < 2**31 else INDEX_DTYPES[1]


def spec(section: str, declared) -> str | None:
    """The dtype a suffix section must have (the declared one where two are allowed), None if not ours."""
    if section in ("suffix_text", "suffix_second"):
        return "<i4"
    if section in ("suffix_sa", "suffix_starts"):
        return declared if declared in INDEX_DTYPES else INDEX_DTYPES[0]
    return None


def header_of(n: int, n_documents: int, max_id: int) -> dict:
    return {"n": n, "n_documents": n_documents, "max_id": max_id, "separator": SEPARATOR, "sample": SAMPLE,
            "order": ORDER, "builder": "libdivsufsort (pydivsufsort) on 3 big-endian bytes per token (id + 1)"}


def rows(n: int, max_id: int) -> dict[str, int]:
    """Each section's length in elements."""
    return {"suffix_text": n, "suffix_sa": n, "suffix_starts": max_id + 3 if n else 2,
            "suffix_second": -(-n // SAMPLE)}


def sections_of(index) -> tuple[dict[str, np.ndarray], dict]:
    """The sections and header object of an in-memory index (anything with text, sa, starts, second)."""
    arrays = dict(zip(NAMES, (index.text, index.sa, index.starts, index.second)))
    n = len(index.text)
    meta = header_of(n, int(index.starts[1]) if n else 0, len(index.starts) - 3 if n else -1)
    arrays = {k: np.ascontiguousarray(a, dtype=spec(k, index_dtype(n))) for k, a in arrays.items()}
    return arrays, meta


def _fail(name: str, what: str) -> FormatError:
    return FormatError(f"{name}: not a valid .lkc file: suffix index: {what}")


def parse(header: dict, views: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    """The four suffix views of a version-3 file, checked against its `suffix` header (O(1))."""
    meta = header.get("suffix")
    if not isinstance(meta, dict):
        raise _fail(name, "version 3 needs a 'suffix' header object")
    ints = {}
    for field in ("n", "n_documents", "max_id"):
        v = meta.get(field)
        if not isinstance(v, int) or isinstance(v, bool) or v < (-1 if field == "max_id" else 0):
            raise _fail(name, f"suffix.{field} is {v!r}")
        ints[field] = v
    n, docs, max_id = ints["n"], ints["n_documents"], ints["max_id"]
    if meta.get("order") != ORDER or meta.get("separator") != SEPARATOR or meta.get("sample") != SAMPLE:
        raise _fail(name, f"order {meta.get('order')!r}, separator {meta.get('separator')!r}, sample "
                          f"{meta.get('sample')!r}: this lookupkit reads {ORDER}, {SEPARATOR}, {SAMPLE}")
    empty_ok = docs == 0 and max_id == -1
    full_ok = 1 <= docs <= n and (max_id == -1) == (docs == n)  # (only document ends: no id at all)
    if n > MAX_TEXT or max_id > MAX_ID or not (full_ok if n else empty_ok):
        raise _fail(name, f"n={n}, n_documents={docs}, max_id={max_id} are inconsistent or beyond "
                          f"{MAX_TEXT} positions / id {MAX_ID}")
    missing = [s for s in NAMES if s not in views]
    if missing:
        raise _fail(name, f"section {missing[0]} is missing")
    want = rows(n, max_id)
    for sec in NAMES:
        v = views[sec]
        if len(v) != want[sec] or v.dtype.str != spec(sec, index_dtype(n)):
            raise _fail(name, f"section {sec} holds {len(v)} {v.dtype.str}, the header needs "
                              f"{want[sec]} {spec(sec, index_dtype(n))}")
    return {sec: views[sec] for sec in NAMES}


def verify(views: dict[str, np.ndarray], header: dict, name: str, chunk: int = 1 << 22) -> list[str]:
    """The O(n) checks a suffix index gets (beside every section's sha256): what the search relies on to
    stay inside the arrays. Not checked: that the SA is a permutation in suffix order (costly for big files)."""
    text, sa, starts, second = (views[s] for s in NAMES)
    meta = header["suffix"]
    n = len(text)

    def bad(what: str) -> FormatError:
        return FormatError(f"{name}: corrupted suffix index: {what} (rebuild it with lookup-create --suffix-index)")

    if n and (int(text[-1]) != SEPARATOR or int(text.min()) < SEPARATOR or int(text.max()) > meta["max_id"]):
        raise bad(f"suffix_text holds ids outside {SEPARATOR}..{meta['max_id']} or does not end with {SEPARATOR}")
    counts = np.zeros(len(starts) - 1, np.int64)
    for a in range(0, n, chunk):
        counts += np.bincount(text[a:a + chunk] + 1, minlength=len(counts))
    if n and not np.array_equal(np.concatenate([[0], np.cumsum(counts)]), starts.astype(np.int64)):
        raise bad("the first-token table does not match the text")
    if n and int(counts[0]) != meta["n_documents"]:
        raise bad(f"{int(counts[0])} document ends, the header says {meta['n_documents']}")
    checks = [f"suffix_text: ids in {SEPARATOR}..{meta['max_id']}, ends with {SEPARATOR}, "
              f"{meta['n_documents']} documents", "suffix_starts equals the text's first-token counts"]
    prev = SEPARATOR - 1
    for a in range(0, n, chunk):
        rows_ = sa[a:a + chunk].astype(np.int64)
        if len(rows_) and (int(rows_.min()) < 0 or int(rows_.max()) >= n):
            raise bad(f"suffix_sa holds a position outside 0..{n - 1}")
        first = text[rows_]
        if (len(first) and int(first[0]) < prev) or np.any(first[1:] < first[:-1]):
            raise bad("suffix_sa is not sorted by first token (it disagrees with suffix_starts)")
        prev = int(first[-1]) if len(first) else prev
        k0 = -(-a // SAMPLE)
        sampled = rows_[k0 * SAMPLE - a::SAMPLE]
        nxt = np.where(text[sampled] == SEPARATOR, SEPARATOR, text[np.minimum(sampled + 1, n - 1)])
        if not np.array_equal(nxt, second[k0:k0 + len(sampled)]):
            raise bad("suffix_second does not hold the second token of every sampled row")
    checks += ["suffix_sa: positions in 0..n-1, sorted by first token as suffix_starts says",
               f"suffix_second: the second token of SA rows 0, {SAMPLE}, {2 * SAMPLE}, ..."]
    return checks


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
    from lookupkit.suffix.build import pack3, second_tokens, sort_packed, starts_from_counts

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
