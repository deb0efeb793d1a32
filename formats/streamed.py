"""The streamed writer: a table that is on disk in parts (`counts.runs.Part`) written with bounded memory,
byte-identical to `lkc_write.write_file` / `ggngcmap.write_file` of the same table in memory.

The pairs are copied part by part into the output and hashed as they go; only the 2-gram keys
(8 B per 2-gram) and the constmap being built (`constmap_build`, ~22 B per 2-gram) are held. The header's
statistics come from the merge's running totals (`follower_stats.stats_from_hist`), its section hashes are filled in
after the sections are written (a sha256 is always 64 hex digits, so the header keeps its length and
every offset stays where it was computed). Formats that compress or re-order (lkc.zst, llama) are
written through an in-memory StaticTable by their own writers.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from lookupkit.counts.follower_stats import stats_from_hist
from lookupkit.counts.tables import StaticTable
from lookupkit.errors import InputError
from lookupkit.files import atomic_writer
from lookupkit.formats import constmap_build, ggngcmap
from lookupkit.formats.lkc_layout import header_blob, header_for, place_sections, preamble, raw_bytes
from lookupkit.formats.lkc_write import check_meta, optional_sections, with_suffix
from lookupkit.formats.registry import BY_NAME
from lookupkit.formats.spans import pack_spans, span_lengths


def parts_hist(parts) -> np.ndarray:
    width = max(len(p.hist) for p in parts)
    hist = np.zeros(width, np.int64)
    for p in parts:
        hist[:len(p.hist)] += p.hist
    return hist


def _keys_and_spans(parts) -> tuple[np.ndarray, np.ndarray]:
    n_keys = sum(p.n_keys for p in parts)
    keys = np.empty((n_keys, 2), np.int32)
    lens = np.empty(n_keys, np.int64)
    at = 0
    for p in parts:
        for k in p.arrays("keys", "<i4", 2):
            keys[at:at + len(k)] = k
            at += len(k)
    at = 0
    for p in parts:
        for ln in p.arrays("lens", "<u4", 1):
            lens[at:at + len(ln)] = ln
            at += len(ln)
    return keys, pack_spans(np.cumsum(lens) - lens, lens, sum(p.n_pairs for p in parts))


def to_table(parts) -> StaticTable:
    """The parts as one in-memory StaticTable (for the formats written by their own writers)."""
    keys, values = _keys_and_spans(parts)
    lens = span_lengths(values)
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    pairs = np.concatenate([a for p in parts for a in p.arrays("pairs", "<i4", 2)] or [np.empty((0, 2), np.int32)])
    return StaticTable(keys, offsets, pairs)


def write_parts(parts, path: str | os.PathLike, fmt: str, meta: dict | None = None, keys: bool = True,
                orders=None, suffix=None) -> str:
    """Write the table in `parts` (ordered, disjoint key ranges) to `path` atomically in format `fmt`;
    `orders` (formats.lkc_orders.HighOrders, lkc only) adds the higher-order sections, `suffix`
    (lookupkit.suffix.write.Part, lkc only) the suffix index, copied from its built file."""
    if orders is not None and not BY_NAME[fmt].has_orders:
        raise InputError(f"higher orders (--orders) are stored in .lkc files only, not {fmt}")
    if suffix is not None and not BY_NAME[fmt].has_suffix:
        raise InputError(f"a suffix index (--suffix-index) is stored in .lkc files only, not {fmt}")
    if not BY_NAME[fmt].streamed:
        table = to_table(parts)
        with atomic_writer(path) as f:
            BY_NAME[fmt].write(f, table, meta, keys)
        return fmt
    with atomic_writer(path) as f:
        if fmt == "ggngcmap":
            k, spans = _keys_and_spans(parts)
            cmap = constmap_build.build_array(k, spans)
            del k, spans
            f.write(ggngcmap.HEADER.pack(ggngcmap.MAGIC, sum(p.n_pairs for p in parts), len(cmap)))
            for p in parts:
                for a in p.arrays("pairs", "<i4", 2):
                    f.write(a.data)
            f.write(cmap.data)
        else:
            _write_lkc(f, parts, meta or {}, keys, orders, suffix)
    return fmt


def _write_lkc(f, parts, meta: dict, keys: bool, orders=None, suffix=None) -> None:
    meta = check_meta(meta, max((p.max_id for p in parts), default=-1))
    k, spans = _keys_and_spans(parts)
    cmap = constmap_build.build_array(k, spans)
    del spans
    n_pairs = sum(p.n_pairs for p in parts)
    arrays = {"pairs": None, "constmap": cmap}
    extra, meta, version = optional_sections(k, keys, orders, meta)
    arrays.update(extra)
    del k
    shapes = {name: list(a.shape) for name, a in arrays.items() if a is not None}
    shapes["pairs"] = [n_pairs, 2]
    lengths = {name: int(a.nbytes) for name, a in arrays.items() if a is not None}
    lengths["pairs"] = 8 * n_pairs
    dtypes = {}
    if suffix is not None:
        meta, version = with_suffix(meta, suffix.header, version)
        for name, (dtype, rows) in suffix.shapes.items():
            shapes[name], lengths[name], dtypes[name] = [rows], suffix.nbytes(name), dtype
    stats = stats_from_hist(parts_hist(parts), sum(p.count_sum for p in parts),
                            max((p.count_max for p in parts), default=0), sum(p.count_ones for p in parts))
    header = header_for(version, {name: (shapes[name], lengths[name], "0" * 64, dtypes.get(name))
                                      for name in [*arrays, *dtypes]}, meta, stats)
    sections = header["sections"]
    blob, size = place_sections(header)
    names = list(arrays)
    f.write(b"\0" * sections["pairs"]["offset"])  # preamble and header come last
    digest = hashlib.sha256()
    for p in parts:
        for a in p.arrays("pairs", "<i4", 2):
            digest.update(a.data)
            f.write(a.data)
    sections["pairs"]["sha256"] = digest.hexdigest()
    written = sections["pairs"]["offset"] + lengths["pairs"]
    for name in names[1:]:
        raw = raw_bytes(arrays[name])
        f.write(b"\0" * (sections[name]["offset"] - written))
        f.write(raw.data)
        sections[name]["sha256"] = hashlib.sha256(raw).hexdigest()
        written = sections[name]["offset"] + lengths[name]
    arrays = extra = cmap = raw = None  # (the constmap's memory is free before the suffix index is copied in)
    for name in dtypes:
        f.write(b"\0" * (sections[name]["offset"] - written))
        suffix.copy(name, f)
        sections[name]["sha256"] = suffix.sha256[name]
        written = sections[name]["offset"] + lengths[name]
    final = header_blob(header)
    assert len(final) == len(blob)
    f.seek(0)
    f.write(preamble(version, final, size))
    f.write(final)
    f.seek(0, os.SEEK_END)
