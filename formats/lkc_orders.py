"""The .lkc version-2 sections: the static cache's higher orders, one VMAP0001 map per order (SPEC.md).

A map `order<n>` sends the key of each kept n-gram (counts.high_orders: the n-gram's 64-bit hash shifted
right by the follower bits, stored as the map's 8 key bytes, low word first) to its packed top follower,
total and share. Nothing else is stored: no pairs, no key lists. The header's `orders` object records
what decides which n-grams were kept and how keys and values are made, so a reader can refuse what it
does not understand. A file with only 2-grams is written as version 1, byte for byte as before.

The value layout is named here once: the builder (counts.high_orders) packs with it, the compiled policy
(policy.chain) unpacks with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from lookupkit.errors import FormatError
from lookupkit.formats import constmap

SECTION = re.compile(r"order(\d+)$")
HASH = "lookupkit-ngram-hash-1"

# A stored value: top follower << VALUE_TOKEN_SHIFT | min(total, TOTAL_MAX) << VALUE_TOTAL_SHIFT | share,
# share = floor(SHARE_ONE * count / total) (SHARE_ONE = the whole run is the top follower).
VALUE_TOKEN_SHIFT = 32
VALUE_TOTAL_SHIFT = 16
TOTAL_MAX = 0xFFFF  # totals saturate here
SHARE_ONE = 0xFFFF
VALUE = "token << 32 | min(total, 65535) << 16 | floor(65535 * count / total)"  # the header's `value`


@dataclass(frozen=True)
class OrderParams:
    """What decides which n-grams of order >= 3 a file keeps, recorded in its header."""

    orders: tuple[int, ...]  # e.g. (3, 4, 5, 6)
    min_total: int = 2
    min_share: float = 0.3
    follower_bits: int = 18  # ids < 2^follower_bits; the key keeps 64 - follower_bits hash bits (the build
    # sets it from the vocabulary)

    def to_meta(self) -> dict:
        return {"orders": list(self.orders), "min_total": self.min_total, "min_share": self.min_share,
                "key_bits": 64 - self.follower_bits, "hash": HASH, "value": VALUE}


def unpack_value(v: int) -> tuple[int, int, float]:
    """(top follower, total (saturated at TOTAL_MAX), share) of a stored value."""
    v = int(v)
    return v >> VALUE_TOKEN_SHIFT, (v >> VALUE_TOTAL_SHIFT) & TOTAL_MAX, (v & SHARE_ONE) / SHARE_ONE


@dataclass
class HighOrders:
    """Kept n-grams of orders >= 3: {n: (keys uint64, values uint64)} and the parameters that kept them."""

    params: OrderParams
    maps: dict[int, tuple[np.ndarray, np.ndarray]]

    def sections(self) -> dict[str, np.ndarray]:
        from lookupkit.formats import constmap_build  # (here: building a map needs kernels, reading a header none)

        return {f"order{n}": constmap_build.build_array(np.ascontiguousarray(k, "<u8").view("<i4").reshape(-1, 2), v)
                for n, (k, v) in sorted(self.maps.items())}

    def header(self) -> dict:
        return {**self.params.to_meta(), "n_keys": {str(n): len(k) for n, (k, _) in sorted(self.maps.items())}}


def parse(buf, header: dict, name: str) -> dict[int, constmap.ConstMapView]:
    """The order maps of a version-2 file, checked against its header (O(1): the maps' headers only)."""
    meta = header.get("orders")
    if not isinstance(meta, dict) or meta.get("hash") != HASH or not isinstance(meta.get("n_keys"), dict):
        raise FormatError(f"{name}: not a valid .lkc file: version 2 needs an 'orders' header with hash {HASH}")
    key_bits = meta.get("key_bits")
    if not isinstance(key_bits, int) or not 40 <= key_bits <= 63:
        raise FormatError(f"{name}: not a valid .lkc file: orders.key_bits is {key_bits!r}")
    out = {}
    for sec, spec in header["sections"].items():
        m = SECTION.match(sec)
        if m is None:
            continue
        n = int(m.group(1))
        cmap = constmap.parse_in(buf, spec["offset"], spec["length"], name)
        if meta["n_keys"].get(str(n)) != cmap.n_keys:
            raise FormatError(f"{name}: not a valid .lkc file: orders.n_keys[{n}] does not match section {sec}")
        out[n] = cmap
    if sorted(out) != sorted(int(n) for n in meta["n_keys"]):
        raise FormatError(f"{name}: not a valid .lkc file: the orders header and the order sections disagree")
    return out
