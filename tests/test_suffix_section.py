"""The suffix index as a section of .lkc (version 3): a round trip answers as the index built in memory,
views into the mapping; damage is one FormatError line at open (geometry) or at verify (content); files
without an index stay version 1/2; the streamed writer (lookup-create's) equals the in-memory one."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from lookupkit import StaticCache
from lookupkit.counts.bigrams import count_static
from lookupkit.errors import FormatError, InputError
from lookupkit.files import atomic_writer
from lookupkit.formats import lkc_suffix
from lookupkit.formats.lkc_layout import PREAMBLE, header_blob, preamble
from lookupkit.formats.lkc_write import write_file
from lookupkit.suffix import build_index, continuation, corpus_text, longest_match
from lookupkit.suffix import write as suffix_write

DOCS = [np.random.default_rng(5).integers(0, 40, 3000), np.arange(7), np.zeros(0, np.int64),
        np.random.default_rng(6).integers(2**18 - 50, 2**18, 600)]


N_VOCAB = 2**18 + 1


def write(path, docs=DOCS, suffix=True, orders=None):
    n_vocab = max([N_VOCAB] + [int(d.max()) + 1 for d in docs if len(d)])
    table = count_static([np.asarray(d, np.int32) for d in docs], n_vocab)
    index = build_index(corpus_text(docs)) if suffix else None
    with atomic_writer(path) as f:
        write_file(f, table, {}, orders=orders, suffix=index)
    return table, index


def test_round_trip_is_the_same_index_as_views_into_the_file(tmp_path):
    _, index = write(tmp_path / "c.lkc")
    raw = (tmp_path / "c.lkc").read_bytes()
    assert PREAMBLE.unpack_from(raw)[1] == 3
    with StaticCache.open(tmp_path / "c.lkc") as cache:
        got = cache.suffix
        assert cache.meta["suffix"]["n"] == index.n == sum(len(d) + 1 for d in DOCS)
        assert cache.meta["suffix"]["n_documents"] == len(DOCS)
        for k in ("text", "sa", "starts", "second"):
            a = getattr(got, k)
            assert np.array_equal(a, getattr(index, k)) and a.dtype == getattr(index, k).dtype
            assert not a.flags.writeable and not a.flags.owndata  # a view of the read-only mapping
        assert cache.suffix is got
        rng = np.random.default_rng(1)
        for _ in range(200):
            at = int(rng.integers(1, index.n))
            ctx = index.text[max(0, at - 20):at]
            ctx = ctx[ctx >= 0].tolist() + rng.integers(0, 45, int(rng.integers(0, 3))).tolist()
            m = longest_match(index, ctx)
            assert longest_match(got, ctx) == m
            assert continuation(got, *m).tokens.tolist() == continuation(index, *m).tokens.tolist()
        assert cache.verify()["ok"] and any("suffix_sa" in c for c in cache.verify()["checks"])


def test_without_an_index_the_file_is_version_1_or_2_with_no_suffix(tmp_path):
    write(tmp_path / "a.lkc", suffix=False)
    with StaticCache.open(tmp_path / "a.lkc") as cache:
        assert cache.suffix is None and cache.meta["format_version"] == 1 and "suffix" not in cache.meta
        assert not any(s.startswith("suffix") for s in cache.meta["sections"])
    assert StaticCache.from_table(count_static([np.arange(5, dtype=np.int32)], 10)).suffix is None


def test_lookup_creates_file_is_the_in_memory_writers_bytes(tmp_path):
    """build_static streams the 2-grams from merged parts and copies the suffix part in: the same bytes as
    lkc_write.write_file of the same table and index (-j 1 and 2)."""
    from lookupkit.create import build_static
    from lookupkit.corpora import TokenFile

    paths, docs = [], [d for d in DOCS if len(d)]
    for i, d in enumerate(docs):
        paths.append(tmp_path / f"d{i}.npy")
        np.save(paths[-1], np.asarray(d, np.int32))
    for jobs in (1, 2):
        out = tmp_path / f"j{jobs}.lkc"
        build_static([TokenFile(p) for p in paths], None, out, jobs=jobs, suffix_index=True,
                     cache_dir=tmp_path / "cache")
        with StaticCache.open(out) as cache:
            meta = {k: cache.meta[k] for k in ("vocab", "corpus", "build")}
        table = count_static([np.asarray(d, np.int32) for d in docs], N_VOCAB)
        with atomic_writer(tmp_path / "ref.lkc") as f:
            write_file(f, table, meta, suffix=build_index(corpus_text(docs)))
        assert out.read_bytes() == (tmp_path / "ref.lkc").read_bytes()


def _rewrite(path, out, change):
    """`path` with its header changed by change(header) and re-signed (sections stay where they are)."""
    raw = path.read_bytes()
    _, version, _, hlen, _, size = PREAMBLE.unpack_from(raw)
    header = json.loads(raw[64:64 + hlen])
    change(header)
    blob = header_blob(header)
    first = min(s["offset"] for s in header["sections"].values())
    assert 64 + len(blob) <= first
    data = preamble(header.get("format_version", version), blob, size) + blob
    out.write_bytes(data + b"\0" * (first - len(data)) + raw[first:])
    return out


def _set(*path_value):
    *keys, value = path_value

    def change(h):
        for k in keys[:-1]:
            h = h[k]
        if value is KeyError:
            del h[keys[-1]]
        else:
            h[keys[-1]] = value
    return change


@pytest.mark.parametrize("change, fragment", [
    (_set("suffix", "n", 10), "suffix_text holds"),
    (_set("suffix", "sample", 16), "sample 16"),
    (_set("suffix", "order", "other"), "order 'other'"),
    (_set("suffix", "max_id", 2**24), "inconsistent"),
    (_set("suffix", "n_documents", 0), "inconsistent"),
    (_set("suffix", KeyError), "'suffix' header"),
    (_set("sections", "suffix_second", KeyError), "suffix_second is missing"),
    (_set("sections", "suffix_sa", "dtype", "<i8"), "suffix_sa"),
    (_set("sections", "suffix_text", "shape", [5]), "suffix_text"),
    (_set("sections", "suffix_starts", "length", 1 << 40), "outside the file"),
    (_set("format_version", 2), "orders"),
])
def test_a_damaged_header_is_one_format_error_at_open(tmp_path, change, fragment):
    write(tmp_path / "c.lkc")
    bad = _rewrite(tmp_path / "c.lkc", tmp_path / "bad.lkc", change)
    with pytest.raises(FormatError, match="not a valid .lkc file") as err:
        StaticCache.open(bad)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_damaged_sections_are_found_by_verify(tmp_path):
    _, index = write(tmp_path / "c.lkc")
    raw = bytearray((tmp_path / "c.lkc").read_bytes())
    header = json.loads(raw[PREAMBLE.size:PREAMBLE.size + PREAMBLE.unpack_from(raw)[3]])
    sa = header["sections"]["suffix_sa"]
    raw[sa["offset"] + 4 * 10:sa["offset"] + 4 * 11] = np.int32(index.n + 5).tobytes()
    (tmp_path / "flip.lkc").write_bytes(bytes(raw))
    with StaticCache.open(tmp_path / "flip.lkc") as cache, pytest.raises(FormatError, match="suffix_sa"):
        cache.verify()
    # the same damage with its checksum updated (a writer's bug): the bounds check still finds it
    digest = hashlib.sha256(raw[sa["offset"]:sa["offset"] + sa["length"]]).hexdigest()
    fixed = _rewrite(tmp_path / "flip.lkc", tmp_path / "resigned.lkc", _set("sections", "suffix_sa", "sha256", digest))
    with StaticCache.open(fixed) as cache, pytest.raises(FormatError, match="outside 0..") as err:
        cache.verify()
    assert "\n" not in str(err.value)


# Opens a damaged file without verify and searches it, then drafts from it with tables that have learnt the
# suffix source (so the policy's kernels read it too); in a process of its own, so that a stray read is a
# failed test, not a crashed run.
SEARCH_DAMAGED = """
import json, sys
import numpy as np
from lookupkit import Drafter, StaticCache
from lookupkit.policy import confidence
from lookupkit.policy.chain import SRC_SUFFIX
from lookupkit.errors import InputError
from lookupkit.suffix import continuation, longest_match

