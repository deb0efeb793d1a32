"""Read the key/value metadata section of a GGUF file with the standard library only.

Why not the `gguf` package: it parses tensors too, many times slower on the vocab files than this
module reads `tokenizer.ggml.*`, all the tokenizer needs (bench/RESULTS.md: Figures the code's comments
rely on). The file is memory-mapped and every length field is checked against the bytes that remain, so
a corrupted or truncated file raises `FormatError` instead of crashing, hanging or allocating gigabytes.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from array import array
from pathlib import Path

from ..errors import FormatError
from ..files import open_input

GGUF_MAGIC = b"GGUF"

# GGUF value types: id -> (struct code, size). 8 = string and 9 = array are handled apart.
_SCALARS = {
    0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
    6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8),
}
_STRING, _ARRAY = 8, 9
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class _Cursor:
    """Bounds-checked little-endian reads over a buffer; every overrun is a FormatError."""

    def __init__(self, buf, path: str):
        self.buf, self.pos, self.size, self.path = buf, 0, len(buf), path

    def fail(self, what: str) -> FormatError:
        return FormatError(f"{self.path}: not a valid GGUF file ({what} at byte {self.pos})")

    def need(self, n: int) -> None:
        if n < 0 or n > self.size - self.pos:
            raise self.fail("truncated or corrupted length")

    def u32(self) -> int:
        self.need(4)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self) -> int:
        self.need(8)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def string(self) -> str:
        n = self.u64()
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        # surrogateescape keeps non-UTF-8 token bytes round-trippable (and hashable) instead of failing
        return raw.decode("utf-8", "surrogateescape")

    def scalar(self, vtype: int):
        code, size = _SCALARS[vtype]
        self.need(size)
        (v,) = struct.unpack_from("<" + code, self.buf, self.pos)
        self.pos += size
        return v

    def strings(self, count: int, keep: bool) -> list | None:
        """`count` length-prefixed strings; the hot loop of a vocabulary (~400k strings)."""
        buf, pos, size, unpack = self.buf, self.pos, self.size, _U64.unpack_from
        out: list = []
        add = out.append
        for _ in range(count):
            if pos + 8 > size:
                break
            end = pos + 8 + unpack(buf, pos)[0]
            if end > size:
                break
            if keep:
                add(buf[pos + 8:end].decode("utf-8", "surrogateescape"))
            pos = end
        else:
            self.pos = pos
            return out if keep else None
        self.pos = pos
        raise self.fail("truncated string array")

    def value(self, vtype: int, keep: bool):
        if vtype == _STRING:
            return self.string()
        if vtype in _SCALARS:
            return self.scalar(vtype)
        if vtype != _ARRAY:
            raise self.fail(f"unknown value type {vtype}")
        etype, count = self.u32(), self.u64()
        if etype == _STRING:
            self.need(8 * count)  # each string has at least its 8-byte length
            return self.strings(count, keep)
        if etype not in _SCALARS:
            raise self.fail(f"unsupported array element type {etype}")
        code, size = _SCALARS[etype]
        self.need(size * count)
        start, self.pos = self.pos, self.pos + size * count
        if not keep:
            return None
        if code == "?":
            return [b != 0 for b in self.buf[start:self.pos]]
        arr = array(code)
        arr.frombytes(self.buf[start:self.pos])
        if sys.byteorder == "big":
            arr.byteswap()
        return arr


def read_metadata(path, prefix: str | tuple = "") -> dict:
    """Return {key: value} of the GGUF metadata whose key starts with `prefix`.

    Scalars become int/float/bool/str, string arrays lists of str, numeric arrays `array.array`.
    Keys not matching `prefix` are skipped without materialising their values.
    """
    p = Path(path)
    with open_input(p, "GGUF file") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise FormatError(f"{p}: not a GGUF file (only {size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, str(p), prefix)


def _parse(buf, path: str, prefix: str) -> dict:
    cur = _Cursor(buf, path)
    if buf[:4] != GGUF_MAGIC:
        raise FormatError(f"{path}: not a GGUF file (bad magic {bytes(buf[:4])!r})")
    cur.pos = 4
    version = cur.u32()
    if version not in (2, 3):
        raise FormatError(f"{path}: unsupported GGUF version {version} (need 2 or 3)")
    cur.u64()  # tensor count: tensors are not read
    n_kv = cur.u64()
    if n_kv > (cur.size - cur.pos) // 12:  # each entry needs >= 8 (key len) + 4 (type) bytes
        raise cur.fail(f"implausible metadata count {n_kv}")
    out: dict = {}
    seen: set = set()
    for _ in range(n_kv):
        key = cur.string()
        if key in seen:
            raise cur.fail(f"duplicate metadata key {key!r}")
        seen.add(key)
        keep = key.startswith(prefix)
        val = cur.value(cur.u32(), keep)
        if keep:
            out[key] = val
    return out
