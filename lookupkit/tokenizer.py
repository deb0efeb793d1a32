"""Tokenize text into exactly the ids llama.cpp's `common_tokenize` produces for a vocabulary.

A static cache is only useful if its ids are the serving model's ids, so this follows
llama-vocab.cpp rather than the HF tokenizers: special tokens are split out first (longest first,
user-defined ones even without parse_special), a few texts are forced to control tokens, BOS
follows `add_bos_token` with llama.cpp's per-vocabulary defaults, SentencePiece vocabularies get
a leading space at the start and after each special token. The BPE work itself is delegated to
tiktoken or HF `tokenizers` (see `bpe_backends`).
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import regex

from lookupkit import bpe_backends as bb
from lookupkit.errors import FormatError, InputError
from lookupkit.gguf import GGUF_MAGIC, read_metadata

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# llama.cpp marks these texts control even when the GGUF says normal (end-of-generation list;
# it covers the EOT and EOM candidates too). qwen2's normal "</s>" is the case that matters here.
_EOG_TEXTS = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
}
# FIM markers, forced to control only when the GGUF does not name that FIM token (llama.cpp picks
# one candidate per kind in hash order; marking all of them differs only for vocabularies with two).
_FIM_TEXTS = {
    ("fim_pre", "prefix"): {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>",
                            "<PRE>", "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>"},
    ("fim_suf", "suffix"): {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>",
                            "<SUF>", "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>"},
    ("fim_mid", "middle"): {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>",
                            "<MID>", "\u2581<MID>", "<|code_middle|>", "<|middle|>"},
    ("fim_pad", None): {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
    ("fim_rep", None): {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
    ("fim_sep", None): {"<|file_sep|>"},
}
_FORCED_USER_DEFINED = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}  # gpt-oss hack

# Where a long text may be cut without changing any id: just after a "\n" that follows a non-space
# and precedes a letter (docs/tokenizers.md), or just after a "\n" followed by " " + letter
# (WikiText-style lines begin and end with a space, so the first rule never fires there). With
# the GPT-2, Llama 3 and Qwen2 regexes such a "\n" ends a piece and a new piece starts after it
# whether or not more text follows; deepseek-coder isolates every "\n", and SentencePiece never
# merges across one (no token contains it). Cuts inside special tokens are excluded by `cuttable`.
SAFE_CUT = regex.compile(r"(?<=\S)\n(?=[A-Za-z])|\n(?= [A-Za-z])")
_PIECE = 1 << 20


@dataclass
class _Vocab:
    model: str                  # "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    pre: str
    tokens: list
    types: list
    merges: list | None
    scores: object | None
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    regexes: list | None = None
    ignore_merges: bool = False
    fim_named: set = field(default_factory=set)  # FIM kinds whose id the file names


class Tokenizer:
    """A vocabulary plus the engine that reproduces llama.cpp's tokenization of it."""

    def __init__(self, vocab: _Vocab):
        v = self._v = vocab
        self.name = v.pre if v.model == "gpt2" else "llama-spm"
        self.n_vocab = len(v.tokens)
        self.bos_id, self.add_bos = v.bos_id, v.add_bos
        self.eos_id, self.add_eos = v.eos_id, v.add_eos
        self.fingerprint = _fingerprint(v)
        specials = _special_tokens(v)
        self._specials = sorted(specials, key=lambda s: (-len(s[0].encode("utf-8", "surrogateescape")), s[1]))
        self._special_ids = {tid for _, tid, _ in specials}
        self._finder = {ps: _finder([s for s in self._specials if ps or s[2]]) for ps in (False, True)}
        self._cuttable = not any("\n" in s for s, _, _ in specials)
        self._backend = _make_backend(v)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path) -> "Tokenizer":
        """Load a GGUF vocabulary (tokenizer.ggml.*) or a HF tokenizer.json (byte-level BPE)."""
        p = Path(path)
        if not p.exists():
            raise InputError(f"{p}: no such file")
        if p.is_dir():
            raise InputError(f"{p}: is a directory, not a vocabulary file")
        try:
            with open(p, "rb") as f:
                head = f.read(64)
        except OSError as e:
            raise InputError(f"{p}: cannot read ({e.strerror})") from None
        if head[:4] == GGUF_MAGIC:
            return cls(_vocab_from_gguf(p))
        if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":
            return cls(_vocab_from_hf_json(p))
        raise FormatError(f"{p}: neither a GGUF file nor a HF tokenizer.json")

    @classmethod
    def default(cls) -> "Tokenizer":
        """The bundled GPT-2 vocabulary (MIT), so lookupkit works without a model file."""
        with resources.as_file(resources.files("lookupkit") / "data" / "ggml-vocab-gpt-2.gguf") as p:
            return cls.from_file(p)

    # -- encoding -----------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> np.ndarray:
        """Ids of `text` as llama.cpp's tokenize(text, add_special, parse_special) returns them.

        Long texts go through encode_chunks in 1M-character pieces, so the backends never build
        one Python list for all ids.
        """
        pieces = (text[i:i + _PIECE] for i in range(0, len(text), _PIECE))
        return np.concatenate(list(self.encode_chunks(pieces, add_special, parse_special)))

    def encode_chunks(self, chunks: Iterable[str], add_special: bool = True,
                      parse_special: bool = True) -> Iterator[np.ndarray]:
        """Stream the ids of "".join(chunks), one array per safe segment.

        Text is carried forward to the last SAFE_CUT in the buffer, so the result is identical to
        encode() of the whole text; if a vocabulary has a special token containing "\\n" (which a
        cut could split) or the text has no cut point, the text is carried until the end.
        """
        pending: list[str] = []     # text after the last cut, kept as pieces (no quadratic joins)
        tail, first = "", True      # tail: last 3 characters of the pending text
        for chunk in chunks:
            if not chunk:
                continue
            probe = tail + chunk
            cut = self._last_cut(probe) if self._cuttable else 0
            if cut:
                buf = "".join(pending) + chunk
                cut += len(buf) - len(probe)
                yield self._segment(buf[:cut], first and add_special, False, parse_special, first)
                first, pending, tail = False, [buf[cut:]], buf[cut:][-3:]
            else:
                pending.append(chunk)
                tail = probe[-3:]
        yield self._segment("".join(pending), first and add_special, add_special, parse_special, first)

    @property
    def cuttable(self) -> bool:
        """False when a special token contains "\\n" (a cut could split it): encode texts whole."""
        return self._cuttable

    def encode_segment(self, text: str, first: bool, last: bool, add_special: bool = True,
                       parse_special: bool = True) -> np.ndarray:
        """Ids of one piece of a longer text cut at SAFE_CUT points (BOS only on the first piece,
        EOS only on the last); the pieces' ids concatenated equal encode() of the whole text."""
        return self._segment(text, first and add_special, last and add_special, parse_special, first)

    def decode(self, ids) -> str:
        """Best-effort text of `ids` (for demos): special tokens are rendered as their text."""
        out, spm = bytearray(), self._v.model == "llama"
        for i in np.asarray(ids, dtype=np.int64).ravel():
            t = self._v.tokens[int(i)]
            if int(i) in self._special_ids:
                out += t.encode("utf-8", "surrogateescape")
            elif spm:
                is_byte = self._v.types[int(i)] == BYTE and len(t) == 6 and t.startswith("<0x")
                out += bytes([int(t[3:5], 16)]) if is_byte else t.replace("\u2581", " ").encode()
            else:
                out += bb.token_bytes(t) or t.encode("utf-8", "surrogateescape")
        text = out.decode("utf-8", "replace")
        return text[1:] if spm and self._v.add_space_prefix and text.startswith(" ") else text

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, n_vocab={self.n_vocab}, fingerprint={self.fingerprint[:16]})"

    # -- internals ----------------------------------------------------------------------------
    @staticmethod
    def _last_cut(text: str) -> int:
        """Index just after the last SAFE_CUT "\n" in text (its 2 following characters known), or 0."""
        pos = len(text) - 2
        while (pos := text.rfind("\n", 0, pos)) >= 0:
            if SAFE_CUT.match(text, pos):
                return pos + 1
        return 0

    def _segment(self, text: str, bos: bool, eos: bool, parse_special: bool,
                 at_start: bool = True) -> np.ndarray:
        parts = [np.array([self.bos_id], np.int32)] if bos and self.add_bos else []
        prev_special = at_start
        for frag in self._partition(text, parse_special):
            if isinstance(frag, int):
                parts.append(np.array([frag], np.int32))
                prev_special = True
            else:
                parts.append(self._backend.encode(frag, prev_special))
                prev_special = False
        if eos and self.add_eos:
            parts.append(np.array([self.eos_id], np.int32))
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)

    def _partition(self, text: str, parse_special: bool) -> list:
        """llama.cpp's tokenizer_st_partition: for each special token, longest first, split every
        remaining text fragment at its occurrences (left to right, non-overlapping)."""
        finder = self._finder[parse_special]
        if not text or finder is None:
            return [text] if text else []
        # the longest special starting at each position; every special that occurs is a prefix
        # of one of these, so only those need the exact (slow) pass
        found = {m.group() for m in finder.finditer(text, overlapped=True)}
        if not found:
            return [text]
        present = {s[:k] for s in found for k in range(1, len(s) + 1)}
        frags: list = [text]
        for s, tid, always in self._specials:
            if s not in present or not (always or parse_special):
                continue
            new: list = []
            for f in frags:
                if isinstance(f, int) or s not in f:
                    new.append(f)
                    continue
                for k, piece in enumerate(f.split(s)):
                    if k:
                        new.append(tid)
                    if piece:
                        new.append(piece)
            frags = new
        return frags


