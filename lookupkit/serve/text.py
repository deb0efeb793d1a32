"""Generated token ids to the text a client receives: UTF-8 assembled across tokens, cut at a stop string,
and text that may still turn into a stop string held back until it cannot (so a stream never sends what
the final text does not hold).

Only the held-back text is kept: text already sent never ends with the start of a stop string (that
part would have been held), so a stop string can only begin in the held text, and each token costs
O(held + new) whatever the length of the output."""

from __future__ import annotations

import codecs


class TextOut:
    """One request's text. piece(token) -> bytes (special tokens as empty: an EOS never reaches the
    text); stops: the request's stop strings."""

    def __init__(self, piece, stops: list[str]):
        self._piece = piece
        self._stops = [s for s in stops if s]
        self._longest = max((len(s) for s in self._stops), default=0)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""
        self.stopped_by: str | None = None  # the stop string that ended the text

    def push(self, tokens) -> str:
        """Add generated tokens; returns the text that may be sent now. After a stop string, nothing more."""
        if self.stopped_by is not None:
            return ""
        text = self._held + self._utf8.decode(b"".join(self._piece(t) for t in tokens))
        hits = [(i, s) for s in self._stops if (i := text.find(s)) >= 0]
        if hits:
            at, self.stopped_by = min(hits)
            self._held = ""
            return text[:at]
        keep = self._prefix_len(text)
        self._held = text[len(text) - keep:]
        return text[:len(text) - keep]

    def finish(self) -> str:
        """The rest, once generation has ended (bytes of an unfinished character become U+FFFD)."""
        if self.stopped_by is not None:
            return ""
        out, self._held = self._held + self._utf8.decode(b"", final=True), ""
        return out

    def _prefix_len(self, text: str) -> int:
        """How many trailing characters of text are a proper prefix of some stop string."""
        for n in range(min(self._longest - 1, len(text)), 0, -1):
            if any(s.startswith(text[-n:]) for s in self._stops):
                return n
        return 0
