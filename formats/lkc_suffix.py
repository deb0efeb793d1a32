"""The .lkc version-3 sections: a suffix index over the corpus' token ids (SPEC.md).

Four sections: `suffix_text` (every document's ids, each document followed by SEPARATOR), `suffix_sa` (its
suffix array), `suffix_starts` (the first-token table: SA rows of first token t are [starts[t + 1],
starts[t + 2])) and `suffix_second` (the second token of every SAMPLE-th SA row), described by the header's
`suffix` object. `parse` checks them against that object in O(1) (no section byte read); `verify` is the
O(n) pass. lookupkit.suffix.write builds the sections out of core for lookup-create.

The format's facts are defined here, in pure numpy, and lookupkit.suffix (the builder and the search,
which load numba) imports them: opening a file and inspecting it need no compiled code.
"""

from __future__ import annotations

import numpy as np

from lookupkit.errors import FormatError

SEPARATOR = -1  # ends every document in suffix_text; sorts below every id
SAMPLE = 32  # suffix_second[k] = second token of SA row k * SAMPLE
MAX_ID = 2**24 - 2  # the builder packs id + 1 into 3 bytes
MAX_TEXT = (2**31 - 1) // 3  # libdivsufsort's int32 SA over 3 bytes per token; beyond: a 64-bit build (not wired)
ORDER = "lookupkit-suffix-order-1"  # suffixes of suffix_text; SEPARATOR below every id, the end of text lowest
NAMES = ("suffix_text", "suffix_sa", "suffix_starts", "suffix_second")
INDEX_DTYPES = ("<i4", "<i8")  # of suffix_sa and suffix_starts: "<i4" while n < 2^31, else "<i8"


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
        raise bad("suffix_starts (the first-token table) does not match the text")
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
