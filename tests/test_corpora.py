"""Corpus sources: sizes, prefix cuts, UTF-8 replacement counting, bad files, datasets, default corpus."""

import importlib.util

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit.create.memory_budget import parse_size
from lookupkit.corpora import HFDataset, StdlibCorpus, TextBudget, TextFile, TokenFile
from lookupkit.corpora.stream import Consumed, Utf8Decoder
from lookupkit.errors import InputError


# -- sizes ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [("25MB", 25_000_000), ("25MiB", 25 * 2**20), ("25000000", 25_000_000),
                                        ("1.5GB", 1_500_000_000), ("7 kb", 7000), ("3B", 3), ("2TiB", 2 * 2**40)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["0", "0MB", "-5", "abc", "25XB", "1.5", "", "MB", "1e6", "0.5B"])
def test_parse_size_rejects_absurd_values(text):
    with pytest.raises(InputError):
        parse_size(text)


# -- prefix cuts ------------------------------------------------------------------------------
def consume(blocks, budget):
    return b"".join(Consumed(iter(blocks), budget))


def reference_prefix(data: bytes, limit: int | None, cut: str) -> bytes:
    """The rule, stated plainly: whole if it fits, else up to the last \\n within `limit` (or `limit` bytes)."""
    if limit is None or len(data) <= limit:
        return data
    return data[:limit] if cut == "byte" else data[:data.rfind(b"\n", 0, limit) + 1]


@settings(max_examples=300, deadline=None)
@given(data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\xc3\xa9", b" "]), max_size=80).map(b"".join),
       limit=st.one_of(st.none(), st.integers(1, 90)), block=st.integers(1, 17), cut=st.sampled_from(["line", "byte"]))
def test_budget_cut_matches_the_rule_for_any_block_size(data, limit, block, cut):
    blocks = [data[i:i + block] for i in range(0, len(data), block)]
    budget = TextBudget(limit, cut)
    consumed = Consumed(iter(blocks), budget)
    out = b"".join(consumed)
    assert out == reference_prefix(data, limit, cut)
    assert consumed.n_bytes == len(out)
    assert consumed.cut == (limit is not None and len(data) > limit)
    if limit is not None:
        assert budget.left == limit - len(out)


def test_cut_keeps_a_newline_that_ends_exactly_at_the_budget():
    assert consume([b"ab\ncd\nef\n"], TextBudget(6)) == b"ab\ncd\n"
    assert consume([b"ab\ncd\nef\n"], TextBudget(5)) == b"ab\n"
    assert consume([b"abcdef\n"], TextBudget(3)) == b""


def test_budget_is_shared_by_sources_in_order():
    budget = TextBudget(10)
    assert consume([b"abcd\n"], budget) == b"abcd\n"   # fits whole
    assert consume([b"ef\ngh\nij\n"], budget) == b"ef\n"  # 5 bytes left: up to the last line end
    assert budget.left == 2 and not budget.exhausted


def test_unknown_cut_is_refused():
    with pytest.raises(InputError, match="unknown cut"):
        TextBudget(5, "word")


# -- UTF-8 ------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60), block=st.integers(1, 7))
def test_decoder_equals_one_shot_replace_and_counts_replaced_bytes(data, block):
    dec = Utf8Decoder()
    text = "".join(dec.decode(data[i:i + block]) for i in range(0, len(data), block)) + dec.decode(b"", final=True)
    assert text == data.decode("utf-8", "replace")
    valid = len(data.decode("utf-8", "ignore").encode("utf-8"))
    assert dec.replaced_bytes == len(data) - valid


# -- text files -------------------------------------------------------------------------------
def test_text_file_and_zstd_frames_stream_the_same_bytes(tmp_path):
    data = b"".join(b"line %d\n" % i for i in range(50000))
    plain, packed = tmp_path / "c.txt", tmp_path / "c.txt.zst"
    plain.write_bytes(data)
    half = len(data) // 2
    packed.write_bytes(zstandard.ZstdCompressor().compress(data[:half]) + zstandard.ZstdCompressor().compress(data[half:]))
    assert b"".join(TextFile(plain).blocks()) == data
    assert b"".join(TextFile(packed).blocks()) == data  # two frames, read one after the other
    assert TextFile(plain).size == len(data)
    single = tmp_path / "s.zst"
    single.write_bytes(zstandard.ZstdCompressor().compress(data))
    assert TextFile(single).size == len(data)