def _finder(specials: list) -> regex.Pattern | None:
    if not specials:
        return None
    return regex.compile("|".join(regex.escape(s) for s, _, _ in specials))


def _special_tokens(v: _Vocab) -> list:
    """(text, id, split_even_without_parse_special) of every token llama.cpp splits out first."""
    forced = set(_EOG_TEXTS)
    for (kind, _), texts in _FIM_TEXTS.items():
        if kind not in v.fim_named:
            forced |= texts
    out = []
    for i, (t, ty) in enumerate(zip(v.tokens, v.types)):
        control = ty in (CONTROL, UNKNOWN) or t in forced
        user = ty == USER_DEFINED
        if t in _FORCED_USER_DEFINED:
            control, user = False, True
        if control or user:
            out.append((t, i, not control))
    return out


def _make_backend(v: _Vocab):
    if v.model == "llama":
        if any("\n" in t for t in v.tokens):
            raise FormatError("SentencePiece vocabularies with tokens containing '\\n' are not supported")
        unk = next((t for t, ty in zip(v.tokens, v.types) if ty == UNKNOWN), None)
        return bb.HFBackend.sentencepiece(v.tokens, v.scores, unk, v.add_space_prefix)
    if len(v.regexes) == 1:
        return bb.TiktokenBackend(v.pre, v.tokens, v.regexes[0])
    return bb.HFBackend.byte_level(v.tokens, v.merges, v.regexes, v.ignore_merges, SAFE_CUT)


