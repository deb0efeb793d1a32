"""Writing a `.lkc` file (layout: lkc_layout; SPEC.md) from a table in memory, and `in_memory`: the same
table handed out as an opened file would be (a Mapped), its maps built in memory.

The choices both .lkc writers make (this one and `streamed`, from parts on disk) are here once: the caller's
metadata checked (`check_meta`), the key index and the higher orders as optional sections
(`optional_sections`, left out with a warning when the key index would be too large) and the format
version a file gets (1: 2-grams only, 2: with higher orders, 3: with a suffix index, `with_suffix`).
The header's statistics come from counts.follower_stats: a writer sits above the counts, a reader below.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import BinaryIO

import numpy as np

from lookupkit.counts.follower_stats import follower_stats
from lookupkit.counts.tables import StaticTable
from lookupkit.errors import InputError, LookupkitWarning
from lookupkit.formats import constmap, lkc_orders, lkc_suffix
from lookupkit.formats.lkc_layout import MAX_KEY_INDEX, PREAMBLE, header_for, place_sections, preamble, raw_bytes
from lookupkit.formats.lkc_orders import HighOrders
from lookupkit.formats.mapped import Mapped


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


def write_file(f: BinaryIO, table: StaticTable, meta: dict | None = None, keys: bool = True,
               orders: HighOrders | None = None, suffix=None) -> dict:
    """Write `table` (and `orders`, the higher orders, and `suffix`, a lookupkit.suffix.SuffixIndex, if any)
    as a .lkc file to the binary stream `f` (sequentially); returns the header."""
    from lookupkit.formats import constmap_build  # (here: building a map needs kernels, reading a header none)

    meta = check_meta(meta or {}, _max_id(table))
    cmap = constmap_build.build_array(table.keys, table.spans())
    arrays = {"pairs": np.ascontiguousarray(table.pairs, dtype="<i4").reshape(-1, 2), "constmap": cmap}
    extra, meta, version = optional_sections(table.keys, keys, orders, meta)
    arrays.update(extra)
    if suffix is not None:
        suffix_arrays, suffix_header = lkc_suffix.sections_of(suffix)
        arrays.update(suffix_arrays)
        meta, version = with_suffix(meta, suffix_header, version)
    stats = follower_stats(np.diff(table.offsets), table.pairs[:, 1])
    header = header_for(version, {name: (list(a.shape), int(a.nbytes), hashlib.sha256(raw_bytes(a)).hexdigest(), a.dtype.str)
                                  for name, a in arrays.items()}, meta, stats)
    sections = header["sections"]
    blob, pos = place_sections(header)
    f.write(preamble(version, blob, pos))
    f.write(blob)
    written = PREAMBLE.size + len(blob)
    for name, a in arrays.items():
        f.write(b"\0" * (sections[name]["offset"] - written))
        f.write(raw_bytes(a))
        written = sections[name]["offset"] + a.nbytes
    return header


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
