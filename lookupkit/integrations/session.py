"""`DraftSession`: a Drafter kept in step with an engine that hands over the whole history at every call.

Inside one generation the history grows by exactly "accepted drafts + one sampled token", so checking
that shape (plus the last WINDOW known tokens) costs O(new tokens) per call; anything else costs one
full comparison, once, and is either a continuation or a new sequence (the old one is then learnt into
the dynamic cache). Accepted tokens are inferred from the next history with lookup-stats' rule: the
common prefix of the new tokens and the last draft. A call's cost stays flat as the history grows, where
`Drafter.draft(history)` compares the whole history (bench/RESULTS.md: Figures the code's comments rely on).
"""

from __future__ import annotations

import threading

import numpy as np

from .. import warmup
from ..rules import check_n_draft

WINDOW = 32  # known tokens re-checked per call (a history that keeps them and adds one draft-loop step continues)


class DraftSession:
    """A Drafter kept in step with an engine's history, with the engine's counters.

    `draft(history)` drafts after `history` (the whole sequence so far, any 1-D integer sequence that
    slices to arrays); `observe(history)` only takes in the outcome (for engines that report it);
    `finish(tokens)` ends the sequence with its final tokens, resolving the last draft.
    """

    def __init__(self, drafter, n_draft: int):
        self.drafter = drafter
        self.n_draft = check_n_draft(n_draft)
        self.n_calls = self.n_drafted = self.n_accepted = self.n_unresolved = 0
        self.n_sequences = 0  # sequences started (a history that did not extend the previous one)
        self.n_full_checks = 0  # histories that needed one O(history) comparison (not a draft-loop step)
        self._n = 0
        self._last = np.zeros(0, np.int32)  # the last WINDOW tokens of the known history
        self._draft = np.zeros(0, np.int32)  # the last draft, until the history shows its outcome

    def draft(self, history, limit: int | None = None) -> np.ndarray:
        """The draft after `history` (int32, at most n_draft tokens, and at most `limit` if given)."""
        self.observe(history)
        n = self.n_draft if limit is None else max(0, min(self.n_draft, limit))
        out = np.asarray(self.drafter.draft(None, n) if n else [], dtype=np.int32)
        self.n_calls += 1
        self.n_drafted += len(out)
        self._draft = out
        return out

    def observe(self, history) -> None:
        """Take in `history`: extend the sequence by its new tokens, or start a new sequence."""
        n, known = len(history), self._n
        if n == known and known and np.array_equal(_ids(history[max(0, n - WINDOW):n]), self._last):
            return
        new = self._step(history, n) if n > known else None
        if new is None and known and n > known:
            self.n_full_checks += 1
            if np.array_equal(_ids(history[:known]), self.drafter.sequence):
                new = _ids(history[known:])
        if new is None:
            self._end(learn=True)
            self.n_sequences += 1
            new = _ids(history[:n])
        self._resolve(new)
        self.drafter.accept(new)
        self._n = n
        self._last = _ids(history[max(0, n - WINDOW):n]).copy()

    def finish(self, tokens=None, learn: bool = True) -> None:
        """End the sequence; `tokens`, its final form, first resolves the last draft. Learnt unless learn=False."""
        if tokens is not None:
            self.observe(tokens)
        self._end(learn)

    def stats(self) -> dict:
        return {"calls": self.n_calls, "drafted": self.n_drafted, "accepted": self.n_accepted,
                "pending": len(self._draft), "unresolved": self.n_unresolved, "sequences": self.n_sequences,
                "full_checks": self.n_full_checks,
                "acceptance": self.n_accepted / self.n_drafted if self.n_drafted else None,
                "tokens_per_call": (self.n_accepted + self.n_calls) / self.n_calls if self.n_calls else None}

    def _step(self, history, n: int) -> np.ndarray | None:
        """The new tokens if `history` is one draft-loop step on from the known one (O(new + WINDOW)), else None."""
        known = self._n
        k = n - known
        if not known or k > len(self._draft) + 1:
            return None
        new = _ids(history[known:n])
        if not np.array_equal(new[:-1], self._draft[:k - 1]):
            return None
        if not np.array_equal(_ids(history[max(0, known - WINDOW):known]), self._last):
            return None
        return new

    def _resolve(self, new: np.ndarray) -> None:
        d = self._draft[:len(new)]
        miss = np.flatnonzero(new[:len(d)] != d)
        self.n_accepted += int(miss[0]) if len(miss) else len(d)
        self._draft = self._draft[:0]

    def _end(self, learn: bool) -> None:
        """Close the current sequence: an unobserved draft stays unresolved; the sequence is learnt."""
        self.n_unresolved += len(self._draft)
        self._draft = self._draft[:0]
        if self._n:
            self.drafter.reset(learn=learn)
        self._n = 0
        self._last = self._last[:0]


def _ids(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int32)


class Counted:
    """An adapter's session (a DraftSession), its counters and end-of-sequence call.

    The adapter calls `_start(drafter_args, n_draft)` when it is constructed: n_draft is checked there,
    and the Drafter is built and its kernels loaded in a background thread (lookupkit.warmup), while
    the engine loads its model. `session` waits for that thread the first time (any thread may ask:
    it is built once) and raises what failed in it (an unknown policy, an unreadable -lcd file).
    """

    def _start(self, drafter_args: dict, n_draft: int) -> None:
        """verify_cost=None in `drafter_args`: the Drafter's default (verify_cost.DEFAULT_COST, not imported
        here: that module loads numba)."""
        self._n_draft = check_n_draft(n_draft)
        self._session: DraftSession | None = None
        self._session_lock = threading.Lock()
        if drafter_args.get("verify_cost", 0) is None:
            drafter_args = {k: v for k, v in drafter_args.items() if k != "verify_cost"}
        self.warmup = warmup.start(drafter_args)

    @property
    def session(self) -> DraftSession:
        if self._session is None:
            with self._session_lock:
                if self._session is None:
                    self._session = DraftSession(self.warmup.wait(), self._n_draft)
        return self._session

    def finish(self, tokens=None, learn: bool = True) -> None:
        """End the sequence with its final tokens (prompt + completion): resolves the last draft and
        learns the sequence into the dynamic cache (unless learn=False). Engines that never say a
        generation ended (llama-cpp-python) need it for exact counters; the next prompt also ends it."""
        self.session.finish(tokens, learn)

    @property
    def n_calls(self) -> int:
        return self.session.n_calls

    @property
    def n_drafted(self) -> int:
        return self.session.n_drafted

    @property
    def n_accepted(self) -> int:
        return self.session.n_accepted

    def stats(self) -> dict:
        return self.session.stats()