def _fingerprint(v: _Vocab) -> str:
    """sha256 of everything that decides the ids, independent of file path and container."""
    h = hashlib.sha256(b"lookupkit-vocab-1\0")
    head = [v.model, v.pre, len(v.tokens), v.bos_id, v.eos_id, v.add_bos, v.add_eos,
            v.add_space_prefix, v.ignore_merges, v.regexes]
    h.update(json.dumps(head).encode())
    for strings in (v.tokens, v.merges or []):
        enc = [s.encode("utf-8", "surrogateescape") for s in strings]
        h.update(np.array([len(e) for e in enc], "<u4").tobytes())
        h.update(b"".join(enc))
    h.update(np.asarray(v.types, "<i4").tobytes())
    if v.scores is not None:
        h.update(np.asarray(v.scores, "<f4").tobytes())
    return h.hexdigest()


# -- loaders ------------------------------------------------------------------------------------
def _vocab_from_gguf(path: Path) -> _Vocab:
    md = read_metadata(path, "tokenizer.ggml.")

    def get(key, kind, default=None):
        val = md.get("tokenizer.ggml." + key, default)
        if val is not None and not isinstance(val, kind):
            raise FormatError(f"{path}: tokenizer.ggml.{key} has the wrong type")
        return val

    model = get("model", str)
    tokens = get("tokens", list)
    if model is None or tokens is None:
        raise FormatError(f"{path}: GGUF file has no tokenizer (tokenizer.ggml.model/tokens missing)")
    n = len(tokens)
    tokens = _unique_tokens([t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)], path)
    types = get("token_type", array, array("i", [NORMAL] * n))
    if types.typecode not in "bBhHiIlLqQ" or len(types) < n:
        raise FormatError(f"{path}: tokenizer.ggml.token_type does not give an integer type per token")
    v = _Vocab(model=model, pre=get("pre", str, "default"), tokens=tokens, types=list(types[:n]),
               merges=None, scores=None, bos_id=None, eos_id=None, add_bos=False, add_eos=False,
               add_space_prefix=False)
    if model == "gpt2":
        pre = bb.PRE_ALIASES.get(v.pre, v.pre)
        if pre not in bb.PRE_TOKENIZERS:
            raise FormatError(f"{path}: unsupported pre-tokenizer {v.pre!r}")
        v.regexes, v.ignore_merges, v.add_bos = bb.PRE_TOKENIZERS[pre]
        v.regexes = list(v.regexes)
        v.merges = get("merges", list)
        if v.merges is None or not all(isinstance(m, str) for m in v.merges):
            raise FormatError(f"{path}: BPE vocabulary without string tokenizer.ggml.merges")
        default_bos = default_eos = 11  # llama.cpp's defaults for BPE
    elif model == "llama":
        v.scores = get("scores", array)
        if v.scores is None or v.scores.typecode not in "fi" or len(v.scores) < n:
            raise FormatError(f"{path}: SentencePiece vocabulary without enough tokenizer.ggml.scores")
        v.scores = list(v.scores[:n])
        v.add_bos, v.add_space_prefix = True, True
        default_bos, default_eos = 1, 2
    else:
        raise FormatError(f"{path}: unsupported tokenizer model {model!r} (need gpt2 or llama)")

    def token_id(key, default):
        val = md.get(f"tokenizer.ggml.{key}_token_id")
        ok = isinstance(val, int) and not isinstance(val, bool) and 0 <= val < n
        return val if ok else (default if default is not None and default < n else None)

    v.bos_id, v.eos_id = token_id("bos", default_bos), token_id("eos", default_eos)
    v.add_bos = bool(md.get("tokenizer.ggml.add_bos_token", v.add_bos))
    v.add_eos = bool(md.get("tokenizer.ggml.add_eos_token", v.add_eos))
    v.add_space_prefix = bool(md.get("tokenizer.ggml.add_space_prefix", v.add_space_prefix))
    v.fim_named = {k for k, old in _FIM_TEXTS if token_id(k, None) is not None
                   or (old and token_id(old, None) is not None)}
    _check_special_ids(v, path)
    return v


