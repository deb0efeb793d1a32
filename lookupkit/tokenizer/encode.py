"""Tokenize text into exactly the ids llama.cpp's `common_tokenize` produces for a vocabulary.

A static cache is only useful if its ids are the serving model's ids, so this follows
llama-vocab.cpp rather than the HF tokenizers: special tokens are split out first (longest first,
user-defined ones even without parse_special), a few texts are forced to control tokens, BOS
follows `add_bos_token` with llama.cpp's per-vocabulary defaults, SentencePiece vocabularies get
a leading space at the start and after each special token. The BPE work itself is delegated to
tiktoken or HF `tokenizers` (see `bpe_backends`); reading the vocabulary file is `vocab`'s.
"""

from __future__ import annotations

from importlib import resources
from typing import Iterable, Iterator

import numpy as np
import regex

from . import backends as bb
from .specials import Partition, code_points, special_tokens
from ..errors import InputError
from .spm import SpmBackend, TiedScores
from .spm_ties import SpmTiesBackend
from .vocab import BYTE, UnsupportedVocab, Vocab, fingerprint, load as load_vocab

# Where a long text may be cut without changing any id: just after a "\n" that follows a non-space
# and precedes a letter (docs/tokenizers.md), or just after a "\n" followed by " " + letter
# (WikiText-style lines begin and end with a space, so the first rule never fires there). With
# the GPT-2, Llama 3 and Qwen2 regexes such a "\n" ends a piece and a new piece starts after it
# whether or not more text follows; deepseek-coder isolates every "\n"; SentencePiece merges
# across it only into a token holding "\n" + a character. `cut_safety` says when a vocabulary's
# special tokens and strip attributes keep these cuts safe (else `cuttable` is False).
SAFE_CUT = regex.compile(r"(?<=\S)\n(?=[A-Za-z])|\n(?= [A-Za-z])")
_PIECE = 1 << 20
FALLBACK = "llama-cpp"  # Tokenizer.from_file(..., fallback=FALLBACK): llama.cpp encodes what lookupkit cannot


