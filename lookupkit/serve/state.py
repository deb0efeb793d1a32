"""What `lookupkit serve --learn history` keeps: every tenant's History (serve.tenants), loaded from
`--state FILE` at start-up and saved there every `--save-every` requests and at shutdown; and the merge of
several replicas' state files into one, so a replica restarted from it drafts what the fleet served.

A save copies each log under its History's lock and writes them in a thread of its own, so the engine
thread never waits for a disk; files.atomic_writer (temp file, fsync, rename) means a kill -9 during a save
or a merge leaves the previous file whole and no partial one. A file that fails any check at start-up is
refused in one line naming the flag that starts afresh: a server never drafts from a state it cannot
trust, and never silently throws one away.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..errors import FormatError, InputError, LookupkitError, VocabMismatchError

log = logging.getLogger("lookupkit.serve")
RESET_FLAG = "--state-reset"
SAVE_EVERY = 100  # --save-every's default: learnt requests between saves (a save of 2^20 tokens writes 4 MB)


def open_tenants(state, budget: int | None, tenant_budget: int | None, vocab, scope: str = "tenant",
                 reset: bool = False):
    """The Tenants to serve with: `state`'s (if given, present and not `reset`; a budget None: the file's),
    else empty ones of `budget` tokens (None: rules.HISTORY_BUDGET) for `vocab` (a fingerprint)."""
    from ..rules import HISTORY_BUDGET
    from .tenants import Tenants

    if state is None or reset or not Path(state).exists():
        if state is not None:
            from ..files import check_writable

            check_writable(state)
        return Tenants(HISTORY_BUDGET if budget is None else budget, tenant_budget, vocab, scope)
    from ..draft.history import read_state

    try:
        logs, head = read_state(state, vocab)
        budget = head["budget"] if budget is None else budget
        if tenant_budget is None and scope == "tenant" and not _shared(logs) and head["tenant_budget"] <= budget:
            tenant_budget = head["tenant_budget"]  # the file's split of the budget, unless it was one shared History
        return Tenants.of_logs(logs, budget, tenant_budget, vocab, scope, head.get("n_vocab"))
    except (FormatError, VocabMismatchError) as exc:
        raise InputError(f"{str(exc).rstrip('.')}; start afresh with {RESET_FLAG} (the file is replaced at the "
                         f"next save) or delete it") from None


def _shared(logs: list) -> bool:
    """Whether a file's logs are one History every client shared (--learn-scope global's, History.save's, a
    version 1 file's) rather than tenants kept apart."""
    from ..formats.history_state import GLOBAL

    return any(t.id == GLOBAL for t in logs)


class StateKeeper:
    """Saves `tenants` (serve.tenants.Tenants) to `path` every `every` learnt requests (0: only at close) and
    at close."""

    def __init__(self, tenants, path, every: int):
        self.tenants, self.path, self.every = tenants, Path(path), every
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
        self.tenants.save(self.path)
        self.saves += 1
        return self.tenants.describe()

    def _save(self) -> None:
        try:
            self.tenants.save(self.path)
            self.saves += 1
        except LookupkitError as exc:  # a full disk must not stop the server: the next save tries again
            log.warning("could not save the history: %s", exc)


def merge_states(paths: list, out, budget: int | None = None, tenant_budget: int | None = None) -> str:
    """Merge replicas' state files into `out` (atomically; nothing is written if any input is refused): per
    tenant, its newest sequences of every input first (serve.tenants.newest_first) within the tenant budget,
    the most recently used tenants kept within the budget. Inputs must share a vocabulary and a scope; a budget
    None is the largest of the inputs'. Returns what was written, for the command's line."""
    from ..draft.history import read_state
    from ..files import check_writable
    from .tenants import Tenants

    if not paths:
        raise InputError("give the state files to merge (.lkh, one per replica)")
    read = [(p, *read_state(p)) for p in paths]
    vocab = first = None
    for path, _, head in read:
        if head["vocab"] is not None and vocab is None:
            vocab, first = head["vocab"], path
        elif head["vocab"] not in (None, vocab):
            raise VocabMismatchError(f"{path} holds ids of another vocabulary (fingerprint {head['vocab']}) than "
                                     f"{first} ({vocab}): merge the states of replicas serving one model")
    scopes = {p: "global" if _shared(logs) else "tenant" for p, logs, _ in read if logs}
    if len(set(scopes.values())) > 1:
        shared = next(p for p, s in scopes.items() if s == "global")
        apart = next(p for p, s in scopes.items() if s == "tenant")
        raise InputError(f"{shared} keeps one history shared by every client (--learn-scope global, or a "
                         f"version 1 file) and {apart} keeps tenants apart: merge the states of one scope")
    scope = next(iter(scopes.values()), "tenant")
    if scope == "global" and tenant_budget is not None:
        raise InputError("--tenant-budget applies to states that keep tenants apart: these keep one shared history")
    budget = max(head["budget"] for _, _, head in read) if budget is None else budget
    if tenant_budget is None and scope == "tenant":
        tenant_budget = min(budget, max(head["tenant_budget"] for _, logs, head in read if not _shared(logs)))
    check_writable(out)
    n_vocab = max((head["n_vocab"] for _, _, head in read if head.get("n_vocab") is not None), default=None)
    merged = Tenants.of_logs([t for _, logs, _ in read for t in logs], budget, tenant_budget, vocab, scope, n_vocab)
    merged.save(out)
    return merged.describe()
