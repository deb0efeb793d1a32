"""The token store: the `.lkt` container round-trips and refuses what it did not write, entries round-trip,
bad entries, and tokenize-once reuse that gives exactly the ids of
tokenizing the consumed bytes on their own (whole corpus, prefixes, grown and changed corpora)."""

import copy
import io
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lookupkit.formats import token_store
from lookupkit.tokenizer import store as tokstore
from lookupkit.corpora import TextBudget, TextFile
from lookupkit.create import tokenized
from lookupkit.create.tokenized import tokenize_source
from lookupkit.errors import FormatError
from lookupkit.tokenizer.encode import Tokenizer
from lookupkit.tokenizer.store import Checkpoint, Entry, TokenStore
import needs

SHARED = needs.SHARED
WORDS = ["the", "Valkyria", "café", "war", "of", "1886", "Müller", "'s", "naïve", "2.5", "=", ",", ".", "(", ")",
         "<|endoftext|>", "東京", "x\u00a0y", "--", "and"]


def synthetic_text(seed: int, n_lines: int = 3000) -> bytes:
    """WikiText-like lines: headings, blank ' ' lines, leading spaces, digits, non-ASCII, a special token."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        kind = rng.random()
        if kind < 0.1:
            lines.append(" = " + " ".join(rng.choices(WORDS, k=3)) + " = ")
        elif kind < 0.25:
            lines.append(" " if rng.random() < 0.5 else "")
        else:
            start = rng.choice(["", " ", "  ", "\t"])
            lines.append(start + " ".join(rng.choices(WORDS, k=rng.randint(1, 25))) + rng.choice(["", " ", " ."]))
    return ("\n".join(lines) + "\n").encode()


def standalone(tok: Tokenizer, data: bytes) -> np.ndarray:
    """What llama.cpp's lookup-create tokenizes for a file holding exactly these bytes."""
    text = data.decode("utf-8", "replace")
    return tok.encode(text[:-1] if text.endswith("\n") else text)


def ids_of(doc) -> np.ndarray:
    return np.concatenate(list(doc.arrays()) or [np.zeros(0, np.int32)])


@pytest.fixture
def small_segments(monkeypatch):
    """Checkpoints every ~2 KiB and a 1 KiB head, so small texts exercise many segments and frames."""
    monkeypatch.setattr(tokenized, "SEGMENT_BYTES", 2048)
    monkeypatch.setattr(tokenized, "HEAD_BYTES", 1024)
    monkeypatch.setattr(tokstore, "FRAME_TOKENS", 1000)


@pytest.fixture(scope="module")
def gpt2():
    return Tokenizer.default()


def build(path, tok, store, limit=None, cut="line"):
    return tokenize_source(TextFile(path), TextBudget(limit, cut), tok, store)


# -- the container (formats/token_store.py) ----------------------------------------------------
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text("abc é東", max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("xyz", max_size=4), inner,
                                                                               max_size=3), max_leaves=8)


def container(ids: np.ndarray, cuts: list[int], checkpoints=(), **info) -> tuple[bytes, dict]:
    """The bytes of a container holding `ids` in frames cut at `cuts`, and the index it wrote."""
    f = io.BytesIO()
    w = token_store.Writer(f)
    for part in np.split(ids, sorted(cuts)):
        if len(part):
            w.frame(part)
    index = w.close(vocab="v", mode="m", n_bytes=info.pop("n_bytes", 99), sha256="ab" * 32,
                    checkpoints=checkpoints, **info)
    return f.getvalue(), index


def read_all(data: bytes, index: dict) -> np.ndarray:
    return np.concatenate([token_store.read_frame(data, fr) for fr in index["frames"]] or [np.zeros(0, "<i4")])


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000), n_cuts=st.integers(0, 5), extra=st.dictionaries(
    st.text("qrs", min_size=1, max_size=4), JSON, max_size=3), n_bytes=st.integers(1, 2**40), data=st.data())