@pytest.mark.parametrize("case,message", [
    ("missing", "does not exist"), ("directory", "is a directory"), ("empty", "is empty"),
    ("binary", "looks binary"), ("truncated", "truncated zstd"), ("corrupt", "cannot decompress"),
    ("not-zstd", "not a zstd stream"),
])
def test_bad_text_files_fail_with_one_line(tmp_path, case, message):
    path = tmp_path / ("corpus.zst" if case == "not-zstd" else "corpus")
    frame = zstandard.ZstdCompressor().compress(b"hello world\n" * 1000)
    if case == "directory":
        path.mkdir()
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "binary":
        path.write_bytes(b"text\x00\x01\x02 more")
    elif case == "truncated":
        path.write_bytes(frame[:-10])
    elif case == "corrupt":
        path.write_bytes(frame[:4] + b"\xff" * 40)
    elif case == "not-zstd":
        path.write_bytes(b"plain text, not compressed\n")
    with pytest.raises(InputError, match=message) as err:
        TextFile(path).check()
        b"".join(TextFile(path).blocks())
    assert "\n" not in str(err.value)


# -- token files ------------------------------------------------------------------------------
def test_token_files_raw_and_npy(tmp_path):
    ids = np.arange(10, dtype=np.int32)
    ids.tofile(tmp_path / "a.i32")
    np.save(tmp_path / "b.npy", ids.astype(np.int64))
    assert np.array_equal(np.concatenate(list(TokenFile(tmp_path / "a.i32").arrays())), ids)
    assert np.array_equal(TokenFile(tmp_path / "b.npy").ids(), ids)


@pytest.mark.parametrize("case,message", [
    ("odd", "not a multiple of 4"), ("empty", "no tokens"), ("2d", "1-D int32 or int64"),
    ("float", "1-D int32 or int64"), ("missing", "does not exist"), ("dir", "is a directory"),
    ("badnpy", "not a readable .npy"),
])
def test_bad_token_files(tmp_path, case, message):
    path = tmp_path / ("t.npy" if case in ("2d", "float", "badnpy") else "t.i32")
    if case == "odd":
        path.write_bytes(b"\x01\x00\x00\x00\x02")
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "2d":
        np.save(path, np.zeros((2, 2), np.int32))
    elif case == "float":
        np.save(path, np.zeros(4, np.float32))
    elif case == "dir":
        path.mkdir()
    elif case == "badnpy":
        path.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(InputError, match=message):
        TokenFile(path).check()


# -- Hugging Face datasets ----------------------------------------------------------------------
needs_datasets = pytest.mark.skipif(importlib.util.find_spec("datasets") is None
                                    or importlib.util.find_spec("pyarrow") is None,
                                    reason="the optional `datasets`/`pyarrow` packages are not installed")


@needs_datasets
def test_local_parquet_dataset_is_one_document_of_lines(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    pq.write_table(pa.table({"text": [" = Title = \n", "", " body line \n", "no newline"]}), tmp_path / "d.parquet")
    assert b"".join(HFDataset(str(tmp_path / "d.parquet")).blocks()) == b" = Title = \n\n body line \nno newline\n"


@needs_datasets
def test_dataset_without_text_column(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "d.parquet")
    with pytest.raises(InputError, match="no 'text' column .*body"):
        HFDataset(str(tmp_path / "d.parquet")).check()


@pytest.mark.parametrize("spec", ["", ":config", "name::train", "a:b:c:d"])
def test_bad_dataset_spec(spec):
    with pytest.raises(InputError, match="dataset spec"):
        HFDataset(spec)._parse()


# -- the embedded default corpus ------------------------------------------------------------------
def test_default_corpus_is_the_sorted_stdlib_sources():
    corpus = StdlibCorpus()
    files = corpus.files
    assert files and all(p.suffix == ".py" for p in files)
    rel = [p.relative_to(corpus.root).as_posix() for p in files]
    assert rel == sorted(rel)
    assert not any(part in ("test", "tests", "site-packages") for r in rel for part in r.split("/")[:-1])
    head = next(corpus.blocks())
    assert head == files[0].read_bytes() + (b"" if files[0].read_bytes().endswith(b"\n") else b"\n")


def test_default_corpus_of_an_empty_tree(tmp_path):
    with pytest.raises(InputError, match="default corpus is empty"):
        StdlibCorpus(tmp_path).check()
