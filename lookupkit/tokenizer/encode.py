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
from ..errors import FormatError
from .vocab import BYTE, CONTROL, FIM_TEXTS, UNKNOWN, USER_DEFINED, Vocab, fingerprint, load as load_vocab

# llama.cpp marks these texts control even when the GGUF says normal (end-of-generation list;
# it covers the EOT and EOM candidates too). qwen2's normal "</s>" is the case that matters here.
_EOG_TEXTS = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
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


class Tokenizer:
    """A vocabulary plus the engine that reproduces llama.cpp's tokenization of it."""

    def __init__(self, vocab: Vocab):
        v = self._v = vocab
        self.name = v.pre if v.model == "gpt2" else "llama-spm"
        self.n_vocab = len(v.tokens)
        self.bos_id, self.add_bos = v.bos_id, v.add_bos
        self.eos_id, self.add_eos = v.eos_id, v.add_eos
        self.fingerprint = fingerprint(v)
        specials = _special_tokens(v)
        self._specials = sorted(specials, key=lambda s: (-len(s[0].encode("utf-8", "surrogateescape")), s[1]))
        self._special_ids = {tid for _, tid, _ in specials}
        self._finder = {ps: _finder([s for s in self._specials if ps or s[2]]) for ps in (False, True)}
        self._cuttable = not any("\n" in s for s, _, _ in specials)
        self._backend = _make_backend(v)
        self.bundled = False  # True for Tokenizer.default(): errors then say that no -m was given

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path) -> "Tokenizer":
        """Load a GGUF vocabulary (tokenizer.ggml.*) or a HF tokenizer.json (byte-level BPE)."""
        return cls(load_vocab(path))

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


def _special_tokens(v: Vocab) -> list:
    """(text, id, split_even_without_parse_special) of every token llama.cpp splits out first."""
    forced = set(_EOG_TEXTS)
    for (kind, _), texts in FIM_TEXTS.items():
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


def _make_backend(v: Vocab):
    if v.model == "llama":
        if any("\n" in t for t in v.tokens):
            raise FormatError("SentencePiece vocabularies with tokens containing '\\n' are not supported")
        unk = next((t for t, ty in zip(v.tokens, v.types) if ty == UNKNOWN), None)
        return bb.HFBackend.sentencepiece(v.tokens, v.scores, unk, v.add_space_prefix)
    if len(v.regexes) == 1:
        return bb.TiktokenBackend(v.pre, v.tokens, v.regexes[0])
    return bb.HFBackend.byte_level(v.tokens, v.merges, v.regexes, v.ignore_merges, SAFE_CUT)
