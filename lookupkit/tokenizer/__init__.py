"""Tokenize: llama.cpp's exact ids from a GGUF vocabulary or a HF tokenizer.json, with no model.

gguf (metadata reader) -> vocab (Vocab, fingerprint) -> backends (tiktoken / HF BPE) -> encode
(`Tokenizer`: special tokens, BOS/EOS, safe cuts for streaming), with specials (what llama.cpp splits out
first), spm and spm_ties (llama.cpp's SentencePiece merge, and with its own tie rule where `spm` cannot rank)
and llama_engine (ids from llama.cpp itself, through llama-cpp-python); store keeps tokenized corpora as
zstd int32 so prefixes of one corpus tokenize once.
"""

from .._lazy import lazy_faces

__all__ = ["SAFE_CUT", "Tokenizer"]

# Reading a GGUF's vocabulary (gguf, vocab) loads no encoder and no numba.
__getattr__ = lazy_faces(__name__, {"SAFE_CUT": ".encode", "Tokenizer": ".encode"})
