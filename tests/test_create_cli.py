"""lookup-create as a user runs it: outputs equal to independent counts and llama.cpp's, summaries, and
bad input (one-line error, exit 2, nothing at the target)."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lookupkit import StaticCache, Tokenizer
from lookupkit import files as atomic
from lookupkit.cli.create import app
from lookupkit.corpora import TextFile
from lookupkit.counts.bigrams import count_static
from lookupkit.counts.tables import StaticTable
from lookupkit.formats import llama
from lookupkit.static import read_table
from cli_checks import assert_one_line_error as check
import needs

REF = needs.SHARED / "reference"
runner = CliRunner()
BUNDLED = Path(__file__).resolve().parents[1] / "lookupkit" / "data" / "ggml-vocab-gpt-2.gguf"
TEXT = " = Heading = \n \n The cat sat on the mat . The cat sat on the hat . \n The dog sat . \n"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def gpt2():
    return Tokenizer.default()


def create(*args):
    return runner.invoke(app, [str(a) for a in args])


def create_json(*args) -> dict:
    result = create(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_one_line_error(result, *fragments):
    """Progress bars of finished phases may precede the error line."""
    check(result, *fragments, after_progress=True)


def same(a: StaticTable, b: StaticTable) -> bool:
    return all(np.array_equal(x, y) for x, y in [(a.keys, b.keys), (a.offsets, b.offsets), (a.pairs, b.pairs)])


def file_ids(tok, text: str) -> np.ndarray:
    return tok.encode(text[:-1] if text.endswith("\n") else text)


# -- outputs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["zipf.lcs", "zipf.lkc", "zipf.ggngcmap", "zipf.lkc.zst"])
def test_token_ids_build_equals_llamacpp_lookup_create(tmp_path, name):
    needs.shared("reference")
    out = tmp_path / name
    summary = create_json("--tokens", REF / "zipf.corpus.i32", "-lcs", out)
    reference = StaticTable.from_ngrams(llama.read((REF / "zipf.static.lcs").read_bytes()))
    assert same(read_table(out), reference)
    assert (summary["n_tokens"], summary["n_2grams"], summary["n_pairs"]) == (200_000, reference.n_keys, reference.n_pairs)
    assert summary["file_bytes"] == out.stat().st_size


def test_text_build_counts_the_tokenizers_ids(tmp_path, gpt2):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    summary = create_json("-f", corpus, "-lcs", tmp_path / "out.lkc")
    ids = file_ids(gpt2, TEXT)
    assert same(read_table(tmp_path / "out.lkc"), count_static([ids], gpt2.n_vocab))
    assert summary["n_tokens"] == len(ids) and summary["n_bytes"] == len(TEXT.encode())
    assert summary["vocab"]["fingerprint"] == gpt2.fingerprint
    assert set(summary["seconds"]) == {"tokenize", "count", "write", "total"} and summary["peak_rss_bytes"] > 0


def test_several_files_are_separate_documents(tmp_path, gpt2):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("one two three four five\n")
    b.write_text("six seven eight nine\n")
    create_json("-f", a, "-f", b, "-lcs", tmp_path / "ab.lcs")
    expected: dict = {}
    for text in ("one two three four five\n", "six seven eight nine\n"):
        for gram, followers in count_static([file_ids(gpt2, text)], gpt2.n_vocab).to_dict().items():
            expected[gram] = dict(Counter(expected.get(gram, {})) + Counter(followers))
    assert read_table(tmp_path / "ab.lcs").to_dict() == expected  # = lookup-merge of per-file caches


def test_max_bytes_cuts_at_a_line_end_across_sources(tmp_path, gpt2):
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    a.write_text("alpha beta gamma\n")          # 17 bytes, fits whole
    b.write_text("delta epsilon\nzeta eta theta\n")  # 14 bytes fit: its first line
    c.write_text("iota kappa lambda\n")          # nothing left
    summary = create_json("-f", a, "-f", b, "-f", c, "--max-bytes", "40B", "-lcs", tmp_path / "o.lkc")
    assert [s["bytes"] for s in summary["sources"]] == [17, 14]
    assert [s["cut"] for s in summary["sources"]] == [False, True]
    assert summary["skipped_sources"] == [str(c)]
    byte_cut = create_json("-f", a, "-f", b, "--max-bytes", "40", "--cut", "byte", "-lcs", tmp_path / "p.lkc")
    assert [s["bytes"] for s in byte_cut["sources"]] == [17, 23]


def test_human_summary_and_invalid_utf8_warning(tmp_path):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("caf\u00e9 na\u00efve r\u00e9sum\u00e9 \n".encode("latin-1") * 20)
    result = create("-f", corpus, "-lcs", tmp_path / "o.lkc", "-c", "4096")
    assert result.exit_code == 0, result.output
    assert "2-grams" in result.stdout and "peak RSS" in result.stdout
    assert "80 bytes of invalid UTF-8 were replaced" in result.stdout
    assert create_json("-f", corpus, "-lcs", tmp_path / "p.lkc")["replaced_bytes"] == 80


def test_token_cache_is_reused_and_can_be_disabled(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT * 50)
    first = create_json("-f", corpus, "-lcs", tmp_path / "a.lkc", "--cache-dir", tmp_path / "tc")
    again = create_json("-f", corpus, "-lcs", tmp_path / "b.lkc", "--cache-dir", tmp_path / "tc")
    assert first["reused_tokens"] == 0 and again["reused_tokens"] == again["n_tokens"] == first["n_tokens"]
    assert (tmp_path / "a.lkc").read_bytes() == (tmp_path / "b.lkc").read_bytes()
    off = create_json("-f", corpus, "-lcs", tmp_path / "c.lkc", "--no-token-cache")
    assert off["token_cache"] is None and not (tmp_path / "cache").exists()


def test_default_corpus(tmp_path):
    summary = create_json("--default-corpus", "--max-bytes", "200KB", "-lcs", tmp_path / "d.lkc")
    [source] = summary["sources"]
    assert source["source"].startswith("default:python") and 0 < source["bytes"] <= 200_000
    assert summary["n_2grams"] > 1000


def test_help_shows_examples():
    result = create("--help")
    assert result.exit_code == 0
    assert "Examples:" in result.stdout and "--max-bytes 25MB" in result.stdout and "-lcs" in result.stdout


def test_help_says_the_orders_list_form_and_limit_from_the_constants():
    from lookupkit.create.memory_budget import DEFAULT_MEMORY_BUDGET, size_text
    from lookupkit.counts.high_orders import parse_orders
    from lookupkit.rules import MAX_STATIC_ORDER

    text = " ".join(create("--help").stdout.split())
    assert "such as 2,3,5" in text and f"orders up to {MAX_STATIC_ORDER}." in text
    assert f"(default {size_text(DEFAULT_MEMORY_BUDGET)})" in text
    assert parse_orders("2,3,5") == (2, 3, 5) and parse_orders(f"2-{MAX_STATIC_ORDER}")[-1] == MAX_STATIC_ORDER
    check(create("--orders", f"2-{MAX_STATIC_ORDER + 1}", "--default-corpus", "-lcs", "o.lkc"),
          f"N <= {MAX_STATIC_ORDER}")  # what the help says is what is enforced


needs_datasets = pytest.mark.skipif(importlib.util.find_spec("datasets") is None
                                    or importlib.util.find_spec("pyarrow") is None,
                                    reason="the optional `datasets`/`pyarrow` packages are not installed")


@needs_datasets
def test_local_parquet_dataset(tmp_path, monkeypatch, gpt2):
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    pq.write_table(pa.table({"text": [" = A = \n", "", " the cat sat \n", " the cat ran \n"]}), tmp_path / "d.parquet")
    create_json("--dataset", tmp_path / "d.parquet", "-lcs", tmp_path / "o.lkc")
    ids = file_ids(gpt2, " = A = \n\n the cat sat \n the cat ran \n")
    assert same(read_table(tmp_path / "o.lkc"), count_static([ids], gpt2.n_vocab))


@needs_datasets
@pytest.mark.parametrize("offline_env", [True, False])
def test_remote_dataset_offline(tmp_path, offline_env):
    # a fresh process: `datasets` reads its offline switches when first imported
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "https://hub.invalid"}
    if offline_env:
        env["HF_HUB_OFFLINE"] = "1"
    result = subprocess.run(["lookup-create", "--dataset", "wikitext:wikitext-103-raw-v1:train", "-lcs",
                             tmp_path / "o.lkc"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: dataset wikitext:wikitext-103-raw-v1:train cannot be downloaded (offline?)")


# -- progress: what the bars are fed -------------------------------------------------------------
class Bars:
    """A progress factory recording every bar's total and updates, and how many bytes the tokenizer had
    encoded when each advance came."""

    def __init__(self, encoded):
        self.bars, self.encoded = [], encoded

    def __call__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, label, total=None, **fields):
        self.bars.append({"label": label, "total": total, "advances": [], "end": None})
        return len(self.bars) - 1

    def update(self, task, advance=None, total=None, completed=None, **fields):
        bar = self.bars[task]
        if advance is not None:
            bar["advances"].append((advance, self.encoded[0]))
        if completed is not None:
            bar["end"] = (total, completed, sum(a for a, _ in bar["advances"]))


@pytest.fixture
def counted_encoding(monkeypatch, gpt2):
    """Bytes of text the tokenizer has encoded so far (in this process); small blocks, segments and pieces."""
    from lookupkit.create import parallel, tokenized
    from lookupkit.corpora import sources

    encoded = [0]
    real = type(gpt2).encode_segment

    def encode_segment(self, text, *args, **kwargs):
        encoded[0] += len(text.encode("utf-8"))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(type(gpt2), "encode_segment", encode_segment)
    monkeypatch.setattr(sources, "BLOCK", 4096)
    monkeypatch.setattr(tokenized, "SEGMENT_BYTES", 2000)
    monkeypatch.setattr(parallel, "PIECE_BYTES", 3000)
    return encoded


def assert_fed_bytes_done(bar, n_bytes):
    """Every advance counts bytes already tokenized (+1: the trailing newline the document rule strips),
    they add up to the document, and the end does not jump."""
    assert len(bar["advances"]) > 5
    seen = 0
    for n, encoded in bar["advances"]:
        seen += n
        assert seen <= encoded + 1, (seen, encoded)
    assert seen == n_bytes and bar["end"] == (n_bytes, n_bytes, n_bytes)


def test_tokenize_bar_is_fed_bytes_tokenized_not_bytes_read(tmp_path, gpt2, counted_encoding):
    from lookupkit.create.pipeline import build_static

    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT * 400)
    bars = Bars(counted_encoding)
    s = build_static([TextFile(corpus)], gpt2, tmp_path / "o.lkc", progress=bars, token_cache=False, jobs=1)
    (tok_bar,) = [b for b in bars.bars if b["label"] == "tokenize"]
    assert tok_bar["total"] == corpus.stat().st_size
    assert_fed_bytes_done(tok_bar, s["n_bytes"])


def test_parallel_pieces_advance_when_their_ids_come_back(tmp_path, gpt2, counted_encoding):
    """-j N: the driver reads pieces ahead of the workers; the bar hears of a piece when its ids are back
    (workers inline here, so the encoded bytes are visible to the test)."""
    from lookupkit.create.parallel import Boundaries, CounterSpec, Workers, tokenize_count
    from lookupkit.corpora.stream import TextBudget

    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT * 400)
    spec = CounterSpec(gpt2.n_vocab, "gpt2", None, str(tmp_path), 64 << 20, 1 << 16)
    bars = Bars(counted_encoding)
    bar = bars.add_task("tokenize+count")
    workers = Workers(1, gpt2, spec)
    doc = tokenize_count(TextFile(corpus), TextBudget(None), gpt2, workers, Boundaries(), None,
                         lambda n: bars.update(bar, advance=n))
    bars.update(bar, total=doc.n_bytes, completed=doc.n_bytes)
    assert_fed_bytes_done(bars.bars[bar], doc.n_bytes)


def test_parallel_build_bar_total_is_the_text_under_max_bytes(tmp_path, gpt2, counted_encoding):
    """-j 2 with --max-bytes: the bar's total is the text to tokenize, not the file; its end no jump."""
    from lookupkit.create.pipeline import build_static

    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT * 400)
    limit = corpus.stat().st_size // 2
    bars = Bars(counted_encoding)
    s = build_static([TextFile(corpus)], gpt2, tmp_path / "o.lkc", progress=bars, token_cache=False, jobs=2,
                     max_bytes=limit)
    (bar,) = [b for b in bars.bars if b["label"] == "tokenize+count"]
    assert bar["total"] == limit and s["n_bytes"] <= limit
    assert sum(n for n, _ in bar["advances"]) == s["n_bytes"] and bar["end"] == (s["n_bytes"],) * 3


