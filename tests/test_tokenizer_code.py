"""Gemma 3 on source code, markup and changelogs: llama.cpp's ids, and the shortcuts that make them fast.

In code every newline and indentation is one of Gemma 3's special tokens ("\\n" x 1-31, " " x 2-31,
"\\t" x 1-31), and pieces run across punctuation; `specials.Partition` finds such specials with
numpy and a trie (`_Plan`) and `spm._piece_pattern` cuts pieces at punctuation. Neither may change an id:

* (a) llama.cpp's own ids (llama-cpp-python) on text any machine has or makes the same way: a sample of
  this Python's standard library, HTML that pydoc and difflib make from it, this repository's Markdown,
  a changelog written here from a seed;
* (b) random code-like text (indentation and newline runs past 31, tabs, long identifiers and
  strings, tags, the joint character) against llama.cpp, with and without BOS and parse_special;
* (c) `_Plan` against the replay of llama.cpp's order, on Gemma's specials and on made-up ones (no
  model needed), and the cases where it must step aside;
* (d) the space-prefix path of `SpmBackend.encode_spans` (no vocabulary of llama.cpp's tests reaches
  it): Gemma's tokens with add_space_prefix, tiktoken's engine against the numba one (llama.cpp's loop).

Without llama-cpp-python or the model package the tests that need them skip saying so (under CI they fail).
"""

from __future__ import annotations

import difflib
import functools
import json
import pydoc
import random
import string
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lookupkit.bench.tokenize_corpora.run import stdlib_python
from lookupkit.tokenizer.specials import Partition, Special, _overlap_free, _Plan
from test_tokenizer_models import _close_oracles, gemma, gemma_path, llama_ids  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = 100_000  # characters of each kind of text compared in (a): llama.cpp needs ~5 s per 100 KB of code


def _lines(text: str, limit: int) -> str:
    return text[:text.rfind("\n", 0, limit) + 1] if len(text) > limit else text


