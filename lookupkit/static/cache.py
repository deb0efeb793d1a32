"""`StaticCache`: a static 2-gram cache opened in O(1) from any format, looked up in place.

`.lkc` and ggngcmap files are memory-mapped read-only (shared pages, nothing read but the header) and
handed out as numpy views; `.lkc.zst` is unpacked once to a cache directory first; llama.cpp's legacy
file is parsed (O(n), as llama.cpp does) and its constmap built in memory. No checksum is computed at
open: `verify()` is the O(n) step that checks every checksum and bound.

Bounds: open checks every section's geometry, but a corrupted constmap can still map a 2-gram to a span
outside the pairs. The jitted `span_of` reports such a span as length -1 (never reads it); the
methods here raise FormatError for it; jitted callers treat it as a miss.

A version-3 .lkc also holds a suffix index (formats.lkc_suffix): `suffix` hands it out as a
lookupkit.suffix.SuffixIndex of views into the mapping (made at first use: the search loads numba,
opening does not).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from .. import formats
from ..counts.follower_stats import follower_stats
from ..counts.tables import StaticTable
from ..errors import FormatError, InputError, LookupkitWarning, VocabMismatchError
from ..files import unmap
from ..formats import constmap, lkc_read, lkc_suffix
from ..formats.llama import read_static
from .high_orders import high_of, no_high

_I32 = np.iinfo(np.int32)


_lookup = None


def _kernels():
    """static.lookup, imported at first use: opening a cache and reading its header need no compiled code."""
    global _lookup
    if _lookup is None:
        from . import lookup as _lookup
    return _lookup


def _ids(arr, what: str) -> np.ndarray:
    """An integer array as int32, with ids outside int32 replaced by -1 (they cannot be in any cache)."""
    arr = np.asarray(arr)
    if arr.size and arr.dtype.kind not in "iu":
        raise InputError(f"{what} must be integer token ids, got {arr.dtype}")
    if arr.dtype == np.int32:
        return np.ascontiguousarray(arr)
    wide = arr.astype(np.int64)
    return np.where((wide < _I32.min) | (wide > _I32.max), -1, wide).astype(np.int32)


def _id(t) -> int:
    t = int(t)
    return t if _I32.min <= t <= _I32.max else -1


class StaticCache:
    """A static cache's pairs (token, count) and constmap (2-gram -> offset << 24 | n_followers)."""

    def __init__(self, mapped: formats.Mapped):
        self.path = Path(mapped.path) if mapped.path is not None else None
        self.format, self.meta = mapped.format, mapped.meta
        vocab = mapped.meta.get("vocab") or {}
        self.vocab_fingerprint: str | None = vocab.get("fingerprint")
        self.vocab_name: str | None = vocab.get("name")
        self.n_vocab: int | None = vocab.get("n_vocab")
        self.pairs, self.cmap = mapped.pairs, mapped.cmap
        self.n_pairs = len(self.pairs)
        self.n_keys = int(self.cmap.n_keys) if self.cmap.n_keys or not self.n_pairs else None
        self._cmap_loc = (mapped.cmap_buf, mapped.cmap_offset)
        self._keys, self._key_views, self._mm = mapped.keys, mapped.key_views, mapped.mm
        self._layout = None
        self._args = (*self.cmap.args, np.uint64(self.n_pairs))
        self._order_maps = mapped.orders or {}
        self.high = high_of(self._order_maps, mapped.orders_buf, mapped.meta.get("orders"))
        self._suffix_views, self._suffix = mapped.suffix, None

    @property
    def suffix(self):
        """The corpus' suffix index (lookupkit.suffix.SuffixIndex: views into the file, nothing copied), or
        None when the file has none (built by lookup-create --suffix-index)."""
        if self._suffix is None and self._suffix_views is not None:
            from ..suffix import SuffixIndex  # (here: the suffix package loads numba, opening needs none)

            v = self._suffix_views
            self._suffix = SuffixIndex(text=v["suffix_text"], sa=v["suffix_sa"], starts=v["suffix_starts"],
                                       second=v["suffix_second"])
        return self._suffix

    @property
    def orders(self) -> list[int]:
        """The n-gram orders this cache holds: [2] (llama.cpp's static cache), or 2 and its higher orders."""
        return [2, *sorted(self._order_maps)]

    @property
    def name(self) -> str:
        return str(self.path) if self.path is not None else "in-memory cache"

    # ---- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, path, *, expect_vocab=None) -> "StaticCache":
        """Open any format; .lkc/ggngcmap in O(1) (mmap). expect_vocab: the Tokenizer (or vocab fingerprint)
        of the tokens you will look up (see check_vocab)."""
        cache = cls(formats.open_mapped(path))
        try:
            cache.check_vocab(expect_vocab)
        except VocabMismatchError:
            cache.close()
            raise
        return cache

    @classmethod
    def from_table(cls, table: StaticTable, meta: dict | None = None, high=None, suffix=None) -> "StaticCache":
        """An in-memory cache (the maps are built here, O(n)): for tests and the legacy format. `high`: a
        formats.lkc_orders.HighOrders of higher orders to hold too; `suffix`: a lookupkit.suffix.SuffixIndex."""
        return cls(formats.in_memory(table, meta, high=high, suffix=suffix))

    def check_vocab(self, expect) -> None:
        """Refuse use with another vocabulary than the one the cache was built with.

        `expect`: a Tokenizer (anything with .fingerprint and .name), a vocab fingerprint, or None. A cache
        that records no vocabulary (.lcs, .ggngcmap, or converted from one) cannot be checked: a warning
        says so (attach one with `lookupkit convert IN OUT.lkc -m VOCAB`).
        """
        if expect is None:
            return
        fingerprint = getattr(expect, "fingerprint", expect)
        used = getattr(expect, "name", None)
        if self.vocab_fingerprint is None:
            warnings.warn(LookupkitWarning(
                f"{self.name} records no vocabulary, so it cannot be checked against "
                f"{used or 'the one in use'}: a cache of another vocabulary would draft nothing useful "
                f"(attach one with `lookupkit convert {self.name} OUT.lkc -m VOCAB`)"), stacklevel=3)
        elif fingerprint != self.vocab_fingerprint:
            built = self.vocab_name or "another vocabulary"
            raise VocabMismatchError(f"{self.name} was built for {built} (vocab fingerprint "
                                     f"{self.vocab_fingerprint}) but is used with {used or 'another vocabulary'} "
                                     f"(fingerprint {fingerprint}); rebuild the cache for it with lookup-create -m VOCAB")

    def check_ids(self, ids: np.ndarray) -> None:
        """Refuse ids the cache's vocabulary cannot hold (when it records its size): ids and cache then come
        from different vocabularies, which a replay from a token file could not otherwise tell."""
        top = int(ids.max()) if len(ids) else -1
        if self.n_vocab and top >= self.n_vocab:
            raise VocabMismatchError(f"token id {top} is out of range for {self.name}, built for a vocabulary of "
                                     f"{self.n_vocab} tokens: the ids and the cache come from different vocabularies")

    def close(self) -> None:
        """Drop the views and unmap (if views handed out are still alive, the mapping goes with the last one)."""
        self.pairs = self.cmap = self._keys = self._key_views = self._layout = self._args = self._cmap_loc = None
        self.high, self._order_maps = no_high(), {}
        self._suffix_views = self._suffix = None
        if self._mm is not None:
            unmap(self._mm)
            self._mm = None

    def __enter__(self) -> "StaticCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StaticCache({self.name!r}, format={self.format}, n_keys={self.n_keys}, n_pairs={self.n_pairs})"

    # ---- lookups -------------------------------------------------------------------------------
    def _live(self) -> tuple:
        if self._args is None:
            raise InputError(f"{self.name} is closed")
        return self._args

    def _corrupt(self, what: str) -> FormatError:
        return FormatError(f"{self.name}: corrupted cache: the constmap maps {what} outside the "
                           f"{self.n_pairs} pairs (run `lookupkit verify`)")

    def span(self, t0: int, t1: int) -> tuple[int, int]:
        """(offset, n_followers) of the 2-gram in `pairs`; (0, 0) when absent."""
        off, n = _kernels().span_of(np.int32(_id(t0)), np.int32(_id(t1)), *self._live())
        if n < 0:
            raise self._corrupt(f"({t0}, {t1})")
        return int(off), int(n)

    def find(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """Follower tokens and counts of the 2-gram (views into the file, sorted by token; empty if absent)."""
        off, n = self.span(t0, t1)
        run = self.pairs[off:off + n]
        return run[:, 0], run[:, 1]

    def count(self, t0: int, t1: int, token: int) -> int:
        """How often `token` followed the 2-gram (0 if never)."""
        off, n = self.span(t0, t1)
        return int(_kernels().count_in(self.pairs, np.int64(off), np.int64(n), np.int32(_id(token))))

    def find_many(self, keys) -> tuple[np.ndarray, np.ndarray]:
        """Offsets and lengths (0 = absent) for an (n, 2) array of 2-grams."""
        keys = _ids(keys, "keys").reshape(-1, 2)
        offs, lens = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
        if _kernels().spans_many(keys, *self._live(), offs, lens):
            raise self._corrupt(f"2-gram {keys[np.argmax(lens < 0)].tolist()}")
        return offs, lens

    def count_many(self, keys, tokens) -> np.ndarray:
        """Count of tokens[i] after keys[i] for every i (int64; 0 where absent)."""
        keys = _ids(keys, "keys").reshape(-1, 2)
        tokens = _ids(tokens, "tokens").reshape(-1)
        if len(tokens) != len(keys):
            raise InputError(f"count_many needs one token per 2-gram, got {len(tokens)} for {len(keys)}")
        out = np.empty(len(keys), np.int64)
        if _kernels().counts_many(keys, tokens, self.pairs, *self._live(), out):
            raise self._corrupt("a 2-gram")
        return out

    # ---- content -------------------------------------------------------------------------------
    @property
    def has_keys(self) -> bool:
        """Whether the file lists its 2-grams (else they are recovered from the constmap when needed)."""
        return self._keys is not None or self._key_views is not None

    def keys(self) -> np.ndarray | None:
        """(n, 2) int32 keys in canonical order when the file stores them, else None."""
        self._live()
        if self._keys is None and self._key_views is not None:
            self._keys = lkc_read.keys_from_sections(self._key_views["key_t0_offsets"], self._key_views["key_t1"], self.name)
        return self._keys

    def layout(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, offsets): each key's run is pairs[offsets[i]:offsets[i+1]], runs in file order (O(n)).

        Keys not stored in the file are recovered from the constmap (keyrecovery; may refuse if too costly).
        """
        if self._layout is None:
            keys = self.keys()
            if keys is None:
                from .keyrecovery import recover_layout  # (here: recovering keys needs kernels, opening none)

                self._layout = recover_layout(self.pairs, self.cmap, self.name)
            else:
                offs, lens = self.find_many(keys)
                if len(lens) and int(lens.min()) <= 0:
                    missing = keys[np.argmax(lens <= 0)].tolist()
                    raise FormatError(f"{self.name}: corrupted cache: stored 2-gram {missing} is not in its constmap")
                offsets = np.zeros(len(keys) + 1, np.int64)
                np.cumsum(lens, out=offsets[1:])
                if not np.array_equal(offs, offsets[:-1]) or offsets[-1] != self.n_pairs:
                    raise FormatError(f"{self.name}: corrupted cache: the runs of its 2-grams do not tile the pairs")
                self._layout = (keys, offsets)
        return self._layout

    def to_table(self) -> StaticTable:
        """The content as a canonical StaticTable, copied out of the file."""
        keys, offsets = self.layout()
        order = self._canonical_order(keys, offsets)
        new_offsets = np.zeros(len(keys) + 1, np.int64)
        np.cumsum(np.diff(offsets)[order], out=new_offsets[1:])
        pairs = np.empty((self.n_pairs, 2), np.int32)
        _kernels().gather_runs(self.pairs, offsets, order, pairs)
        return StaticTable(np.ascontiguousarray(keys[order]), new_offsets, pairs)

    def _canonical_order(self, keys: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """The permutation that sorts the 2-grams, after checking they are unique and each run strictly ascending."""
        order = np.lexsort((keys[:, 1], keys[:, 0]))
        sk = keys[order]
        if len(sk) > 1 and not np.all(np.any(sk[1:] != sk[:-1], axis=1)):
            raise FormatError(f"{self.name}: corrupted cache: a 2-gram is listed twice")
        bad = _kernels().first_unsorted_run(self.pairs, offsets)
        if bad >= 0:
            raise FormatError(f"{self.name}: corrupted cache: the followers of 2-gram {keys[bad].tolist()} "
                              f"are not strictly ascending by token")
        return order

    def stats(self) -> dict:
        """Followers-per-2-gram distribution etc.: from the .lkc header, else computed (O(n)).

        When the keys are neither stored nor recoverable, only what the pairs tell ("source": "partial",
        with the reason under "unavailable").
        """
        self._live()
        if self.format == "lkc":
            return {**self.meta["stats"], "source": "header"}
        try:
            keys, offsets = self.layout()
        except FormatError as exc:  # keys not stored and not recoverable: what the pairs alone tell
            counts = self.pairs[:, 1]
            return {"n_keys": self.n_keys, "n_pairs": self.n_pairs, "n_tokens": int(counts.sum(dtype=np.int64)),
                    "max_count": int(counts.max()) if self.n_pairs else 0, "source": "partial", "unavailable": str(exc)}
        return {**follower_stats(np.diff(offsets), self.pairs[:, 1]), "source": "computed"}

    def verify(self) -> dict:
        """Check every checksum and bound (O(n)); raise FormatError naming the first problem; return stats."""
        from ..formats.constmap_probe import checksum_ok  # (here: verifying reads every byte, in kernels)

        self._live()
        checks = []
        if self.format == "lkc":
            checks += [f"sha256 of section {s}" for s in lkc_read.verify_sections(self._mm, self.meta, self.name)]
        buf, offset = self._cmap_loc
        if not checksum_ok(buf, offset, self.cmap.nbytes):
            raise FormatError(f"{self.name}: the constmap's FNV-1a checksum does not match (the file is corrupted)")
        checks.append("constmap FNV-1a checksum")
        for n, cmap in sorted(self._order_maps.items()):
            words = self.high.words
            start = cmap.data.__array_interface__["data"][0] - words.__array_interface__["data"][0] - constmap.HEADER_SIZE
            if not checksum_ok(words.view(np.uint8), start, cmap.nbytes):
                raise FormatError(f"{self.name}: the order-{n} map's FNV-1a checksum does not match (the file is corrupted)")
            checks.append(f"order-{n} map FNV-1a checksum")
        self._check_pairs()
        checks.append("follower tokens >= 0 (and < n_vocab), counts > 0")
        keys, offsets = self.layout()
        checks.append("every 2-gram's span lies inside the pairs, spans tile the pairs exactly")
        self._check_keys(keys)
        checks.append("2-gram ids valid" + (", sorted and unique" if self._key_views is not None else ""))
        self._canonical_order(keys, offsets)
        checks.append("2-grams unique, followers of every 2-gram strictly ascending by token")
        if self._suffix_views is not None:
            checks += lkc_suffix.verify(self._suffix_views, self.meta, self.name)
        stats = follower_stats(np.diff(offsets), self.pairs[:, 1])
        if self.format == "lkc":
            for field, value in stats.items():
                if self.meta["stats"].get(field) != value:
                    raise FormatError(f"{self.name}: header stats.{field} = {self.meta['stats'].get(field)!r} "
                                      f"but the data gives {value!r}")
            checks.append("header statistics match the data")
        return {"ok": True, "format": self.format, "checks": checks, **stats}

    def _check_pairs(self) -> None:
        tokens, counts = self.pairs[:, 0], self.pairs[:, 1]
        if self.n_pairs and int(counts.min()) <= 0:
            raise FormatError(f"{self.name}: corrupted cache: pair {int(np.argmax(counts <= 0))} has a count <= 0")
        if self.n_pairs and int(tokens.min()) < 0:
            raise FormatError(f"{self.name}: corrupted cache: pair {int(np.argmax(tokens < 0))} has a negative token")
        if self.n_vocab is not None and self.n_pairs and int(tokens.max()) >= self.n_vocab:
            raise FormatError(f"{self.name}: a follower token id {int(tokens.max())} is outside the vocabulary "
                              f"of {self.n_vocab}")

    def _check_keys(self, keys: np.ndarray) -> None:
        if self.n_keys is not None and len(keys) != self.n_keys:
            raise FormatError(f"{self.name}: {len(keys)} 2-grams found, the constmap declares {self.n_keys}")
        if len(keys) and (int(keys.min()) < 0 or (self.n_vocab is not None and int(keys.max()) >= self.n_vocab)):
            raise FormatError(f"{self.name}: a 2-gram holds a token id outside 0..{(self.n_vocab or 2**31) - 1}")
        if self._key_views is not None and len(keys) > 1:
            same = keys[1:, 0] == keys[:-1, 0]
            if np.any(same & (keys[1:, 1] <= keys[:-1, 1])):
                raise FormatError(f"{self.name}: corrupted cache: key_t1 is not strictly ascending "
                                  f"within a first token")


def read_table(path) -> StaticTable:
    """Any format's content as a canonical StaticTable, copied out of the file (for convert and merge)."""
    if formats.detect(path) == "llama":
        return read_static(path)  # (no constmap to build: the legacy file lists its keys)
    with StaticCache.open(path) as cache:
        return cache.to_table()
