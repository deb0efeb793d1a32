"""Counting within a memory limit: `SpillingCounter` writes its sorted runs to disk when they grow too big.

It counts exactly as `FollowerCounter` (same chunks, same triples); whenever the runs held in memory
exceed `limit_bytes`, they are merged into one and spilled as a `runs.Run` file. `finish()` spills
the rest and returns every run; `runs.merge_range` merges them into the table's parts. Spilling
changes where counts are summed, never what they sum to, so the file is the same for any limit.
"""

from __future__ import annotations

import os
import uuid

import numpy as np

from .bigrams import FollowerCounter
from .runs import RUN_BYTES_PER_ENTRY, Run, write_run

MIN_CHUNK_TOKENS = 1 << 16
BYTES_PER_CHUNK_TOKEN = 40  # a chunk's transient: int32 copy, uint64 triples, sort, unique keys + counts


def chunk_tokens_for(limit_bytes: int, largest: int) -> int:
    """The chunk size that keeps one chunk's transient memory within a third of `limit_bytes`."""
    return int(max(MIN_CHUNK_TOKENS, min(largest, limit_bytes // (3 * BYTES_PER_CHUNK_TOKEN))))


class SpillingCounter(FollowerCounter):
    """A FollowerCounter whose runs go to `spill_dir` whenever they exceed `limit_bytes` in memory."""

    def __init__(self, n_vocab: int, spill_dir: str | os.PathLike, limit_bytes: int, chunk_tokens: int,
                 **kw):
        super().__init__(n_vocab, chunk_tokens, **kw)
        self.spill_dir, self.limit = str(spill_dir), limit_bytes
        self.spilled: list[Run] = []
        self._held = 0

    def _add_chunk(self, tokens: np.ndarray) -> None:
        super()._add_chunk(tokens)
        per_entry = RUN_BYTES_PER_ENTRY[self.packed]
        self._held = sum(len(c) for _, _, c in self._runs) * per_entry
        if self._held > self.limit // 3:  # merging to one run needs up to twice what is held
            self.spill()

    def spill(self) -> None:
        """Merge the runs held in memory into one and write it to the spill directory."""
        keys, counts = self.merged_run()
        if len(counts):
            stem = os.path.join(self.spill_dir, f"run-{os.getpid()}-{uuid.uuid4().hex[:12]}")
            self.spilled.append(write_run(stem, keys, counts))
        self._held = 0

    def finish(self) -> list[Run]:
        """Spill what is left; every run counted so far."""
        self.spill()
        return list(self.spilled)