# -- bad input ----------------------------------------------------------------------------------
def bad_corpus(tmp_path: Path, case: str) -> list:
    path = tmp_path / "corpus.txt"
    if case == "missing":
        return ["-f", path]
    if case == "directory":
        path.mkdir()
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 10)
    elif case == "only-newline":
        path.write_bytes(b"\n")
    elif case == "two-tokens":
        path.write_bytes(b"hello world\n")
    elif case == "empty-ids":
        path = tmp_path / "t.i32"
        path.write_bytes(b"")
        return ["--tokens", path]
    elif case == "ids-outside-vocab":  # a text source too: the bundled gpt-2 vocabulary is used, and said so
        path = tmp_path / "t.i32"
        np.array([1, 2, 3, 50257, 4], dtype="<i4").tofile(path)
        (tmp_path / "c.txt").write_text(TEXT)
        return ["-f", tmp_path / "c.txt", "--tokens", path]
    elif case == "odd-size-ids":
        path = tmp_path / "t.i32"
        path.write_bytes(b"\x01\x00\x00\x00\x02\x00")
        return ["--tokens", path]
    return ["-f", path]


@pytest.mark.parametrize("case,fragment", [
    ("missing", "does not exist"), ("directory", "is a directory"), ("empty", "is empty"),
    ("binary", "looks binary"), ("only-newline", "empty token stream"), ("two-tokens", "no 2-grams"),
    ("empty-ids", "empty token stream"), ("ids-outside-vocab", "token id 50257 at position 3 of document 2 is outside the bundled gpt-2 vocabulary"),
    ("odd-size-ids", "not a multiple of 4"),
])
def test_bad_corpora(tmp_path, case, fragment):
    out = tmp_path / "out.lkc"
    assert_one_line_error(create(*bad_corpus(tmp_path, case), "-lcs", out), fragment)
    assert not out.exists()


