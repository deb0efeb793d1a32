"""Opening a `.lkc` file (layout: lkc_layout; SPEC.md): `open_file` maps it and hands out views in O(1).

`parse` checks everything that can be checked without reading the sections: the preamble, the header
(checksum, JSON, types of the descriptive fields), each section's geometry against the file, and the
counts the header, the sections and the constmap state; the higher orders and the suffix index are
checked by lkc_orders and lkc_suffix. `verify_sections` hashes the sections (the O(n) part), and
`keys_from_sections` turns the key index back into 2-grams.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from lookupkit.errors import FormatError
from lookupkit.files import map_file, unmap
from lookupkit.formats import constmap, lkc_orders, lkc_suffix
from lookupkit.formats.lkc_layout import (BYTE_ORDER_MARK, KEY_SECTIONS, MAGIC, MAX_HEADER, MIN_ALIGN, PREAMBLE,
                                          VERSION, section_spec)
from lookupkit.formats.mapped import Mapped


def _fail(name: str, what: str) -> FormatError:
    return FormatError(f"{name}: not a valid .lkc file: {what}")


def _uint(value, what: str, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(name, f"{what} is {value!r}, not a non-negative integer")
    return value


def parse(buf, name: str) -> tuple[dict, dict[str, np.ndarray], constmap.ConstMapView]:
    """Validate preamble, header and section geometry (O(1) in the data); return header, views, constmap.

    `buf` is the whole file (an mmap); only the preamble and the header are read.
    """
    size = len(buf)
    if size < PREAMBLE.size:
        raise _fail(name, f"{size} bytes is shorter than the {PREAMBLE.size}-byte preamble (truncated)")
    magic, version, bom, header_len, digest, file_size = PREAMBLE.unpack_from(buf, 0)
    if magic != MAGIC:
        raise _fail(name, f"magic is {magic!r}, expected {MAGIC!r}")
    if bom != BYTE_ORDER_MARK:
        order = "big-endian" if bom == 0x0D0C0B0A else "corrupted"
        raise _fail(name, f"byte-order marker {bom:#010x} ({order}); lookupkit reads little-endian files")
    if not 1 <= version <= VERSION:
        if version > VERSION:
            raise FormatError(f"{name} was written by a newer lookupkit (format version {version}); "
                              f"this one reads {VERSION}")
        raise _fail(name, f"format version {version} does not exist")
    if file_size != size:
        raise _fail(name, f"the preamble says {file_size} bytes, the file has {size} (truncated or extended)")
    if header_len > min(MAX_HEADER, size - PREAMBLE.size):
        raise _fail(name, f"header length {header_len} does not fit the file")
    blob = bytes(buf[PREAMBLE.size:PREAMBLE.size + header_len])
    if hashlib.sha256(blob).digest() != digest:
        raise _fail(name, "header checksum mismatch (the header is corrupted)")
    try:
        header = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _fail(name, "header is not valid UTF-8 JSON") from None
    if not isinstance(header, dict) or not isinstance(header.get("sections"), dict):
        raise _fail(name, "header has no 'sections' object")
    if header.get("format_version") != version:
        raise _fail(name, f"the header's format_version {header.get('format_version')!r} is not the preamble's {version}")
    views = _section_views(buf, header["sections"], PREAMBLE.size + header_len, name)
    spec = header["sections"]["constmap"]
    cmap = constmap.parse_in(buf, spec["offset"], spec["length"], name)
    _check_counts(header, views, cmap, name)
    return header, views, cmap


def _section_views(buf, sections: dict, data_start: int, name: str) -> dict[str, np.ndarray]:
    """Check each section's geometry (in the file, aligned, not overlapping, dtype/shape) and view it."""
    for required in ("pairs", "constmap"):
        if required not in sections:
            raise _fail(name, f"header lacks the '{required}' section")
    if (KEY_SECTIONS[0] in sections) != (KEY_SECTIONS[1] in sections):
        raise _fail(name, "only one of the two key sections is present")
    spans = []
    for sec, spec in sections.items():
        if not isinstance(spec, dict):
            raise _fail(name, f"section '{sec}' is not an object")
        off = _uint(spec.get("offset"), f"section '{sec}' offset", name)
        length = _uint(spec.get("length"), f"section '{sec}' length", name)
        digest = spec.get("sha256")
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise _fail(name, f"section '{sec}' has no valid sha256")
        if off % MIN_ALIGN or off < data_start or off + length > len(buf):
            raise _fail(name, f"section '{sec}' [{off}, {off + length}) is misaligned or outside the file")
        spans.append((off, off + length, sec))
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise _fail(name, f"sections '{a}' and '{b}' overlap")
    views = {}
    for sec in sections:
        spec = sections[sec]
        known = section_spec(sec, spec.get("dtype"))
        if known is None:
            continue  # (a section of a version this reader does not use)
        dtype, ndim = known
        shape = spec.get("shape")
        want = [None, 2] if ndim == 2 else [None]
        if (spec.get("dtype") != dtype or not isinstance(shape, list) or len(shape) != len(want)
                or any(w is not None and s != w for s, w in zip(shape, want))):
            raise _fail(name, f"section '{sec}' has dtype {spec.get('dtype')!r} and shape {shape!r}, "
                              f"expected {dtype} with {len(want)} dimension(s)")
        rows = _uint(shape[0], f"section '{sec}' rows", name)
        itemsize = np.dtype(dtype).itemsize * (2 if ndim == 2 else 1)
        if rows * itemsize != spec["length"]:
            raise _fail(name, f"section '{sec}' is {spec['length']} bytes, its shape needs {rows * itemsize}")
        arr = np.frombuffer(buf, dtype=dtype, count=rows * (2 if ndim == 2 else 1), offset=spec["offset"])
        views[sec] = arr.reshape(shape) if ndim == 2 else arr
    return views


