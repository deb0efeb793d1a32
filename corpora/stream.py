"""A source's bytes as a build consumes them: cut to --max-bytes at a line end, hashed, decoded.

`--max-bytes N` is one budget shared by the sources in order. A source that fits is taken whole;
the source that crosses the budget ends at the last "\\n" at or before the budget (the "\\n" is
kept: how the 25/100 MB WikiText-103 prefixes of lookupkit's benchmarks were cut, "the first N MB of
wiki541, cut at a line boundary"), or, with cut="byte", after exactly
the budget's bytes (how ../shared/docs/anchors.md's token counts for this machine's stand-in corpus were
made: 25 MB of wiki541 is 5,651,710 qwen2 tokens cut at byte 25,000,000, 5,651,583 at the line end).
Later sources are skipped.
Invalid UTF-8 never stops a build: it is replaced with U+FFFD as Python's "replace" does, and the
number of replaced bytes is counted.
"""

from __future__ import annotations

import codecs
import contextvars
from typing import Iterable, Iterator

from lookupkit.errors import InputError

CUTS = ("line", "byte")


class TextBudget:
    """Bytes of text still allowed under --max-bytes, shared by the sources in order (None: no limit).

    (What bounds memory is `lookupkit.create.memory_budget`; this bounds the corpus.)"""

    def __init__(self, limit: int | None, cut: str = "line"):
        if cut not in CUTS:
            raise InputError(f"unknown cut {cut!r}; choose {' or '.join(CUTS)}")
        self.left = limit
        self.at_line = cut == "line"

    @property
    def exhausted(self) -> bool:
        return self.left is not None and self.left <= 0


class Consumed:
    """Iterates one source's blocks as consumed under the budget (the budget is charged at the end)."""

    def __init__(self, blocks: Iterable[bytes], budget: TextBudget):
        self._blocks = blocks
        self._budget = budget
        self.n_bytes = 0
        self.cut = False  # True when the budget ended this source before its end

    def __iter__(self) -> Iterator[bytes]:
        left, at_line = self._budget.left, self._budget.at_line
        source = self._blocks if left is None else (self._to_line(self._blocks, left) if at_line
                                                     else self._to_byte(self._blocks, left))
        for block in source:
            if block:
                self.n_bytes += len(block)
                yield block
        if self._budget.left is not None:
            self._budget.left -= self.n_bytes

    def _to_byte(self, blocks: Iterable[bytes], left: int) -> Iterator[bytes]:
        for block in blocks:
            if len(block) > left:
                self.cut = True
                yield block[:left]
                return
            yield block
            left -= len(block)

    def _to_line(self, blocks: Iterable[bytes], left: int) -> Iterator[bytes]:
        held = bytearray()  # bytes after the last "\n" seen; never contains "\n"
        for block in blocks:
            room = left - len(held)
            if len(block) > room:
                self.cut = True
                k = block.rfind(b"\n", 0, room)
                if k >= 0:
                    yield bytes(held) + block[:k + 1]
                return
            k = block.rfind(b"\n")
            if k < 0:
                held += block
                continue
            yield bytes(held) + block[:k + 1]
            left -= len(held) + k + 1
            held = bytearray(block[k + 1:])
        yield bytes(held)


_counter: contextvars.ContextVar[list[int]] = contextvars.ContextVar("lookupkit_replaced")


def _count_and_replace(exc: UnicodeDecodeError):
    _counter.get()[0] += exc.end - exc.start
    return "\ufffd", exc.end


codecs.register_error("lookupkit-count-replace", _count_and_replace)


class Utf8Decoder:
    """Incremental UTF-8 decoding (sequences may span blocks) that counts the bytes it replaced."""

    def __init__(self):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="lookupkit-count-replace")
        self._box = [0]

    @property
    def replaced_bytes(self) -> int:
        return self._box[0]

    def decode(self, data: bytes, final: bool = False) -> str:
        token = _counter.set(self._box)
        try:
            return self._decoder.decode(data, final)
        finally:
            _counter.reset(token)
