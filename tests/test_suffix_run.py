"""`lookup-stats --source suffix` (lookupkit.replay.suffix_run): the compiled replay against its readable
definition call for call, that definition against the brute-force search, a hand-worked case, and the
command's flags and refusals."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli_checks import assert_one_line_error

from lookupkit.policy.suffix_source import MAX_LEN, MIN_SHARE
from lookupkit.errors import InputError
from lookupkit.replay.suffix_run import check_params, replay_suffix, suffix_draft
from lookupkit.rules import SUFFIX
from lookupkit.suffix import build_index, corpus_text
from lookupkit.suffix import reference as ref
from lookupkit.suffix.build import doubling_sa


def _index(docs):
    return build_index(corpus_text([np.array(d, np.int64) for d in docs]), builder=doubling_sa)


def _brute_draft(index, tokens, n_draft, min_match):
    m, lo, hi = ref.longest_match(index.text, index.sa, tokens, MAX_LEN)
    if not tokens or m < min_match:
        return []
    return ref.continuation(index.text, index.sa, m, lo, hi, n_draft, MIN_SHARE)[0]


def _loop(tokens, n_ctx, draft):
    """lookup-stats' loop written out: per chunk, draft after chunk[:out], accept the agreeing prefix, emit one."""
    calls = []
    for c in range((len(tokens) - 1) // n_ctx):
        chunk = [int(t) for t in tokens[c * n_ctx:(c + 1) * n_ctx]]
        out = 1
        while out < n_ctx:
            d = draft(chunk[:out])
            a = 0
            while a < len(d) and out + a < n_ctx and chunk[out + a] == d[a]:
                a += 1
            calls.append((c, out, len(d), a, d))
            out += a + 1 if out + a < n_ctx else a
    return calls


def test_hand_worked_run_after_the_longest_match():
    index = _index([[1, 2, 3, 4, 5, 6], [9, 2, 3, 7]])
    # "2 3" occurs twice (followed by 4 and by 7: no majority of more than half... 1 of 2 = 0.5 share passes,
    # the tie goes to the smaller id); "1 2 3" once, followed by 4 5 6 and the document's end.
    assert suffix_draft(index, [8, 1, 2, 3], n_draft=8, min_match=2) == [4, 5, 6]
    assert suffix_draft(index, [8, 1, 2, 3], n_draft=2, min_match=2) == [4, 5]
    assert suffix_draft(index, [8, 1, 2, 3], n_draft=8, min_match=4) == []  # the match is 3 long
    assert suffix_draft(index, [9, 2, 3], n_draft=8, min_match=1) == [7]
    assert suffix_draft(index, [42], n_draft=8, min_match=1) == []


@settings(max_examples=120, deadline=None)
@given(docs=st.lists(st.lists(st.integers(0, 4), max_size=30), max_size=4),
       tokens=st.lists(st.integers(0, 5), min_size=2, max_size=60),
       n_ctx=st.integers(2, 24), n_draft=st.integers(1, 8), min_match=st.integers(1, 5))
def test_compiled_replay_is_the_definition_call_for_call(docs, tokens, n_ctx, n_draft, min_match):
    index = _index(docs)
    tokens = np.array(tokens, np.int32)
    if len(tokens) <= n_ctx:
        return
    want = _loop(tokens, n_ctx, lambda seq: _brute_draft(index, seq, n_draft, min_match))
    assert want == _loop(tokens, n_ctx, lambda seq: suffix_draft(index, seq, n_draft, min_match))
    trace = replay_suffix(tokens, n_ctx, index, n_draft, min_match)
    got = list(zip(trace.chunk.tolist(), trace.pos.tolist(), trace.n_drafted.tolist(), trace.n_accepted.tolist()))
    assert got == [w[:4] for w in want]
    assert trace.tokens.tolist() == [t for w in want for t in w[4]]
    assert set(trace.sources.tolist()) <= {SUFFIX}


def test_a_text_that_repeats_its_corpus_is_drafted_in_long_runs():
    rng = np.random.default_rng(3)
    corpus = rng.integers(0, 50, 3000)
    index = _index([corpus])
    trace = replay_suffix(corpus[1000:2024].astype(np.int32), 512, index, n_draft=16, min_match=4)
    s = trace.summary()
    assert s["accepted_per_call"] > 10 and s["accept"] > 95


@pytest.mark.parametrize("n_draft, min_match, flag", [(0, 4, "--draft"), (65, 4, "--draft"), (8, 0, "--ngram-min-match"),
                                                      (8, MAX_LEN + 1, "--ngram-min-match")])
def test_parameters_out_of_range_name_their_flag(n_draft, min_match, flag):
    with pytest.raises(InputError, match=flag):
        check_params(n_draft, min_match)


# ---- the command -------------------------------------------------------------------------------------

TEXT = "def f(x):\n    return x + 1\n\n" * 20 + "class A:\n    pass\n" * 10


def _run(*args):
    from lookupkit.cli.stats import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    from lookupkit.cli.create import app

    d = tmp_path_factory.mktemp("sx")
    (d / "corpus.txt").write_text(TEXT)
    (d / "eval.txt").write_text(TEXT[100:] + TEXT[:300])
    for name, extra in (("sx.lkc", ["--suffix-index"]), ("plain.lkc", [])):
        result = CliRunner().invoke(app, ["-f", str(d / "corpus.txt"), "-lcs", str(d / name), "-q", *extra])
        assert result.exit_code == 0, result.output
    return d


def test_lookup_stats_source_suffix_reports_its_replay(caches):
    result = _run("-f", caches / "eval.txt", "-lcs", caches / "sx.lkc", "--source", "suffix", "-c", "128", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["source"] == "suffix" and out["n_draft"] == 8 and out["ngram_min_match"] == 4
    assert out["n_accept"] > 0.8 * out["n_drafted"] > 0  # the eval text is the corpus, shifted
    text = _run("-f", caches / "eval.txt", "-lcs", caches / "sx.lkc", "--source", "suffix", "-c", "128", "--draft", "3",
                "--ngram-min-match", "2")
    assert text.exit_code == 0, text.output
    assert re.search(r"n_draft\s*=\s*3", text.stdout), text.stdout


@pytest.mark.parametrize("args, fragment", [
    (["--source", "suffix"], "built with lookup-create --suffix-index"),
    (["--source", "suffix", "-lcs", "plain.lkc"], "plain.lkc has none"),
    (["--source", "suffix", "-lcs", "sx.lkc", "--sweep"], "--sweep replays --source lookup or ngram"),
    (["--source", "suffix", "-lcs", "sx.lkc", "--policy", "lookupkit"], "not with --source ngram/suffix"),
    (["--source", "suffix", "-lcs", "sx.lkc", "--ngram-max-match", "9"], "cannot be used with --source suffix"),
    (["--source", "suffix", "-lcs", "sx.lkc", "--draft", "0"], "--draft must be between 1 and 64"),
    (["--source", "suffix", "-lcs", "sx.lkc", "--engine", "reference"], "--engine reference replays"),
])
def test_lookup_stats_source_suffix_refusals_are_one_line(caches, args, fragment):
    args = [str(caches / a) if a.endswith(".lkc") else a for a in args]
    assert_one_line_error(_run("-f", caches / "eval.txt", *args), fragment)
