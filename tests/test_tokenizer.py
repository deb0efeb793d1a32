"""The tokenizer must give exactly llama.cpp's ids: test vectors, whole WikiText test split, chunking.

Reference data lives in ../shared next to the repo (llama.cpp's vocab test files and ids that
llama.cpp produced); tests needing it skip when it is absent. Vocabulary files for the format and
error tests are written here by a minimal GGUF writer.
"""

from __future__ import annotations

import functools
import json
import random
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookupkit.tokenizer import backends as bb
from lookupkit.errors import FormatError, InputError
from lookupkit.tokenizer.gguf import read_metadata
from lookupkit.tokenizer.encode import SAFE_CUT, Tokenizer
import needs

SHARED = needs.SHARED
VOCABS = ["gpt-2", "qwen2", "llama-bpe", "llama-spm", "deepseek-coder"]
WIKI_VOCABS = ["qwen2", "llama-bpe", "gpt-2"]  # those with llama.cpp ids for the WikiText test split
BUNDLED = Path(__file__).resolve().parents[1] / "lookupkit" / "data" / "ggml-vocab-gpt-2.gguf"


def shared(*parts: str) -> Path:
    return needs.shared("/".join(parts))


@functools.lru_cache(maxsize=None)
def _load(vocab: str) -> Tokenizer:
    return Tokenizer.from_file(SHARED / "vocab" / f"ggml-vocab-{vocab}.gguf")


def tok(vocab: str) -> Tokenizer:
    shared("vocab", f"ggml-vocab-{vocab}.gguf")
    return _load(vocab)


@functools.lru_cache(maxsize=None)
def wiki_text() -> str:
    text = shared("corpora", "wiki.test.raw").read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text  # lookup-stats strips exactly one "\n"


# -- exactness against llama.cpp ---------------------------------------------------------------
@pytest.mark.parametrize("vocab", VOCABS)
def test_llamacpp_test_vectors(vocab):
    """Every text of llama.cpp's tokenizer test (add_special=false, parse_special=false)."""
    t = tok(vocab)
    texts = shared("vocab", f"ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8")
    texts = texts.split("\n__ggml_vocab_test__\n")
    lines = shared("vocab", f"ggml-vocab-{vocab}.gguf.out").read_text().split("\n")
    expected = [[int(x) for x in line.split()] for line in lines[:len(texts)]]
    assert len(texts) == len(expected) > 40
    bad = [(s, e, t.encode(s, add_special=False, parse_special=False).tolist())
           for s, e in zip(texts, expected)
           if t.encode(s, add_special=False, parse_special=False).tolist() != e]
    assert not bad, f"{len(bad)} of {len(texts)} vectors differ, first: {bad[0]!r}"


@pytest.mark.parametrize("vocab", WIKI_VOCABS)
def test_wikitext_bit_exact(vocab):
    """The whole WikiText test split in lookup-stats mode (BOS per vocab, specials parsed)."""
    ref = np.fromfile(shared("reference", "wikitext", f"wiki.test.{vocab}.i32"), dtype="<i4")
    got = tok(vocab).encode(wiki_text())
    assert got.dtype == np.int32 and got.ndim == 1
    assert len(got) == len(ref)
    assert np.array_equal(got, ref)


def _awkward_pieces(text: str, seed: int) -> list[str]:
    """Pieces of every size from 1 character to 64 KB, many of them ending on a newline."""
    rnd, out, i = random.Random(seed), [], 0
    while i < len(text):
        n = rnd.choice([1, 2, 3, 5, 17, 100, 999, 4096, 65536])
        if rnd.random() < 0.3:  # end exactly after or before a newline
            j = text.find("\n", i + 1)
            n = (j - i + rnd.choice([0, 1])) if j > 0 else n
        out.append(text[i:i + max(n, 1)])
        i += max(n, 1)
    return out


