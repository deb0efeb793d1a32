"""The embedded default corpus: this Python's own standard-library sources, present on every machine.

It serves the README demo without any download. The document is every `.py` file of the standard
library (tests, idle tests and site-packages excluded), in sorted path order, concatenated, each file
ending with one "\\n". It is deterministic for a given Python installation (CPython 3.11.7 here:
734 files, 12.1 MB); its sha256 in the build summary identifies it exactly.
"""

from __future__ import annotations

import sys
import sysconfig
from functools import cached_property
from pathlib import Path
from typing import Iterator

from lookupkit.errors import InputError
from lookupkit.corpora.sources import validated

_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


class StdlibCorpus:
    """The standard library's .py files as one text document."""

    kind = "default"

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root or sysconfig.get_paths()["stdlib"])
        self.name = f"python{sys.version_info.major}.{sys.version_info.minor}-stdlib"

    @cached_property
    def files(self) -> list[Path]:
        """The files in the order they are concatenated (sorted relative POSIX paths)."""
        found = [p for p in self.root.rglob("*.py")
                 if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(self.root).parts[:-1])]
        return sorted(found, key=lambda p: p.relative_to(self.root).as_posix())

    def check(self) -> None:
        if not self.files:
            raise InputError(f"the default corpus is empty: no .py files under {self.root}")

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files)

    def blocks(self) -> Iterator[bytes]:
        return validated(self._raw_blocks(), self.name)

    def _raw_blocks(self) -> Iterator[bytes]:
        for path in self.files:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise InputError(f"cannot read default-corpus file {path}: {exc.strerror or exc}") from None
            if data:
                yield data if data.endswith(b"\n") else data + b"\n"

    def describe(self) -> str:
        return f"default:{self.name} ({len(self.files)} files under {self.root})"