class Tokenizer:
    """A vocabulary plus the engine that reproduces llama.cpp's tokenization of it."""

    def __init__(self, vocab: Vocab):
        v = self._v = vocab
        if v.unsupported:
            raise UnsupportedVocab(v.unsupported)
        self.name = v.pre if v.model == "gpt2" else "llama-spm"
        self.n_vocab = len(v.tokens)
        self.bos_id, self.add_bos = v.bos_id, v.add_bos
        self.eos_id, self.add_eos = v.eos_id, v.add_eos
        self.fingerprint = fingerprint(v)
        specials = special_tokens(v)
        self._partition = Partition(specials)
        self._special_ids = {s.id for s in specials}
        self._cut_refusal = cut_safety(v, specials)
        self._backends: dict = {}  # parse_special -> backend (SentencePiece: one per mode)
        self._backend(True)
        self.bundled = False  # True for Tokenizer.default(): errors then say that no -m was given

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path, fallback: str | None = None) -> "Tokenizer":
        """Load a GGUF vocabulary (tokenizer.ggml.*) or a HF tokenizer.json (byte-level BPE).

        A vocabulary lookupkit does not encode itself is refused in one line, or with
        fallback="llama-cpp" encoded by llama.cpp through llama-cpp-python (`LlamaCppTokenizer`:
        exact by construction, whole texts only, slower); any GGUF with a vocabulary works then.
        """
        if fallback not in (None, FALLBACK):
            raise InputError(f"unknown tokenizer fallback {fallback!r} (the one there is: {FALLBACK!r})")
        try:
            return cls(load_vocab(path))
        except UnsupportedVocab as exc:
            if fallback is None:
                raise UnsupportedVocab(f"{exc}; with llama-cpp-python installed lookup-create encodes it through "
                                       "llama.cpp (Tokenizer.from_file(path, fallback='llama-cpp'))") from None
            from .llama_engine import LlamaCppTokenizer

            return LlamaCppTokenizer(path, load_vocab(path, strict=False), str(exc))

    @classmethod
    def default(cls) -> "Tokenizer":
        """The bundled GPT-2 vocabulary (MIT), so lookupkit works without a model file."""
        with resources.as_file(resources.files("lookupkit") / "data" / "ggml-vocab-gpt-2.gguf") as p:
            tok = cls.from_file(p)
        tok.bundled = True
        return tok

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
            cut = self._last_cut(probe) if self.cuttable else 0
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
        """False when a SAFE_CUT could change an id for this vocabulary (`cut_safety`): encode whole."""
        return self._cut_refusal is None

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
        backend = self._backend(parse_special)
        if hasattr(backend, "encode_spans"):  # SentencePiece by tiktoken: the specials' spans as arrays
            cps = code_points(text)
            parts.append(backend.encode_spans(text, self._partition.locate(text, parse_special, cps), at_start, cps))
        elif hasattr(backend, "encode_parts"):  # the whole segment, special ids in place
            parts.append(backend.encode_parts(self._partition.split(text, parse_special), at_start))
        else:
            prev_special = at_start
            for frag in self._partition.split(text, parse_special):
                if isinstance(frag, int):
                    parts.append(np.array([frag], np.int32))
                    prev_special = True
                else:
                    parts.append(backend.encode(frag, prev_special))
                    prev_special = False
        if eos and self.add_eos:
            parts.append(np.array([self.eos_id], np.int32))
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)

    def _backend(self, parse_special: bool):
        """The engine for fragments of this parse_special mode (BPE: one for both)."""
        key = parse_special if self._v.model == "llama" else True
        if key not in self._backends:
            split = {s.id for s in self._partition.specials if s.always or parse_special}
            self._backends[key] = _make_backend(self._v, split)
        return self._backends[key]


def cut_safety(v: Vocab, specials: list) -> str | None:
    """Why a SAFE_CUT could change an id for this vocabulary, or None when every one is safe.

    A cut sits just after a "\\n" followed by a letter or " " + letter. It is safe when (1) no
    special token spans it (none holds "\\n" + another character: runs of "\\n" are fine, as in
    Gemma), (2) no rstrip token could eat the " " after it, and for SentencePiece (3) no mergeable
    token holds "\\n" + a character and (4) no special "\\n" makes the next fragment take a space
    prefix. A vocabulary whose "\\n\\n" is a token is still cut only at a single "\\n" + letter.
    """
    if any(regex.search(r"\n[^\n]", s.text) for s in specials):
        return "a special token holds a newline followed by another character"
    if any(s.rstrip for s in specials):
        return "a special token strips the whitespace after it"
    if v.model == "llama":
        always = {s.id for s in specials if s.always}
        if any("\n" in t and regex.search(r"\n[^\n]", t) for i, t in enumerate(v.tokens) if i not in always):
            return "a mergeable token holds a newline followed by another character"
        if v.add_space_prefix and any("\n" in s.text for s in specials):
            return "a special newline token is followed by a space prefix"
    return None


def _make_backend(v: Vocab, split: set):
    if v.model == "llama":
        try:
            return SpmBackend(v.pre, v.tokens, v.scores, split, v.add_space_prefix)
        except TiedScores:  # equal scores that compete: llama.cpp's own loop, with its tie rule
            return SpmTiesBackend(v.pre, v.tokens, v.scores, split, v.add_space_prefix)
    if len(v.regexes) == 1:
        try:
            return bb.TiktokenBackend(v.pre, v.tokens, v.regexes[0])
        except bb.MissingBytes:
            pass  # HF's BPE, like llama.cpp, copes with byte strings that are not tokens
    return bb.HFBackend.byte_level(v.tokens, v.merges, v.regexes, v.ignore_merges, SAFE_CUT)
