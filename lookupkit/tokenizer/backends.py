"""Engines that turn one special-token-free text fragment into llama.cpp's ids.

llama.cpp pre-tokenizes with a list of regexes (each splits the pieces of the previous one; text
between matches is kept as its own piece), maps bytes to GPT-2's printable alphabet and runs BPE.
Two engines reproduce that:

* tiktoken (ranks = ids, one regex): the faster one. Valid for single-regex byte-level vocabularies;
  tiktoken always emits a piece that is itself a token without merging, which is llama.cpp's
  `ignore_merges` (llama-bpe) and was measured identical for qwen2 and gpt-2.
* HF `tokenizers`, rebuilt from the GGUF metadata: multi-regex pre-tokenizers (deepseek-coder,
  falcon, ...) and vocabularies without a token for every byte (mpt). SentencePiece vocabularies
  are `spm`'s (and `spm_ties`').
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import FormatError

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEEPSEEK_LLM_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1"
    "\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd"
    "\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d"
    "\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4"
    "\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec"
    "\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b"
    "\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787"
    "\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943")

# tokenizer.ggml.pre -> (regexes in llama.cpp's order, ignore_merges, default add_bos)
PRE_TOKENIZERS = {
    "gpt-2": ([_GPT2], False, False),
    "llama-bpe": ([_LLAMA3], True, True),
    "qwen2": ([_QWEN2], False, False),
    "deepseek-coder": (["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
                        r"\p{N}"], False, False),
    "starcoder": ([r"\p{N}", _GPT2], False, False),
    "falcon": ([r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"], False, False),
    "qwen35": ([_QWEN35], False, False),
    "deepseek-llm": (["[\r\n]", f"\\s?[{_DEEPSEEK_LLM_LETTERS}]+",
                      "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", "\\s+$",
                      "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}+"], False, False),
    # llama.cpp's regexes for a BPE vocabulary whose pre-tokenizer is missing or "default"
    "default": ([r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"], False, False),
}
# names llama.cpp maps to the same pre-tokenizer (llama-vocab.cpp)
PRE_ALIASES = {
    "phi-2": "gpt-2", "mpt": "gpt-2", "olmo": "gpt-2", "jais": "gpt-2", "exaone4": "gpt-2",
    "llama3": "llama-bpe", "llama-v3": "llama-bpe", "falcon3": "llama-bpe", "pixtral": "llama-bpe",
    "deepseek-r1-qwen": "qwen2", "megrez": "qwen2", "stablelm2": "qwen2",
    "refact": "starcoder", "smollm": "starcoder", "codeshell": "starcoder", "exaone": "starcoder",
    "command-r": "starcoder", "minerva-7b": "starcoder", "mellum2": "starcoder",
    "kormo": "qwen2", "f2llmv2": "qwen2", "hunyuan": "qwen2", "solar-open": "qwen2",
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


class MissingBytes(FormatError):
    """A byte-level vocabulary without a token for every byte (tiktoken needs all 256)."""


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
            raise MissingBytes(f"{name}: byte-level vocabulary lacks single-byte tokens")
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

    def __init__(self, tok, cut: re.Pattern | None):
        self._tok, self._cut = tok, cut

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

    def encode(self, text: str, at_start: bool = False) -> np.ndarray:
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