def _unique_tokens(tokens: list, path) -> list:
    if not all(isinstance(t, str) for t in tokens):
        raise FormatError(f"{path}: the token list does not hold strings")
    if len(set(tokens)) != len(tokens):
        raise FormatError(f"{path}: duplicate tokens in the vocabulary (llama.cpp refuses them too)")
    return tokens


def _check_special_ids(v: _Vocab, path) -> None:
    if v.add_bos and v.bos_id is None:
        raise FormatError(f"{path}: add_bos_token is true but the vocabulary has no BOS token")
    if v.add_eos and v.eos_id is None:
        raise FormatError(f"{path}: add_eos_token is true but the vocabulary has no EOS token")


def _vocab_from_hf_json(path: Path) -> _Vocab:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        return _parse_hf_json(data, path)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        raise FormatError(f"{path}: not a valid HF tokenizer.json") from None


def _parse_hf_json(data: dict, path: Path) -> _Vocab:
    model = data["model"]
    if model.get("type") != "BPE":
        raise FormatError(f"{path}: unsupported tokenizer.json model {model.get('type')!r} (need BPE)")
    added = {int(a["id"]): a for a in data.get("added_tokens") or []}
    ids = {**{int(i): t for t, i in model["vocab"].items()}, **{i: a["content"] for i, a in added.items()}}
    n = max(ids) + 1 if ids else 0
    if n > 2 * len(ids) + 1024 or min(ids, default=0) < 0:
        raise FormatError(f"{path}: token ids of the tokenizer.json are not dense")
    tokens = _unique_tokens([ids.get(i) or f"[EMPTY_{i}]" for i in range(n)], path)
    types = [(CONTROL if added[i].get("special") else USER_DEFINED) if i in added else NORMAL
             for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    regexes = _hf_regexes(data.get("pre_tokenizer"), path)
    pre = next((k for k, (r, _, _) in bb.PRE_TOKENIZERS.items() if r == regexes), "custom")
    bos = _hf_bos(data.get("post_processor"), {t: i for i, t in enumerate(tokens)})
    return _Vocab(model="gpt2", pre=pre, tokens=tokens, types=types, merges=merges, scores=None,
                  bos_id=bos, eos_id=None, add_bos=bos is not None, add_eos=False,
                  add_space_prefix=False, regexes=regexes, ignore_merges=bool(model.get("ignore_merges")))


def _hf_regexes(pt, path) -> list:
    """The llama.cpp-style regex list of a byte-level HF pre-tokenizer (Split/ByteLevel/Digits)."""
    steps = (pt or {}).get("pretokenizers", [pt]) if (pt or {}).get("type") == "Sequence" else [pt]
    out, byte_level = [], False
    for st in steps:
        kind = (st or {}).get("type")
        if kind == "Split" and st.get("behavior") == "Isolated" and not st.get("invert"):
            pat = st["pattern"]
            r = pat.get("Regex") if "Regex" in pat else regex.escape(pat.get("String", ""))
            out.append(r.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)",
                                 "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"))
        elif kind == "ByteLevel" and not st.get("add_prefix_space"):
            byte_level = True
            if st.get("use_regex", True):
                out.append(bb.PRE_TOKENIZERS["gpt-2"][0][0])
        elif kind == "Digits":
            out.append(r"\p{N}" if st.get("individual_digits") else r"\p{N}+")
        else:
            raise FormatError(f"{path}: unsupported tokenizer.json pre-tokenizer {kind!r}")
    if not byte_level or not out:
        raise FormatError(f"{path}: only byte-level BPE tokenizer.json files are supported")
    return out


def _hf_bos(pp, ids: dict) -> int | None:
    """BOS id if the post-processor template starts with a special token (as Llama 3's does)."""
    procs = (pp or {}).get("processors", [pp]) if (pp or {}).get("type") == "Sequence" else [pp]
    for p in procs:
        if (p or {}).get("type") == "TemplateProcessing" and p.get("single"):
            first = p["single"][0]
            if "SpecialToken" in first:
                return ids.get(first["SpecialToken"]["id"])
    return None
