"""What opening a static cache file hands to `StaticCache`: views of its pairs and constmap, and its header.

Every format's `open_file` returns one `Mapped`; `lkc_write.in_memory` builds one from a table (the legacy
file, tests), building the constmap in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lookupkit.formats import constmap


@dataclass
class Mapped:
    format: str  # "lkc", "ggngcmap", "llama" or "memory"
    meta: dict  # the .lkc header ({} when the format has none)
    pairs: np.ndarray  # (m, 2) int32 (token, count), read-only
    cmap: constmap.ConstMapView
    cmap_buf: object  # the buffer holding the constmap's bytes, and where in it they start
    cmap_offset: int
    key_views: dict | None = None  # the .lkc key sections, when stored
    keys: np.ndarray | None = None  # (n, 2) int32 keys, when known without a pass (in-memory tables)
    mm: object = None  # the mapping to close, if any
    path: Path | None = None
    orders: dict = None  # {n: ConstMapView} of the higher orders (version-2 .lkc), {} when none
    orders_buf: object = None  # the buffer all order maps lie in (the file's mapping, or one array)
    suffix: dict | None = None  # the suffix index's sections (formats.lkc_suffix.NAMES), checked; None without
