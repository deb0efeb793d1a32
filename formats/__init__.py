"""The one registry of static cache file formats: detect, read into a StaticTable, write from one.

Formats: `lkc` (lookupkit's own, SPEC.md), `lkc.zst` (the same, zstd-compressed), `ggngcmap` (the
constmap fork's file) and `llama` (llama.cpp's legacy -lcs file). Conversions always go through
StaticTable, never format to format. Reading detects by magic where a format has one (the legacy file
has none), by extension otherwise.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path

import numpy as np

from ..atomic import atomic_writer
from ..errors import FormatError, InputError
from ..table import StaticTable
from . import ggngcmap, lkc, llama, zst

FORMATS = ("lkc", "lkc.zst", "ggngcmap", "llama")
EXTENSIONS = {".lkc.zst": "lkc.zst", ".lkc": "lkc", ".ggngcmap": "ggngcmap", ".lcs": "llama", ".lcd": "llama"}


def format_for_path(path: str | os.PathLike, format: str | None = None) -> str:
    """The format to write: `format` if given (checked), else from the file name's extension."""
    if format is not None:
        if format not in FORMATS:
            raise InputError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
        return format
    fmt = _by_extension(Path(path))
    if fmt is None:
        raise InputError(f"cannot tell the format of {path} from its extension; name it "
                         f"{', '.join('*' + e for e in EXTENSIONS)} or pass --format ({', '.join(FORMATS)})")
    return fmt


def _by_extension(path: Path) -> str | None:
    name = path.name.lower()
    return next((fmt for ext, fmt in EXTENSIONS.items() if name.endswith(ext)), None)


def _open_regular(path: Path) -> int:
    """An O_RDONLY descriptor of a regular file, or a one-line InputError."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a cache file") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{path} is {'a directory' if stat.S_ISDIR(mode) else 'not a regular file'}, not a cache file")
    return fd


def map_file(path: str | os.PathLike) -> mmap.mmap:
    """The whole file mapped read-only and shared (pages are shared by every process mapping it)."""
    path = Path(path)
    fd = _open_regular(path)
    try:
        if os.fstat(fd).st_size == 0:
            raise FormatError(f"{path} is empty")
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise InputError(f"cannot map {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def detect(path: str | os.PathLike) -> str:
    """The format of an existing file: by magic for lkc, lkc.zst and ggngcmap, else llama (no magic)."""
    path = Path(path)
    fd = _open_regular(path)
    try:
        magic = os.pread(fd, 8, 0)
    finally:
        os.close(fd)
    if magic == lkc.MAGIC:
        return "lkc"
    if magic in (ggngcmap.MAGIC, ggngcmap.MAGIC[::-1]):
        return "ggngcmap"
    if magic[:4] == zst.MAGIC:
        return "lkc.zst"
    claimed = _by_extension(path) or ("lkc.zst" if path.name.lower().endswith(".zst") else None)
    if claimed not in (None, "llama"):
        what = "zstd-compressed" if claimed == "lkc.zst" else f"a {claimed} file"
        raise FormatError(f"{path} is not {what} (wrong magic: it starts with {magic!r})")
    return "llama"


def read_legacy_ngrams(path: str | os.PathLike):
    """A llama.cpp legacy file (-lcs/-lcd, n-grams of 1..4 tokens) as an NgramTable; an empty file is an
    empty cache, as llama.cpp reads it (the O(n) parse)."""
    path = Path(path)
    fd = _open_regular(path)
    empty = os.fstat(fd).st_size == 0
    os.close(fd)
    return llama.read(np.empty(0, np.uint8) if empty else map_file(path), str(path))


def read_legacy(path: str | os.PathLike) -> StaticTable:
    """A llama.cpp legacy file holding 2-grams only (a static cache) as a StaticTable."""
    table = read_legacy_ngrams(path)
    try:
        return StaticTable.from_ngrams(table)
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from None


def read_table(path: str | os.PathLike) -> StaticTable:
    """Any format's content as a canonical StaticTable (copied out of the file)."""
    if detect(path) == "llama":
        return read_legacy(path)
    from ..static import StaticCache

    with StaticCache.open(path) as cache:
        return cache.to_table()


def write_table(table: StaticTable, path: str | os.PathLike, format: str | None = None, meta: dict | None = None,
                keys: bool = True) -> str:
    """Write `table` atomically; returns the format written.

    `meta` (vocab, corpus, build) and `keys` only matter for lkc/lkc.zst: ggngcmap never stores keys or
    metadata, the legacy file always stores keys and never metadata.
    """
    fmt = format_for_path(path, format)
    with atomic_writer(path) as f:
        if fmt == "lkc":
            lkc.write(f, table, meta, keys)
        elif fmt == "lkc.zst":
            with zst.compressing(f) as z:
                lkc.write(z, table, meta, keys)
        elif fmt == "ggngcmap":
            ggngcmap.write(f, table)
        else:
            f.write(llama.encode(table.to_ngrams()).view(np.uint8))
    return fmt
