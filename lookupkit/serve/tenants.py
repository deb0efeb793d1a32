"""Whose text a request may draft from under `lookupkit serve --learn history`: its tenant's only.

One History shared by every client lets one client's text draft another's, and acceptance timing (or
/completion's draft_n_accepted) tells the second what the first sent. So a request belongs to a tenant:
the API key it authenticated with (--api-key), else the OpenAI `user` field of its body, else the one
anonymous tenant; with --learn-scope tenant (the default) it drafts from and learns into its tenant's
History alone. A tenant id keeps only a hash ("key:" or "user:" and 16 hex digits of the sha256), never
the key or the user string. --learn-scope global keeps one History for everyone, on purpose.

Memory is bounded whatever ids clients send: the budget is split into Histories of --tenant-budget
tokens, and a tenant seen when that many are kept takes the place of the least recently used one.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

import numpy as np

from ..draft.history import BUDGET_MIN, History, check_budget
from ..errors import InputError
from ..formats.history_state import GLOBAL, TenantLog
from ..rules import HISTORY_TENANTS, LEARN_SCOPES as SCOPES, TENANTS_MAX

ANONYMOUS = "anonymous"


def tenant_id(key: str | None = None, user: str | None = None) -> str:
    """The tenant of a request that authenticated with `key` (None: no keys are set) and sent `user`."""
    if key is not None:
        return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    if user:
        return "user:" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return ANONYMOUS


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InputError(f"--learn-scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return scope


def default_tenant_budget(budget: int) -> int:
    """--tenant-budget's default: the budget shared by rules.HISTORY_TENANTS tenants (at least a History's least)."""
    return min(budget, max(BUDGET_MIN, budget // HISTORY_TENANTS))


def check_tenant_budget(tenant_budget, budget: int) -> int:
    tenant_budget = check_budget(tenant_budget, "--tenant-budget")
    if tenant_budget > budget:
        raise InputError(f"--tenant-budget {tenant_budget:,} is more than the --history-budget of {budget:,} tokens "
                         f"the tenants share: give a smaller one")
    return tenant_budget


def newest_first(logs: list, budget: int) -> np.ndarray:
    """One log of at most `budget` positions from several (the most recently used first): their newest
    sequences, then each one's second newest, and so on (a sequence already taken is not taken again)
    until the next does not fit; oldest first, each led by -1, as a History holds them."""
    stacks = [_sequences(log)[::-1] for log in logs]
    taken, seen, room = [], set(), budget
    for rank in range(max(map(len, stacks), default=0)):
        for stack in stacks:
            if rank >= len(stack) or stack[rank].tobytes() in seen:
                continue
            seq = stack[rank]
            if len(seq) + 1 > room:
                if taken:
                    return _joined(taken)
                seq = seq[-(room - 1):]  # the newest sequence alone is too long: its newest tokens, as History keeps
            seen.add(seq.tobytes())
            taken.append(seq)
            room -= len(seq) + 1
    return _joined(taken)


def _sequences(log: np.ndarray) -> list:
    """The log's sequences, oldest first (the first may have lost its start to eviction)."""
    parts = [p[1:] if len(p) and p[0] == -1 else p for p in np.split(log, np.flatnonzero(log == -1))]
    return [p for p in parts if len(p)]


def _joined(newest_first_seqs: list) -> np.ndarray:
    out = [np.concatenate([[-1], s]).astype(np.int32) for s in reversed(newest_first_seqs)]
    return np.concatenate(out) if out else np.zeros(0, np.int32)


