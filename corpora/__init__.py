"""Corpora in: text files, Hugging Face datasets, token-id files and the embedded default corpus,
read streaming, cut by --max-bytes at line ends, and tokenized once through the token store."""

from .default import StdlibCorpus
from .hf import HFDataset
from .sources import TextFile, TokenFile
from .stream import Budget, parse_size

__all__ = ["Budget", "HFDataset", "StdlibCorpus", "TextFile", "TokenFile", "parse_size"]
