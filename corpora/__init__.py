"""Corpora in: text files, Hugging Face datasets, token-id files and the embedded default corpus,
read streaming and cut by --max-bytes at line ends (`stream.TextBudget`): sources (text, zstd and token-id
files), hf (a Hugging Face dataset, `datasets` imported only when used). Turning them into ids and
counts is the build's job (`lookupkit.create`)."""

from lookupkit.corpora.default import StdlibCorpus
from lookupkit.corpora.hf import HFDataset
from lookupkit.corpora.sources import TextFile, TokenFile, read_token_file
from lookupkit.corpora.stream import TextBudget

__all__ = ["HFDataset", "StdlibCorpus", "TextBudget", "TextFile", "TokenFile", "read_token_file"]
