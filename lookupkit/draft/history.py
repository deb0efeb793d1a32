"""`History`: what earlier sequences (prompts and responses) said, as a source of lookupkit's policy.

A drafter follows one sequence; a server sees the same text again and again (agents re-send their
history, retry, rewrite the same code). A History keeps the last `budget` tokens of the sequences it
was taught, in order, and drafts the follower of the longest earlier match of the current suffix
(counts.history_index: exact, verified token by token; evidence = the match length, as the sequence's
own longest-match source). One History may be shared by any number of Drafters (a server's slots) in
any threads: learning and drafting take its lock, which a draft call holds for one kernel call.

    history = History(budget=1 << 20)
    drafter = Drafter(policy="lookupkit", history=history)   # any number of them
    ... drafter.reset(tokens)                                # end of a sequence: learnt into the history
                                                             # (not into the drafter's unbounded dynamic cache)

Memory is bounded: the arrays are made once for the budget, and when a sequence does not fit, the
oldest tokens go (the newest half of the budget is kept and re-indexed, so eviction costs O(1) per
learnt token, amortised). `save` / `History.load` keep it in a `.lkh` file (formats/history_state.py).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from ..counts.history_index import MAX_LOG, SEPARATOR, clear_slots, insert_positions, new_hist, slots_for, view
from ..counts.match_index import MATCH_LENGTHS
from ..errors import FormatError, InputError, VocabMismatchError
from ..rules import HISTORY_BUDGET, HISTORY_BUDGET_MAX
from ..rules import token_ids

BUDGET_MIN = int(MATCH_LENGTHS[0]) * 2  # tokens: room for one sequence that can be matched at every length


def check_budget(budget, what: str = "the history budget") -> int:
    most = min(HISTORY_BUDGET_MAX, MAX_LOG)
    if isinstance(budget, bool) or not hasattr(budget, "__index__") or not BUDGET_MIN <= budget <= most:
        raise InputError(f"{what} must be an integer between {BUDGET_MIN} and {most} tokens, got {budget!r}")
    return int(budget)


class History:
    """The last `budget` tokens (separators included: one per sequence) of the sequences learnt.

    vocab: the vocabulary fingerprint of the ids it learns (a str, or a Tokenizer; None: not recorded),
    written into its state file and checked when the file is loaded for another model."""

    def __init__(self, budget: int = HISTORY_BUDGET, vocab=None):
        self.budget = check_budget(budget)
        self.vocab = getattr(vocab, "fingerprint", vocab)
        self.n_vocab = getattr(vocab, "n_vocab", None)  # recorded in its state file when a Tokenizer gives it
        self.lock = threading.Lock()
        self.learnt = 0  # sequences learnt since the history began (also those evicted since)
        try:
            self._h = new_hist(self.budget)
        except MemoryError:
            need = 4 * (self.budget + slots_for(self.budget))
            raise InputError(f"a history of {self.budget:,} tokens needs {need / 2**20:,.0f} MiB, more than this "
                             f"process can allocate: give a smaller budget (--history-budget)") from None

    def view(self):
        """The arrays for one drafter's compiled policy (shared log and index, scratch of its own); read
        them only while holding `lock`."""
        return view(self._h)

    @property
    def n_tokens(self) -> int:
        """Positions in use: tokens plus one separator per (part of a) sequence kept."""
        return int(self._h.n[0])

    def learn(self, tokens) -> None:
        """Append a finished sequence (its newest budget - 1 tokens if it is longer), evicting the oldest."""
        ids = token_ids(tokens, "tokens")
        if not len(ids):
            return
        with self.lock:
            self._append(ids)
            self.learnt += 1

    def _append(self, ids: np.ndarray) -> None:
        h, cap = self._h, self.budget
        ids = ids[-(cap - 1):]
        need = len(ids) + 1
        n = int(h.n[0])
        if n + need > cap:  # keep the newest half (or what leaves room), re-indexed in place
            keep = max(0, min(n, cap // 2, cap - need))
            h.log[:keep] = h.log[n - keep:n].copy()
            h.n[0] = keep
            clear_slots(h)
            insert_positions(h, 1, keep)
            n = keep
        h.log[n] = SEPARATOR
        h.log[n + 1:n + need] = ids
        h.n[0] = n + need
        insert_positions(h, n + 1, n + need)

    def tokens(self) -> np.ndarray:
        """A copy of the live log: the sequences kept, each led by SEPARATOR (-1; the first may be cut)."""
        return self.snapshot()[0]

    def snapshot(self) -> tuple[np.ndarray, int]:
        """(a copy of the live log, sequences learnt), taken together under the lock: what a save writes."""
        with self.lock:
            return self._h.log[:self._h.n[0]].copy(), self.learnt

    def n_sequences(self) -> int:
        with self.lock:
            return int(np.count_nonzero(self._h.log[:self._h.n[0]] == SEPARATOR))

    def check_vocab(self, expect) -> None:
        """Refuse a history of another vocabulary than `expect` (a Tokenizer or fingerprint; None: no check)."""
        fingerprint = getattr(expect, "fingerprint", expect)
        if fingerprint is not None and self.vocab is not None and fingerprint != self.vocab:
            raise VocabMismatchError(f"the history holds ids of vocabulary {self.vocab}, not of {fingerprint}")

    def save(self, path: str | os.PathLike) -> None:
        """Write the history to `path` atomically (a crash or kill -9 leaves the previous file whole), as the
        one tenant "global" of a state file (formats/history_state.py)."""
        from ..formats import history_state

        log, learnt = self.snapshot()
        history_state.write(path, [history_state.TenantLog(history_state.GLOBAL, log, self.budget, learnt)],
                            vocab=self.vocab, budget=self.budget, tenant_budget=self.budget, n_vocab=self.n_vocab)

    @classmethod
    def load(cls, path: str | os.PathLike, budget: int | None = None, expect_vocab=None) -> "History":
        """A History from a `.lkh` file of one History (every check of formats/history_state.py; a foreign
        vocabulary is refused); budget None: the file's; a smaller one keeps the file's newest tokens. A file
        of several tenants is refused: their texts are never mixed (serve.tenants reads it)."""
        tenants, meta = read_state(path, getattr(expect_vocab, "fingerprint", expect_vocab),
                                   getattr(expect_vocab, "n_vocab", None))  # (a Tokenizer knows its size)
        if len(tenants) > 1:
            raise InputError(f"{path} keeps {len(tenants)} tenants' histories apart; History.load reads a file of "
                             f"one (lookupkit serve --state reads them all)")
        if not tenants:
            hist = cls(meta["budget"] if budget is None else budget, vocab=meta["vocab"])
        else:
            hist = cls.of_log(tenants[0].log, tenants[0].budget if budget is None else budget, meta["vocab"],
                              tenants[0].learnt)
        hist.n_vocab = meta.get("n_vocab")
        return hist

    @classmethod
    def of_log(cls, log: np.ndarray, budget: int, vocab=None, learnt: int = 0) -> "History":
        """A History of `budget` holding `log` (sequences led by SEPARATOR; its newest positions if longer)."""
        hist = cls(budget, vocab=vocab)
        hist.learnt = learnt
        return hist._fill(log)

    def _fill(self, log: np.ndarray) -> "History":
        log = log[-self.budget:]
        h = self._h
        h.log[:len(log)] = log
        h.n[0] = len(log)
        insert_positions(h, 1, len(log))
        return self

    def __repr__(self) -> str:
        return f"History({self.n_tokens:,} of {self.budget:,} tokens, {self.learnt:,} sequences learnt)"


def top_id(logs) -> int:
    """The largest token id in TenantLogs (-1: none; the logs' SEPARATORs are -1)."""
    return max((int(t.log.max()) for t in logs if len(t.log)), default=-1)


def read_state(path, vocab=None, n_vocab: int | None = None) -> tuple[list, dict]:
    """A state file's TenantLogs and header (formats.history_state.read: checksums, bounds, `vocab` if given, ids
    below the vocabulary size it records), every budget it records checked too, and every id below n_vocab (the
    size of the vocabulary it will draft for, if known): ids enter the drafting loops here, checked once."""
    from ..formats import history_state

    logs, head = history_state.read(path, expect_vocab=vocab)
    try:
        for budget in (head["budget"], head["tenant_budget"], *(t.budget for t in logs)):
            check_budget(budget)
    except InputError as exc:
        raise FormatError(f"{path} is not a valid lookupkit history state: {exc}") from None
    top = top_id(logs)
    if n_vocab is not None and top >= n_vocab:
        raise FormatError(f"{path} is not a history of this vocabulary: it holds the token id {top}, outside the "
                          f"{n_vocab:,} ids of the vocabulary it would draft for")
    return logs, head
