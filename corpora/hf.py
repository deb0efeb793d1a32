"""A Hugging Face dataset as one text document, read through `datasets` (imported only when used).

`--dataset name:config:split` (config and split optional; split defaults to train) loads from the
Hub or the local Hugging Face cache; an existing local path (a .parquet/.arrow/.txt/.json/.csv file,
or a directory of them) is loaded with the matching `datasets` builder. The document is the `text`
column, row after row, each row ending with one "\\n" (one is added to rows that lack it, so an
empty row is an empty line): WikiText's rows are its lines, so this rebuilds the raw file's lines.
Rows are streamed in batches from the memory-mapped Arrow table, never held as one string.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

from lookupkit.errors import InputError
from lookupkit.corpora.sources import validated

TEXT_COLUMN = "text"
_BATCH_ROWS = 4096
_BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".txt": "text", ".text": "text", ".json": "json",
             ".jsonl": "json", ".csv": "csv"}


def _datasets(remote: bool = False):
    """Import `datasets` quietly. Before the first import for a Hub dataset, an unreachable Hub switches
    it to offline mode, so a cached dataset still loads and a missing one fails at once (not after
    ~25 s of retries)."""
    if remote and "datasets" not in sys.modules and not _hub_reachable():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets
        from huggingface_hub.utils import logging as hub_logging
    except ImportError:
        raise InputError("--dataset needs the `datasets` package: pip install 'lookupkit[hf]'") from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    hub_logging.set_verbosity_error()
    return datasets


def _hub_reachable(timeout: float = 3.0) -> bool:
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


class HFDataset:
    """One split of a dataset; `spec` is `name[:config[:split]]` or a local file/directory path."""

    kind = "dataset"

    def __init__(self, spec: str):
        self.spec = spec
        self.name = spec
        self._ds = None

    def _parse(self) -> tuple[str, str | None, str]:
        parts = self.spec.split(":")
        if not parts[0] or len(parts) > 3 or any(p == "" for p in parts[1:]):
            raise InputError(f"cannot read dataset spec {self.spec!r}: expected name[:config[:split]], "
                             "e.g. wikitext:wikitext-103-raw-v1:train, or a local path")
        name, config, split = (parts + [None, None])[:3]
        return name, config, split or "train"

    def dataset(self):
        """The loaded split (loaded once); every failure is a one-line InputError."""
        if self._ds is None:
            self._ds = self._load()
            if TEXT_COLUMN not in self._ds.column_names:
                raise InputError(f"dataset {self.spec} has no {TEXT_COLUMN!r} column "
                                 f"(columns: {', '.join(self._ds.column_names)})")
        return self._ds

    def _load(self):
        path = Path(self.spec)
        if path.exists():
            return self._load_local(path)
        name, config, split = self._parse()
        datasets = _datasets(remote=True)
        try:
            return datasets.load_dataset(name, config, split=split)
        except (ConnectionError, TimeoutError) as exc:
            raise InputError(f"dataset {self.spec} cannot be downloaded (offline?) and is not in the local "
                             f"Hugging Face cache: {_first_line(exc)}") from None
        except Exception as exc:  # datasets raises many types; the person needs the message, not a traceback
            raise InputError(f"cannot load dataset {self.spec}: {_first_line(exc)}") from None

    def _load_local(self, path: Path):
        datasets = _datasets()
        builder = _BUILDERS.get(path.suffix.lower())
        if path.is_file() and builder is None:
            raise InputError(f"cannot load {path} as a dataset: use a {'/'.join(sorted(_BUILDERS))} file, "
                             "a directory of them, or -f for a plain text file")
        try:
            if path.is_dir():
                return datasets.load_dataset(str(path), split="train")
            return datasets.load_dataset(builder, data_files=str(path), split="train")
        except Exception as exc:  # as above: any loader failure becomes one line
            raise InputError(f"cannot load local dataset {path}: {_first_line(exc)}") from None

    def check(self) -> None:
        blocks = self.blocks()
        next(blocks)
        blocks.close()

    @property
    def size(self) -> None:
        return None  # unknown until the rows are read

    def blocks(self) -> Iterator[bytes]:
        return validated(self._raw_blocks(), self.spec)

    def _raw_blocks(self) -> Iterator[bytes]:
        for batch in self.dataset().iter(batch_size=_BATCH_ROWS):
            rows = batch[TEXT_COLUMN]
            if any(not isinstance(r, str) for r in rows if r is not None):
                raise InputError(f"dataset {self.spec}: column {TEXT_COLUMN!r} does not hold text")
            text = "".join(r if r and r.endswith("\n") else (r or "") + "\n" for r in rows)
            yield text.encode("utf-8", "surrogatepass")

    def describe(self) -> str:
        return f"dataset:{self.spec}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
