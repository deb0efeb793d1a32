"""`.lkt`: one token store entry (a document's token ids, tokenized once), spec'd in SPEC.md ("`.lkt`").

b"LKTOK001" | independent zstd frames of little-endian int32 ids | UTF-8 JSON index | u64 LE index length |
b"LKTOK001". The index names the frames ([offset, length, n_tokens] each), the document (n_bytes, sha256)
and its checkpoints ([byte, token, sha256 of the bytes before, replaced bytes]). `Writer` writes one into an
open file, `read_index` checks a whole file's container and index (FormatError says what failed) and
`read_frame` decompresses one frame (a failed zstd checksum or a wrong size is a FormatError). Where
entries live, how they are named and reused, and how large a frame is: lookupkit.tokenizer.store.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO, Sequence

import numpy as np
import zstandard

from lookupkit.errors import FormatError

MAGIC = b"LKTOK001"
VERSION = 1
TRAILER = struct.Struct("<Q8s")  # index length, the magic again


class Writer:
    """Writes one entry into `f` (open for binary writing, at its start): the magic now, a frame per
    `frame()`, the index and trailer at `close()`."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self._cctx = zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True)
        self.frames: list[list[int]] = []  # [offset, length, n_tokens]
        self.n_tokens = 0
        f.write(MAGIC)
        self._offset = len(MAGIC)

    def frame(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype="<i4")
        data = self._cctx.compress(ids.tobytes())
        self._f.write(data)
        self.frames.append([self._offset, len(data), len(ids)])
        self._offset += len(data)
        self.n_tokens += len(ids)

    def close(self, *, vocab: str, mode: str, n_bytes: int, sha256: str, checkpoints: Sequence[Sequence],
              **info) -> dict:
        """Write the index (vocab, mode, the frames, the document, `info`, checkpoints) and the trailer;
        the index written is returned."""
        index = {"version": VERSION, "vocab": vocab, "mode": mode, "n_tokens": self.n_tokens,
                 "frames": self.frames, "n_bytes": n_bytes, "sha256": sha256, **info,
                 "checkpoints": [list(c) for c in checkpoints]}
        blob = json.dumps(index).encode()
        self._f.write(blob)
        self._f.write(TRAILER.pack(len(blob), MAGIC))
        return index


def _bad(why: str) -> FormatError:
    return FormatError(f"not a valid token store entry: {why}")


def read_index(buf) -> dict:
    """The index of the entry whose whole bytes are `buf` (bytes or an mmap), every container check passed:
    both magics, the index inside the file, its JSON, version, frames (inside the frame area, summing to
    n_tokens) and checkpoints (within n_bytes and n_tokens)."""
    size = len(buf)
    if size < 2 * len(MAGIC) + TRAILER.size:
        raise _bad(f"{size} bytes, fewer than the magic and the trailer take")
    if buf[:len(MAGIC)] != MAGIC:
        raise _bad(f"its first bytes are {bytes(buf[:len(MAGIC)])!r}, not {MAGIC!r}")
    length, magic = TRAILER.unpack_from(buf, size - TRAILER.size)
    start = size - TRAILER.size - length
    if magic != MAGIC:
        raise _bad(f"it does not end with {MAGIC!r} (truncated or cut short)")
    if not len(MAGIC) <= start < size:
        raise _bad(f"an index of {length:,} bytes does not fit in its {size:,}")
    try:
        index = json.loads(buf[start:start + length])
        frames = index["frames"]
        ok = (index["version"] == VERSION and sum(n for _, _, n in frames) == index["n_tokens"]
              and all(len(MAGIC) <= o and o + ln <= start and n >= 0 for o, ln, n in frames)
              and all(0 < b <= index["n_bytes"] and 0 <= t <= index["n_tokens"] for b, t, _, _ in index["checkpoints"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise _bad(f"the index is not valid ({type(exc).__name__}: {exc})") from None
    if not ok:
        raise _bad("the index disagrees with its version, frames or checkpoints")
    return index


def read_frame(buf, frame: Sequence[int], dctx: zstandard.ZstdDecompressor | None = None,
               name: str = "a token store entry") -> np.ndarray:
    """The ids of one frame ([offset, length, n_tokens] from the index) of the entry in `buf`, read-only;
    FormatError("`name` is corrupted (why)") when it fails its zstd checksum or holds other than n_tokens ids."""
    offset, length, n = frame
    try:
        raw = (dctx or zstandard.ZstdDecompressor()).decompress(memoryview(buf)[offset:offset + length])
    except zstandard.ZstdError as exc:
        raise FormatError(f"{name} is corrupted ({exc})") from None
    if len(raw) != 4 * n:
        raise FormatError(f"{name} is corrupted (a frame has the wrong size)")
    return np.frombuffer(raw, dtype="<i4")
