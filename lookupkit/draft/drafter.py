"""`Drafter`: llama.cpp-exact prompt-lookup drafts for any inference loop, from Python.

It keeps the three caches of llama.cpp's `llama-lookup`: a context cache of the current sequence
(kept in sync incrementally), a dynamic cache (an -lcd file and/or what earlier sequences taught it)
and an optional static cache, and drafts with llama.cpp's compiled rule (draft.rule) or, with
policy="lookupkit", with lookupkit's policy (policy.chain: it drafts only what pays at `verify_cost`).

    drafter = Drafter(static="wiki.lkc")
    draft = drafter.draft(tokens, n_draft=8)   # tokens: the whole sequence so far
    ... verify the draft with the model, append the accepted tokens + the sampled one to `tokens` ...
    drafter.reset(tokens)                      # end of the sequence: learn it into the dynamic cache

With policy="lookupkit", `history=History(...)` (draft.history) adds what earlier sequences said: one History
may be shared by many Drafters, and each learns its sequences into it at reset, instead of into its dynamic
cache (which grows without bound, to gigabytes over many sequences; the History keeps its budget).
"""

from __future__ import annotations

import os

import numpy as np

from .rule import Thresholds, draft_tokens
from ..static.source import grow_memo, new_memo, static_arrays
from ..errors import InputError
from ..counts.flat import FlatCache
from ..rules import token_ids
from ..formats import read_ngrams
from ..static.cache import StaticCache
from ..counts.tables import NgramTable
from ..rules import DEFAULT_DRAFT, MAX_DRAFT, SOURCE_NAMES, check_n_draft
from ..counts.match_index import clear_index, ensure_room, index_positions
from ..verify_cost import VerifyCost
from ..policy.confidence import load as load_table
from ..verify_cost import DEFAULT_COST
from ..policy.chain import check_policy, learn, make_policy, policy_draft, with_static
from ..policy.suffix_source import reset as reset_suffix
from .history import History
from ..policy.trust import fresh as fresh_trust, params_of