class Tenants:
    """Every tenant's History within `budget` tokens: at most min(budget // tenant_budget, rules.TENANTS_MAX)
    Histories of tenant_budget tokens, and a new tenant beyond that drops the least recently used tenant's.
    Scope "global": one History of the whole budget, whoever asks. Thread-safe."""

    def __init__(self, budget: int, tenant_budget: int | None, vocab, scope: str = "tenant",
                 n_vocab: int | None = None):
        self.budget, self.scope, self.vocab = check_budget(budget, "--history-budget"), check_scope(scope), vocab
        self.n_vocab = n_vocab  # the vocabulary's size, recorded in the state file (None: not known)
        if scope == "global":
            self.tenant_budget, self.most = self.budget, 1
        else:
            self.tenant_budget = check_tenant_budget(
                default_tenant_budget(self.budget) if tenant_budget is None else tenant_budget, self.budget)
            self.most = min(self.budget // self.tenant_budget, TENANTS_MAX)
        self.dropped = 0  # tenants whose History made room for another's
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, list] = OrderedDict()  # id -> [History, last used (ms)], least recent first
        self._clock = 0  # the last "last used": ms since the epoch, one more if the clock has not moved on

    def history(self, tenant: str) -> History:
        """The tenant's History (made empty if it has none), now its most recently used."""
        tenant = GLOBAL if self.scope == "global" else tenant
        with self._lock:
            kept = self._kept.pop(tenant, None)
            if kept is None:
                while len(self._kept) >= self.most:
                    self._kept.popitem(last=False)
                    self.dropped += 1
                kept = [History(self.tenant_budget, vocab=self.vocab), 0]
            self._clock = kept[1] = max(int(time.time() * 1e3), self._clock + 1)  # the order survives a save
            self._kept[tenant] = kept
            return kept[0]

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def n_tokens(self) -> int:
        """Positions in use in all tenants' Histories."""
        with self._lock:
            return sum(h.n_tokens for h, _ in self._kept.values())

    @property
    def learnt(self) -> int:
        with self._lock:
            return sum(h.learnt for h, _ in self._kept.values())

    def snapshot(self) -> list:
        """Every tenant's log as a formats.history_state.TenantLog (least recently used first), each copied
        under its History's lock."""
        with self._lock:
            kept = list(self._kept.items())
        out = []
        for tenant, (hist, used) in kept:
            log, learnt = hist.snapshot()
            out.append(TenantLog(tenant, log, hist.budget, learnt, used))
        return out

    def save(self, path) -> None:
        """Write every tenant's History to `path` atomically (formats/history_state.py, version 2)."""
        from ..formats import history_state

        history_state.write(path, self.snapshot(), vocab=self.vocab, budget=self.budget,
                            tenant_budget=self.tenant_budget, n_vocab=self.n_vocab)

    @classmethod
    def of_logs(cls, logs: list, budget: int, tenant_budget: int | None, vocab, scope: str = "tenant",
                n_vocab: int | None = None) -> "Tenants":
        """Tenants holding TenantLogs (a state file's). Scope "global": all of them, newest first, in the one
        History; scope "tenant": each in its own, a shared History's (GLOBAL: --learn-scope global's, a
        version 1 file's) as the anonymous tenant's, the most recently used kept when there are too many."""
        out = cls(budget, tenant_budget, vocab, scope, n_vocab)
        groups: dict[str, list] = {}
        for t in sorted(logs, key=lambda t: -t.last_used_ms):
            groups.setdefault(GLOBAL if scope == "global" else ANONYMOUS if t.id == GLOBAL else t.id, []).append(t)
        newest = sorted(groups.items(), key=lambda g: -g[1][0].last_used_ms)[:out.most]
        for tenant, group in reversed(newest):
            log = group[0].log if len(group) == 1 else newest_first([t.log for t in group], out.tenant_budget)
            hist = History.of_log(log, out.tenant_budget, vocab, sum(t.learnt for t in group))
            out._kept[tenant] = [hist, group[0].last_used_ms]
            out._clock = max(out._clock, group[0].last_used_ms)
        return out

    def describe(self) -> str:
        scope = ("one History for every client (--learn-scope global)" if self.scope == "global" else
                 f"{len(self):,} tenants kept apart, at most {self.most:,} of {self.tenant_budget:,} tokens")
        return f"{scope}; {self.n_tokens:,} of {self.budget:,} positions, {self.learnt:,} sequences learnt"