def test_token_ids_without_a_vocabulary_record_none_and_take_any_int32(tmp_path):
    ids = np.array([5, 151_000, 2**31 - 1, 5, 151_000, 2**31 - 1, 7], dtype="<i4")  # beyond gpt-2's 50,257
    ids.tofile(tmp_path / "t.i32")
    out = tmp_path / "ids.lkc"
    summary = create_json("--tokens", tmp_path / "t.i32", "-lcs", out)
    assert summary["vocab"] is None
    with StaticCache.open(out) as cache:
        assert cache.vocab_fingerprint is None and cache.meta["vocab"] is None
        assert cache.find(5, 151_000)[0].tolist() == [2**31 - 1]
        assert cache.find(151_000, 2**31 - 1)[0].tolist() == [5, 7]
    assert "none recorded" in create("--tokens", tmp_path / "t.i32", "-lcs", tmp_path / "again.lkc").stdout


def test_token_ids_with_a_vocabulary_are_checked_against_it(tmp_path):
    np.array([1, 2, 3, 50257, 4], dtype="<i4").tofile(tmp_path / "t.i32")
    result = create("--tokens", tmp_path / "t.i32", "-m", BUNDLED, "-lcs", tmp_path / "o.lkc")
    assert_one_line_error(result, "token id 50257 at position 3", "outside the gpt-2 vocabulary (0..50256)")
    assert "bundled" not in result.stderr  # -m was given