@pytest.mark.parametrize("vocab", VOCABS)
def test_encode_chunks_equals_encode_on_wikitext(vocab):
    text = wiki_text() if vocab in WIKI_VOCABS else wiki_text()[:400_000]  # HF-backed ones are slower
    whole = tok(vocab).encode(text)
    if vocab in WIKI_VOCABS:  # and encode() itself is llama.cpp's
        assert len(whole) == len(np.fromfile(shared("reference", "wikitext", f"wiki.test.{vocab}.i32"), "<i4"))
    for seed in range(2):
        segments = list(tok(vocab).encode_chunks(_awkward_pieces(text, seed)))
        assert len(segments) > 10, "the text was never cut"
        assert np.array_equal(np.concatenate(segments), whole)


def test_encode_chunks_is_streaming():
    """A segment comes out before the input is exhausted (no whole-corpus buffering)."""
    text = wiki_text()
    consumed = []

    def source():
        for k in range(0, len(text), 10_000):
            consumed.append(k)
            yield text[k:k + 10_000]

    it = tok("qwen2").encode_chunks(source())
    first = next(it)
    assert len(first) > 0 and len(consumed) <= 2


def test_encode_segment_at_safe_cuts():
    """The public piecewise API (used by the corpus token store) matches encode()."""
    t, text = tok("llama-bpe"), wiki_text()[:300_000]
    bounds = [0] + [m.end() for m in SAFE_CUT.finditer(text)][::40] + [len(text)]
    segs = [t.encode_segment(text[a:b], first=i == 0, last=b == len(text))
            for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    assert t.cuttable and len(segs) > 10
    assert np.array_equal(np.concatenate(segs), t.encode(text))


def test_special_token_with_newline_disables_cuts(tmp_path):
    t = Tokenizer.from_file(write_vocab(tmp_path / "nl.gguf", extra=[("x\nThe", 4)]))
    text = "one\nThe x\nThe two\nThe end " * 50
    assert not t.cuttable
    got = list(t.encode_chunks([text[i:i + 7] for i in range(0, len(text), 7)]))
    assert len(got) == 1 and np.array_equal(got[0], t.encode(text))
    assert (got[0] == t.n_vocab - 1).sum() == 50


_ALPHABET = st.sampled_from(["a", "B", "z", "é", "中", " ", "  ", "\n", "\n\n", "\t", ".", ",", "'s",
                             "3", "42", "@-@", " = ", "<|endoftext|>", "</s>", "<s>", "<|im_end|>", "Á"])


@pytest.mark.parametrize("vocab", VOCABS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.lists(_ALPHABET, max_size=12).map("".join), max_size=12),
       add_special=st.booleans(), parse_special=st.booleans())
def test_encode_chunks_property(vocab, parts, add_special, parse_special):
    t = tok(vocab)
    got = list(t.encode_chunks(parts, add_special, parse_special))
    assert np.array_equal(np.concatenate(got), t.encode("".join(parts), add_special, parse_special))


# -- llama.cpp's special-token and BOS rules ---------------------------------------------------
def test_special_tokens_and_bos():
    q, lb, spm, ds = tok("qwen2"), tok("llama-bpe"), tok("llama-spm"), tok("deepseek-coder")
    assert q.encode("a</s>b").tolist() == [64, 128247, 65]  # "</s>" is normal in the GGUF
    assert 128247 not in q.encode("a</s>b", parse_special=False).tolist()
    assert q.bos_id == 151643 and not q.add_bos and q.encode("").tolist() == []
    assert lb.add_bos and lb.encode("").tolist() == [128000]
    assert lb.encode("Hi", add_special=False).tolist() == [13347]
    assert np.concatenate(list(lb.encode_chunks(["Hi\n", "there\nyou"]))).tolist().count(128000) == 1
    # SPM: a space is prepended at the start and after each special token
    assert spm.encode("Hello</s>world").tolist() == [1, 15043, 2] + spm.encode("world", False).tolist()
    # user-defined tokens are split out even without parse_special
    assert ds.encode("Á", add_special=False, parse_special=False).tolist() == [32002]


