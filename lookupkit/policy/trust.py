"""The policy's trust in each family of sources on the text at hand: a table learnt elsewhere, corrected online.

A confidence table (policy.confidence) says how often a source's candidate was right where the table was learnt;
on another text, another model or another cache it can be wrong in either direction, and a source it
over-rates costs verify time. So the policy also keeps, per family of sources (context, dynamic, static,
longest match, suffix, history), how often that family's candidates turned out right on this text against how
often the table said they would, and scales every candidate's table probability by the ratio

    f = (A + s) / (S + s),   A = right candidates, S = the table's probabilities summed over the same ones,

each observation discounted by (1 - 1/window) per newer one of its family, and s a prior that keeps f at 1
until evidence comes. The families' factors choose the candidate; one more row, the chain, scores the chosen
token against the probability the policy gave it after the agreement table (policy.confidence), and its factor
scales that probability, which decides how far the chain is drafted: agreeing sources can together over-rate a
token that no family over-rates alone. A candidate is observed when the truth at its position becomes known: every family's
candidate at each chain position up to the first wrong draft (and the token after a fully accepted draft, if
the chain went that far), whether or not it was drafted. A declined family is therefore still watched, and is
drafted from again once it is right again. Nothing here changes which tokens are emitted: drafts are verified.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..errors import InputError
from ..kernels import kernel
from ..rules import TRUST_PRIOR, TRUST_WINDOW

FAMILIES = ("context", "dynamic", "static", "match", "suffix", "history")
N_FAMILIES = len(FAMILIES)
CHAIN = N_FAMILIES  # one more row: the drafted chain's own token, against the probability the policy gave it
N_ROWS = N_FAMILIES + 1

Trust = namedtuple("Trust", "params evidence tok p n")
Trust.__doc__ = """The online correction's state (one per drafted sequence stream): params float64 [prior s,
decay = 1 - 1/window] (s <= 0: off, every factor 1); evidence (N_ROWS, 2) float64 [S, A]; tok, p
(n_draft + 1, N_ROWS): each family's candidate (token, -1 = none) and table probability, and the chain's token and
probability, at each position of the last call's chain; n (1,) int64: the positions the last call computed."""


def new_trust(n_draft: int, prior: float, window: float) -> Trust:
    """Fresh state (no evidence) for chains of at most n_draft tokens; prior <= 0 switches the correction off."""
    decay = 1.0 - 1.0 / window if window > 0 else 0.0
    return Trust(np.array([prior, decay], np.float64), np.zeros((N_ROWS, 2), np.float64),
                 np.full((n_draft + 1, N_ROWS), -1, np.int64), np.zeros((n_draft + 1, N_ROWS), np.float64),
                 np.zeros(1, np.int64))


def fresh(trust: Trust) -> Trust:
    """The same parameters, no evidence (each replay starts from the table alone)."""
    return Trust(trust.params.copy(), np.zeros_like(trust.evidence), trust.tok.copy(), trust.p.copy(),
                 np.zeros(1, np.int64))


def params_of(trust) -> tuple[float, float]:
    """(prior, window) from a Drafter's `trust=`: True (rules.TRUST_PRIOR, TRUST_WINDOW), False (off) or a pair of
    numbers >= 0; anything else is one InputError."""
    if trust is True:
        return TRUST_PRIOR, TRUST_WINDOW
    if trust is False:
        return 0.0, 0.0
    try:
        prior, window = (float(x) for x in trust)
    except (TypeError, ValueError):
        prior = window = -1.0
    if not (prior >= 0 and window >= 0):  # also refuses NaN
        raise InputError(f"trust must be True, False or (prior, window) with both >= 0, got {trust!r}")
    return prior, window


@kernel
def factor(trust, g):
    s = trust.params[0]
    if s <= 0:
        return 1.0
    return (trust.evidence[g, 1] + s) / (trust.evidence[g, 0] + s)


@kernel
def clear_position(trust, j):
    for g in range(trust.tok.shape[1]):
        trust.tok[j, g] = -1
        trust.p[j, g] = 0.0


@kernel
def note(trust, j, g, tok, p):
    """Family g proposes tok with table probability p at chain position j (its most probable row wins)."""
    if p > trust.p[j, g]:
        trust.tok[j, g], trust.p[j, g] = tok, p


@kernel
def learn_outcome(trust, truth, base, n_known, chain, c0):
    """Score the last call's candidates: truth[base:n_known] is what followed the sequence it drafted after,
    chain[c0:] its chain (drafted or not). Positions are scored while the chain before them equals the truth."""
    decay = trust.params[1]
    for j in range(trust.n[0]):
        if base + j >= n_known:
            break
        t = truth[base + j]
        for g in range(trust.tok.shape[1]):
            if trust.tok[j, g] >= 0:
                trust.evidence[g, 0] = decay * trust.evidence[g, 0] + trust.p[j, g]
                trust.evidence[g, 1] = decay * trust.evidence[g, 1] + (1.0 if trust.tok[j, g] == t else 0.0)
        if chain[c0 + j] != t:
            break
    trust.n[0] = 0
