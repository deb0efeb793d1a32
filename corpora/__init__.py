"""Corpora in: text files, Hugging Face datasets, token-id files and the embedded default corpus,
read streaming, cut by --max-bytes at line ends, and tokenized once through the token store
(or, for a replay's input, in memory)."""

from lookupkit.corpora.default import StdlibCorpus
from lookupkit.corpora.hf import HFDataset
from lookupkit.corpora.sources import TextFile, TokenFile, read_token_file
from lookupkit.corpora.stream import Budget, parse_size
from lookupkit.corpora.tokenized import tokenize_text_file

__all__ = ["Budget", "HFDataset", "StdlibCorpus", "TextFile", "TokenFile", "parse_size", "read_token_file",
           "tokenize_text_file"]
