"""What `lookupkit serve --learn history` keeps: the one History every slot drafts from and learns into,
loaded from `--state FILE` at start-up and saved there every `--save-every` requests and at shutdown.

A save copies the log under the History's lock (a memcpy of 4 MB for 2^20 positions) and writes it in a
thread of its own (44 ms for those 4 MB here, fsync included), so the engine thread never waits for a disk; files.atomic_writer (temp file, fsync,
rename) means a kill -9 during a save leaves the previous file whole. A file that fails any check at
start-up is refused in one line naming the flag that starts afresh: a server never drafts from a state
it cannot trust, and never silently throws one away.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..errors import FormatError, InputError, LookupkitError, VocabMismatchError

log = logging.getLogger("lookupkit.serve")
RESET_FLAG = "--state-reset"
SAVE_EVERY = 100  # --save-every's default: learnt requests between saves (a save of 2^20 tokens writes 4 MB)


def open_history(state, budget: int | None, vocab, reset: bool = False):
    """The History to serve with: `state`'s (if given, present and not `reset`; budget None: the file's), else
    an empty one of `budget` tokens (None: rules.HISTORY_BUDGET) for `vocab` (a fingerprint)."""
    from ..draft.history import History
    from ..rules import HISTORY_BUDGET

    if state is None or reset or not Path(state).exists():
        if state is not None:
            from ..files import check_writable

            check_writable(state)
        return History(HISTORY_BUDGET if budget is None else budget, vocab=vocab)
    try:
        return History.load(state, budget=budget, expect_vocab=vocab)
    except (FormatError, VocabMismatchError, InputError) as exc:
        raise InputError(f"{str(exc).rstrip('.')}; start afresh with {RESET_FLAG} (the file is replaced at the "
                         f"next save) or delete it") from None


class StateKeeper:
    """Saves `history` to `path` every `every` learnt requests (0: only at close) and at close."""

    def __init__(self, history, path, every: int):
        self.history, self.path, self.every = history, Path(path), every
        self.saves = 0
        self._since = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def learnt(self) -> None:
        """One more request was learnt (called by the engine thread)."""
        self._since += 1
        if not self.every or self._since < self.every:
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return  # a save is still writing: the next request tries again
            self._since = 0
            self._thread = threading.Thread(target=self._save, name="lookupkit-state-save", daemon=True)
            self._thread.start()

    def close(self) -> str:
        """Wait for a save in progress, then save once more; returns what was saved, for the log."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
        self.history.save(self.path)
        self.saves += 1
        return f"{self.history.n_tokens:,} positions, {self.history.learnt:,} sequences learnt"

    def _save(self) -> None:
        try:
            self.history.save(self.path)
            self.saves += 1
        except LookupkitError as exc:  # a full disk must not stop the server: the next save tries again
            log.warning("could not save the history: %s", exc)
