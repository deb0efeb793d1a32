"""`.lkc.zst`: a zstd-compressed .lkc, unpacked once into a cache directory and then memory-mapped.

The unpacked copy lives in `$LOOKUPKIT_CACHE_DIR` (default `~/.cache/lookupkit`) under a name keyed by
a fingerprint of the .zst: its size, its mtime (ns) and the sha256 of its first and last 64 KiB. That
is O(1) in the file size, so reopening costs no pass over the data; the last bytes hold the
zstd frame's checksum of the whole content (lookupkit writes it), so a changed content changes the key
even when size and mtime were kept. Unpacking streams into a temp file and renames it (atomic_writer),
so concurrent openers never see a partial file. Old unpacked copies are not evicted: the directory can
be emptied at any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import BinaryIO, Iterator

import zstandard

from lookupkit.counts.tables import StaticTable
from lookupkit.errors import FormatError
from lookupkit.files import ZSTD_MAGIC, atomic_writer, default_root, ensure_dir, open_input
from lookupkit.formats import lkc_layout, lkc_read, lkc_write
from lookupkit.formats.mapped import Mapped

MAGIC = ZSTD_MAGIC
EDGE = 2**16  # bytes hashed at each end for the fingerprint (the last ones hold the zstd checksum)
CHUNK = 4 * 2**20
LEVEL = 3


def fingerprint(path: Path) -> str:
    """size + mtime + sha256 of the first and last 64 KiB: changes whenever the .zst does, O(1) to compute."""
    st = path.stat()
    h = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}:".encode())
    with open(path, "rb") as f:
        h.update(f.read(EDGE))
        f.seek(max(0, st.st_size - EDGE))
        h.update(f.read(EDGE))
    return h.hexdigest()[:32]


def unpack(path: str | os.PathLike) -> Path:
    """The path of the unpacked .lkc of a .lkc.zst, decompressing it first if not cached yet."""
    path = Path(path)
    stem = path.name[:-4] if path.name.endswith(".zst") else path.name
    stem = stem[:-4] if stem.endswith(".lkc") else stem
    target = default_root() / f"{stem}.{fingerprint(path)}.lkc"
    if target.is_file():
        return target
    ensure_dir(target.parent, f"the cache directory for unpacking {path.name}")
    with open_input(path, "cache file") as src, atomic_writer(target) as dst:
        try:
            reader = zstandard.ZstdDecompressor(max_window_size=2**31).stream_reader(src, read_across_frames=True)
            head = reader.read(len(lkc_layout.MAGIC))
            if head != lkc_layout.MAGIC:
                raise FormatError(f"{path}: the zstd stream does not hold a .lkc file (it starts with {head[:8]!r})")
            dst.write(head)
            while chunk := reader.read(CHUNK):
                dst.write(chunk)
        except zstandard.ZstdError as exc:
            raise FormatError(f"{path}: not a valid zstd file ({exc})") from None
    return target


@contextlib.contextmanager
def compressing(f: BinaryIO) -> Iterator[BinaryIO]:
    """A writer that zstd-compresses into `f` (with a content checksum); `f` stays open."""
    with zstandard.ZstdCompressor(level=LEVEL, write_checksum=True).stream_writer(f, closefd=False) as z:
        yield z


def write_file(f: BinaryIO, table: StaticTable, meta: dict | None = None, keys: bool = True) -> None:
    with compressing(f) as z:
        lkc_write.write_file(z, table, meta, keys)


def open_file(path: Path) -> Mapped:
    """Unpacked once into the cache directory, then mapped as a .lkc (reported as format lkc)."""
    mapped = unpack(path)
    out = lkc_read.open_file(mapped, f"{path} (unpacked as {mapped})")
    out.path = path
    return out