def _check_counts(header: dict, views: dict, cmap: constmap.ConstMapView, name: str) -> None:
    """The numbers the header, the sections and the constmap state about the content agree."""
    stats = header.get("stats")
    if not isinstance(stats, dict):
        raise _fail(name, "header has no 'stats' object")
    n_keys = _uint(stats.get("n_keys"), "stats.n_keys", name)
    n_pairs = _uint(stats.get("n_pairs"), "stats.n_pairs", name)
    if n_pairs != len(views["pairs"]):
        raise _fail(name, f"header says {n_pairs} pairs, the pairs section holds {len(views['pairs'])}")
    if n_keys != cmap.n_keys:
        raise _fail(name, f"header says {n_keys} 2-grams, the constmap holds {cmap.n_keys}")
    if n_keys > n_pairs:
        raise _fail(name, f"{n_keys} 2-grams cannot share {n_pairs} pairs (each has at least one follower)")
    if "key_t1" in views:
        if len(views["key_t1"]) != n_keys:
            raise _fail(name, f"key_t1 holds {len(views['key_t1'])} keys, the header says {n_keys}")
        if len(views["key_t0_offsets"]) < 1:
            raise _fail(name, "key_t0_offsets is empty")
    _check_meta_fields(header, name)


_NUMBER = (int, float)
_STATS = {"n_tokens": int, "max_followers": int, "mean_followers": _NUMBER, "max_count": int,
          "count_one_pairs": _NUMBER, "followers_percentiles": dict, "followers_cdf": list}


def _check_meta_fields(header: dict, name: str) -> None:
    """The descriptive fields have the types readers (inspect) rely on; O(size of the header)."""
    for field in ("vocab", "corpus", "build", "tool"):
        if header.get(field) is not None and not isinstance(header[field], dict):
            raise _fail(name, f"header '{field}' is not an object")
    vocab = header.get("vocab") or {}
    if vocab.get("fingerprint") is not None and not isinstance(vocab["fingerprint"], str):
        raise _fail(name, "vocab.fingerprint is not a string")
    if vocab.get("n_vocab") is not None:
        _uint(vocab["n_vocab"], "vocab.n_vocab", name)
    sources = (header.get("corpus") or {}).get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(x, dict) for x in sources):
        raise _fail(name, "corpus.sources is not a list of objects")
    more = (header.get("corpus") or {}).get("more_sources")
    if more is not None and not (isinstance(more, dict) and isinstance(more.get("count"), int)):
        raise _fail(name, "corpus.more_sources is not an object with a count")
    stats = header["stats"]
    for field, kind in _STATS.items():
        value = stats.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _fail(name, f"stats.{field} is {value!r}")
    rows = stats["followers_cdf"]
    if not all(isinstance(r, dict) and all(isinstance(r.get(k), _NUMBER) and not isinstance(r.get(k), bool)
                                           for k in ("followers", "keys", "pairs")) for r in rows):
        raise _fail(name, "stats.followers_cdf is malformed")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in stats["followers_percentiles"].values()):
        raise _fail(name, "stats.followers_percentiles is malformed")


def verify_sections(buf, header: dict, name: str) -> list[str]:
    """Hash every section against its sha256 in the header (O(n)); returns the names checked."""
    checked = []
    for sec, spec in header["sections"].items():
        data = np.frombuffer(buf, dtype=np.uint8, count=spec["length"], offset=spec["offset"])
        if hashlib.sha256(data).hexdigest() != spec["sha256"]:
            raise FormatError(f"{name}: section '{sec}' does not match its sha256 (the file is corrupted)")
        checked.append(sec)
    return checked


def keys_from_sections(t0_offsets: np.ndarray, t1: np.ndarray, name: str) -> np.ndarray:
    """(n, 2) int32 keys back from the two key sections, after checking the offsets are consistent."""
    t0_offsets = t0_offsets.astype(np.int64)  # (u32 differences would wrap instead of going negative)
    steps = np.diff(t0_offsets)
    if t0_offsets[0] != 0 or t0_offsets[-1] != len(t1) or (len(steps) and int(steps.min()) < 0):
        raise FormatError(f"{name}: corrupted key index (key_t0_offsets is not a monotone index into key_t1)")
    t0 = np.repeat(np.arange(len(steps), dtype=np.int32), steps)
    return np.column_stack([t0, t1]).astype(np.int32, copy=False)


def open_file(path: Path, name: str | None = None) -> Mapped:
    """Mapped read-only in O(1): preamble, header and section geometry checked, nothing else read."""
    mm = map_file(path, "cache file")
    try:
        header, views, cmap = parse(mm, name or str(path))
        version = header["format_version"]
        order_sections = "orders" in header or any(map(lkc_orders.SECTION.match, views))
        has_orders = version == 2 or (version == 3 and order_sections)
        high = lkc_orders.parse(mm, header, name or str(path)) if has_orders else {}
        suffix = lkc_suffix.parse(header, views, name or str(path)) if version == 3 else None
        if version < 3 and ("suffix" in header or any(s in views for s in lkc_suffix.NAMES)):
            raise _fail(name or str(path), f"a suffix index in a version-{version} file (it needs version 3)")
    except BaseException:
        unmap(mm)
        raise
    key_views = {k: views[k] for k in KEY_SECTIONS if k in views} or None
    return Mapped("lkc", header, views["pairs"], cmap, mm, header["sections"]["constmap"]["offset"],
                  key_views=key_views, mm=mm, path=path, orders=high, orders_buf=mm, suffix=suffix)