def test_the_container_round_trips_and_refuses_a_cut_or_changed_frame_of_itself(seed, n, n_cuts, extra, n_bytes,
                                                                              data):
    rng = np.random.default_rng(seed)
    ids = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype("<i4")
    cuts = [int(c) for c in rng.integers(0, n + 1, n_cuts)]
    checkpoints = data.draw(st.lists(st.tuples(st.integers(1, n_bytes), st.integers(0, n), st.text("0123abcdef"),
                                               st.integers(0, 9)), max_size=4))
    raw, index = container(ids, cuts, checkpoints, n_bytes=n_bytes, **extra)
    assert raw[:8] == raw[-8:] == token_store.MAGIC
    got = token_store.read_index(raw)
    assert got == index and got["n_tokens"] == n and got["n_bytes"] == n_bytes
    assert got["checkpoints"] == [list(c) for c in checkpoints] and all(got[k] == v for k, v in extra.items())
    assert np.array_equal(read_all(raw, got), ids)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(FormatError, match="not a valid token store entry"):
        token_store.read_index(raw[:cut])


def test_the_container_is_refused_whole_when_its_bytes_are_wrong():
    raw, index = container(np.arange(5000, dtype="<i4"), [1000, 4000], [(3, 2, "00" * 32, 0)], n_bytes=10)
    trailer = token_store.TRAILER.size
    assert token_store.read_index(raw) == index
    cases = {
        "empty": b"",
        "truncated": raw[:-5],
        "wrong magic": b"LKTOK002" + raw[8:],
        "wrong trailing magic": raw[:-8] + b"LKTOK002",
        "index length past the end": raw[:-trailer] + token_store.TRAILER.pack(len(raw), token_store.MAGIC),
        "index length of 2^64 - 1": raw[:-trailer] + token_store.TRAILER.pack(2**64 - 1, token_store.MAGIC),
        "index not JSON": raw[:-trailer - 1] + b"}}" + raw[-trailer:],
        "another version": raw.replace(b'"version": 1', b'"version": 2'),
        "a frame past the index": raw.replace(b'"frames": [[8, ', b'"frames": [[9999999, '),
        "a checkpoint past the document": raw.replace(b'[[3, 2, ', b'[[11, 2, '),
        "garbage": b"LKTOK001" + b"\x00" * 100,
    }
    for why, bad in cases.items():
        assert bad != raw, why
        with pytest.raises(FormatError, match="not a valid token store entry"):
            token_store.read_index(bad)
    first = index["frames"][0]
    flipped = bytearray(raw)
    flipped[first[0] + first[1] // 2] ^= 0xFF
    with pytest.raises(FormatError, match="entry is corrupted"):
        token_store.read_frame(bytes(flipped), first)
    with pytest.raises(FormatError, match="x.lkt is corrupted \\(a frame has the wrong size\\)"):
        token_store.read_frame(raw, [first[0], first[1], first[2] + 1], name="x.lkt")


# -- entries ----------------------------------------------------------------------------------
def test_entry_round_trip_over_many_frames(tmp_path, monkeypatch):
    monkeypatch.setattr(tokstore, "FRAME_TOKENS", 7)
    store = TokenStore(tmp_path)
    ids = np.arange(100, dtype=np.int32)
    with store.writer("abc", "vocab", "mode") as w:
        for part in np.array_split(ids, 9):
            w.add(part)
        w.checkpoint(Checkpoint(10, 40, "00" * 32, 0))
        w.finish(123, "ff" * 32, replaced_bytes=0)
    entry = w.entry
    assert entry.n_tokens == 100 and entry.n_bytes == 123 and entry.checkpoints == [Checkpoint(10, 40, "00" * 32, 0)]
    assert np.array_equal(np.concatenate(list(entry.arrays())), ids)
    assert np.array_equal(np.concatenate(list(entry.arrays(33))), ids[:33])
    assert [e.path for e in store.candidates("abc", "vocab", "mode")] == [entry.path]
    assert store.candidates("abc", "other-vocab", "mode") == []


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "c"))
    assert TokenStore().root == tmp_path / "c" / "tokens"


