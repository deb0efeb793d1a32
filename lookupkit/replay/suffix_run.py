"""The suffix-index draft source (`lookup-stats --source suffix`): the run after the longest corpus match.

Rules (pinned by tests/test_suffix_run.py). At each call, with `tokens` the chunk so far: the longest
suffix of tokens, at most MAX_LEN of them, that occurs in the static cache's suffix index
(lookupkit.suffix.longest_match); if it holds at least min_match tokens, the draft is the run its
occurrences agree on (lookupkit.suffix.continuation: each step's most frequent next token while it holds
at least MIN_SHARE of them), cut to n_draft. Nothing else is drafted from: no context or dynamic cache,
no 2-grams. Each chunk is its own sequence, as in lookup-stats.

`suffix_draft` is the readable definition; `replay_suffix` runs lookup-stats' loop with it compiled,
bounding each search by the previous match plus the tokens emitted since (a match grows by at most one
token per token: the same answer, fewer probes; tested against `suffix_draft` call for call). On prose
most matches are short and a count-1 run token is mostly rejected, so this source pays on
text that repeats its corpus (code at two releases); the policy (--policy lookupkit) decides per token.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ..policy.suffix_source import MAX_LEN, MIN_SHARE
from ..errors import InputError
from ..kernels import kernel
from ..rules import SOURCE_DEFAULTS, SUFFIX, check_replay
from ..suffix.search import continuation, continuation_kernel, longest_match, longest_match_kernel
from .longest_match import verify_call
from .trace import ReplayTrace

_DEFAULTS = SOURCE_DEFAULTS["suffix"]  # this source's --draft and --ngram-min-match
DEFAULT_DRAFT, DEFAULT_MIN_MATCH = _DEFAULTS["n_draft"], _DEFAULTS["min_match"]
MAX_RUN = 64  # the longest run this source drafts in one call (its --draft's limit, below rules.MAX_DRAFT)


def check_params(n_draft: int, min_match: int) -> None:
    """Refuse parameters the source cannot use, naming the flag."""
    if not 1 <= n_draft <= MAX_RUN:
        raise InputError(f"--draft must be between 1 and {MAX_RUN} for --source suffix, got {n_draft}")
    if not 1 <= min_match <= MAX_LEN:
        raise InputError(f"--ngram-min-match must be between 1 and {MAX_LEN} for --source suffix, got {min_match}")


def suffix_draft(index, tokens: Sequence[int], n_draft: int = DEFAULT_DRAFT,
                 min_match: int = DEFAULT_MIN_MATCH) -> list[int]:
    """The run after the longest corpus match of the sequence's end, if it is at least min_match long."""
    check_params(n_draft, min_match)
    if len(tokens) == 0:
        return []
    m, lo, hi = longest_match(index, tokens, MAX_LEN)
    if m < min_match:
        return []
    return list(continuation(index, m, lo, hi, n_draft, MIN_SHARE).tokens)


@kernel
def _run_chunk(text, sa, starts, second, truth, chunk, n_draft, min_match, calls, n_calls, drafted, n_toks, cnt, tot):
    """The lookup-stats loop over one chunk with the suffix source; returns (calls, drafted) recorded."""
    n_ctx = truth.shape[0]
    out = 1
    prev_m, prev_out = MAX_LEN, 1
    while out < n_ctx:
        bound = min(MAX_LEN, prev_m + out - prev_out)
        m, lo, hi = longest_match_kernel(text, sa, starts, second, truth, out, bound)
        prev_m, prev_out = m, out
        k = 0
        if m >= min_match:
            k = continuation_kernel(text, sa, m, lo, hi, n_draft, MIN_SHARE, drafted[n_toks:n_toks + n_draft], cnt, tot)
        out = verify_call(truth, chunk, out, k, drafted, n_toks, calls, n_calls)
        n_calls += 1
        n_toks += k
    return n_calls, n_toks


def replay_suffix(tokens, n_ctx: int, index, n_draft: int = DEFAULT_DRAFT,
                  min_match: int = DEFAULT_MIN_MATCH) -> ReplayTrace:
    """lookup-stats over `tokens` with the suffix source (compiled); t_draft_s times the chunk loop."""
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    n_ctx, n_draft = int(n_ctx), int(n_draft)
    check_replay(len(tokens), n_ctx, n_draft)
    check_params(n_draft, min_match)
    n_chunks = (len(tokens) - 1) // n_ctx
    calls = np.full((n_chunks * (n_ctx - 1), 4), 0, np.int32)  # np.full: no first-touch faults while timed
    drafted = np.full(len(calls) * n_draft + n_draft, 0, np.int32)
    cnt, tot = np.zeros(n_draft, np.int64), np.zeros(n_draft, np.int64)
    args = (index.text, index.sa, index.starts, index.second)
    _run_chunk(*args, tokens[:1], 0, n_draft, min_match, calls, 0, drafted, 0, cnt, tot)  # compile or load
    n_calls = n_toks = 0
    t0 = time.perf_counter()
    for chunk in range(n_chunks):
        n_calls, n_toks = _run_chunk(*args, tokens[chunk * n_ctx:(chunk + 1) * n_ctx], chunk, n_draft, min_match,
                                     calls, n_calls, drafted, n_toks, cnt, tot)
    t_draft = time.perf_counter() - t0
    return ReplayTrace.of_calls(n_ctx, n_draft, len(tokens), calls, n_calls, drafted, n_toks, SUFFIX, t_draft,
                                {"source": "suffix", "ngram_min_match": min_match})
