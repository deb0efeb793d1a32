"""lookupkit's own static cache file, `.lkc`: one self-describing file that opens in O(1) (SPEC.md).

Layout: a 64-byte preamble (magic, format version, byte-order marker, header length, header sha256,
file size), a UTF-8 JSON header (sections with offset/length/dtype/shape/sha256, vocabulary,
corpus provenance, build parameters, tool, statistics), then page-aligned sections: `pairs`,
`constmap` (fastconstmap VMAP0001) and, unless written with keys=False, `key_t0_offsets` + `key_t1`;
version 2 adds the higher orders (lkc_orders), version 3 the suffix index (lkc_suffix).
`parse` checks everything that can be checked without reading the sections; `verify_sections`
hashes them (the O(n) part).
"""

from __future__ import annotations

import hashlib
import json
import struct
import warnings
from pathlib import Path
from typing import BinaryIO

import numpy as np

from lookupkit._version import __version__
from lookupkit.counts.follower_stats import follower_stats
from lookupkit.counts.tables import StaticTable
from lookupkit.errors import FormatError, InputError, LookupkitWarning
from lookupkit.files import map_file, unmap
from lookupkit.formats import constmap, lkc_orders, lkc_suffix
from lookupkit.formats.mapped import Mapped
from lookupkit.formats.lkc_orders import HighOrders

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


def optional_sections(keys: np.ndarray, want_keys: bool, orders: HighOrders | None, meta: dict):
    """The sections after pairs and constmap, for both writers: the key index (left out, with a warning,
    when it would be too large) and the higher orders. Returns (sections, meta, format version); the
    suffix sections, when there are any, follow these (version 3: `with_suffix`)."""
    extra = {}
    if want_keys and _dense_index_bytes(keys) > max(MAX_KEY_INDEX, 8 * len(keys)):
        warnings.warn(LookupkitWarning(
            f"2-grams start with token ids up to {int(keys[:, 0].max()):,}: the key index would take "
            f"{_dense_index_bytes(keys):,} bytes, so the keys are left out of the file (it drafts the "
            f"same; listing and converting it need the keys recovered from its constmap)"), stacklevel=3)
        want_keys = False
    if want_keys:
        extra.update(key_sections(keys))
    if orders is None:
        return extra, meta, 1
    extra.update(orders.sections())
    return extra, {**meta, "orders": orders.header()}, 2


def with_suffix(meta: dict, suffix_header: dict | None, version: int) -> tuple[dict, int]:
    """The header objects and format version once a suffix index is added (version 3), or unchanged."""
    return (meta, version) if suffix_header is None else ({**meta, "suffix": suffix_header}, 3)


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


def _spec(section: str, declared=None) -> tuple[str, int] | None:
    """(dtype, dimensions) of a section (`declared`: the header's dtype, where two are allowed), or None for
    one this reader does not know."""
    suffix = lkc_suffix.spec(section, declared)
    return SECTIONS.get(section) or (("|u1", 1) if lkc_orders.SECTION.match(section) else None) or \
        (suffix and (suffix, 1))


def _dense_index_bytes(keys: np.ndarray) -> int:
    """Size of key_t0_offsets: 4 B for every first-token id up to the largest (it is dense)."""
    return 4 * (int(keys[:, 0].max()) + 2) if len(keys) else 4


def key_sections(keys: np.ndarray) -> dict[str, np.ndarray]:
    """Keys as per-first-token offsets into the list of second tokens (4 B per 2-gram + 4 B per t0).

    u32 offsets suffice: a VMAP0001 map holds fewer than 2^32 keys.
    """
    keys = np.asarray(keys, dtype=np.int32).reshape(-1, 2)
    if len(keys) and int(keys.min()) < 0:
        raise InputError("a 2-gram has a negative token id; token ids are >= 0")
    top = int(keys[:, 0].max()) + 1 if len(keys) else 0
    offsets = np.searchsorted(keys[:, 0], np.arange(top + 1, dtype=np.int64)).astype("<u4")
    return {"key_t0_offsets": offsets, "key_t1": np.ascontiguousarray(keys[:, 1], dtype="<i4")}


def keys_from_sections(t0_offsets: np.ndarray, t1: np.ndarray, name: str) -> np.ndarray:
    """(n, 2) int32 keys back from the two key sections, after checking the offsets are consistent."""
    t0_offsets = t0_offsets.astype(np.int64)  # (u32 differences would wrap instead of going negative)
    steps = np.diff(t0_offsets)
    if t0_offsets[0] != 0 or t0_offsets[-1] != len(t1) or (len(steps) and int(steps.min()) < 0):
        raise FormatError(f"{name}: corrupted key index (key_t0_offsets is not a monotone index into key_t1)")
    t0 = np.repeat(np.arange(len(steps), dtype=np.int32), steps)
    return np.column_stack([t0, t1]).astype(np.int32, copy=False)


def check_meta(meta: dict, max_id: int) -> dict:
    """The caller's vocab/corpus/build metadata, checked just enough that readers can rely on it
    (`max_id`: the largest token id the table holds, -1 if none)."""
    vocab = meta.get("vocab")
    if vocab is not None:
        if not isinstance(vocab, dict):
            raise InputError("meta['vocab'] must be a dict with name, n_vocab and fingerprint")
        n_vocab = vocab.get("n_vocab")
        if n_vocab is not None:
            if not isinstance(n_vocab, int) or isinstance(n_vocab, bool) or n_vocab <= 0:
                raise InputError(f"meta['vocab']['n_vocab'] must be a positive integer, got {n_vocab!r}")
            if max_id >= n_vocab:
                raise InputError(f"the table holds token id {max_id}, outside the vocabulary of {n_vocab} tokens")
        if vocab.get("fingerprint") is not None and not isinstance(vocab["fingerprint"], str):
            raise InputError("meta['vocab']['fingerprint'] must be a string")
    return {"vocab": vocab, "corpus": meta.get("corpus"), "build": meta.get("build") or {}}