path, table_path = sys.argv[1:]
table, agree = confidence.load(None)
table = table.copy()
table[SRC_SUFFIX:] = 0.95
confidence.save((table, agree), table_path)
rng = np.random.default_rng(0)
matched = refused = drafted = 0
with StaticCache.open(path) as cache:
    index = cache.suffix
    text = np.array(index.text)
    for _ in range(400):
        at = int(rng.integers(1, index.n))
        ctx = text[max(0, at - 30):at]
        ctx = ctx[ctx >= 0].tolist() + rng.integers(0, 45, int(rng.integers(0, 2))).tolist()
        m = longest_match(index, ctx)
        matched += m[0] > 0
        try:
            continuation(index, *m)
        except InputError:  # rows the damage made disagree: refused, not read
            refused += 1
    drafter = Drafter(static=cache, policy="lookupkit", policy_table=table_path)
    for _ in range(100):
        at = int(rng.integers(1, index.n))
        ctx = text[max(0, at - 40):at]
        drafted += len(drafter.draft(ctx[ctx >= 0].tolist() or [1], 16))
print(json.dumps({"matched": matched, "refused": refused, "drafted": drafted}))
"""


def _damage(path, out, section, values):
    """`path` with every third element of `section` (int32) set to one of `values` in turn, re-signed."""
    raw = bytearray(path.read_bytes())
    sec = json.loads(raw[PREAMBLE.size:PREAMBLE.size + PREAMBLE.unpack_from(raw)[3]])["sections"][section]
    a = np.frombuffer(raw, np.int32, sec["length"] // 4, sec["offset"]).copy()
    a[1::3] = np.resize(np.array(values, np.int64), len(a[1::3])).astype(np.int32)
    raw[sec["offset"]:sec["offset"] + sec["length"]] = a.tobytes()
    out.write_bytes(bytes(raw))
    digest = hashlib.sha256(a.tobytes()).hexdigest()
    return _rewrite(out, out.with_suffix(".signed.lkc"), _set("sections", section, "sha256", digest))


@pytest.mark.parametrize("section", ["suffix_sa", "suffix_starts"])
def test_a_damaged_index_opened_without_verify_is_searched_without_a_stray_read(tmp_path, section):
    import subprocess
    import sys

    _, index = write(tmp_path / "c.lkc")
    n = index.n
    signed = _damage(tmp_path / "c.lkc", tmp_path / "bad.lkc", section,
                     [2**31 - 1, -2**31, -1, n, n + 7, 2**30, -n])
    for path in (tmp_path / "bad.lkc", signed):  # open checks no section's bytes: both open
        r = subprocess.run([sys.executable, "-c", SEARCH_DAMAGED, str(path), str(tmp_path / "t.json")],
                           capture_output=True, text=True, cwd="/", timeout=600)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["matched"] > 0 and got["drafted"] >= 0
        checked = umbrella("verify", path)  # the checksum (bad.lkc) or the bounds (re-signed) find the damage
        assert checked.exit_code == 2 and "Traceback" not in checked.output
        assert section in checked.stderr and len(checked.stderr.strip().splitlines()) == 1, checked.stderr


@pytest.mark.parametrize("seed", range(6))
def test_random_corpora_round_trip(tmp_path, seed):
    rng = np.random.default_rng(seed)
    top = int(rng.choice([3, 50, 2**18, 2**24 - 2]))
    docs = [rng.integers(max(0, top - 60), top + 1, int(rng.integers(0, 400))) for _ in range(int(rng.integers(1, 6)))]
    _, index = write(tmp_path / "c.lkc", docs=docs)
    with StaticCache.open(tmp_path / "c.lkc") as cache:
        for k in ("text", "sa", "starts", "second"):
            assert np.array_equal(getattr(cache.suffix, k), getattr(index, k))
        assert cache.verify()["ok"] and cache.meta["suffix"]["max_id"] == (max(int(d.max()) for d in docs if len(d))
                                                                           if any(len(d) for d in docs) else -1)


def test_an_empty_corpus_and_documents_without_ids(tmp_path):
    for docs in ([np.arange(3)], [np.zeros(0, np.int64), np.arange(3)]):
        write(tmp_path / "c.lkc", docs=docs)
        with StaticCache.open(tmp_path / "c.lkc") as cache:
            assert cache.verify()["ok"] and cache.suffix.n == sum(len(d) + 1 for d in docs)
            assert longest_match(cache.suffix, [0, 1]) == longest_match(build_index(corpus_text(docs)), [0, 1])


def test_build_part_refuses_ids_beyond_the_packing_and_wrong_sizes(tmp_path):
    with pytest.raises(InputError, match="too large for --suffix-index"):
        suffix_write.build_part([[np.array([1, 2**24 - 1])]], 3, str(tmp_path / "x"))
    with pytest.raises(InputError, match="5 were announced"):
        suffix_write.build_part([[np.array([1, 2])]], 5, str(tmp_path / "x"))
    with pytest.raises(InputError, match="more than the 2 ids"):
        suffix_write.build_part([[np.array([1, 2])]], 2, str(tmp_path / "x"))
    with pytest.raises(InputError, match="pass --memory-budget 1MiB or more"):
        suffix_write.part_positions(2**20, 2**19)


def _part_sections(part) -> dict[str, bytes]:
    raw = open(part.path, "rb").read()
    return {s: raw[part.offsets[s]:part.offsets[s] + part.nbytes(s)] for s in lkc_suffix.NAMES}


@pytest.mark.parametrize("cut, block", [(1, 1 << 22), (7, 5), (1000, 3), (10**6, 1 << 22)])
def test_build_part_writes_the_in_memory_sections_however_the_ids_come(tmp_path, monkeypatch, cut, block):
    """Documents as arrays of `cut` ids, packed `block` at a time: the sections and header of build_index."""
    monkeypatch.setattr(suffix_write, "_BLOCK", block)
    rng = np.random.default_rng(cut)
    docs = [rng.integers(0, 30, 2500), np.zeros(0, np.int64), rng.integers(2**18 - 40, 2**18, 700)]
    n = sum(len(d) + 1 for d in docs)
    pieces = ([d[i:i + cut] for i in range(0, len(d), cut)] for d in docs)
    part = suffix_write.build_part(pieces, n, str(tmp_path / "p"))
    arrays, header = lkc_suffix.sections_of(build_index(corpus_text(docs)))
    assert part.header == header and _part_sections(part) == {s: a.tobytes() for s, a in arrays.items()}
    assert all(part.sha256[s] == hashlib.sha256(a.tobytes()).hexdigest() for s, a in arrays.items())
    empty = suffix_write.build_part([], 0, str(tmp_path / "e"))
    assert empty.header == lkc_suffix.sections_of(build_index(corpus_text([])))[1]
    assert {s: len(b) for s, b in _part_sections(empty).items()} == {"suffix_text": 0, "suffix_sa": 0,
                                                                     "suffix_starts": 8, "suffix_second": 0}


# ---- lookup-create --suffix-index, inspect, verify, convert ----------------------------------------

TEXT = "def f(x):\n    return x + 1\n\n" * 30 + "class A:\n    pass\n" * 20


def create(*args):
    from typer.testing import CliRunner

    from lookupkit.cli.create import app

    return CliRunner().invoke(app, [str(a) for a in args])


def umbrella(*args):
    import typer
    from typer.testing import CliRunner

    from lookupkit.cli.cache_cmds import register

    app = typer.Typer(add_completion=False)
    register(app)
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "a.txt").write_text(TEXT)
    (tmp_path / "b.txt").write_text(TEXT[::-1])
    return tmp_path


def test_create_with_an_index_is_the_same_for_any_jobs_and_drafts_what_the_corpus_holds(corpus):
    from lookupkit import Tokenizer

    outs = []
    for jobs in (1, 2):
        out = corpus / f"j{jobs}.lkc"
        result = create("-f", corpus / "a.txt", "-f", corpus / "b.txt", "--suffix-index", "-j", jobs,
                        "--no-token-cache", "-lcs", out, "--json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    tok = Tokenizer.default()  # what lookup-create encodes: each file, one trailing newline stripped
    docs = [np.asarray(tok.encode(t[:-1] if t.endswith("\n") else t), np.int32) for t in (TEXT, TEXT[::-1])]
    with StaticCache.open(corpus / "j1.lkc") as cache:
        index = cache.suffix
        assert summary["suffix_index"]["positions"] == index.n == summary["n_tokens"] + 2
        assert cache.meta["suffix"]["n_documents"] == 2 and cache.verify()["ok"]
        assert np.array_equal(index.text, corpus_text(docs))
        built = build_index(corpus_text(docs))
        assert all(np.array_equal(getattr(index, k), getattr(built, k)) for k in ("sa", "starts", "second"))
        ctx = index.text[40:60].tolist()  # inside document a, which repeats: the match is the whole window
        m = longest_match(index, ctx, max_len=20)
        assert m[0] == 20 and continuation(index, *m).tokens.tolist() == index.text[60:60 + len(
            continuation(index, *m).tokens)].tolist()
    human = create("-f", corpus / "a.txt", "--suffix-index", "-lcs", corpus / "h.lkc", "-q")
    assert human.exit_code == 0 and (corpus / "h.lkc").exists()


def test_create_with_orders_and_index_and_the_cache_commands(corpus):
    out = corpus / "o.lkc"
    result = create("-f", corpus / "a.txt", "--orders", "2-4", "--suffix-index", "-lcs", out)
    assert result.exit_code == 0, result.output
    assert "suffix index of" in result.stdout and "per position" in result.stdout
    with StaticCache.open(out) as cache:
        assert cache.orders == [2, 3, 4] and cache.suffix is not None and cache.meta["format_version"] == 3
    for drop in ("orders", "suffix"):  # each header object is required by its sections
        bad = _rewrite(out, corpus / "bad.lkc", _set(drop, KeyError))
        with pytest.raises(FormatError, match=f"'{drop}' header"):
            StaticCache.open(bad)
    shown = umbrella("inspect", out)
    assert shown.exit_code == 0 and "suffix      " in shown.stdout and "B per position" in shown.stdout
    info = json.loads(umbrella("inspect", out, "--json").stdout)
    assert info["suffix_index"]["n"] == info["sections"]["suffix_text"]["shape"][0]
    checked = umbrella("verify", out)
    assert checked.exit_code == 0 and "suffix_sa: positions in 0..n-1" in checked.stdout
    converted = umbrella("convert", out, corpus / "o.ggngcmap")
    assert converted.exit_code == 0 and "higher orders and suffix index" in converted.stderr
    plain = create("-f", corpus / "a.txt", "-lcs", corpus / "p.lkc", "-q")
    assert plain.exit_code == 0 and "suffix" not in umbrella("convert", corpus / "p.lkc", corpus / "p2.lkc").stderr


def test_create_refuses_what_the_index_cannot_hold(corpus, monkeypatch):
    from cli_checks import assert_one_line_error

    ids = corpus / "big.npy"
    np.save(ids, np.array([1, 2, 3, 2**24 - 1], np.int32))
    assert_one_line_error(create("--tokens", ids, "--suffix-index", "-lcs", corpus / "x.lkc"),
                          "too large for --suffix-index", "leave out --suffix-index")
    assert_one_line_error(create("-f", corpus / "a.txt", "--suffix-index", "-lcs", corpus / "x.ggngcmap"),
                          "--suffix-index writes a .lkc file")
    monkeypatch.setattr(suffix_write, "BYTES_PER_TOKEN_TO_BUILD", 10**6)
    assert_one_line_error(create("-f", corpus / "a.txt", "--suffix-index", "--memory-budget", "64MiB",
                                 "-lcs", corpus / "x.lkc"), "too small for the suffix index", "pass --memory-budget",
                          after_progress=True)
    np.save(ids, np.arange(100, dtype=np.int32))  # token files: refused before anything is counted
    assert_one_line_error(create("--tokens", ids, "--suffix-index", "--memory-budget", "64MiB", "-lcs",
                                 corpus / "x.lkc"), "too small for the suffix index of 101 positions")
    assert not (corpus / "x.lkc").exists() and not (corpus / "x.ggngcmap").exists()
