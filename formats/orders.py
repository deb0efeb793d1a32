"""The .lkc version-2 sections: the static cache's higher orders, one VMAP0001 map per order (SPEC.md).

A map `order<n>` sends the key of each kept n-gram (counts.orders: the n-gram's 64-bit hash shifted
right by the follower bits, stored as the map's 8 key bytes, low word first) to its packed top follower,
total and share. Nothing else is stored: no pairs, no key lists. The header's `orders` object records
what decides which n-grams were kept and how keys and values are made, so a reader can refuse what it
does not understand. A file with only 2-grams is written as version 1, byte for byte as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from lookupkit.counts.orders import OrderParams
from lookupkit.errors import FormatError
from lookupkit.formats import vmap

SECTION = re.compile(r"order(\d+)$")
HASH = "lookupkit-ngram-hash-1"


@dataclass
class HighOrders:
    """Kept n-grams of orders >= 3: {n: (keys uint64, values uint64)} and the parameters that kept them."""

    params: OrderParams
    maps: dict[int, tuple[np.ndarray, np.ndarray]]

    def sections(self) -> dict[str, np.ndarray]:
        return {f"order{n}": np.frombuffer(vmap.build(np.ascontiguousarray(k, "<u8").view("<i4").reshape(-1, 2), v),
                                           dtype=np.uint8) for n, (k, v) in sorted(self.maps.items())}

    def header(self) -> dict:
        return {**self.params.to_meta(), "n_keys": {str(n): len(k) for n, (k, _) in sorted(self.maps.items())}}


def parse(buf, header: dict, name: str) -> dict[int, vmap.ConstMapView]:
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
        cmap = vmap.parse_in(buf, spec["offset"], spec["length"], name)
        if meta["n_keys"].get(str(n)) != cmap.n_keys:
            raise FormatError(f"{name}: not a valid .lkc file: orders.n_keys[{n}] does not match section {sec}")
        out[n] = cmap
    if sorted(out) != sorted(int(n) for n in meta["n_keys"]):
        raise FormatError(f"{name}: not a valid .lkc file: the orders header and the order sections disagree")
    return out
