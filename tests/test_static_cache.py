"""StaticCache: O(1) open of every format, lookups against an oracle, bounds on corrupted files, verify, vocab."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit import StaticCache, formats
from lookupkit.formats import constmap_build
from lookupkit.counts.follower_stats import follower_stats
from lookupkit.errors import LookupkitWarning, FormatError, InputError, VocabMismatchError
from lookupkit.formats.lkc_layout import ALIGN, PREAMBLE
from lookupkit.formats.spans import SPAN_BITS
from lookupkit.static.lookup import count_in, span_of
from lookupkit.counts.tables import StaticTable
from test_formats import EXT, META, same, table_of, text_like

FORMATS = ["lkc", "lkc-nokeys", "lkc.zst", "ggngcmap", "llama", "memory"]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "unpacked"))


@pytest.fixture(scope="module")
def table():
    return table_of(text_like(4000, vocab=500, seed=11))


def opened(table, tmp_path, kind, meta=META) -> StaticCache:
    if kind == "memory":
        return StaticCache.from_table(table, meta)
    fmt = "lkc" if kind == "lkc-nokeys" else kind
    path = tmp_path / f"c{EXT[fmt]}"
    formats.write_table(table, path, meta=meta, keys=kind != "lkc-nokeys")
    return StaticCache.open(path)


def rewrite_header(path: Path, edit) -> None:
    """Apply edit(header dict) and store the header with a matching checksum (a crafted, 'valid' file)."""
    raw = bytearray(path.read_bytes())
    magic, version, bom, hlen, _, size = PREAMBLE.unpack_from(raw)
    header = json.loads(bytes(raw[PREAMBLE.size:PREAMBLE.size + hlen]))
    edit(header)
    blob = json.dumps(header, separators=(",", ":")).encode()
    assert len(blob) <= ALIGN - PREAMBLE.size, "test header must fit the first page"
    pre = PREAMBLE.pack(magic, version, bom, len(blob), hashlib.sha256(blob).digest(), size)
    raw[:PREAMBLE.size + max(hlen, len(blob))] = pre + blob + b"\0" * max(0, hlen - len(blob))
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("kind", FORMATS)
def test_lookups_match_the_table(table, tmp_path, kind):
    expected = table.to_dict()
    rng = np.random.default_rng(0)
    with opened(table, tmp_path, kind) as c:
        assert (c.n_keys, c.n_pairs) == (table.n_keys, table.n_pairs)
        for i in rng.choice(table.n_keys, 200):
            k = tuple(table.keys[i].tolist())
            toks, counts = c.find(*k)
            assert dict(zip(toks.tolist(), counts.tolist())) == expected[k]
            assert c.span(*k) == (int(table.offsets[i]), int(table.offsets[i + 1] - table.offsets[i]))
            tok = int(toks[len(toks) // 2])
            assert c.count(*k, tok) == expected[k][tok]
            assert c.count(*k, 10**6) == 0 and c.count(*k, -5) == 0
        absent = [(499, 498), (-1, 3), (2**31 - 1, 0), (10**12, 5)]
        for k in absent:
            assert k in expected or (c.span(*k) == (0, 0) and len(c.find(*k)[0]) == 0 and c.count(*k, 1) == 0)
        queries = np.vstack([table.keys[rng.choice(table.n_keys, 500)], rng.integers(0, 600, (500, 2))])
        offs, lens = c.find_many(queries)
        tokens = rng.integers(0, 500, len(queries))
        counts = c.count_many(queries, tokens)
        for q, o, n, t, cnt in zip(queries.tolist(), offs, lens, tokens.tolist(), counts):
            run = expected.get(tuple(q), {})
            assert n == len(run) and cnt == run.get(t, 0)
            if n:
                assert c.pairs[o, 0] == min(run)
        assert c.find_many(np.empty((0, 2), np.int64))[1].shape == (0,)
        assert same(c.to_table(), table)


@pytest.mark.parametrize("kind", ["lkc", "ggngcmap"])
def test_find_returns_views_into_the_mapping(table, tmp_path, kind):
    with opened(table, tmp_path, kind) as c:
        toks, counts = c.find(*table.keys[3].tolist())
        assert np.shares_memory(toks, c.pairs) and np.shares_memory(counts, c.pairs)
        assert not c.pairs.flags.writeable
        assert c.keys() is None or c.keys().shape == (table.n_keys, 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=300, unique=True), st.integers(-5, 2**31 - 1))
def test_count_binary_search(tokens, probe):
    tokens = sorted(tokens)
    pairs = np.array([(t, i + 1) for i, t in enumerate(tokens)], np.int32)
    pad = np.array([[-7, 99]] * 3, np.int32)  # neighbours outside the run must never be read as hits
    pairs = np.vstack([pad, pairs, pad])
    for tok in (probe, tokens[0], tokens[-1], tokens[len(tokens) // 2]):
        want = tokens.index(tok) + 1 if tok in tokens else 0
        assert count_in(pairs, np.int64(3), np.int64(len(tokens)), np.int32(tok)) == want


def test_open_reads_no_section(table, tmp_path):
    """O(1) open: a damaged section (bad sha256, bad FNV) opens fine; verify finds it."""
    path = tmp_path / "c.lkc"
    formats.write_table(table, path, meta=META)
    header = StaticCache.open(path).meta
    raw = bytearray(path.read_bytes())
    raw[header["sections"]["pairs"]["offset"] + 5] ^= 0x40  # a token of some pair
    path.write_bytes(bytes(raw))
    with StaticCache.open(path) as c:
        with pytest.raises(FormatError, match="section 'pairs' does not match its sha256"):
            c.verify()
    g = tmp_path / "c.ggngcmap"
    formats.write_table(table, g)
    raw = bytearray(g.read_bytes())
    raw[-1] ^= 1  # the constmap's FNV-1a checksum
    g.write_bytes(bytes(raw))
    with StaticCache.open(g) as c:
        assert len(c.find(*table.keys[0].tolist())[0])
        with pytest.raises(FormatError, match="FNV-1a"):
            c.verify()


def test_span_outside_the_pairs_is_never_read(tmp_path):
    """A constmap value pointing past the pairs (corruption that passes the O(1) checks) raises, never reads."""
    table = table_of(text_like(800, seed=5))
    spans = table.spans()
    spans[4] = (np.uint64(table.n_pairs - 1) << np.uint64(SPAN_BITS)) | np.uint64(50)  # runs 49 pairs past the end
    cm = constmap_build.build(table.keys, spans)
    path = tmp_path / "c.ggngcmap"
    path.write_bytes(struct.pack("<8sQQ", b"ggngcmap", table.n_pairs, len(cm)) + table.pairs.astype("<i4").tobytes() + cm)
    key = table.keys[4].tolist()
    with StaticCache.open(path) as c:
        with pytest.raises(FormatError, match="outside the"):
            c.find(*key)
        with pytest.raises(FormatError, match="outside the"):
            c.find_many(table.keys)
        with pytest.raises(FormatError, match="outside the"):
            c.count_many(table.keys, np.zeros(table.n_keys, np.int32))
        assert span_of(np.int32(key[0]), np.int32(key[1]), *c._args) == (0, -1)  # jitted callers see a miss
        assert c.span(*table.keys[5].tolist())[1] > 0  # other keys still work
        with pytest.raises(FormatError):
            c.verify()
        with pytest.raises(FormatError):
            c.to_table()


@pytest.mark.parametrize("kind", FORMATS)
def test_verify_and_stats(table, tmp_path, kind):
    with opened(table, tmp_path, kind) as c:
        result = c.verify()
        expected = follower_stats(np.diff(table.offsets), table.pairs[:, 1])
        assert result["ok"] and {k: result[k] for k in expected} == expected
        stats = c.stats()
        assert {k: stats[k] for k in expected} == expected


def test_verify_catches_a_lying_header(table, tmp_path):
    path = tmp_path / "c.lkc"
    formats.write_table(table, path)
    rewrite_header(path, lambda h: h["stats"].update(n_tokens=h["stats"]["n_tokens"] + 1))
    with StaticCache.open(path) as c:
        with pytest.raises(FormatError, match="stats.n_tokens"):
            c.verify()


@pytest.mark.parametrize("kind", ["lkc", "lkc.zst", "memory"])
def test_vocab_fingerprint(table, tmp_path, kind):
    with opened(table, tmp_path, kind) as c:
        assert c.vocab_fingerprint == "toy-fp" and c.n_vocab == 1000
        c.check_vocab("toy-fp")
        c.check_vocab(None)
        with pytest.raises(VocabMismatchError) as err:
            c.check_vocab("other-fp")
        assert "toy-fp" in str(err.value) and "other-fp" in str(err.value)
        c.check_ids(np.array([0, 999], np.int32))
        c.check_ids(np.empty(0, np.int32))
        with pytest.raises(VocabMismatchError, match="token id 1000 is out of range .* 1000 tokens"):
            c.check_ids(np.array([5, 1000, 3], np.int32))
    if kind == "lkc":
        with pytest.raises(VocabMismatchError, match="toy-fp.*other-fp"):
            StaticCache.open(tmp_path / "c.lkc", expect_vocab="other-fp")
        assert StaticCache.open(tmp_path / "c.lkc", expect_vocab="toy-fp").n_keys == table.n_keys


@pytest.mark.parametrize("kind", ["ggngcmap", "llama"])
def test_formats_without_vocab_are_accepted_with_a_warning(table, tmp_path, kind):
    formats.write_table(table, tmp_path / f"c{EXT[kind]}")
    with pytest.warns(LookupkitWarning, match="records no vocabulary, so it cannot be checked"):
        with StaticCache.open(tmp_path / f"c{EXT[kind]}", expect_vocab="anything") as c:
            assert c.vocab_fingerprint is None and c.n_vocab is None


def test_close(table, tmp_path):
    c = opened(table, tmp_path, "lkc")
    toks, _ = c.find(*table.keys[0].tolist())
    c.close()  # a view is still alive: no error, the mapping goes with the view
    assert toks.sum() >= 0
    with pytest.raises(InputError, match="closed"):
        c.find(1, 2)
    c.close()


@pytest.mark.parametrize("edit,message", [
    (lambda raw: raw.__setitem__(slice(0, 8), b"LKCACHE9"), "magic"),
    (lambda raw: raw.__setitem__(slice(8, 12), (4).to_bytes(4, "little")), "newer lookupkit \\(format version 4\\); this one reads 3"),
    (lambda raw: raw.__setitem__(slice(12, 16), bytes([0x0a, 0x0b, 0x0c, 0x0d])), "big-endian"),
    (lambda raw: raw.__setitem__(100, raw[100] ^ 1), "header checksum"),
    (lambda raw: raw.__setitem__(slice(56, 64), (10).to_bytes(8, "little")), "truncated or extended"),
    (lambda raw: raw.__delitem__(slice(len(raw) - 10, len(raw))), "truncated"),
    (lambda raw: raw.__delitem__(slice(40, len(raw))), "preamble|truncated"),
])
def test_bad_lkc_files(table, tmp_path, edit, message):
    path = tmp_path / "c.lkc"
    formats.write_table(table, path)
    raw = bytearray(path.read_bytes())
    edit(raw)
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=message):
        StaticCache.open(path)


@pytest.mark.parametrize("edit,message", [
    (lambda h: h["sections"]["pairs"].update(offset=h["sections"]["pairs"]["offset"] + 4), "misaligned"),
    (lambda h: h["sections"]["pairs"].update(length=10**12), "outside the file"),
    (lambda h: h["sections"]["pairs"].update(shape=[3, 2]), "shape needs"),
    (lambda h: h["sections"]["pairs"].update(dtype="<i8"), "dtype"),
    (lambda h: h["sections"]["key_t1"].update(offset=h["sections"]["pairs"]["offset"]), "overlap"),
    (lambda h: h["sections"].pop("constmap"), "lacks the 'constmap'"),
    (lambda h: h["sections"].pop("key_t1"), "only one of the two key sections"),
    (lambda h: h["stats"].update(n_keys=h["stats"]["n_keys"] - 1), "constmap holds"),
    (lambda h: h["stats"].update(n_pairs=True), "not a non-negative integer"),
    (lambda h: h.update(vocab={"fingerprint": 7}), "fingerprint"),
    (lambda h: h.update(tool=["x"]), "'tool' is not an object"),
    (lambda h: h["stats"].update(followers_cdf="x"), "followers_cdf"),
])
def test_crafted_headers_are_refused(table, tmp_path, edit, message):
    path = tmp_path / "c.lkc"
    formats.write_table(table, path)
    rewrite_header(path, edit)
    with pytest.raises(FormatError, match=message):
        StaticCache.open(path)


def test_bad_ggngcmap_files(table, tmp_path):
    path = tmp_path / "c.ggngcmap"
    formats.write_table(table, path)
    raw = path.read_bytes()
    for data, message in ((raw[:-1], "truncated"), (raw + b"\0" * 8, "truncated or corrupted"),
                          (b"pamcgngg" + raw[8:], "big-endian"), (raw[:20], "shorter than its 24-byte header"),
                          (raw[:24 + 8 * table.n_pairs] + b"CMAP0003" + raw[24 + 8 * table.n_pairs + 8:], "VMAP0001")):
        path.write_bytes(data)
        with pytest.raises(FormatError, match=message):
            StaticCache.open(path)


def test_empty_cache(tmp_path):
    empty = StaticTable(np.empty((0, 2), np.int32), np.zeros(1, np.int64), np.empty((0, 2), np.int32))
    for kind in ("lkc", "ggngcmap", "llama", "memory"):
        with opened(empty, tmp_path, kind, meta=None) as c:
            assert c.n_pairs == 0 and c.span(1, 2) == (0, 0) and c.count_many([[1, 2]], [3]).tolist() == [0]
            assert c.verify()["n_keys"] == 0 and same(c.to_table(), empty)


def test_processes_share_the_pages(table, tmp_path):
    """Two processes mapping one file use the same page-cache pages (Shared_Clean in their smaps)."""
    if not Path("/proc/self/smaps").exists():
        pytest.skip("needs Linux /proc/<pid>/smaps")
    path = tmp_path / "c.lkc"
    formats.write_table(table_of(text_like(60000, vocab=5000, seed=2)), path)
    child = textwrap.dedent(f"""
        import sys, time
        from lookupkit import StaticCache
        c = StaticCache.open({str(path)!r})
        int(c.pairs.sum())  # touch every page of the pairs
        print("ready", flush=True)
        sys.stdin.readline()
        shared = 0
        lines = open("/proc/self/smaps").read().splitlines()
        for i, line in enumerate(lines):
            if line.endswith({str(path)!r}):
                for l in lines[i + 1:i + 25]:
                    if l.startswith("Shared_Clean:"):
                        shared += int(l.split()[1])
                        break
        print(shared, flush=True)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        p = procs[0]
        p.stdin.write("\n")
        p.stdin.flush()
        shared_kb = int(p.stdout.readline())
    finally:
        for q in procs:
            q.kill()
            q.wait()
    pairs_kb = StaticCache.open(path).pairs.nbytes // 1024
    assert shared_kb >= pairs_kb * 0.9
