"""Tokenize: llama.cpp's exact ids from a GGUF vocabulary or a HF tokenizer.json, with no model.

gguf (metadata reader) -> vocab (Vocab, fingerprint) -> backends (tiktoken / HF BPE) -> encode
(`Tokenizer`: special tokens, BOS/EOS, safe cuts for streaming); store keeps tokenized corpora as
zstd int32 so prefixes of one corpus tokenize once.
"""

__all__ = ["SAFE_CUT", "Tokenizer"]


def __getattr__(name: str):
    """The faces imported at first use (PEP 562): reading a GGUF's vocabulary (gguf, vocab) loads no
    encoder and no numba."""
    if name in __all__:
        from . import encode

        globals().update(SAFE_CUT=encode.SAFE_CUT, Tokenizer=encode.Tokenizer)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