class Drafter:
    """Drafts from a context cache of the current sequence, a dynamic and an optional static cache.

    static: a StaticCache, a path to any static cache file, or None. dynamic: an NgramTable, a path to
    a llama.cpp legacy cache (-lcd), or None. expect_vocab: the Tokenizer (or vocab fingerprint) of the
    tokens you will pass; a static cache built for another vocabulary is refused (VocabMismatchError).
    policy: "llama.cpp" (the default, exact) or "lookupkit"; for the latter, verify_cost (a number C per
    drafted token, or a `lookupkit calibrate` curve file) and policy_table (a confidence table file,
    default: the bundled one; a static cache's suffix index is drafted from when the table has learnt it),
    history (a draft.history.History to draft from and to learn each sequence into at reset, or None), and
    trust (the policy's online correction of its table on the text at hand, policy.trust: True, False for the
    table alone, or (prior, window); like the dynamic cache, it keeps what a sequence taught unless that
    sequence ends with reset(learn=False)).
    Thread safety: the static cache and a History may be shared by any number of
    Drafters in any threads; one Drafter follows one sequence, from one thread at a time.
    """

    def __init__(self, static=None, dynamic=None, *, expect_vocab: str | None = None,
                 thresholds: Thresholds | None = None, policy: str = "llama.cpp", verify_cost=DEFAULT_COST,
                 policy_table=None, history: History | None = None, trust=True):
        if isinstance(static, (str, os.PathLike)):
            static = StaticCache.open(static, expect_vocab=expect_vocab)
        elif static is not None and hasattr(static, "check_vocab"):
            static.check_vocab(expect_vocab)
        if isinstance(dynamic, (str, os.PathLike)):
            dynamic = read_ngrams(dynamic)
        if dynamic is not None and not isinstance(dynamic, NgramTable):
            raise InputError(f"dynamic must be an NgramTable or a path to a legacy cache, got {type(dynamic).__name__}")
        self.thresholds = thresholds or Thresholds()
        self.static = static
        self._st = static_arrays(static, self.thresholds.static)
        self._memo = new_memo(1 << 12)
        self.policy = check_policy(policy)
        trust = params_of(trust)
        self._pol = None
        if history is not None:
            if not isinstance(history, History):
                raise InputError(f"history must be a lookupkit History, got {type(history).__name__}")
            if self.policy != "lookupkit":
                raise InputError("a history is drafted from by policy='lookupkit' only (llama.cpp's rule has no such "
                                 "source)")
            history.check_vocab(expect_vocab)
        self.history = history
        if self.policy == "lookupkit":
            cost = VerifyCost.of(verify_cost)
            self._pol = make_policy(load_table(policy_table), cost.at, MAX_DRAFT, getattr(static, "high", None),
                                    getattr(static, "suffix", None), history.view() if history is not None else None,
                                    trust)
            self._buf = (np.zeros(MAX_DRAFT, np.int32), np.zeros(MAX_DRAFT, np.int8))
        self._dyn = FlatCache.from_table(dynamic, thresholds=self.thresholds.dynamic)
        self._ctx = FlatCache(1024, 1024, self.thresholds.context)
        self._seq = np.zeros(1024, np.int32)
        self._drafted_at = -1  # where the last policy draft was made (its trust learns what followed), -1: none
        self._start_over()
        self.last_sources: list[str] = []

    @property
    def sequence(self) -> np.ndarray:
        """The sequence the context cache holds (a copy)."""
        return self._seq[:self._n].copy()

    def accept(self, tokens) -> None:
        """Append tokens (accepted drafts, sampled tokens, a prompt) to the sequence and its context cache."""
        new = token_ids(tokens, "tokens")
        if not len(new):
            return
        n = self._n + len(new)
        if n > len(self._seq):
            grown = np.zeros(max(n, 2 * len(self._seq)), np.int32)
            grown[:self._n] = self._seq[:self._n]
            self._seq = grown
        self._seq[self._n:n] = new
        if self._pol is not None:  # the policy's longest-match index follows the sequence too
            index = ensure_room(self._pol.index, self._seq, self._n, len(new))
            index_positions(index, self._seq, max(self._n, 1), n)
            self._pol = self._pol._replace(index=index)
        self._n = n
        self._ctx.update(self._seq[:n], nnew=len(new))

    def draft(self, tokens=None, n_draft: int = DEFAULT_DRAFT, price=None) -> list[int]:
        """Up to n_draft tokens likely to follow `tokens` (the whole sequence so far; None = as accepted).

        If `tokens` extends the sequence seen so far, only the new tokens are counted; if it does not,
        the context cache starts over from `tokens` (the old sequence is dropped, not learnt).
        price (policy="lookupkit"): (cost, others) for a step shared with other sequences: cost[k] what the step
        costs with k drafted tokens more, relative to none (verify_cost.StepPricer.offer), others the tokens
        the step's other rows are expected to yield; the draft then maximises the step's tokens per cost, and
        `expected` is what this one is expected to yield (a shared step's plan may take another prefix: plan, take).
        """
        n_draft = check_n_draft(n_draft)
        if tokens is not None:
            self._sync(token_ids(tokens, "tokens"))
        self._learn_outcome()
        if self._pol is None:
            out, codes = draft_tokens(self._seq[:self._n], int(n_draft), self._ctx.c, self._dyn.c, self._st, self._memo)
        else:
            drafted, sources = self._buf
            pol = self._pol
            pol.step[0] = 0.0
            if price is not None:
                cost, others = price
                pol = pol._replace(cost=np.asarray(cost, np.float64))
                pol.step[0] = others
            if self.history is None:
                k = policy_draft(self._seq, self._n, n_draft, self._ctx.c, self._dyn.c, self._st, self._memo,
                                 pol, drafted, sources, 0)
            else:
                with self.history.lock:  # its log and index change only under the lock
                    k = policy_draft(self._seq, self._n, n_draft, self._ctx.c, self._dyn.c, self._st, self._memo,
                                     pol, drafted, sources, 0)
            out, codes = drafted[:k].copy(), sources[:k]
            self._drafted_at = self._n
        self._memo = grow_memo(self._memo)
        self.last_sources = [SOURCE_NAMES[int(c)] for c in codes]
        return out.tolist()

    def plan(self) -> np.ndarray:
        """E[j], j = 0..L: the tokens the first j tokens of the last policy call's chain would be expected to yield
        (a shared step's plan chooses among them: verify_cost.StepPricer.plan); [1.0] without the policy."""
        if self._pol is None:
            return np.ones(1)
        return self._pol.step[3:4 + int(self._pol.step[2])].copy()

    def take(self, d: int) -> list[int]:
        """The first d tokens of the last policy call's chain as its draft instead (d < len(plan())): what the
        step's plan chose; `expected` and `last_sources` follow."""
        if self._pol is None or not 0 <= d <= int(self._pol.step[2]):
            raise InputError(f"take({d}): the last call's chain has {len(self.plan()) - 1} tokens"
                             + ("" if self._pol is not None else " (llama.cpp's rule has no chain)"))
        drafted, sources = self._buf
        self._pol.step[1] = self._pol.step[3 + d]
        self.last_sources = [SOURCE_NAMES[int(c)] for c in sources[:d]]
        return drafted[:d].tolist()

    @property
    def expected(self) -> float:
        """The tokens the last policy draft is expected to yield (its accepted drafts and the next one), by the
        table's probabilities; 1.0 without the policy."""
        return float(self._pol.step[1]) if self._pol is not None else 1.0

    def reset(self, tokens=None, learn: bool = True) -> None:
        """End the sequence: learn it (unless learn=False) into the history if there is one, else merge its
        context cache into the dynamic one; then clear it. learn=False also forgets what the sequence taught
        the policy's trust, so that nothing of it reaches the next sequence's drafts.

        `tokens`, if given, is the final sequence: what it adds to the sequence seen so far is counted first.
        """
        if tokens is not None:
            self._sync(token_ids(tokens, "tokens"))
        self._learn_outcome()
        if learn and self.history is not None:
            self.history.learn(self._seq[:self._n])
        elif learn:
            self._dyn.merge(self._ctx)
        elif self._pol is not None:  # what the sequence taught the trust goes with it
            self._pol.trust.evidence[:] = self._trust_before
        self._start_over()

    def use_static(self, static: StaticCache | None) -> None:
        """Draft from another static cache from the next call on, all else kept (a server's -lcs replaced while
        it runs); checking its vocabulary is the caller's job."""
        self.static = static
        self._st = static_arrays(static, self.thresholds.static)
        self._memo = new_memo(1 << 12)
        if self._pol is not None:
            self._pol = with_static(self._pol, getattr(static, "high", None), getattr(static, "suffix", None))

    def use_history(self, history: History) -> None:
        """Draft from and learn into `history` from now on (another of the same vocabulary, e.g. the next
        request's tenant's: a server's slot serves many); the Drafter must have been made with a history.
        Another History also starts the policy's trust afresh: how the drafts of one history's sequences fared
        must not shape the drafts from another (a tenant would see it in its drafted counts)."""
        if self.history is None or not isinstance(history, History):
            raise InputError("use_history swaps one History for another: make the Drafter with history=History()")
        if history is not self.history:
            history.check_vocab(self.history.vocab)
            self.history = history
            self._pol = self._pol._replace(history=history.view(), trust=fresh_trust(self._pol.trust))
            self._trust_before = self._pol.trust.evidence.copy()  # nor may a reset(learn=False) bring it back

    def dynamic_table(self) -> NgramTable:
        """The dynamic cache's counts (to save as an -lcd file), saturated at 2^31-1."""
        return self._dyn.to_table()

    def _learn_outcome(self) -> None:
        """Let the policy's trust (policy.trust) score its last call against the tokens that followed it."""
        if self._drafted_at >= 0 and self._n > self._drafted_at:
            learn(self._pol, self._seq, self._drafted_at, self._n, self._buf[0], 0)
            self._drafted_at = -1

    def _sync(self, tokens: np.ndarray) -> None:
        n = self._n
        if len(tokens) >= n and np.array_equal(tokens[:n], self._seq[:n]):
            self.accept(tokens[n:])
        else:
            self._start_over()
            self.accept(tokens)

    def _start_over(self) -> None:
        """Drop the sequence: its context cache and, under the policy, its longest-match index and the
        suffix source's previous lookup."""
        self._ctx.clear()
        self._drafted_at = -1
        if self._pol is not None:
            clear_index(self._pol.index)
            reset_suffix(self._pol.suffix)
            self._trust_before = self._pol.trust.evidence.copy()  # reset(learn=False) goes back to it
        self._n = 0