def test_an_abandoned_or_failed_writer_leaves_nothing(tmp_path):
    store = TokenStore(tmp_path)
    with store.writer("abc", "v", "m") as w:
        w.add(np.arange(10, dtype=np.int32))  # no finish(): nothing is committed
    with pytest.raises(RuntimeError), store.writer("abc", "v", "m") as w:
        w.add(np.arange(10, dtype=np.int32))
        raise RuntimeError("boom")
    assert list(store.root.iterdir()) == []


def test_unparseable_entries_are_ignored_and_corrupt_frames_are_errors(tmp_path):
    store = TokenStore(tmp_path)
    with store.writer("abc", "v", "m") as w:
        w.add(np.arange(5000, dtype=np.int32))
        w.finish(10, "ee" * 32)
    data = w.entry.path.read_bytes()
    (store.root / "abc-truncated.lkt").write_bytes(data[:-5])
    (store.root / "abc-garbage.lkt").write_bytes(b"LKTOK001" + b"\x00" * 100)
    assert [e.path for e in store.candidates("abc", "v", "m")] == [w.entry.path]
    flipped = bytearray(data)
    flipped[20] ^= 0xFF
    w.entry.path.write_bytes(bytes(flipped))
    with pytest.raises(FormatError, match="corrupted"):
        list(Entry.open(w.entry.path).arrays())


# -- tokenize once, reuse exactly --------------------------------------------------------------
def test_whole_document_and_exact_hit(tmp_path, gpt2, small_segments):
    path = tmp_path / "c.txt"
    data = synthetic_text(1)
    path.write_bytes(data)
    store = TokenStore(tmp_path / "cache")
    first = build(path, gpt2, store)
    assert first.reused_tokens == 0 and first.n_bytes == len(data)
    assert np.array_equal(ids_of(first), standalone(gpt2, data))
    [entry] = [Entry.open(p) for p in store.root.glob("*.lkt")]
    assert len(entry.checkpoints) > 20
    second = build(path, gpt2, store)
    assert second.reused_tokens == second.n_tokens == first.n_tokens
    assert second.sha256 == first.sha256 and np.array_equal(ids_of(second), ids_of(first))


@pytest.mark.parametrize("cut", ["line", "byte"])
def test_every_prefix_equals_tokenizing_the_prefix_alone(tmp_path, gpt2, small_segments, cut):
    path = tmp_path / "c.txt"
    data = synthetic_text(2)
    path.write_bytes(data)
    store = TokenStore(tmp_path / "cache")
    build(path, gpt2, store)
    rng = random.Random(3)
    reused = 0
    for limit in [1, 500, 2049, 4096, len(data) - 1, len(data)] + [rng.randrange(1, len(data)) for _ in range(25)]:
        doc = build(path, gpt2, store, limit, cut)
        expected_bytes = data[:limit] if cut == "byte" else data[:data.rfind(b"\n", 0, limit) + 1]
        assert doc.n_bytes == len(expected_bytes)
        assert np.array_equal(ids_of(doc), standalone(gpt2, expected_bytes)), limit
        reused += doc.reused_tokens
    assert reused > 0  # prefixes did reuse the stored whole-corpus tokens


