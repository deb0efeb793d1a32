"""The formats' registry: each static cache format's name, magic, extensions, reader (`open`) and writer
(`write`), and what it can hold; the one place that turns a path into a format (`detect` by magic,
`format_for_path` by extension) and a file into a Mapped or a table.

It joins every format's reader and writer, so it sits above them and above the counts (the writers take a
counts.tables.StaticTable); a module that reads one format imports that format's module instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

from lookupkit.counts.tables import NgramTable, StaticTable
from lookupkit.errors import FormatError, InputError
from lookupkit.files import atomic_writer, open_input
from lookupkit.formats import ggngcmap, lkc_layout, lkc_read, lkc_write, llama, zst
from lookupkit.formats.mapped import Mapped


@dataclass(frozen=True)
class Format:
    name: str
    magic: tuple[bytes, ...]  # the file starts with one of these; () = no magic
    extensions: tuple[str, ...]
    open: Callable[[Path], Mapped]
    write: Callable[[BinaryIO, StaticTable, dict | None, bool], None]  # (f, table, meta, keys)
    what: str
    records_meta: bool  # keeps the vocabulary, corpus and build provenance (`meta`)
    keys_optional: bool  # the 2-gram list may be left out (--no-keys); else always or never stored
    has_orders: bool  # can hold the higher-order sections (lookup-create --orders 2-N)
    has_suffix: bool  # can hold the suffix index (lookup-create --suffix-index)
    streamed: bool  # formats.streamed writes it from merged parts, never holding the whole table


REGISTRY = (
    Format("lkc", (lkc_layout.MAGIC,), (".lkc",), lkc_read.open_file, lkc_write.write_file,
           "a lookupkit cache (.lkc)", records_meta=True, keys_optional=True, has_orders=True, has_suffix=True,
           streamed=True),
    Format("lkc.zst", (zst.MAGIC,), (".lkc.zst",), zst.open_file, zst.write_file, "zstd-compressed",
           records_meta=True, keys_optional=True, has_orders=False, has_suffix=False, streamed=False),
    Format("ggngcmap", (ggngcmap.MAGIC, ggngcmap.MAGIC[::-1]), (".ggngcmap",), ggngcmap.open_file,
           ggngcmap.write_file, "a ggngcmap file", records_meta=False, keys_optional=False, has_orders=False,
           has_suffix=False, streamed=True),
    Format("llama", (), (".lcs", ".lcd"), llama.open_file, llama.write_file, "a llama.cpp legacy cache",
           records_meta=False, keys_optional=False, has_orders=False, has_suffix=False, streamed=False),
)
BY_NAME = {f.name: f for f in REGISTRY}
FORMATS = tuple(BY_NAME)
MAGIC_BYTES = max(len(m) for f in REGISTRY for m in f.magic)


def _by_extension(path: Path) -> Format | None:
    name = path.name.lower()
    ends = sorted(((ext, f) for f in REGISTRY for ext in f.extensions), key=lambda e: -len(e[0]))
    return next((f for ext, f in ends if name.endswith(ext)), None)


def format_for_path(path: str | os.PathLike, format: str | None = None) -> str:
    """The format to write: `format` if given (checked), else from the file name's extension."""
    if format is not None:
        if format not in BY_NAME:
            raise InputError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
        return format
    fmt = _by_extension(Path(path))
    if fmt is None:
        exts = ", ".join("*" + e for f in REGISTRY for e in f.extensions)
        raise InputError(f"cannot tell the format of {path} from its extension; name it {exts} "
                         f"or pass --format ({', '.join(FORMATS)})")
    return fmt.name


def _magic_of(path: Path) -> bytes:
    with open_input(path, "cache file") as f:
        return f.read(MAGIC_BYTES)


def _by_magic(head: bytes) -> Format | None:
    return next((fmt for fmt in REGISTRY if any(head.startswith(m) for m in fmt.magic)), None)


def detect(path: str | os.PathLike) -> str:
    """The format of an existing file: by magic where the format has one, else llama (no magic)."""
    path = Path(path)
    head = _magic_of(path)
    fmt = _by_magic(head)
    if fmt is not None:
        return fmt.name
    claimed = _by_extension(path) or (BY_NAME["lkc.zst"] if path.name.lower().endswith(".zst") else None)
    if claimed is not None and claimed.magic:
        raise FormatError(f"{path} is not {claimed.what} (wrong magic: it starts with {head[:8]!r})")
    return "llama"


def open_mapped(path: str | os.PathLike) -> Mapped:
    """Any format's file opened for `StaticCache`: .lkc/ggngcmap mapped in O(1), the legacy file parsed."""
    path = Path(path)
    return BY_NAME[detect(path)].open(path)


def read_ngrams(path: str | os.PathLike, what: str = "dynamic cache") -> NgramTable:
    """A llama.cpp legacy file of 1..4-grams (-lcd, -lcs) as an NgramTable; a file of another format is
    refused by name (a .lkc given as -lcd)."""
    path = Path(path)
    fmt = _by_magic(_magic_of(path))
    if fmt is not None:
        raise InputError(f"{what} {path} is {fmt.what}, a static cache; the {what} must be a llama.cpp "
                         f"legacy file (.lcd, as written by --save-dynamic or llama-lookup); pass a static "
                         f"cache with -lcs")
    return llama.read_file(path)


def write_table(table: StaticTable, path: str | os.PathLike, format: str | None = None, meta: dict | None = None,
                keys: bool = True) -> str:
    """Write `table` atomically; returns the format written.

    `meta` (vocab, corpus, build) and `keys` only matter for lkc/lkc.zst: ggngcmap never stores keys or
    metadata, the legacy file always stores keys and never metadata.
    """
    fmt = format_for_path(path, format)
    with atomic_writer(path) as f:
        BY_NAME[fmt].write(f, table, meta, keys)
    return fmt
