"""The verify-cost model and the sweep: numbers checked by hand and against single replays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lookupkit.draft.rule import Thresholds
from lookupkit.errors import InputError
from lookupkit.replay.longest_match import replay_ngram
from lookupkit.replay.loop import replay_fast
from lookupkit.replay.sweep import THRESHOLD_VARIANTS, default_grid, expected_speedup, make_grid, sweep, sweep_table
from lookupkit.replay.trace import ReplayTrace

TOKENS = np.array([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 1, 2, 3, 5] * 8, np.int32)


def trace_of(drafted, accepted) -> ReplayTrace:
    n = len(drafted)
    return ReplayTrace(n_ctx=64, n_draft=8, n_input=65, chunk=np.zeros(n, np.int32), pos=np.arange(n, dtype=np.int32),
                       n_drafted=np.array(drafted, np.int32), n_accepted=np.array(accepted, np.int32),
                       tokens=np.zeros(sum(drafted), np.int32), sources=np.ones(sum(drafted), np.int8))


def test_speedup_model_by_hand():
    # 3 calls: (4 drafted, 3 accepted), (2, 0), (0, 0): tokens 4 + 1 + 1 = 6; cost at C = 0.25: 2 + 1.5 + 1 = 4.5
    t = trace_of([4, 2, 0], [3, 0, 0])
    out = expected_speedup(t, 0.25)
    assert out["speedup"] == pytest.approx(6 / 4.5)
    assert out["break_even_cost"] == pytest.approx(3 / 6)
    assert expected_speedup(t, out["break_even_cost"])["speedup"] == pytest.approx(1.0)
    assert expected_speedup(t, 0.0)["speedup"] == pytest.approx(2.0)  # free verification: tokens per step


def test_nothing_drafted_means_no_speedup():
    out = expected_speedup(trace_of([0, 0], [0, 0]), 0.5)
    assert out["speedup"] == 1.0 and out["break_even_cost"] is None


@pytest.mark.parametrize("cost", [-0.1, math.inf, math.nan])
def test_bad_verify_cost(cost):
    with pytest.raises(InputError, match="--verify-cost"):
        expected_speedup(trace_of([1], [1]), cost)


def test_grid_is_the_cartesian_product():
    assert make_grid(n_draft=range(1, 3), min_match=[2, 3]) == [
        {"n_draft": 1, "min_match": 2}, {"n_draft": 1, "min_match": 3},
        {"n_draft": 2, "min_match": 2}, {"n_draft": 2, "min_match": 3}]
    assert make_grid(n_draft=4) == [{"n_draft": 4}]


def test_lookup_sweep_rows_equal_single_replays():
    rows = sweep(TOKENS, grid=make_grid(n_draft=[1, 4]), n_ctx=32, verify_cost=0.1)
    for row in rows:
        trace, _ = replay_fast(TOKENS, 32, row["n_draft"])
        s = trace.summary()
        assert (row["n_drafted"], row["n_accept"]) == (s["n_drafted"], s["n_accept"])
        assert row["speedup"] == pytest.approx(expected_speedup(trace, 0.1)["speedup"])
    assert rows[1]["n_drafted"] > rows[0]["n_drafted"]


def test_threshold_axis():
    strict = Thresholds(context=[[10**6] * 4, [100] * 4])
    rows = sweep(TOKENS, grid=make_grid(n_draft=4, thresholds=[("llama.cpp", None), ("strict", strict)]), n_ctx=32)
    assert [r["thresholds"] for r in rows] == ["llama.cpp", "strict"]
    assert rows[1]["n_drafted"] < rows[0]["n_drafted"]


def test_ngram_sweep_over_min_match():
    rows = sweep(TOKENS, grid=make_grid(min_match=range(1, 5), n_draft=3), n_ctx=32, source="ngram")
    for row in rows:
        s = replay_ngram(TOKENS, 32, 3, row["min_match"], 8).summary()
        assert (row["n_drafted"], row["n_accept"]) == (s["n_drafted"], s["n_accept"])
    drafted = [r["n_drafted"] for r in rows]
    assert drafted == sorted(drafted, reverse=True)  # a stricter gate never drafts more


def test_ngram_sweep_defaults_are_the_ngram_sources():
    """An ngram grid without n_draft uses the ngram source's own default (3), not lookup's 16."""
    rows = sweep(TOKENS, grid=make_grid(min_match=[2, 3]), n_ctx=32, source="ngram")
    assert [(r["n_draft"], r["min_match"], r["max_match"]) for r in rows] == [(3, 2, 8), (3, 3, 8)]
    assert rows[0]["n_drafted"] == replay_ngram(TOKENS, 32, 3, 2, 8).summary()["n_drafted"]


def test_default_grids_hold_what_is_given_and_sweep_the_rest():
    assert default_grid("lookup") == make_grid(n_draft=range(1, 9), thresholds=THRESHOLD_VARIANTS)
    assert default_grid("lookup", n_draft=5) == [{"n_draft": 5, "thresholds": t} for t in THRESHOLD_VARIANTS]
    assert default_grid("ngram", max_match=4) == [{"n_draft": 3, "max_match": 4, "min_match": m} for m in range(1, 5)]
    assert default_grid("ngram", n_draft=2, min_match=3) == [{"n_draft": 2, "max_match": 8, "min_match": 3}]


def test_bad_sweeps():
    with pytest.raises(InputError, match="min_match"):
        sweep(TOKENS, grid=[{"min_match": 2}], n_ctx=32, source="lookup")
    with pytest.raises(InputError, match="source"):
        sweep(TOKENS, n_ctx=32, source="magic")


def test_table_has_one_line_per_row_and_aligned_columns():
    rows = sweep(TOKENS, grid=make_grid(n_draft=[1, 2, 3]), n_ctx=32, verify_cost=0.05)
    lines = sweep_table(rows).splitlines()
    assert len(lines) == 4
    assert lines[0].split() == ["n_draft", "thresholds", "n_drafted", "n_accept", "accept", "coverage",
                                "tokens_per_verify", "us_per_drafted_token", "speedup", "break_even_cost"]
    assert len({len(line) for line in lines}) == 1
    assert lines[2].split()[0] == "2" and lines[2].split()[4].endswith("%")
