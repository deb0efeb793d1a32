"""Engines that turn one special-token-free text fragment into llama.cpp's ids.

llama.cpp pre-tokenizes with a list of regexes (each splits the pieces of the previous one; text
between matches is kept as its own piece), maps bytes to GPT-2's printable alphabet and runs BPE.
Two engines reproduce that:

* tiktoken (ranks = ids, one regex): ~3x faster. Valid for single-regex byte-level vocabularies;
  tiktoken always emits a piece that is itself a token without merging, which is llama.cpp's
  `ignore_merges` (llama-bpe) and was measured identical for qwen2 and gpt-2.
* HF `tokenizers`, rebuilt from the GGUF metadata: multi-regex pre-tokenizers (deepseek-coder)
  and SentencePiece vocabularies (as BPE with merges derived from scores plus byte fallback).
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import FormatError

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")

# tokenizer.ggml.pre -> (regexes in llama.cpp's order, ignore_merges, default add_bos)
PRE_TOKENIZERS = {
    "gpt-2": ([_GPT2], False, False),
    "llama-bpe": ([_LLAMA3], True, True),
    "qwen2": ([_QWEN2], False, False),
    "deepseek-coder": (["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
                        r"\p{N}"], False, False),
    "starcoder": ([r"\p{N}", _GPT2], False, False),
    "falcon": ([r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"], False, False),
}
# names llama.cpp maps to the same pre-tokenizer (llama-vocab.cpp)
PRE_ALIASES = {
    "phi-2": "gpt-2", "mpt": "gpt-2", "olmo": "gpt-2", "jais": "gpt-2", "exaone4": "gpt-2",
    "llama3": "llama-bpe", "llama-v3": "llama-bpe", "falcon3": "llama-bpe", "pixtral": "llama-bpe",
    "deepseek-r1-qwen": "qwen2", "megrez": "qwen2", "stablelm2": "qwen2",
    "refact": "starcoder", "smollm": "starcoder", "codeshell": "starcoder", "exaone": "starcoder",
}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (printable Latin-1 maps to itself)."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = iter(range(256, 512))
    return {b: chr(b if b in keep else next(extra)) for b in range(256)}


BYTE_TO_CHAR = _bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


# byte-level character -> the Latin-1 character of its byte; characters outside the alphabet
# (including raw Latin-1 ones such as " ") become U+FFFF so that encoding to Latin-1 fails
_TO_LATIN1 = {**{b: 0xFFFF for b in range(256)}, **{ord(c): b for c, b in CHAR_TO_BYTE.items()}}


def token_bytes(text: str) -> bytes | None:
    """Raw bytes of a byte-level BPE token, or None if it uses characters outside the alphabet."""
    try:
        return text.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        return None


def anchor_end(pattern: str) -> str:
    """Make an unescaped `$` outside a class mean end of piece (`\\z`), as in llama.cpp's std::regex.

    Oniguruma (HF `tokenizers`) reads `$` as end of line; a piece containing `\\n` would differ.
    """
    return re.sub(r"(\\.|\[(?:\\.|[^\]\\])*\])|\$", lambda m: m.group(1) or r"\z", pattern)


class TiktokenBackend:
    """One regex + byte-level BPE with ranks = token ids (the vocab's ids follow merge order)."""

    def __init__(self, name: str, tokens: list[str], pattern: str):
        import tiktoken

        ranks: dict[bytes, int] = {}
        for i, t in enumerate(tokens):
            b = token_bytes(t)
            if b is not None:
                ranks.setdefault(b, i)
        if any(bytes([b]) not in ranks for b in range(256)):
            raise FormatError(f"{name}: byte-level vocabulary lacks single-byte tokens")
        # llama.cpp keeps unmatched text as its own piece; tiktoken drops it, so a final `|\s+`
        # catches the only text the GPT-2 regex leaves unmatched (whitespace before a non-space).
        if not pattern.endswith(r"|\s+"):
            pattern += r"|\s+"
        self._enc = tiktoken.Encoding(f"lookupkit-{name}", pat_str=pattern, mergeable_ranks=ranks,
                                      special_tokens={}, explicit_n_vocab=None)

    def encode(self, text: str, at_start: bool = False) -> np.ndarray:
        return np.asarray(self._enc.encode_ordinary(text), dtype=np.int32)


class HFBackend:
    """HF `tokenizers` BPE rebuilt from GGUF data; input is cut into small pieces at safe points."""

    def __init__(self, tok, cut: re.Pattern | None, spm_prefix: bool | None = None):
        self._tok, self._cut, self._spm_prefix = tok, cut, spm_prefix

    @classmethod
    def byte_level(cls, tokens: list[str], merges: list[str], regexes: list[str],
                   ignore_merges: bool, cut: re.Pattern | None) -> "HFBackend":
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers

        vocab = _hf_vocab(tokens)
        # as llama.cpp: split at the first space after the first character; HF rejects merges
        # whose parts or result are not tokens (they could never apply in llama.cpp either)
        pairs = [(m[:k], m[k + 1:]) for m in merges if (k := m.find(" ", 1)) > 0]
        pairs = [(a, b) for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(anchor_end(r)), behavior="isolated") for r in regexes]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        return cls(tok, cut)

    @classmethod
    def sentencepiece(cls, tokens: list[str], scores, unk: str | None,
                      add_space_prefix: bool) -> "HFBackend":
        """llama.cpp's SPM merges the adjacent pair whose concatenation is the highest-scoring token:
        BPE with one merge per (left, right) split of every token, ranked by that token's score."""
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers

        vocab = _hf_vocab(tokens)
        found = []
        for i, t in enumerate(tokens):
            for k in range(1, len(t)):
                if t[:k] in vocab and t[k:] in vocab:
                    found.append((-scores[i], i, k))
        found.sort()
        pairs = [(tokens[i][:k], tokens[i][k:]) for _, i, k in found]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, unk_token=unk, byte_fallback=True))
        # no token contains "\n" (checked by the caller), so lines are tokenized independently
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("\n"), behavior="isolated")
        return cls(tok, re.compile("\n"), spm_prefix=add_space_prefix)

    def encode(self, text: str, at_start: bool = False) -> np.ndarray:
        if self._spm_prefix is not None:
            # llama.cpp prepends a space to text that starts the input or follows a special token
            text = (" " + text if self._spm_prefix and at_start else text).replace(" ", "\u2581")
        pieces = _pieces(text, self._cut, 8192)
        encs = self._tok.encode_batch_fast(pieces, add_special_tokens=False)
        if not encs:
            return np.zeros(0, np.int32)
        return np.concatenate([np.asarray(e.ids, dtype=np.int32) for e in encs])


def _hf_vocab(tokens: list[str]) -> dict[str, int]:
    """token -> id for HF, without tokens that are not valid UTF-8 (no valid text contains them)."""
    vocab = {}
    for i, t in enumerate(tokens):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            continue
        vocab[t] = i
    return vocab


def _pieces(text: str, cut: re.Pattern | None, target: int) -> list[str]:
    """Split at safe cut points into pieces of about `target` characters (whole text if no rule)."""
    if cut is None or len(text) <= target:
        return [text] if text else []
    out, start = [], 0
    while start < len(text):
        m = cut.search(text, start + target)
        end = m.end() if m else len(text)
        out.append(text[start:end])
        start = end
    return out
