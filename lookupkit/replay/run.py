"""The lookup-stats replay, one entry point for every draft source: draft over known text as if it were being
generated, and count hits.

`Replay(source, n_draft, n_ctx, ...)` is one replay of a source (lookup: llama.cpp's rule over its caches;
policy: lookupkit's policy over them; ngram: the longest earlier match in the sequence; suffix: the run after the
longest match in the static cache's corpus). Made, it fills in the source's defaults from rules.SOURCE_DEFAULTS
and checks them (before any cache is loaded); `check_caches(static)` refuses or warns about what the caches lack
for it; `run(tokens, static, dynamic)` picks the replay that runs it (`replay` below, replay.longest_match or
replay.suffix_run) and returns (ReplayTrace, final dynamic cache); `other()` is the other policy's replay on the
same caches, which lookup-stats' verdict compares this one with.

`replay` is the lookup-cache replay: the readable reference loop (replay.loop_reference) or the fast engine (the
compiled loop, replay.loop), both returning (ReplayTrace, final dynamic cache as an NgramTable).
n_ctx is used as given: llama.cpp pads -c up to a multiple of 32, lookupkit does not (the
reference vectors use n_ctx 8).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..counts.dict_cache import NgramCache
from ..counts.tables import NgramTable
from ..policy.confidence import load as load_tables
from ..policy.chain import make_policy, suffix_on
from ..errors import InputError, LookupkitWarning
from ..rules import DEFAULT_DRAFT, SOURCE_DEFAULTS, check_replay, DEFAULT_CTX
from ..verify_cost import DEFAULT_COST, VerifyCost
from . import longest_match, suffix_run
from .loop import replay_fast
from .loop_reference import replay_reference
from .trace import ReplayTrace

ENGINES = ("reference", "fast")
SOURCES = tuple(SOURCE_DEFAULTS)  # lookup, policy, ngram, suffix


@dataclass(frozen=True, eq=False)
class Replay:
    """One lookup-stats replay of `source` (one of SOURCES). A parameter left None takes the source's default
    (rules.SOURCE_DEFAULTS); min_match and max_match belong to the longest-match sources (ngram: both; suffix:
    min_match). `tables` are the policy's confidence tables (policy.confidence.load; None: the bundled ones),
    `cost` the verify cost it drafts for and a verdict is given at (None: verify_cost.DEFAULT_COST)."""

    source: str = "lookup"
    n_draft: int | None = None
    n_ctx: int = DEFAULT_CTX
    min_match: int | None = None
    max_match: int | None = None
    engine: str = "fast"
    tables: tuple | None = None
    cost: VerifyCost | None = None

    def __post_init__(self):
        if self.source not in SOURCES:
            raise InputError(f"unknown source {self.source!r}; choose one of {', '.join(SOURCES)}")
        if self.source in ("ngram", "suffix") and self.engine != "fast":  # (lookup, policy: `replay` checks it)
            raise InputError(f"source {self.source} replays with the fast engine only, not {self.engine!r}")
        unused = [k for k in ("min_match", "max_match") if getattr(self, k) is not None
                  and k not in SOURCE_DEFAULTS[self.source]]
        if unused:
            raise InputError(f"source {self.source} takes no {' or '.join(unused)}")
        p = self.params
        if self.source == "ngram":
            longest_match.check_params(p["n_draft"], p["min_match"], p["max_match"])
        elif self.source == "suffix":
            suffix_run.check_params(p["n_draft"], p["min_match"])

    @property
    def params(self) -> dict:
        """The source's parameters (n_draft, and its match lengths), each as given or else its default; a
        default min_match is at most a given max_match."""
        given = {k: getattr(self, k) for k in SOURCE_DEFAULTS[self.source] if getattr(self, k) is not None}
        p = {**SOURCE_DEFAULTS[self.source], **given}
        if self.min_match is None and "max_match" in p:
            p["min_match"] = min(p["min_match"], p["max_match"])
        return p

    @property
    def verdict_cost(self) -> VerifyCost:
        """The verify cost the policy drafts for and a verdict is given at: the one given, else DEFAULT_COST."""
        return self.cost if self.cost is not None else VerifyCost.of(DEFAULT_COST)

    def check_caches(self, static) -> None:
        """Refuse caches the source cannot draft from (suffix: a static cache with a suffix index); for the
        policy, warn about what the static cache lacks or holds unused."""
        if self.source == "suffix":
            _suffix_index(static)
        if self.source != "policy":
            return
        if static is None or len(static.orders) == 1:
            warnings.warn(LookupkitWarning(
                "--policy lookupkit: " + ("no static cache (-lcs)" if static is None else f"{static.name} holds no "
                "higher orders") + ": it drafts from what there is; build the static cache with lookup-create "
                "--orders 2-6 for the rest"))
        if getattr(static, "suffix", None) is not None and not suffix_on(self._tables()[0]):
            warnings.warn(LookupkitWarning(
                f"--policy lookupkit: {static.name} has a suffix index, but the policy table was learnt without one "
                "(or tune-policy found that it did not pay on its held-out text), so the policy does not draft from "
                f"it: learn a table with lookupkit tune-policy --cache {static.name} and pass it with --policy-table"))

    def run(self, tokens, static=None, dynamic: NgramTable | None = None) -> tuple[ReplayTrace, NgramTable | None]:
        """Replay `tokens` (full chunks of n_ctx) from a StaticCache and an -lcd file's table (either None);
        returns the trace, its extra naming the source, engine and input size, and the dynamic cache after the
        last chunk (None for the cache-free sources ngram and suffix)."""
        p = self.params
        if self.source == "ngram":
            trace, final = longest_match.replay_ngram(tokens, self.n_ctx, p["n_draft"], p["min_match"],
                                                      p["max_match"]), None
        elif self.source == "suffix":
            trace, final = suffix_run.replay_suffix(tokens, self.n_ctx, _suffix_index(static), p["n_draft"],
                                                    p["min_match"]), None
        else:
            pol = policy_over(static, self._tables(), self.verdict_cost, p["n_draft"]) \
                if self.source == "policy" else None
            trace, final = replay(tokens, self.n_ctx, p["n_draft"], static, dynamic, engine=self.engine, policy=pol)
            if pol is not None:
                trace.extra.update(policy="lookupkit", policy_cost=self.verdict_cost.describe())
        trace.extra.update(source="lookup" if self.source == "policy" else self.source, engine=self.engine,
                           n_input=len(tokens))
        return trace, final

    def other(self) -> "Replay":
        """The other policy's replay on the same caches, which a verdict compares this one with: llama.cpp's rule
        for lookupkit's policy and the other way round (with the bundled tables), with the fast engine, at the
        given n_draft, else at that policy's default."""
        if self.source not in ("lookup", "policy"):
            raise InputError(f"source {self.source} has no other policy to compare with")
        other = "lookup" if self.source == "policy" else "policy"
        return Replay(other, self.n_draft, self.n_ctx, cost=self.cost)

    def _tables(self) -> tuple:
        return self.tables if self.tables is not None else load_tables()


