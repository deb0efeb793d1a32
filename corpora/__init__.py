"""Corpora in: text files, Hugging Face datasets, token-id files and the embedded default corpus,
read streaming, cut by --max-bytes at line ends, and tokenized once through the token store
(or, for a replay's input, in memory)."""

from .default import StdlibCorpus
from .hf import HFDataset
from .sources import TextFile, TokenFile, read_token_file
from .stream import Budget, parse_size
from .tokenized import tokenize_text_file

__all__ = ["Budget", "HFDataset", "StdlibCorpus", "TextFile", "TokenFile", "parse_size", "read_token_file",
           "tokenize_text_file"]
