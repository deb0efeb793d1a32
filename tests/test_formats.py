"""Formats: .lkc layout, ggngcmap and legacy byte compatibility, detection, conversion, .lkc.zst, key recovery."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import struct
import subprocess
import sys

import fastconstmap
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit import formats
from lookupkit.static import read_table
from lookupkit.formats import constmap_build
from lookupkit.static import keyrecovery
from lookupkit.errors import FormatError, InputError
from lookupkit.formats import llama
from lookupkit.formats.lkc_layout import ALIGN, PREAMBLE
from lookupkit.formats.spans import SPAN_BITS
from lookupkit.static.cache import StaticCache
from lookupkit.counts.tables import StaticTable
import needs

REF = needs.SHARED / "reference"
META = {"vocab": {"name": "toy", "n_vocab": 1000, "fingerprint": "toy-fp"},
        "corpus": {"sources": [{"source": "toy.txt", "bytes": 10, "tokens": 5, "sha256": "00" * 32, "replaced_bytes": 0}]},
        "build": {"ngram": 2}}


def table_of(*docs) -> StaticTable:
    """2-gram followers of token streams (2-grams do not span documents), counted with a dict: the oracle."""
    d: dict = {}
    for tokens in docs:
        tokens = [int(t) for t in tokens]
        for a, b, c in zip(tokens, tokens[1:], tokens[2:]):
            run = d.setdefault((a, b), {})
            run[c] = run.get(c, 0) + 1
    keys, offsets, pairs = sorted(d), [0], []
    for k in keys:
        pairs += sorted(d[k].items())
        offsets.append(len(pairs))
    return StaticTable(np.array(keys, np.int32).reshape(-1, 2), np.array(offsets, np.int64),
                       np.array(pairs, np.int32).reshape(-1, 2))


def text_like(n: int, vocab: int = 300, seed: int = 0) -> np.ndarray:
    """A Zipf token stream with repeated spans (so 2-grams recur, like text)."""
    rng = np.random.default_rng(seed)
    out = list(rng.zipf(1.4, 64) % vocab)
    while len(out) < n:
        if rng.random() < 0.5 and len(out) > 20:
            s = int(rng.integers(0, len(out) - 10))
            out += out[s:s + int(rng.integers(3, 10))]
        else:
            out += list(rng.zipf(1.4, 8) % vocab)
    return np.array(out[:n], np.int32)


def same(a: StaticTable, b: StaticTable) -> bool:
    return (np.array_equal(a.keys, b.keys) and np.array_equal(a.offsets, b.offsets)
            and np.array_equal(a.pairs, b.pairs))


EXT = {"lkc": ".lkc", "lkc.zst": ".lkc.zst", "ggngcmap": ".ggngcmap", "llama": ".lcs"}


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "unpacked"))


@pytest.mark.parametrize("fmt", list(EXT))
@pytest.mark.parametrize("keys", [True, False])
def test_round_trip_every_format(tmp_path, fmt, keys):
    table = table_of(text_like(3000))
    path = tmp_path / f"c{EXT[fmt]}"
    assert formats.write_table(table, path, meta=META, keys=keys) == fmt
    assert formats.detect(path) == fmt
    assert same(read_table(path), table)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), min_size=0, max_size=60), min_size=1, max_size=4),
       st.sampled_from(["lkc", "ggngcmap", "llama"]), st.booleans())
def test_round_trip_property(tmp_path_factory, docs, fmt, keys):
    """Formats that store keys round-trip exactly; key recovery gives the exact table or refuses, never another."""
    table = table_of(*docs)
    path = tmp_path_factory.mktemp("rt") / f"c{EXT[fmt]}"
    formats.write_table(table, path, keys=keys)
    if fmt == "llama" or (fmt == "lkc" and keys):
        assert same(read_table(path), table)
        return
    try:
        got = read_table(path)
    except FormatError as exc:
        assert "rebuild the cache from the corpus" in str(exc)
    else:
        assert same(got, table)


@settings(max_examples=25, deadline=None)
@given(st.integers(50, 3000), st.integers(0, 2**32 - 1), st.integers(3, 70000))
def test_key_recovery_of_one_token_stream(tmp_path_factory, n, seed, vocab):
    """What llama-lookup-create writes (one stream) is always recovered from a ggngcmap file."""
    table = table_of(text_like(n, vocab=vocab, seed=seed))
    path = tmp_path_factory.mktemp("kr") / "c.ggngcmap"
    formats.write_table(table, path)
    assert same(read_table(path), table)


@pytest.mark.parametrize("name", ["synth", "zipf"])
def test_llamacpp_reference_files_read_and_convert(tmp_path, name):
    needs.shared("reference")
    corpus = np.fromfile(REF / f"{name}.corpus.i32", dtype="<i4")
    expected = table_of(corpus)
    got = read_table(REF / f"{name}.static.lcs")  # written by llama.cpp itself
    assert same(got, expected)
    for fmt in ("lkc", "ggngcmap", "llama"):
        out = tmp_path / f"x{EXT[fmt]}"
        formats.write_table(got, out)
        assert same(read_table(out), expected)
    ours = llama.encode(expected.to_ngrams()).tobytes()
    assert len(ours) == (REF / f"{name}.static.lcs").stat().st_size  # same records, canonical order


def test_ggngcmap_bytes_match_the_fork_layout(tmp_path):
    table = table_of(text_like(2000))
    path = tmp_path / "c.ggngcmap"
    formats.write_table(table, path)
    raw = path.read_bytes()
    magic, n, map_size = struct.unpack_from("<8sQQ", raw)
    assert magic == b"ggngcmap" and n == table.n_pairs and len(raw) == 24 + 8 * n + map_size
    assert raw[24:24 + 8 * n] == table.pairs.astype("<i4").tobytes()
    lengths = np.diff(table.offsets)
    mapping = {struct.pack("<ii", *k): (int(o) << SPAN_BITS) | int(ln)
               for k, o, ln in zip(table.keys.tolist(), table.offsets[:-1], lengths)}
    assert raw[24 + 8 * n:] == fastconstmap.VerifiedConstMap(mapping).to_bytes()  # what the fork's C writes
    view = fastconstmap.VerifiedConstMap.from_buffer(memoryview(np.frombuffer(raw, np.uint64)).cast("B")[24 + 8 * n:])
    k = table.keys[7]
    assert view.get(struct.pack("<ii", *k.tolist())) == mapping[struct.pack("<ii", *k.tolist())]


def test_ggngcmap_in_hash_order_reads_canonically(tmp_path):
    """The fork writes runs in hash-map order, not sorted: reading must still give the canonical table."""
    table = table_of(text_like(2500, seed=3))
    order = np.random.default_rng(1).permutation(table.n_keys)
    lengths = np.diff(table.offsets)
    pairs = np.concatenate([table.pairs[table.offsets[i]:table.offsets[i + 1]] for i in order])
    starts = np.concatenate([[0], np.cumsum(lengths[order])[:-1]])
    values = (starts.astype(np.uint64) << np.uint64(SPAN_BITS)) | lengths[order].astype(np.uint64)
    cmap = constmap_build.build(table.keys[order], values)
    path = tmp_path / "fork.ggngcmap"
    path.write_bytes(struct.pack("<8sQQ", b"ggngcmap", len(pairs), len(cmap)) + pairs.astype("<i4").tobytes() + cmap)
    assert same(read_table(path), table)
    with StaticCache.open(path) as c:
        assert c.verify()["n_keys"] == table.n_keys


def test_lkc_layout(tmp_path):
    table = table_of(text_like(2000))
    path = tmp_path / "c.lkc"
    formats.write_table(table, path, meta=META)
    raw = path.read_bytes()
    magic, version, bom, hlen, digest, size = PREAMBLE.unpack_from(raw)
    assert (magic, version, bom, size) == (b"LKCACHE\0", 1, 0x0A0B0C0D, len(raw))
    blob = raw[PREAMBLE.size:PREAMBLE.size + hlen]
    assert hashlib.sha256(blob).digest() == digest
    header = json.loads(blob)
    assert header["vocab"] == META["vocab"] and header["corpus"] == META["corpus"] and header["build"] == META["build"]
    assert header["tool"]["name"] == "lookupkit" and header["stats"]["n_keys"] == table.n_keys
    secs = header["sections"]
    assert set(secs) == {"pairs", "constmap", "key_t0_offsets", "key_t1"}
    for spec in secs.values():
        assert spec["offset"] % ALIGN == 0
        data = raw[spec["offset"]:spec["offset"] + spec["length"]]
        assert hashlib.sha256(data).hexdigest() == spec["sha256"]
    p = secs["pairs"]
    assert raw[p["offset"]:p["offset"] + p["length"]] == table.pairs.astype("<i4").tobytes()
    c = secs["constmap"]
    assert raw[c["offset"]:c["offset"] + 8] == b"VMAP0001"
    small = tmp_path / "small.lkc"
    formats.write_table(table, small, keys=False)
    small_raw = small.read_bytes()
    header_len = PREAMBLE.unpack_from(small_raw)[3]
    assert set(json.loads(small_raw[PREAMBLE.size:PREAMBLE.size + header_len])["sections"]) == {"pairs", "constmap"}
    assert small.stat().st_size < path.stat().st_size


def test_writes_are_deterministic(tmp_path):
    table = table_of(text_like(1500))
    for fmt in ("lkc", "ggngcmap", "llama"):
        a, b = tmp_path / f"a{EXT[fmt]}", tmp_path / f"b{EXT[fmt]}"
        formats.write_table(table, a, meta=META)
        formats.write_table(table, b, meta=META)
        assert a.read_bytes() == b.read_bytes()


def test_detect_by_magic_then_extension(tmp_path):
    table = table_of(text_like(500))
    for fmt in ("lkc", "ggngcmap", "lkc.zst"):
        p = tmp_path / f"x{EXT[fmt]}"
        formats.write_table(table, p)
        renamed = p.rename(tmp_path / f"{fmt}.bin")
        assert formats.detect(renamed) == fmt
    legacy = tmp_path / "static.bin"
    formats.write_table(table, legacy, format="llama")
    assert formats.detect(legacy) == "llama"
    for ext, what in ((".lkc", r"not a lookupkit cache \(\.lkc\)"), (".ggngcmap", "not a ggngcmap file"),
                      (".lkc.zst", "not zstd-compressed")):
        bad = tmp_path / f"bad{ext}"
        bad.write_bytes(b"garbage!" * 10)
        with pytest.raises(FormatError, match=what):
            formats.detect(bad)
    with pytest.raises(InputError, match="does not exist"):
        formats.detect(tmp_path / "missing.lkc")
    with pytest.raises(InputError, match="directory"):
        formats.detect(tmp_path)


def test_the_registry_says_what_each_format_keeps(tmp_path):
    """records_meta and keys_optional (what convert's -m, --no-keys and its note read) match what is written."""
    table = table_of(text_like(600))
    for fmt in formats.REGISTRY:
        stored = {}
        for keys in (True, False):
            path = tmp_path / f"{keys}{EXT[fmt.name]}"
            formats.write_table(table, path, meta=META, keys=keys)
            with StaticCache.open(path) as cache:
                assert (cache.meta.get("vocab") == META["vocab"]) == fmt.records_meta, fmt.name
                assert cache.vocab_fingerprint == ("toy-fp" if fmt.records_meta else None), fmt.name
                stored[keys] = cache.keys() is not None
        assert (stored[True] != stored[False]) == fmt.keys_optional, (fmt.name, stored)


def test_format_names_are_checked(tmp_path):
    table = table_of(text_like(300))
    with pytest.raises(InputError, match="unknown format 'parquet'.*lkc, lkc.zst, ggngcmap, llama"):
        formats.write_table(table, tmp_path / "x.lkc", format="parquet")
    with pytest.raises(InputError, match="cannot tell the format"):
        formats.write_table(table, tmp_path / "x.dat")
    assert formats.write_table(table, tmp_path / "x.dat", format="ggngcmap") == "ggngcmap"
    assert not (tmp_path / "x.lkc").exists()


def test_unwritable_and_disk_full_leave_nothing(tmp_path, monkeypatch):
    table = table_of(text_like(800))
    with pytest.raises(InputError, match="does not exist"):
        formats.write_table(table, tmp_path / "no" / "dir" / "x.lkc")

    def full(f, *args, **kwargs):
        f.write(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setitem(formats.BY_NAME, "lkc", dataclasses.replace(formats.BY_NAME["lkc"], write=full))
    target = tmp_path / "full.lkc"
    target.write_bytes(b"previous content")
    with pytest.raises(InputError, match="no space left"):
        formats.write_table(table, target)
    assert target.read_bytes() == b"previous content"  # the old file survives, no partial file
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_meta_is_checked(tmp_path):
    table = table_of(text_like(500))
    with pytest.raises(InputError, match="outside the vocabulary of 10"):
        formats.write_table(table, tmp_path / "x.lkc", meta={"vocab": {"n_vocab": 10}})
    with pytest.raises(InputError, match="JSON"):
        formats.write_table(table, tmp_path / "x.lkc", meta={"build": {"when": object()}})
    assert not (tmp_path / "x.lkc").exists()


def test_lkc_zst_unpacks_once(tmp_path):
    table = table_of(text_like(1000))
    path = tmp_path / "c.lkc.zst"
    formats.write_table(table, path, meta=META)
    with StaticCache.open(path) as c:
        assert c.format == "lkc" and c.vocab_fingerprint == "toy-fp"
    cached = list((tmp_path / "unpacked").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith("c.") and cached[0].suffix == ".lkc"
    stamp = cached[0].stat().st_mtime_ns
    with StaticCache.open(path) as c:
        assert same(c.to_table(), table)
    assert list((tmp_path / "unpacked").iterdir()) == cached and cached[0].stat().st_mtime_ns == stamp
    # a .zst compressed by the zstd tool (other level, no checksum) is accepted too
    other = tmp_path / "d.lkc.zst"
    other.write_bytes(zstandard.ZstdCompressor(level=19).compress((tmp_path / "unpacked" / cached[0].name).read_bytes()))
    assert same(read_table(other), table)


def test_bad_zst_files(tmp_path):
    notzstd = tmp_path / "a.lkc.zst"
    notzstd.write_bytes(b"this is plain text, not zstd")
    with pytest.raises(FormatError, match="not zstd-compressed"):
        StaticCache.open(notzstd)
    wrong = tmp_path / "b.lkc.zst"
    wrong.write_bytes(zstandard.ZstdCompressor().compress(b"hello world, not a cache"))
    with pytest.raises(FormatError, match="does not hold a .lkc"):
        StaticCache.open(wrong)
    table = table_of(text_like(3000))
    good = tmp_path / "c.lkc.zst"
    formats.write_table(table, good)
    cut = tmp_path / "cut.lkc.zst"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(FormatError):
        StaticCache.open(cut)
    unpacked = tmp_path / "unpacked"
    assert not unpacked.exists() or not [p for p in unpacked.iterdir() if p.name.startswith("cut")]


def test_key_recovery_many_documents_and_start_tokens(tmp_path):
    """Documents that start with a token that never follows anything (like BOS) are still recovered."""
    bos = 5000
    docs = [np.concatenate([[bos], text_like(int(n), seed=i)]) for i, n in enumerate([400, 300, 500, 250, 350])]
    table = table_of(*docs)
    path = tmp_path / "docs.ggngcmap"
    formats.write_table(table, path)
    assert same(read_table(path), table)


def test_key_recovery_refuses_when_too_costly(tmp_path):
    docs = [text_like(60, vocab=2000, seed=i) for i in range(200)]
    table = table_of(*docs)
    path = tmp_path / "many.ggngcmap"
    formats.write_table(table, path)
    with StaticCache.open(path) as c:
        with pytest.raises(FormatError, match="rebuild the cache from the corpus"):
            keyrecovery.recover_layout(c.pairs, c.cmap, str(path), search_budget=1000)
        keys, offsets = keyrecovery.recover_layout(c.pairs, c.cmap, str(path))  # the default budget suffices
    assert same(StaticTable.canonical(keys, offsets, table.pairs), table)


def test_key_recovery_fails_cleanly_when_start_ids_are_out_of_range(tmp_path):
    table = table_of([2**20 + 1, 2**20 + 2, 3])  # one 2-gram, both ids never follow anything and are >= 2^18
    path = tmp_path / "odd.ggngcmap"
    formats.write_table(table, path)
    with pytest.raises(FormatError, match="could not recover"):
        read_table(path)


def test_reading_headers_needs_no_compiled_code(tmp_path):
    """`lookupkit.formats` and every header reader import without numba (fresh process): only building a
    map, a legacy file's record scan and the lookups load the kernels."""
    path = tmp_path / "t.lkc"
    formats.write_table(table_of(text_like(400)), path, meta=META)
    code = ("import json, sys; import lookupkit.formats as f; from lookupkit.files import map_file; "
            "from lookupkit.formats import constmap, ggngcmap, lkc_read, lkc_orders, llama; "
            "header, views, cmap = lkc_read.parse(map_file(sys.argv[1], 'cache'), 'x'); "
            "print(json.dumps({'numba': 'numba' in sys.modules, 'n_keys': cmap.n_keys}))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd="/", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"numba": False, "n_keys": read_table(path).n_keys}
