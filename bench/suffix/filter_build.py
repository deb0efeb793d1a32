"""Building the n-gram membership filters bench/suffix/filter.py measures: pyfusefilter's Fuse8 (binary fuse,
8-bit fingerprints, ~9 bits per key) over the distinct keys of every n-gram of the corpus text of each order,
populated through pyfusefilter's C library and read back from its serialized form into the arrays the
compiled lookup (bench.suffix.filter_kernels.fuse_contains) reads; and what calling it from Python costs.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import numpy as np

HEADER = 28  # serialized Fuse8: Seed u64; Size, SegmentLength, SegmentCount, SegmentCountLength, ArrayLength u32


def fuse8(keys: np.ndarray):
    """A pyfusefilter Fuse8 over distinct uint64 keys, populated through its C library (its Python
    constructor hashes str(key) one key at a time: timed separately, python_api_costs)."""
    import pyfusefilter
    from pyfusefilter._xorfilter import ffi, lib

    keys = np.ascontiguousarray(keys, np.uint64)
    f = pyfusefilter.Fuse8(len(keys))
    if not lib.binary_fuse8_populate(ffi.cast("uint64_t *", keys.ctypes.data), len(keys), f._Fuse8__filter):
        raise RuntimeError(f"pyfusefilter could not build a filter of {len(keys)} keys")
    return f


def fuse_row(f, order: int, offset: int) -> tuple[list[int], np.ndarray]:
    """(params row, fingerprints) of a Fuse8 read from its serialized bytes (checked against its struct;
    the segment mask is not serialized: it is SegmentLength - 1)."""
    c = f._Fuse8__filter
    buf = bytes(f.serialize())
    seed = int(np.frombuffer(buf, np.uint64, 1)[0])
    size, seg, _, seg_count_len, n_fp = np.frombuffer(buf, np.uint32, count=5, offset=8).tolist()
    if len(buf) != HEADER + n_fp or (seed, size, seg, seg_count_len, n_fp, seg - 1) != \
            (c.Seed, c.Size, c.SegmentLength, c.SegmentCountLength, c.ArrayLength, c.SegmentLengthMask):
        raise RuntimeError("pyfusefilter's serialized Fuse8 is not laid out as this bench reads it")
    fp = np.frombuffer(buf, np.uint8, count=n_fp, offset=HEADER)
    return [order, seed, seg, seg - 1, seg_count_len, offset, n_fp], fp


def sorted_distinct(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorting `keys` in place (numpy 2.4's np.unique hashes: 300x slower here)."""
    keys.sort()
    keep = np.ones(len(keys), bool)
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def build_filter(text: np.ndarray, orders: list[int]) -> tuple[np.ndarray, np.ndarray, dict]:
    """(params, fingerprints, stats): one Fuse8 per order over the distinct keys of the text's n-grams."""
    from lookupkit.bench.suffix.filter_kernels import gram_keys

    rows, fps, stats = [], [], {"orders": {}}
    t_all = time.perf_counter()
    keys = np.empty(len(text), np.uint64)
    gram_keys(text[:0], 2, keys)  # compiled before the clock starts
    for k in sorted(orders):
        t0 = time.perf_counter()
        n = gram_keys(text, k, keys)
        t1 = time.perf_counter()
        distinct = sorted_distinct(keys[:n])
        t2 = time.perf_counter()
        row, fp = fuse_row(fuse8(distinct), k, sum(len(f) for f in fps))
        t3 = time.perf_counter()
        rows.append(row)
        fps.append(fp)
        stats["orders"][str(k)] = {"grams": int(n), "distinct": len(distinct), "bytes": len(fp),
                                   "bits_per_key": round(8 * len(fp) / max(1, len(distinct)), 3),
                                   "hash_s": round(t1 - t0, 2), "unique_s": round(t2 - t1, 2),
                                   "populate_s": round(t3 - t2, 2)}
        del distinct
    fp = np.concatenate(fps) if fps else np.zeros(0, np.uint8)
    stats.update(build_s=round(time.perf_counter() - t_all, 2), bytes=len(fp),
                 keys=sum(o["distinct"] for o in stats["orders"].values()),
                 bytes_per_corpus_token=round(len(fp) / max(1, len(text)), 3),
                 peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
    stats["bits_per_key"] = round(8 * len(fp) / max(1, stats["keys"]), 3)
    return np.array(rows, np.uint64).reshape(-1, 7), fp, stats


def save_filter(path: Path, params: np.ndarray, fp: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(np.uint64(len(params)).tobytes() + params.tobytes() + fp.tobytes())


def load_filter(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The filter's params and its fingerprints as a read-only mapping of the file (pages come in on use)."""
    raw = np.memmap(path, np.uint8, "r")
    n = int(raw[:8].view(np.uint64)[0])
    return np.array(raw[8:8 + 56 * n].view(np.uint64).reshape(n, 7)), raw[8 + 56 * n:]


def python_api_costs(flt_stats: dict, mean_checks: float, n: int = 200_000) -> dict:
    """What a filter called from Python would cost: pyfusefilter's Fuse8 API (it hashes xxh64(str(key))
    per key, building and querying), tried first; where it fails, the same steps with the string encoded
    (its own hashing, then its C contain through cffi) and the bare cffi contain."""
    from importlib import metadata

    import pyfusefilter
    import xxhash
    from pyfusefilter._xorfilter import lib

    keys = np.random.default_rng(0).integers(0, 2**63, n, dtype=np.uint64)
    out = {"pyfusefilter": metadata.version("pyfusefilter"), "xxhash": xxhash.VERSION}
    try:
        pyfusefilter.Fuse8([1, 2, 3]).contains(1)
        out["python_api"] = "works"
    except TypeError as e:
        out["python_api"] = f"fails: {e}"
    ints = keys.tolist()
    t0 = time.perf_counter()
    hashed = np.array([xxhash.xxh64_intdigest(str(k).encode()) for k in ints], np.uint64)
    f = fuse8(sorted_distinct(hashed))
    build = time.perf_counter() - t0
    probe = ints[: n // 2] + [k ^ 1 for k in ints[: n // 2]]
    handle = f._Fuse8__filter
    t0 = time.perf_counter()
    hits = sum(1 for k in probe if lib.binary_fuse8_contain(xxhash.xxh64_intdigest(str(k).encode()), handle))
    us = 1e6 * (time.perf_counter() - t0) / len(probe)
    raw = hashed[: n // 2].tolist()
    t0 = time.perf_counter()
    for k in raw:
        lib.binary_fuse8_contain(k, handle)
    bare = 1e6 * (time.perf_counter() - t0) / len(raw)
    out.update(build_us_per_key=round(1e6 * build / n, 3),
               build_s_extrapolated=round(build / n * flt_stats.get("keys", 0), 1),
               contains_us=round(us, 3), hit_share_of_half_members=round(hits / len(probe), 4),
               bare_cffi_contains_us=round(bare, 3), checks_per_draft_call=round(mean_checks, 3),
               added_us_per_draft_call=round(us * mean_checks, 3))
    return out