def test_a_grown_corpus_extends_the_stored_prefix(tmp_path, gpt2, small_segments):
    path = tmp_path / "c.txt"
    data = synthetic_text(4)
    path.write_bytes(data)
    store = TokenStore(tmp_path / "cache")
    short = build(path, gpt2, store, len(data) // 3)
    whole = build(path, gpt2, store)
    assert 0 < whole.reused_tokens < whole.n_tokens  # the prefix's tokens, then the rest
    assert np.array_equal(ids_of(whole), standalone(gpt2, data))
    assert len(list(store.root.glob("*.lkt"))) == 2
    again = build(path, gpt2, store, len(data) // 3)
    assert again.reused_tokens > short.n_tokens // 2 and np.array_equal(ids_of(again), ids_of(short))


def test_changed_bytes_after_the_head_are_detected(tmp_path, gpt2, small_segments):
    path = tmp_path / "c.txt"
    data = bytearray(synthetic_text(5))
    path.write_bytes(bytes(data))
    store = TokenStore(tmp_path / "cache")
    build(path, gpt2, store)
    where = len(data) // 2
    data[where:where + 3] = b"ZZZ" if data[where:where + 3] != b"ZZZ" else b"YYY"
    path.write_bytes(bytes(data))
    changed = build(path, gpt2, store)
    assert 0 < changed.reused_tokens < changed.n_tokens
    assert np.array_equal(ids_of(changed), standalone(gpt2, bytes(data)))


def test_invalid_utf8_is_replaced_and_counted_through_reuse(tmp_path, gpt2, small_segments):
    path = tmp_path / "c.txt"
    lines = synthetic_text(6).split(b"\n")
    for i in range(0, len(lines), 50):
        lines[i] += b"\xff\xc3"  # one invalid byte and one truncated sequence per 50 lines
    data = b"\n".join(lines)
    path.write_bytes(data)
    store = TokenStore(tmp_path / "cache")
    bad = len(data) - len(data.decode("utf-8", "ignore").encode())
    whole = build(path, gpt2, store)
    assert whole.replaced_bytes == bad
    assert np.array_equal(ids_of(whole), standalone(gpt2, data))
    limit = len(data) * 2 // 3
    prefix = data[:data.rfind(b"\n", 0, limit) + 1]
    doc = build(path, gpt2, store, limit)
    assert doc.reused_tokens > 0
    assert doc.replaced_bytes == len(prefix) - len(prefix.decode("utf-8", "ignore").encode())
    assert np.array_equal(ids_of(doc), standalone(gpt2, prefix))


def test_a_vocabulary_that_cannot_be_cut_is_tokenized_whole(tmp_path, gpt2, small_segments):
    whole_only = copy.copy(gpt2)
    whole_only.__class__ = type("WholeOnly", (Tokenizer,), {"cuttable": False})
    path = tmp_path / "c.txt"
    data = synthetic_text(7, 500)
    path.write_bytes(data)
    store = TokenStore(tmp_path / "cache")
    doc = build(path, whole_only, store)
    assert np.array_equal(ids_of(doc), standalone(gpt2, data))
    assert all(not e.checkpoints for e in map(Entry.open, store.root.glob("*.lkt")))
    assert build(path, whole_only, store).reused_tokens == doc.n_tokens  # still an exact hit


@pytest.mark.parametrize("vocab", ["qwen2", "llama-spm", "llama-bpe"])
def test_prefixes_of_real_text_with_real_vocabularies(tmp_path, small_segments, vocab):
    raw, gguf = needs.shared("corpora/wiki.test.raw"), needs.shared(f"vocab/ggml-vocab-{vocab}.gguf")
    tok = Tokenizer.from_file(gguf)
    data = raw.read_bytes()[:120_000]
    data = data[:data.rfind(b"\n") + 1]
    path = tmp_path / "w.txt"
    path.write_bytes(data)
    store = TokenStore(tmp_path / "cache")
    assert np.array_equal(ids_of(build(path, tok, store)), standalone(tok, data))
    for limit in (30_011, 77_777, len(data) - 3):
        doc = build(path, tok, store, limit)
        assert doc.reused_tokens > 0
        assert np.array_equal(ids_of(doc), standalone(tok, data[:data.rfind(b"\n", 0, limit) + 1]))


def test_whole_wikitext_test_split_equals_llamacpp_ids(tmp_path):
    raw, ref = needs.shared("corpora/wiki.test.raw"), needs.shared("reference/wikitext/wiki.test.qwen2.i32")
    gguf = needs.shared("vocab/ggml-vocab-qwen2.gguf")
    doc = build(raw, Tokenizer.from_file(gguf), TokenStore(tmp_path))
    assert np.array_equal(ids_of(doc), np.fromfile(ref, dtype="<i4"))
