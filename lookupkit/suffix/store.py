"""A suffix index on disk, opened in O(1) by mapping it: a stand-in container until the index becomes a
section of .lkc (issue 15 item 1), kept to the layout such a section needs (aligned little-endian arrays
named in a JSON header, so the search reads the mapping with no copy).

File: b"LKSUFX01" | u64 LE header length | header (UTF-8 JSON: n, sa dtype, arrays' offsets) | arrays,
each at a 64-byte aligned offset: text (int32), sa (int32), starts (int64).
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from ..errors import FormatError
from ..files import atomic_writer, map_file
from .build import SuffixIndex

MAGIC = b"LKSUFX01"
_ALIGN = 64
_NAMES = ("text", "sa", "starts")


def save(index: SuffixIndex, path: str | os.PathLike) -> int:
    """Write the index atomically; returns the file size."""
    arrays = {k: np.ascontiguousarray(getattr(index, k)).astype(getattr(index, k).dtype.newbyteorder("<"), copy=False)
              for k in _NAMES}
    header = {"n": index.n, "arrays": {}}
    offset = 0
    for k in _NAMES:
        header["arrays"][k] = {"dtype": arrays[k].dtype.str, "len": len(arrays[k]), "offset": offset}
        offset += -(-arrays[k].nbytes // _ALIGN) * _ALIGN
    blob = json.dumps(header, sort_keys=True).encode()
    start = -(-(len(MAGIC) + 8 + len(blob)) // _ALIGN) * _ALIGN
    with atomic_writer(path) as f:
        f.write(MAGIC + struct.pack("<Q", len(blob)) + blob)
        f.write(b"\0" * (start - f.tell()))
        for k in _NAMES:
            f.write(arrays[k].tobytes())
            f.write(b"\0" * (-arrays[k].nbytes % _ALIGN))
        return f.tell()


def open_index(path: str | os.PathLike) -> SuffixIndex:
    """The index at `path`, mapped read-only (header checks only: O(1) whatever the size)."""
    mm = map_file(path, "suffix index")
    if mm[:8] != MAGIC:
        raise FormatError(f"{path} is not a lookupkit suffix index (magic {bytes(mm[:8])!r})")
    (size,) = struct.unpack("<Q", mm[8:16])
    try:
        header = json.loads(mm[16:16 + size])
        start = -(-(16 + size) // _ALIGN) * _ALIGN
        views = {}
        for k in _NAMES:
            a = header["arrays"][k]
            end = start + a["offset"] + a["len"] * np.dtype(a["dtype"]).itemsize
            if end > len(mm):
                raise ValueError(f"array {k} runs past the end of the file")
            views[k] = np.frombuffer(mm, dtype=np.dtype(a["dtype"]), count=a["len"], offset=start + a["offset"])
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatError(f"suffix index {path} is truncated or corrupted ({exc}); rebuild it") from None
    return SuffixIndex(**views)