def policy_over(static, tables: tuple, cost: VerifyCost, n_draft: int):
    """lookupkit's policy (policy.chain.make_policy) over a static cache's sources beyond its 2-grams: its
    higher orders and its suffix index (either absent, as with no static cache)."""
    return make_policy(tables, cost.at, n_draft, getattr(static, "high", None), getattr(static, "suffix", None))


def _suffix_index(static):
    """The static cache's suffix index, which --source suffix drafts from."""
    if static is None or getattr(static, "suffix", None) is None:
        raise InputError("--source suffix drafts from a static cache's suffix index: give -lcs a cache built "
                         "with lookup-create --suffix-index" + (f" ({static.name} has none)" if static else ""))
    return static.suffix


def replay(tokens, n_ctx: int = DEFAULT_CTX, n_draft: int = DEFAULT_DRAFT, static=None,
           dynamic: NgramTable | None = None, engine: str = "fast", policy=None) -> tuple[ReplayTrace, NgramTable]:
    """Run lookup-stats over `tokens`; returns the trace and the dynamic cache after the last chunk.

    `static` is a StaticCache (or, for the reference engine, anything with `.find(t0, t1)`),
    `dynamic` the table of an -lcd file, `policy` a policy.chain.make_policy (fast engine) to draft with
    lookupkit's policy instead of llama.cpp's rule. Only full chunks of n_ctx tokens are replayed.
    """
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    if engine == "fast":
        return replay_fast(tokens, n_ctx, n_draft, static, dynamic, policy=policy)  # it checks its inputs
    if policy is not None:
        raise InputError("the reference engine replays llama.cpp's rule only; lookupkit's policy runs on the fast one")
    if engine != "reference":
        raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    check_replay(len(tokens), n_ctx, n_draft)
    dyn = NgramCache.from_table(dynamic) if dynamic is not None else NgramCache()
    trace = replay_reference(tokens.tolist(), n_ctx, n_draft, static, dyn)
    return trace, dyn.to_table()
