"""Conformance with llama.cpp's own code: every case of ../shared/reference/cases.json, step for step.

Each case replays the eval tokens as lookup-stats does and must reproduce n_predict, n_drafted and
n_accept exactly, and the .steps file line for line (drafted tokens and their sources). The readable
reference engine always runs; the fast engine runs when it is installed.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from lookupkit.corpora import read_token_file as load_tokens
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.formats import read_ngrams
from lookupkit.replay import replay
import needs

REF = needs.SHARED / "reference"
CASES = json.loads((REF / "cases.json").read_text()) if (REF / "cases.json").is_file() else []
HAVE_FAST = importlib.util.find_spec("lookupkit.replay.loop") is not None

pytestmark = needs.shared_mark("reference/cases.json")


def open_static(name: str | None):
    """The reference's static cache through lookupkit's StaticCache (the -lcs loader)."""
    if name is None:
        return None
    from lookupkit.static.cache import StaticCache

    return StaticCache.open(REF / name)


def run_case(case: dict, engine: str):
    tokens = load_tokens(REF / case["tokens"])
    dynamic = read_ngrams(REF / case["dynamic"]) if case["dynamic"] else None
    return replay(tokens, case["n_ctx"], case["n_draft"], open_static(case["static"]), dynamic, engine=engine)


def check_case(case: dict, trace) -> None:
    summary = trace.summary()
    got = {k: summary[k] for k in ("n_predict", "n_drafted", "n_accept")}
    assert got == {k: case[k] for k in got}
    expected = (REF / case["steps_file"]).read_text().splitlines()
    ours = list(trace.steps_lines())
    assert len(ours) == len(expected)
    for line_no, (a, b) in enumerate(zip(ours, expected), 1):
        assert a == b, f"{case['steps_file']} line {line_no}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["case"])
def test_reference_engine(case):
    trace, _ = run_case(case, "reference")
    check_case(case, trace)


@pytest.mark.skipif(not HAVE_FAST, reason="the fast engine (lookupkit.replay.loop) is not installed")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["case"])
def test_fast_engine(case):
    trace, _ = run_case(case, "fast")
    check_case(case, trace)


@pytest.mark.parametrize("engine", ["reference"] + (["fast"] if HAVE_FAST else []))
def test_tiny_worked_example(engine):
    """docs/llama-lookup.md's 20 tokens at n_ctx 8, n_draft 4: two chunks, the second helped by the first."""
    tokens = load_tokens(REF / "tiny.tokens.i32")
    assert tokens.tolist() == [1, 5, 6, 7, 5, 6, 7, 5, 6, 8, 5, 6, 7, 5, 6, 7, 9, 5, 6, 7]
    trace, dynamic = replay(tokens, n_ctx=8, n_draft=4, engine=engine)
    # chunk 0 = 1 5 6 7 5 6 7 5: at pos 7 the context drafts 5 6 7 5 (c3 c4 c4 c3); only 5 is right
    rows = list(zip(trace.chunk.tolist(), trace.pos.tolist(), trace.n_drafted.tolist(), trace.n_accepted.tolist()))
    assert rows[6] == (0, 7, 4, 1) and trace.tokens[:4].tolist() == [5, 6, 7, 5]
    # chunk 1 = 6 8 5 6 7 5 6 7: at pos 5 (after 6 8 5 6 7) the context knows nothing yet; the dynamic
    # cache (chunk 0's n-grams) has (5 6 7) -> {5: 2}, which passes the strict n=3 test: d3, accepted
    assert rows[11] == (1, 5, 1, 1) and trace.tokens[-1] == 5 and trace.sources[-1] == 4 + 3
    # 20 tokens at n_ctx 8: chunks start at 0 and 8; the tail 16..19 is dropped
    assert trace.n_predict == 16 and set(trace.chunk.tolist()) == {0, 1}
    chunks = NgramCache()
    chunks.update(tokens[:8].tolist())
    second = NgramCache()
    second.update(tokens[8:16].tolist())
    chunks.merge(second)
    assert dynamic.to_dict() == chunks.parts  # the final dynamic cache = both chunks' context caches


def test_reference_static_and_dynamic_files_load():
    for name in ("synth.static.lcs", "zipf.static.lcs", "synth.dynamic.lcd"):
        table = read_ngrams(REF / name)
        sizes = set(np.unique(table.sizes).tolist())
        assert sizes == ({2} if name.endswith(".lcs") else {1, 2, 3, 4})
        assert len(table.ngrams) > 0 and (table.pairs[:, 1] > 0).all()


@pytest.mark.skipif(not HAVE_FAST, reason="the fast engine (lookupkit.replay.loop) is not installed")
def test_engines_leave_the_same_dynamic_cache():
    """-lcd plus every full chunk of the eval set, identical from both engines (what --save-dynamic writes)."""
    case = next(c for c in CASES if c["dynamic"])
    _, ref_dyn = run_case(case, "reference")
    _, fast_dyn = run_case(case, "fast")
    for field in ("ngrams", "offsets", "pairs"):
        assert np.array_equal(getattr(ref_dyn, field), getattr(fast_dyn, field))
    expected = NgramCache.from_table(read_ngrams(REF / case["dynamic"]))
    tokens = load_tokens(REF / case["tokens"]).tolist()
    n_ctx = case["n_ctx"]
    for start in range(0, len(tokens) - n_ctx, n_ctx):
        chunk = NgramCache()
        chunk.update(tokens[start:start + n_ctx])
        expected.merge(chunk)
    assert ref_dyn.to_dict() == expected.parts