@functools.lru_cache(maxsize=None)
def code_sample() -> str:
    """1,000 characters from the middle of each top-level standard-library module, at line starts."""
    out = []
    for path in stdlib_python():
        text = path.read_text(encoding="utf-8", errors="replace")
        mid = text.find("\n", len(text) // 2) + 1
        out.append(_lines(text[mid:], 1000))
    return _lines("".join(out), SAMPLE)


@functools.lru_cache(maxsize=None)
def html_sample() -> str:
    """pydoc's page of json and textwrap, and difflib's side-by-side table of two versions of textwrap.py."""
    import json as json_module

    doc = pydoc.HTMLDoc()
    pages = [doc.page(m.__name__, doc.docmodule(m)) for m in (json_module, textwrap)]
    lines = Path(textwrap.__file__).read_text(encoding="utf-8").splitlines()[:300]
    edited = [ln.replace("self", "this").replace("    ", "\t") if k % 7 == 0 else ln for k, ln in enumerate(lines)]
    pages.append(difflib.HtmlDiff(tabsize=4, wrapcolumn=72).make_file(lines, edited))
    return _lines("".join(pages), SAMPLE)


@functools.lru_cache(maxsize=None)
def markdown_sample() -> str:
    """This repository's Markdown files, sorted by path."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(ROOT.glob("**/*.md")) if ".git" not in p.parts]
    return _lines("".join(texts), SAMPLE)


@functools.lru_cache(maxsize=None)
def changelog_sample() -> str:
    """A Debian-style changelog written from seed 21: entries, wrapped bullets, trailer lines."""
    rng = random.Random(21)
    words = sorted(set(code_sample().split()))
    out = []
    for k in range(120, 0, -1):
        out.append(f"lookupkit ({k // 10}.{k % 10}.{rng.randrange(9)}-{rng.randrange(1, 4)}) unstable; "
                   f"urgency={rng.choice(['low', 'medium', 'high'])}\n\n")
        for _ in range(rng.randrange(1, 6)):
            bullet = " ".join(rng.choice(words) for _ in range(rng.randrange(4, 40)))
            out.append(textwrap.fill(bullet, 80, initial_indent="  * ", subsequent_indent="    ") + "\n")
            if rng.random() < 0.3:
                out.append(f"    (Closes: #{rng.randrange(10**5, 10**6)})\n")
        out.append(f"\n -- Jane Doe <jane{k}@example.org>  Mon, {k % 28 + 1:02d} Jan 20{k % 30:02d} "
                   f"{k % 24:02d}:{k % 60:02d}:00 +0000\n\n")
    return _lines("".join(out), SAMPLE)


SAMPLES = {"code": code_sample, "html": html_sample, "markdown": markdown_sample, "changelog": changelog_sample}


def _assert_same(got: np.ndarray, want: list[int], what: str):
    want = np.asarray(want, np.int32)
    n = min(len(got), len(want))
    bad = np.flatnonzero(got[:n] != want[:n])
    first = int(bad[0]) if len(bad) else n
    assert len(got) == len(want) and not len(bad), \
        f"{what}: first difference at {first} of {len(want)}: ours {got[first:first + 8]}, llama.cpp {want[first:first + 8]}"


# -- (a) text a fresh machine has, against llama.cpp -----------------------------------------------
@pytest.mark.parametrize("kind", SAMPLES)
def test_gemma_corpus_sample_equals_llama_cpp(kind):
    text = SAMPLES[kind]()
    assert len(text) > SAMPLE // 2
    _assert_same(gemma().encode(text), llama_ids(gemma_path(), text, True, True), kind)


def test_gemma_html_without_parse_special_equals_llama_cpp():
    text = html_sample()
    _assert_same(gemma().encode(text, True, False), llama_ids(gemma_path(), text, True, False), "html")


def test_gemma_joint_character_in_text_equals_llama_cpp():
    """A text holding the joint (the control character that stands for specials) is encoded fragment by fragment."""
    tok = gemma()
    joint = tok._backend(True)._joint
    text = f"def f():\n\treturn '{joint}'  # <b>x</b>\n\n\n    {joint}{joint}<eos>{joint}\n"
    for ps in (True, False):
        _assert_same(tok.encode(text, True, ps), llama_ids(gemma_path(), text, True, ps), repr(text))


# -- (b) random code-like text against llama.cpp ---------------------------------------------------
_MARKUP = ["<td>", "</td>", "<tr>", "</tr>", "<b>", "</b>", "<html>", '<div class="x">', "</div>", "<br/>", "&nbsp;",
           "<!-- c -->", "[multimodal]", "<start_of_turn>", "<end_of_turn>", "<eos>", "<bos>", "<unused12>", "<unk>",
           "<mask>", "# ", "## ", "* ", "- ", "```py", "`x`", "**", "[a](http://x.org/p?a=1&b=2)", "|---|:--|",
           " -- Jane Doe <jane@example.org>  Mon, 01 Jan 2024 00:00:00 +0000", ">\u2581</", "> </", "\u2581",
           "\u2581\u2581", "\x04", "\x01", "\x00", "\r", "\u00e9", "\u00df", "\u6d77", "\U0001F600", "\u00a0", "\u200b",
           "\u2019", "\u2014", "\u02c8", " /\u02c8", "1.2.3-4", "0x7f", "e.g.", "self.", "__init__", "->", "=>", "!="]
_CODE = st.lists(st.one_of(
    st.integers(1, 70).map(" ".__mul__), st.integers(1, 40).map("\t".__mul__), st.integers(1, 70).map("\n".__mul__),
    st.text(string.ascii_letters + string.digits + "_", min_size=1, max_size=300),
    st.text(max_size=60).map(repr), st.text("()[]{}<>=+-*/%&|^~!?.,:;#@$`'\"\\", min_size=1, max_size=12),
    st.sampled_from(["\n", "\r\n", ":\n    ", ";\n\t", " \\\n", "\n\n    \n"] + _MARKUP), st.text(max_size=8)),
    max_size=40).map("".join)


def _text(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False  # lone surrogates are not text


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_CODE, add_special=st.booleans(), parse_special=st.booleans())
def test_gemma_code_like_text_equals_llama_cpp(text, add_special, parse_special):
    if _text(text):
        got = gemma().encode(text, add_special=add_special, parse_special=parse_special)
        _assert_same(got, llama_ids(gemma_path(), text, add_special, parse_special), repr(text))


@pytest.mark.parametrize("parse_special", [True, False])
def test_gemma_pieces_never_cut_a_token(parse_special):
    """The piece pattern cuts only between characters no token holds side by side: every token it
    ranks, alone between two joints, is one piece (else tiktoken would return more than its rank)."""
    backend = gemma()._backend(parse_special)
    texts = ((t.decode(), r) for t, r in backend._enc._mergeable_ranks.items() if _utf8(t))
    tokens = [(t, r) for t, r in texts if len(t) > 1]  # the multi-character ones: the tokens kept
    joint = backend._joint
    got = backend._enc.encode_ordinary(joint + joint.join(t for t, _ in tokens) + joint)
    assert got[1::2] == [r for _, r in tokens] and len(tokens) > 200_000


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# -- (c) the partition's shortcuts against the replay of llama.cpp's order ---------------------------
def _same_spans(part: Partition, text: str, ps: bool):
    got, want = part.locate(text, ps), part._replay(text, ps)
    assert all(np.array_equal(a, b) for a, b in zip(got, want)), repr(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_CODE, ps=st.booleans())
def test_gemma_plan_equals_replay(text, ps):
    part = gemma()._partition
    assert part._plans[ps] is not None  # Gemma 3's specials take the shortcuts in both modes
    _same_spans(part, text, ps)


def _specials(*items) -> list[Special]:
    """Specials from (text, always[, lstrip, rstrip]), ids in order, sorted as special_tokens sorts them."""
    out = [Special(t, k, *rest) for k, (t, *rest) in enumerate(items)]
    return sorted(out, key=lambda s: (-len(s.text.encode()), s.id))


MADE_UP = _specials(*[("\n" * n, True) for n in range(1, 6)], *[(" " * n, True) for n in range(2, 5)],
                    ("<a>", True), ("</a>", True), ("[x]", False), ("<c>", False), ("\u00e9\u00e9", True))


@settings(max_examples=500, deadline=None)
@given(text=st.lists(st.sampled_from(["\n", " ", "\t", "<", ">", "/", "a", "c", "[", "x", "]", "\u00e9"]),
                     max_size=60).map("".join), ps=st.booleans())
def test_made_up_plan_equals_replay(text, ps):
    part = Partition(MADE_UP)
    assert part._plans[ps] is not None
    _same_spans(part, text, ps)


@pytest.mark.parametrize("items, why", [
    ([("\n", True), ("\n\n\n", True)], "a run family missing a length"),
    ([("ab", True), ("bc", True)], "a suffix of one special is a prefix of another"),
    ([("ab", True), ("xaby", True)], "a special inside another"),
    ([("<a>", True), ("\n", True), ("x\n", True)], "another special holds a run character"),
    ([("<a>", True, True, False), ("\n", True)], "a special strips whitespace"),
])
def test_plan_steps_aside(items, why):
    """Where the shortcuts would not be llama.cpp's order, the replay runs."""
    specials = _specials(*items)
    assert _Plan.make(specials) is None, why
    assert Partition(specials)._plans == {False: None, True: None}


def test_overlap_free():
    texts = lambda *ts: _specials(*[(t, True) for t in ts])  # noqa: E731
    assert _overlap_free(texts("<a>", "</a>", "<ab>", "[x]"))
    assert not _overlap_free(texts("aa"))             # overlaps itself: "aaa"
    assert not _overlap_free(texts("ab", "ba"))
    assert not _overlap_free(texts("<a", "<ab>"))      # a prefix of another
    assert not _overlap_free(texts("b>", "<ab>"))      # a suffix of another


# -- (d) the space prefix, through tiktoken and through llama.cpp's loop ------------------------------
@functools.lru_cache(maxsize=None)
def _prefixed_engines():
    from lookupkit.tokenizer.spm import SpmBackend
    from lookupkit.tokenizer.spm_ties import SpmTiesBackend

    tok = gemma()
    v, split = tok._v, {s.id for s in tok._partition.specials}
    return (SpmBackend(v.pre, v.tokens, v.scores, split, True),
            SpmTiesBackend(v.pre, v.tokens, v.scores, split, True))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_CODE, at_start=st.booleans())