@pytest.mark.parametrize("args,fragment", [
    (["--max-bytes", "0"], "positive"), (["--max-bytes", "lots"], "cannot read size"),
    (["--max-bytes", "-3MB"], "cannot read size"), (["--format", "zip"], "unknown format"),
    (["--tokens", "x.i32", "--max-bytes", "1MB"], "cannot be combined"),
])
def test_absurd_flags(tmp_path, args, fragment):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    np.arange(10, dtype="<i4").tofile(tmp_path / "x.i32")
    args = [tmp_path / a if a == "x.i32" else a for a in args]
    assert_one_line_error(create("-f", corpus, *args, "-lcs", tmp_path / "o.lkc"), fragment)


def test_token_cache_dir_that_is_a_file(tmp_path):
    corpus, not_a_dir = tmp_path / "c.txt", tmp_path / "file"
    corpus.write_text(TEXT)
    not_a_dir.write_text("x")
    out = tmp_path / "o.lkc"
    assert_one_line_error(create("-f", corpus, "-lcs", out, "--cache-dir", not_a_dir), "token cache directory")
    assert not out.exists()


def test_no_source_and_no_extension(tmp_path):
    assert_one_line_error(create("-lcs", tmp_path / "o.lkc"), "no corpus given")
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    assert_one_line_error(create("-f", corpus, "-lcs", tmp_path / "o.bin"), "cannot tell the format")


