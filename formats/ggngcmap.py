"""The constmap fork's static cache file (`ggngcmap`), read and written byte-compatibly.

Layout (as the fork's llama-lookup-create writes it): u64 magic "ggngcmap" (host order; little-endian here), u64
n_entries, u64 map_size, n_entries x (int32 token, int32 count), then a fastconstmap VerifiedConstMap
(VMAP0001) from each 2-gram's 8 key bytes (<ii) to offset << 24 | n_followers; nothing after it.
Everything is 8-aligned, so `parse` maps it in O(1) like a .lkc. The file stores no 2-gram keys, no
vocabulary and no version: turning it back into a table needs `keyrecovery`.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from lookupkit.errors import FormatError
from lookupkit.files import map_file, unmap
from lookupkit.formats import constmap
from lookupkit.formats.mapped import Mapped

MAGIC = b"ggngcmap"
HEADER = struct.Struct("<8sQQ")


def write_file(f: BinaryIO, table, meta: dict | None = None, keys: bool = True) -> None:
    """Write `table` (a counts.tables.StaticTable, runs in canonical order) as a ggngcmap file to `f` (no
    keys, no metadata: the format has no room for them)."""
    from lookupkit.formats import constmap_build  # (here: building a map needs kernels, reading a header none)

    cmap = constmap_build.build_array(table.keys, table.spans())
    f.write(HEADER.pack(MAGIC, table.n_pairs, len(cmap)))
    f.write(np.ascontiguousarray(table.pairs, dtype="<i4").reshape(-1).view(np.uint8))
    f.write(cmap)


def parse(buf, name: str) -> tuple[np.ndarray, constmap.ConstMapView]:
    """Check the header and sizes (O(1)) and return the pairs view and the constmap view."""
    size = len(buf)
    if size < HEADER.size:
        raise FormatError(f"{name}: not a valid ggngcmap file: {size} bytes is shorter than its 24-byte header")
    magic, n_entries, map_size = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        what = "it was written on a big-endian host" if magic == MAGIC[::-1] else f"magic is {magic!r}"
        raise FormatError(f"{name}: not a valid ggngcmap file: {what}")
    if HEADER.size + 8 * n_entries + map_size != size:
        raise FormatError(f"{name}: not a valid ggngcmap file: 24 + 8 x {n_entries} pairs + {map_size} map bytes "
                          f"!= file size {size} (truncated or corrupted)")
    pairs = np.frombuffer(buf, dtype="<i4", count=2 * n_entries, offset=HEADER.size).reshape(n_entries, 2)
    cmap = constmap.parse_in(buf, HEADER.size + 8 * n_entries, map_size, name)
    if cmap.n_keys > n_entries:
        raise FormatError(f"{name}: corrupted ggngcmap file: {cmap.n_keys} 2-grams cannot share {n_entries} pairs")
    return pairs, cmap


def open_file(path: Path) -> Mapped:
    """Mapped read-only in O(1)."""
    mm = map_file(path, "cache file")
    try:
        pairs, cmap = parse(mm, str(path))
    except BaseException:
        unmap(mm)
        raise
    return Mapped("ggngcmap", {}, pairs, cmap, mm, HEADER.size + pairs.nbytes, mm=mm, path=path)