def test_longest_special_first(tmp_path):
    """llama.cpp splits out specials longest first, not leftmost first."""
    path = write_vocab(tmp_path / "v.gguf", extra=[("AB", 4), ("BCD", 4)])
    t = Tokenizer.from_file(path)
    ab, bcd = t.n_vocab - 2, t.n_vocab - 1
    assert t.encode("ABCD", parse_special=False).tolist() == [ord("A") - 33, bcd]
    assert t.encode("ABAB", parse_special=False).tolist() == [ab, ab]


def test_anchor_end_means_end_of_piece():
    assert bb.anchor_end(r"\s+$") == r"\s+\z"
    assert bb.anchor_end(r"[\p{P}\$\+<=>\^~\|`]+") == r"[\p{P}\$\+<=>\^~\|`]+"
    assert bb.anchor_end(r"[$]x\$") == r"[$]x\$"


# -- loading, fingerprint, default vocab ---------------------------------------------------------
def test_default_is_bundled_gpt2():
    d = Tokenizer.default()
    assert (d.name, d.n_vocab, d.bos_id, d.add_bos) == ("gpt-2", 50257, 50256, False)
    assert d.encode("Hello world").tolist() == [15496, 995]
    assert d.decode(d.encode("Hello world <|endoftext|> é")) == "Hello world <|endoftext|> é"


def test_fingerprint_depends_on_content_not_path(tmp_path):
    copy = tmp_path / "renamed.gguf"
    copy.write_bytes(BUNDLED.read_bytes())
    a, b = Tokenizer.default(), Tokenizer.from_file(copy)
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64
    int(a.fingerprint, 16)
    v1 = Tokenizer.from_file(write_vocab(tmp_path / "1.gguf"))
    v2 = Tokenizer.from_file(write_vocab(tmp_path / "2.gguf", merges=["Ġ t", "h e", "t he"]))
    v3 = Tokenizer.from_file(write_vocab(tmp_path / "3.gguf", add_bos=True))
    assert len({a.fingerprint, v1.fingerprint, v2.fingerprint, v3.fingerprint}) == 4
    assert Tokenizer.from_file(write_vocab(tmp_path / "4.gguf")).fingerprint == v1.fingerprint


def test_all_vocab_fingerprints_differ():
    assert len({tok(v).fingerprint for v in VOCABS}) == len(VOCABS)


def test_gguf_reader_reads_tokenizer_metadata():
    md = read_metadata(BUNDLED, "tokenizer.")
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "gpt-2"
    assert len(md["tokenizer.ggml.tokens"]) == 50257 and len(md["tokenizer.ggml.merges"]) == 50000
    assert list(md["tokenizer.ggml.token_type"][-2:]) == [1, 3]
    assert "general.name" not in md


