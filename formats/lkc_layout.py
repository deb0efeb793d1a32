"""The `.lkc` file's layout (SPEC.md), named once: the facts its writers (lkc_write, streamed) and its
reader (lkc_read) share, and the preamble and JSON header built from them.

A 64-byte preamble (magic, format version, byte-order marker, header length, header sha256, file size),
a UTF-8 JSON header (sections with offset/length/dtype/shape/sha256, vocabulary, corpus provenance,
build parameters, tool, statistics), then page-aligned sections: `pairs`, `constmap` (fastconstmap
VMAP0001) and, unless written without keys, `key_t0_offsets` + `key_t1`; version 2 adds the higher
orders (lkc_orders), version 3 the suffix index (lkc_suffix).
"""

from __future__ import annotations

import hashlib
import json
import struct

from lookupkit._version import __version__
from lookupkit.errors import InputError
from lookupkit.formats import lkc_orders, lkc_suffix

MAGIC = b"LKCACHE\x00"
VERSION = 3  # the newest this code reads and writes; a file without higher orders or suffix index is still 1
BYTE_ORDER_MARK = 0x0A0B0C0D  # written little-endian: 0d 0c 0b 0a
PREAMBLE = struct.Struct("<8sIIQ32sQ")  # magic, version, byte order, header length, header sha256, file size
ALIGN = 4096  # the writer starts every section on a page; readers require 8
MIN_ALIGN = 8
MAX_HEADER = 16 * 2**20
MAX_KEY_INDEX = 64 * 2**20  # a dense key_t0_offsets larger than this (and than 8 B per 2-gram) is left out

# name: (dtype, number of trailing dims); shapes are [rows] or [rows, 2]
SECTIONS = {"pairs": ("<i4", 2), "constmap": ("|u1", 1), "key_t0_offsets": ("<u4", 1), "key_t1": ("<i4", 1)}
KEY_SECTIONS = ("key_t0_offsets", "key_t1")


def header_for(version: int, sections: dict[str, tuple], meta: dict, stats: dict) -> dict:
    """The JSON header every .lkc writer writes (SPEC.md). `sections`: {name: (shape, length, sha256[, dtype])}
    in file order (dtype: where a section may have two); their offsets are set by `place_sections`."""
    specs = {name: {"offset": 0, "length": s[1], "dtype": section_spec(name, s[3] if len(s) > 3 else None)[0],
                    "shape": s[0], "sha256": s[2]} for name, s in sections.items()}
    return {"format": "lkc", "format_version": version, "byte_order": "little", "alignment": ALIGN,
            "sections": specs, **meta, "tool": {"name": "lookupkit", "version": __version__}, "stats": stats}


def header_blob(header: dict) -> bytes:
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False, default=_json_default).encode()


def place_sections(header: dict) -> tuple[bytes, int]:
    """Fill the sections' offsets (page-aligned, in order) and return (header bytes, file size). The
    offsets are inside the header, whose length moves them: iterate to a fixed point."""
    try:
        json.dumps(header, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise InputError(f"metadata cannot be stored as JSON: {exc}") from None
    sections = header["sections"]
    names = list(sections)
    for _ in range(8):
        blob = header_blob(header)
        pos, moved = _align(PREAMBLE.size + len(blob)), False
        for name in names:
            moved |= sections[name]["offset"] != pos
            sections[name]["offset"] = pos
            pos += sections[name]["length"]
            pos = pos if name == names[-1] else _align(pos)
        if not moved:
            return blob, pos
    raise AssertionError("section offsets did not converge")


def preamble(version: int, blob: bytes, file_size: int) -> bytes:
    """The fixed 64 bytes before the JSON header `blob`."""
    return PREAMBLE.pack(MAGIC, version, BYTE_ORDER_MARK, len(blob), hashlib.sha256(blob).digest(), file_size)


def section_spec(section: str, declared=None) -> tuple[str, int] | None:
    """(dtype, dimensions) of a section (`declared`: the header's dtype, where two are allowed), or None for
    one this reader does not know."""
    suffix = lkc_suffix.spec(section, declared)
    return SECTIONS.get(section) or (("|u1", 1) if lkc_orders.SECTION.match(section) else None) or \
        (suffix and (suffix, 1))


def raw_bytes(a):
    """The bytes of a numpy array, contiguous, as a flat uint8 view (also when empty): what a section holds."""
    import numpy as np

    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")