def _max_id(table: StaticTable) -> int:
    return max(int(table.keys.max()) if table.n_keys else -1, int(table.pairs[:, 0].max()) if table.n_pairs else -1)


def _raw(a: np.ndarray) -> np.ndarray:
    """The bytes of a contiguous array as a flat uint8 view (also when empty)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def header_for(version: int, sections: dict[str, tuple], meta: dict, stats: dict) -> dict:
    """The JSON header every .lkc writer writes (SPEC.md). `sections`: {name: (shape, length, sha256[, dtype])}
    in file order (dtype: where a section may have two); their offsets are set by `place_sections`."""
    specs = {name: {"offset": 0, "length": s[1], "dtype": _spec(name, s[3] if len(s) > 3 else None)[0],
                    "shape": s[0], "sha256": s[2]} for name, s in sections.items()}
    return {"format": "lkc", "format_version": version, "byte_order": "little", "alignment": ALIGN,
            "sections": specs, **meta, "tool": {"name": "lookupkit", "version": __version__}, "stats": stats}


def preamble(version: int, blob: bytes, file_size: int) -> bytes:
    """The fixed 64 bytes before the JSON header `blob`."""
    return PREAMBLE.pack(MAGIC, version, BYTE_ORDER_MARK, len(blob), hashlib.sha256(blob).digest(), file_size)


def write_file(f: BinaryIO, table: StaticTable, meta: dict | None = None, keys: bool = True,
               orders: HighOrders | None = None, suffix=None) -> dict:
    """Write `table` (and `orders`, the higher orders, and `suffix`, a lookupkit.suffix.SuffixIndex, if any)
    as a .lkc file to the binary stream `f` (sequentially); returns the header."""
    from lookupkit.formats import constmap_build  # (here: building a map needs kernels, reading a header none)

    meta = check_meta(meta or {}, _max_id(table))
    cmap = np.frombuffer(constmap_build.build(table.keys, table.spans()), dtype=np.uint8)
    arrays = {"pairs": np.ascontiguousarray(table.pairs, dtype="<i4").reshape(-1, 2), "constmap": cmap}
    extra, meta, version = optional_sections(table.keys, keys, orders, meta)
    arrays.update(extra)
    if suffix is not None:
        suffix_arrays, suffix_header = lkc_suffix.sections_of(suffix)
        arrays.update(suffix_arrays)
        meta, version = with_suffix(meta, suffix_header, version)
    stats = follower_stats(np.diff(table.offsets), table.pairs[:, 1])
    header = header_for(version, {name: (list(a.shape), int(a.nbytes), hashlib.sha256(_raw(a)).hexdigest(), a.dtype.str)
                                  for name, a in arrays.items()}, meta, stats)
    sections = header["sections"]
    blob, pos = place_sections(header)
    f.write(preamble(version, blob, pos))
    f.write(blob)
    written = PREAMBLE.size + len(blob)
    for name, a in arrays.items():
        f.write(b"\0" * (sections[name]["offset"] - written))
        f.write(_raw(a))
        written = sections[name]["offset"] + a.nbytes
    return header


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
        if _spec(sec, spec.get("dtype")) is None:
            continue  # (a section of a version this reader does not use)
        dtype, ndim = _spec(sec, spec.get("dtype"))
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


def in_memory(table: StaticTable, meta: dict | None = None, format: str = "memory",
              high: HighOrders | None = None, suffix=None) -> Mapped:
    """A table (and higher orders, and a lookupkit.suffix.SuffixIndex) as a Mapped, its maps built here (O(n))."""
    from lookupkit.formats import constmap_build  # (here: building a map needs kernels, reading a header none)

    buf = np.frombuffer(constmap_build.build(table.keys, table.spans()), dtype=np.uint8)
    pairs = np.ascontiguousarray(table.pairs, dtype=np.int32).reshape(-1, 2).view()
    pairs.flags.writeable = False
    keys = np.ascontiguousarray(table.keys, dtype=np.int32).reshape(-1, 2)
    cmap = constmap.parse_in(buf, 0, len(buf), "in-memory cache")
    meta = {**(meta or {}), **check_meta(meta or {}, _max_id(table))}
    views = None
    if suffix is not None:
        views, meta["suffix"] = lkc_suffix.sections_of(suffix)
    maps = {}
    if high is not None:
        meta["orders"] = high.header()
        blobs = list(high.sections().items())
        words = np.concatenate([b for _, b in blobs]) if blobs else np.zeros(8, np.uint8)
        at = np.cumsum([0] + [len(b) for _, b in blobs])  # VMAP0001 maps are whole words long
        maps = {int(lkc_orders.SECTION.match(sec).group(1)): constmap.parse_in(words, int(a), len(b), "in-memory cache")
                for (sec, b), a in zip(blobs, at)}
        return Mapped(format, meta, pairs, cmap, buf, 0, keys=keys, orders=maps, orders_buf=words, suffix=views)
    return Mapped(format, meta, pairs, cmap, buf, 0, keys=keys, orders={}, suffix=views)