@example(text="\x00  ", at_start=False)  # a NUL of the text itself was taken for a special's placeholder
def test_space_prefix_engines_agree(text, at_start):
    if not _text(text):
        return
    fast, ties = _prefixed_engines()
    part = gemma()._partition
    got = fast.encode_spans(text, part.locate(text, True), at_start)
    assert got.tolist() == ties.encode_parts(part.split(text, True), at_start).tolist(), json.dumps(text)


# -- bench/tokenize_corpora/run.py's corpora --------------------------------------------------------------
def test_bench_corpora_are_cut_at_line_ends(tmp_path):
    import gzip

    from lookupkit.bench.tokenize_corpora import run as tc

    (tmp_path / "a.md").write_text("one\ntwo\n")
    (tmp_path / "b.md.gz").write_bytes(gzip.compress(b"three\nfour\nfive\n"))
    (tmp_path / "c.md.gz").write_bytes(b"not gzip")  # unreadable files are skipped
    files = sorted(tmp_path.iterdir())
    assert tc.concatenated(files, 100) == (b"one\ntwo\nthree\nfour\nfive\n", 2)
    assert tc.concatenated(files, 14) == (b"one\ntwo\nthree\n", 2)
    given = tc.corpus("mine", {"mine": str(tmp_path / "a.md")}, 1, 1)
    assert given["text"] == "one\ntwo" and given["made"].startswith("--corpus mine=")
    python = tc.corpus("python", {}, 0.05, 1)
    assert python["files"] >= 1 and 40_000 < len(python["text"].encode()) <= 50_000
    row = {"missing": "no html files on this machine (--corpus html=PATH)"}
    assert "missing: no html files" in tc.table({"corpora": {"html": row}})
