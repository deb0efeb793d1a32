"""Mutated cache files, opened thousands of times: a clear LookupkitError or correct answers, never a crash.

Valid files of every format are truncated, bit-flipped, extended, or get header/constmap fields rewritten
(for .lkc with a matching header checksum, so the checks behind it are reached). Whatever opens is then
looked up, listed, inspected and verified. For .lkc, where every byte of data is covered by a sha256, a
file that passes verify() must hold exactly the original table.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookupkit import StaticCache, formats
from lookupkit.static import keyrecovery
from lookupkit.cli import cache_cmds
from lookupkit.cli.common import print_json
from lookupkit.errors import LookupkitError
from lookupkit.formats.lkc_layout import ALIGN, PREAMBLE
from test_formats import META, same, table_of, text_like

TABLE = table_of(text_like(1500, vocab=300, seed=21))
KINDS = {"lkc": ".lkc", "lkc-nokeys": ".lkc", "ggngcmap": ".ggngcmap", "llama": ".lcs", "lkc.zst": ".lkc.zst"}
_names = itertools.count()
INTS = st.one_of(st.integers(-3, 3), st.integers(0, 2**64 - 1), st.integers(-2**63, 2**63 - 1),
                 st.sampled_from([2**31 - 1, 2**31, 2**32, 4096, 4097, 8]))
VALUES = st.one_of(INTS, st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=4),
                   st.lists(st.integers(-2, 2**33), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Base files, a scratch dir, and key recovery limited to small ids (the table's ids are < 300)."""
    root = tmp_path_factory.mktemp("fuzz")
    base = {}
    for kind, ext in KINDS.items():
        path = root / f"base-{kind}{ext}"
        formats.write_table(TABLE, path, meta=META, keys=kind != "lkc-nokeys")
        base[kind] = path.read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(keyrecovery, "FULL_RANGE", 1024)
        mp.setattr(keyrecovery, "MAX_RANGE", 4096)  # a corrupted huge token id must not slow the sweep
        mp.setenv("LOOKUPKIT_CACHE_DIR", str(root / "unpacked"))
        yield root, base


def exercise(path, kind: str) -> None:
    """Open and use a (possibly corrupted) file; only LookupkitError may come out."""
    try:
        cache = StaticCache.open(path)
    except LookupkitError:
        return
    rng = np.random.default_rng(0)
    probes = np.vstack([TABLE.keys[:40], rng.integers(-2, 400, (40, 2))])
    with cache:
        for call in (lambda: [cache.find(*k) for k in probes.tolist()],
                     lambda: [cache.count(*k, 7) for k in probes.tolist()],
                     lambda: cache.find_many(probes), lambda: cache.count_many(probes, probes[:, 1]),
                     cache.keys, cache.stats, lambda: describe(cache)):
            try:
                call()
            except LookupkitError:
                pass
        try:
            cache.verify()
        except LookupkitError:
            return
        try:
            table = cache.to_table()
        except LookupkitError:
            return
        if kind.startswith("lkc"):  # sha256 covers every section: verified means intact
            assert same(table, TABLE)


def describe(cache: StaticCache) -> None:
    """What `lookupkit inspect` prints, as text and as JSON."""
    info = cache_cmds._describe(cache)
    cache_cmds._print_text(info)
    print_json(info)


def run(work, kind: str, data: bytes) -> None:
    root, _ = work
    path = root / f"m{next(_names)}{KINDS[kind]}"
    path.write_bytes(data)
    try:
        exercise(path, kind)
    finally:
        path.unlink()


def header_of(data: bytes) -> tuple[dict, int]:
    hlen = PREAMBLE.unpack_from(data)[3]
    return json.loads(data[PREAMBLE.size:PREAMBLE.size + hlen]), hlen


def with_header(data: bytes, header: dict, hlen: int) -> bytes:
    blob = json.dumps(header, separators=(",", ":")).encode()
    if len(blob) > ALIGN - PREAMBLE.size:
        return data
    magic, version, bom, _, _, size = PREAMBLE.unpack_from(data)
    pre = PREAMBLE.pack(magic, version, bom, len(blob), hashlib.sha256(blob).digest(), size)
    return pre + blob + b"\0" * (ALIGN - PREAMBLE.size - len(blob)) + data[ALIGN:]


FUZZ = settings(max_examples=700, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(kind=st.sampled_from(list(KINDS)), cut=st.integers(0, 2**40), extra=st.binary(max_size=16))
def test_truncated_or_extended(work, kind, cut, extra):
    data = work[1][kind]
    run(work, kind, data[:cut % (len(data) + 1)] + (extra if cut % 3 == 0 else b""))


@FUZZ
@given(kind=st.sampled_from(list(KINDS)),
       flips=st.lists(st.tuples(st.one_of(st.integers(0, 160), st.integers(0, 2**40)), st.integers(1, 255)),
                      min_size=1, max_size=6))
def test_flipped_bytes(work, kind, flips):
    data = bytearray(work[1][kind])
    for pos, mask in flips:
        data[pos % len(data)] ^= mask
    run(work, kind, bytes(data))


@FUZZ
@given(kind=st.sampled_from(["lkc", "lkc-nokeys"]), section=st.sampled_from(["pairs", "constmap", "key_t0_offsets",
                                                                             "key_t1", "extra"]),
       field=st.sampled_from(["offset", "length", "dtype", "shape", "sha256", None]), value=VALUES,
       top=st.sampled_from([None, "stats", "vocab", "format_version", "corpus", "tool"]), top_field=st.text(max_size=12))
def test_header_fields(work, kind, section, field, value, top, top_field):
    """Rewrite one header field (with a valid header checksum): the open-time schema and bounds checks."""
    header, hlen = header_of(work[1][kind])
    if top is not None:
        target = header.get(top)
        if isinstance(target, dict) and target:
            key = top_field if top_field in target else sorted(target)[len(top_field) % len(target)]
            target[key] = value
        else:
            header[top] = value
    elif field is None:
        header["sections"][section] = value
    else:
        header["sections"].setdefault(section, {})[field] = value
    run(work, kind, with_header(work[1][kind], header, hlen))


@FUZZ
@given(kind=st.sampled_from(["lkc", "lkc-nokeys", "ggngcmap"]), which=st.integers(0, 8), value=INTS)
def test_binary_header_fields(work, kind, which, value):
    """Preamble, ggngcmap header and in-file constmap header fields set to arbitrary integers."""
    data = bytearray(work[1][kind])
    if kind == "ggngcmap":
        fields = [(8, "<Q"), (16, "<Q")]
        cm = 24 + 8 * TABLE.n_pairs
    else:
        fields = [(8, "<I"), (12, "<I"), (16, "<Q"), (56, "<Q")]
        cm = header_of(bytes(data))[0]["sections"]["constmap"]["offset"]
    fields += [(cm + 8, "<Q"), (cm + 16, "<I"), (cm + 20, "<I"), (cm + 24, "<I"), (cm + 28, "<I")]
    off, fmt = fields[which % len(fields)]
    size = struct.calcsize(fmt)
    struct.pack_into(fmt, data, off, value % (1 << (8 * size)))
    run(work, kind, bytes(data))


def test_many_random_single_byte_flips(work):
    """A plain sweep on top of hypothesis: 1,500 more opens of files with one random byte changed."""
    rng = np.random.default_rng(1234)
    for kind in ("lkc", "ggngcmap", "lkc-nokeys"):
        data = work[1][kind]
        for pos in rng.integers(0, len(data), 500):
            mutated = bytearray(data)
            mutated[pos] ^= int(rng.integers(1, 256))
            run(work, kind, bytes(mutated))
