"""The longest-match source: each rule pinned by a hand-made case, and the compiled replay against it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit.errors import InputError
from lookupkit.replay.longest_match import ngram_draft, replay_ngram
from lookupkit.rules import LONGEST_MATCH as NGRAM, SOURCE_NAMES


def test_the_suffix_never_matches_itself():
    assert ngram_draft([5, 6, 7], min_match=1) == []  # 7 occurs only as the suffix itself
    assert ngram_draft([7], min_match=1) == [] and ngram_draft([], min_match=1) == []


def test_the_longest_match_wins_over_a_more_recent_shorter_one():
    # "1 2 3" ends at 2 (followed by 9); "2 3" ends at 5 (followed by 8), more recent but shorter
    assert ngram_draft([1, 2, 3, 9, 2, 3, 8, 1, 2, 3], n_draft=2, min_match=2) == [9, 2]


def test_equal_lengths_go_to_the_most_recent():
    assert ngram_draft([1, 2, 5, 1, 2, 6, 1, 2], n_draft=3, min_match=2) == [6, 1, 2]


def test_lengths_are_capped_so_capped_ties_go_to_the_most_recent():
    tokens = [9, 1, 2, 3, 5, 0, 1, 2, 3, 6, 9, 1, 2, 3]  # "9 1 2 3" ends at 3, "1 2 3" ends at 8
    assert ngram_draft(tokens, n_draft=3, min_match=3, max_match=4) == [5, 0, 1]
    assert ngram_draft(tokens, n_draft=3, min_match=3, max_match=3) == [6, 9, 1]


def test_a_match_may_overlap_the_suffix_and_the_draft_is_clipped_at_the_end():
    assert ngram_draft([1, 2, 1, 2, 1], n_draft=3, min_match=2) == [2, 1]  # "1 2 1" ends at 2 and 4
    assert ngram_draft([4, 4, 4, 4], n_draft=3, min_match=1) == [4]  # the longest match ends at 2


def test_the_gate_drafts_at_min_match_and_not_below():
    tokens = [1, 2, 3, 9, 2, 3]  # best match "2 3", length 2
    assert ngram_draft(tokens, n_draft=3, min_match=2) == [9, 2, 3]
    assert ngram_draft(tokens, n_draft=3, min_match=3) == []


def test_defaults_are_draft_3_min_3_max_8():
    tokens = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3]
    assert ngram_draft(tokens) == [4, 5, 6] == ngram_draft(tokens, 3, 3, 8)


@pytest.mark.parametrize("kwargs, flag", [({"n_draft": 0}, "--draft"), ({"n_draft": 9}, "--draft"),
                                          ({"min_match": 0}, "--ngram-min-match"),
                                          ({"min_match": 9, "max_match": 8}, "--ngram-min-match"),
                                          ({"max_match": 0, "min_match": 1}, "--ngram-max-match"),
                                          ({"max_match": 65}, "--ngram-max-match")])
def test_bad_parameters_are_refused(kwargs, flag):
    with pytest.raises(InputError, match=flag):
        ngram_draft([1, 2, 3], **kwargs)
    with pytest.raises(InputError, match=flag):
        replay_ngram(np.arange(10), 4, **{"n_draft": 3, **kwargs})


def reference_replay(tokens, n_ctx, n_draft, min_match, max_match):
    """The lookup-stats loop with ngram_draft, chunk by chunk: (calls, drafted tokens)."""
    calls, drafted = [], []
    for chunk, start in enumerate(range(0, len(tokens) - n_ctx, n_ctx)):
        truth = list(tokens[start:start + n_ctx])
        out = truth[:1]
        while len(out) < n_ctx:
            draft = ngram_draft(out, n_draft, min_match, max_match)
            pos = len(out)
            for tok in draft:
                if len(out) >= n_ctx or truth[len(out)] != tok:
                    break
                out.append(tok)
            calls.append((chunk, pos, len(draft), len(out) - pos))
            if len(out) < n_ctx:
                out.append(truth[len(out)])
            drafted += draft
    return calls, drafted


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(0, 4), min_size=3, max_size=150), data=st.data())
def test_compiled_replay_equals_the_definition(tokens, data):
    n_ctx = data.draw(st.integers(2, len(tokens) - 1))
    max_match = data.draw(st.integers(1, 10))
    min_match = data.draw(st.integers(1, max_match))
    n_draft = data.draw(st.integers(1, 8))
    trace = replay_ngram(tokens, n_ctx, n_draft, min_match, max_match)
    calls, drafted = reference_replay(tokens, n_ctx, n_draft, min_match, max_match)
    got = list(zip(trace.chunk.tolist(), trace.pos.tolist(), trace.n_drafted.tolist(), trace.n_accepted.tolist()))
    assert got == calls and trace.tokens.tolist() == drafted
    assert set(trace.sources.tolist()) <= {NGRAM}


def test_trace_names_the_source():
    trace = replay_ngram([1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3], 11, 3, 2, 8)
    assert trace.summary()["per_source"]["ng"]["drafted"] == trace.n_drafted.sum() > 0
    assert SOURCE_NAMES[NGRAM] == "ng" and all(line.endswith("ng") or "| |" in line or line.startswith("#")
                                                for line in trace.steps_lines())