@pytest.mark.parametrize("where,fragment", [("no-such-dir/o.lkc", "does not exist"), ("d.lkc", "is a directory")])
def test_unwritable_output(tmp_path, where, fragment):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    (tmp_path / "d.lkc").mkdir()
    assert_one_line_error(create("-f", corpus, "-lcs", tmp_path / where), fragment)


def test_disk_full_leaves_nothing_at_the_target(tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    assert_one_line_error(create("-f", corpus, "-lcs", out_dir / "o.lkc", "--no-token-cache"), "no space left")
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("existing", [False, True])
@pytest.mark.parametrize("after_rename", [True, False])
def test_ctrl_c_after_the_rename_is_a_success_before_it_an_interrupt(tmp_path, monkeypatch, after_rename, existing):
    """Ctrl-C lands exactly after (or instead of) the rename of the finished file over -lcs."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT * 20)
    ref, out = tmp_path / "ref.lkc", tmp_path / "out" / "o.lkc"
    out.parent.mkdir()
    assert create("-f", corpus, "-lcs", ref, "-q", "--no-token-cache").exit_code == 0
    if existing:
        out.write_bytes(b"the previous file")
    real = atomic.os.replace

    def replace(src, dst):
        if Path(dst) != out:
            return real(src, dst)
        if after_rename:
            real(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", replace)
    result = create("-f", corpus, "-lcs", out, "--no-token-cache")
    leftovers = [p.name for p in out.parent.iterdir() if p != out]
    assert leftovers == []  # no temp file either way
    if after_rename:
        assert result.exit_code == 0, result.output
        assert out.read_bytes() == ref.read_bytes()  # the complete file, kept
        assert f"note: interrupted after {out} was completely written; the file is kept" in result.stderr
    else:
        assert result.exit_code == 130 and result.stderr.strip().endswith("error: interrupted"), result.output
        assert out.read_bytes() == b"the previous file" if existing else not out.exists()


def test_the_installed_command(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    ok = subprocess.run(["lookup-create", "-f", corpus, "-lcs", tmp_path / "o.lcs", "-q"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout == "" and (tmp_path / "o.lcs").stat().st_size > 0
    bad = subprocess.run(["lookup-create", "-f", tmp_path / "none.txt", "-lcs", tmp_path / "p.lcs"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1


def test_a_corpus_of_many_files_lists_the_first_in_the_header_and_sums_the_rest(tmp_path):
    """The header is parsed at every open: beyond LISTED_SOURCES files, one entry stands for the rest."""
    import hashlib

    import typer

    from lookupkit.create.pipeline import LISTED_SOURCES
    from lookupkit.cli.cache_cmds import register

    cache_app = typer.Typer(add_completion=False)
    register(cache_app)

    n = LISTED_SOURCES + 5
    paths = []
    for i in range(n):
        p = tmp_path / f"f{i:03d}.txt"
        p.write_text(f"def f{i}(x):\n    return x + {i}\n" * 3)
        paths.append(p)
    out = tmp_path / "many.lkc"
    args = [a for p in paths for a in ("-f", str(p))]
    result = runner.invoke(app, [*args, "-lcs", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert len(summary["sources"]) == n  # the command's summary keeps every source
    corpus = StaticCache.open(out).meta["corpus"]
    assert [s["source"] for s in corpus["sources"]] == [str(p) for p in paths[:LISTED_SOURCES]]
    rest = summary["sources"][LISTED_SOURCES:]
    assert corpus["more_sources"] == {
        "count": 5, "bytes": sum(s["bytes"] for s in rest), "tokens": sum(s["tokens"] for s in rest),
        "replaced_bytes": 0, "cut": False,
        "sha256_of_sha256s": hashlib.sha256("".join(s["sha256"] for s in rest).encode()).hexdigest()}
    assert corpus["n_tokens"] == summary["n_tokens"]
    shown = runner.invoke(cache_app, ["inspect", str(out)])
    assert shown.exit_code == 0 and "and 5 more sources" in shown.stdout
