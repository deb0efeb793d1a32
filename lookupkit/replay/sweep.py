"""Will drafting pay? The expected speed-up of a replay for a given verify cost, and parameter sweeps.

The model (`--verify-cost C`): plain decoding costs 1 unit per token. One speculative step verifies
the k drafted tokens together with the next position in one batch, which costs 1 + C*k units (C =
the relative extra cost of each drafted position; 0 = free, 1 = as dear as decoding it alone), and
yields accepted + 1 tokens (the accepted prefix, then the model's own token). Over the replay's draft
calls: speed-up = sum(accepted + 1) / sum(1 + C*k) = (n_accept + calls) / (calls + C * n_drafted).
It breaks even at C = n_accept / n_drafted (the acceptance rate): drafting pays only for C below it.
A model of the verify step alone: sampling, drafting time and batching effects are left out.
"""

from __future__ import annotations

import itertools

from . import longest_match as ngram_source
from .loop import replay_fast
from .run import policy_over
from ..policy.confidence import load as load_tables
from ..draft.rule import Thresholds
from ..verify_cost import DEFAULT_COST
from ..errors import InputError
from ..rules import POLICY_DRAFT, SOURCE_DEFAULTS, DEFAULT_CTX
from ..counts.flat import LAX, STRICT
from ..verify_cost import REPORTED_COSTS, VerifyCost, break_even, speedup
from .trace import ReplayTrace

SOURCES = ("lookup", "ngram", "policy")  # policy: lookupkit's policy over the lookup caches
AXES = {"lookup": ("n_draft", "thresholds"), "ngram": ("n_draft", "min_match", "max_match"),
        "policy": ("n_draft", "policy_cost")}
DEFAULTS = {"lookup": {**SOURCE_DEFAULTS["lookup"], "thresholds": None}, "ngram": {**SOURCE_DEFAULTS["ngram"]},
            "policy": {**SOURCE_DEFAULTS["policy"], "policy_cost": DEFAULT_COST}}  # each axis' value when not swept
THRESHOLD_VARIANTS = [("llama.cpp", None), ("ctx-strict", Thresholds(context=STRICT)),
                      ("dyn-lax", Thresholds(dynamic=LAX))]
"""The default thresholds axis: llama.cpp's, the context cache held to the dynamic's strict thresholds,
and the dynamic cache given the context's lax ones."""
SWEPT_MAX = 8  # a swept length (--draft, --ngram-min-match) runs 1..8
COLUMNS = ("n_draft", "min_match", "max_match", "thresholds", "policy_cost", "n_drafted", "n_accept", "accept", "coverage",
           "tokens_per_verify", "us_per_drafted_token", "speedup", "break_even_cost", "speedup_at_policy_cost")


def expected_speedup(trace: ReplayTrace, verify_cost) -> dict:
    """The cost model (lookupkit.verify_cost) for one replay: speed-up at this cost (a number or a VerifyCost), and
    the constant cost where drafting breaks even."""
    cost = verify_cost if isinstance(verify_cost, VerifyCost) else VerifyCost(constant=verify_cost)
    return {"verify_cost": cost.describe(), "speedup": speedup(trace.n_drafted, trace.n_accepted, cost),
            "break_even_cost": break_even(trace.n_drafted, trace.n_accepted)}


def make_grid(**axes) -> list[dict]:
    """Every combination of the given axes, e.g. make_grid(n_draft=range(1, 9), min_match=[2, 3])."""
    names = list(axes)
    values = [list(v) if isinstance(v, (list, tuple, range)) else [v] for v in axes.values()]
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


def default_grid(source: str = "lookup", n_draft: int | None = None, min_match: int | None = None,
                 max_match: int | None = None) -> list[dict]:
    """lookup-stats --sweep's grid: what is given stays fixed, the rest is swept (lookup: --draft 1..8 x
    THRESHOLD_VARIANTS; ngram: --ngram-min-match 1..min(8, max_match) at --draft 3)."""
    if source == "policy":
        return make_grid(n_draft=POLICY_DRAFT if n_draft is None else n_draft, policy_cost=list(REPORTED_COSTS))
    if source == "ngram":
        max_match = ngram_source.DEFAULT_MAX_MATCH if max_match is None else max_match
        return make_grid(n_draft=ngram_source.DEFAULT_DRAFT if n_draft is None else n_draft, max_match=max_match,
                         min_match=range(1, min(SWEPT_MAX, max_match) + 1) if min_match is None else min_match)
    return make_grid(n_draft=range(1, SWEPT_MAX + 1) if n_draft is None else n_draft, thresholds=THRESHOLD_VARIANTS)


def sweep(tokens, static=None, dynamic=None, grid: list[dict] | None = None, *, n_ctx: int = DEFAULT_CTX,
          source: str = "lookup", verify_cost: float | None = None, tables=None) -> list[dict]:
    """Replay `tokens` with the fast engine once per grid point; one row of results per point.

    Grid axes: n_draft, and thresholds (a draft.rule.Thresholds, or (label, Thresholds)) for the
    lookup source; n_draft, min_match, max_match for the ngram source; n_draft and policy_cost (the
    verify cost lookupkit's policy drafts for) for the policy, whose confidence `tables` default to
    the bundled ones.
    """
    if source not in SOURCES:
        raise InputError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}")
    grid = grid or make_grid(n_draft=range(1, SWEPT_MAX + 1))
    rows = []
    for point in grid:
        unknown = set(point) - set(AXES[source])
        if unknown:
            raise InputError(f"cannot sweep {', '.join(sorted(unknown))} with --source {source}")
        p = {**DEFAULTS[source], **point}
        if source == "policy":
            tables = tables if tables is not None else load_tables()
            cost = VerifyCost.of(p["policy_cost"])
            pol = policy_over(static, tables, cost, p["n_draft"])
            trace, _ = replay_fast(tokens, n_ctx, p["n_draft"], static, dynamic, policy=pol)
            row = {"n_draft": p["n_draft"], "policy_cost": cost.describe(),
                   "speedup_at_policy_cost": speedup(trace.n_drafted, trace.n_accepted, cost)}
        elif source == "lookup":
            label, thresholds = p["thresholds"] if isinstance(p["thresholds"], tuple) else ("llama.cpp", p["thresholds"])
            trace, _ = replay_fast(tokens, n_ctx, p["n_draft"], static, dynamic, thresholds)
            row = {"n_draft": p["n_draft"], "thresholds": label}
        else:
            trace = ngram_source.replay_ngram(tokens, n_ctx, p["n_draft"], p["min_match"], p["max_match"])
            row = {"n_draft": p["n_draft"], "min_match": p["min_match"], "max_match": p["max_match"]}
        s = trace.summary()
        row.update({k: s[k] for k in ("n_drafted", "n_accept", "accept", "coverage", "tokens_per_verify",
                                      "us_per_drafted_token")})
        if verify_cost is not None:
            row.update(expected_speedup(trace, verify_cost))
        rows.append(row)
    return rows


def sweep_table(rows: list[dict]) -> str:
    """The rows as one aligned text table (columns that no row has are left out)."""
    cols = [c for c in COLUMNS if any(c in r for r in rows)]
    cells = [[_fmt(c, r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _fmt(col: str, value) -> str:
    if value is None:
        return "-"
    if col == "accept":
        return f"{value:.3f}%"
    if col == "coverage":
        return f"{100 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