def test_hf_tokenizer_json_matches_gguf(tmp_path):
    """A tokenizer.json of the same vocabulary (Llama 3 style) gives the same ids."""
    md = read_metadata(shared("vocab", "ggml-vocab-llama-bpe.gguf"), "tokenizer.ggml.")
    toks, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    regex = bb.PRE_TOKENIZERS["llama-bpe"][0][0].replace(
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])", "(?i:'s|'t|'re|'ve|'m|'ll|'d)")
    doc = {
        "added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(toks) if types[i] == 3],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing", "single": [
            {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
        "model": {"type": "BPE", "ignore_merges": True, "merges": md["tokenizer.ggml.merges"],
                  "vocab": {t: i for i, t in enumerate(toks) if types[i] != 3}},
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    hf, gg = Tokenizer.from_file(tmp_path / "tokenizer.json"), tok("llama-bpe")
    assert (hf.name, hf.bos_id, hf.add_bos) == ("llama-bpe", 128000, True)
    text = wiki_text()[:200_000] + " <|eot_id|> 12345 don't"
    assert np.array_equal(hf.encode(text), gg.encode(text))


# -- bad inputs ----------------------------------------------------------------------------------
def test_missing_and_directory(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        Tokenizer.from_file(tmp_path / "nope.gguf")
    with pytest.raises(InputError, match="directory"):
        Tokenizer.from_file(tmp_path)


@pytest.mark.parametrize("content", [b"", b"GGUF", b"\x00" * 100, bytes(random.Random(0).randbytes(5000)),
                                     b"GGUF" + bytes(random.Random(1).randbytes(5000)), b"{not json"])
def test_garbage_files(tmp_path, content):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(FormatError):
        Tokenizer.from_file(p)


def test_truncated_gguf(tmp_path):
    data = BUNDLED.read_bytes()
    for n in [5, 24, 30, 100, 1000, len(data) // 3, len(data) // 2, len(data) - 50_000]:
        p = tmp_path / f"t{n}.gguf"
        p.write_bytes(data[:n])
        with pytest.raises(FormatError):
            Tokenizer.from_file(p)


def test_corrupted_lengths_fail_fast(tmp_path):
    """A huge length or count is rejected against the file size, never allocated."""
    data = bytearray(BUNDLED.read_bytes())
    at = data.index(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 8  # after type+elem type
    for value in (2**63, 2**40, 10**7):
        bad = bytearray(data)
        bad[at:at + 8] = struct.pack("<Q", value)  # the string array's count
        (tmp_path / "c.gguf").write_bytes(bad)
        with pytest.raises(FormatError):
            Tokenizer.from_file(tmp_path / "c.gguf")
    bad = bytearray(data)
    bad[24:32] = struct.pack("<Q", 2**62)  # length of the first key
    (tmp_path / "k.gguf").write_bytes(bad)
    with pytest.raises(FormatError):
        read_metadata(tmp_path / "k.gguf")


def test_unsupported_vocabularies(tmp_path):
    with pytest.raises(FormatError, match="no tokenizer"):
        Tokenizer.from_file(write_gguf(tmp_path / "a.gguf", {"general.name": "x"}))
    with pytest.raises(FormatError, match="unsupported tokenizer model"):
        Tokenizer.from_file(write_vocab(tmp_path / "b.gguf", model="bert"))
    with pytest.raises(FormatError, match="pre-tokenizer"):
        Tokenizer.from_file(write_vocab(tmp_path / "c.gguf", pre="no-such-pre"))
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    with pytest.raises(FormatError, match="Unigram"):
        Tokenizer.from_file(tmp_path / "tokenizer.json")


# -- a minimal GGUF writer -----------------------------------------------------------------------
def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path: Path, kv: dict) -> Path:
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)))
    for key, v in kv.items():
        out += _s(key)
        if isinstance(v, bool):
            out += struct.pack("<I?", 7, v)
        elif isinstance(v, int):
            out += struct.pack("<II", 4, v)
        elif isinstance(v, str):
            out += struct.pack("<I", 8) + _s(v)
        elif all(isinstance(x, str) for x in v):
            out += struct.pack("<IIQ", 9, 8, len(v)) + b"".join(_s(x) for x in v)
        else:
            out += struct.pack("<IIQ", 9, 5, len(v)) + struct.pack(f"<{len(v)}i", *v)
    path.write_bytes(out)
    return path


def write_vocab(path: Path, model="gpt2", pre="gpt-2", merges=("Ġ t", "h e"), extra=(), add_bos=None) -> Path:
    """256 byte tokens (in GPT-2's order of printable characters), merge results, <|endoftext|>, extra."""
    chars = sorted(bb.BYTE_TO_CHAR.values(), key=lambda c: (ord(c) > 255, ord(c)))
    tokens = chars + [m.replace(" ", "") for m in merges] + ["<|endoftext|>"] + [t for t, _ in extra]
    types = [1] * (len(tokens) - len(extra) - 1) + [3] + [ty for _, ty in extra]
    kv = {"tokenizer.ggml.model": model, "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": list(merges),
          "tokenizer.ggml.bos_token_id": len(tokens) - len(extra) - 1}
    if add_bos is not None:
        kv["tokenizer.ggml.add_bos_token"] = add_bos
    return write_gguf(path, kv)
