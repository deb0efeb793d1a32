"""The longest-match draft source (`--source ngram`): copy what followed the longest earlier match.

Rules (all pinned by tests/test_ngram_source.py). With `tokens` = prompt + generated + the token just
confirmed, the match length at an earlier end position j (j <= len-2) is the number of tokens that
tokens[:j+1] and tokens share at their ends, capped at max_match. The suffix is never matched
against itself (j = len-1 is excluded), but a match may overlap it. The longest match wins; among
equal lengths the most recent (largest j). The draft is what followed it, tokens[j+1 : j+1+n_draft],
clipped at the end of `tokens`. If the best match is shorter than min_match, nothing is drafted.

`ngram_draft` is the readable definition; `replay_ngram` runs the lookup-stats loop with this source,
compiled, finding the same match in O(max_match) per call from the sequence's longest-match index
(counts.match_index, the one the policy drafts from) of every length max_match down to min_match (tested
draft for draft against `ngram_draft`).
Each chunk of the replay is its own sequence, as in lookup-stats: matches never cross chunks.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ..counts.match_index import clear_index, index_positions, match_end, new_index
from ..errors import InputError
from ..kernels import kernel
from ..rules import LONGEST_MATCH, SOURCE_DEFAULTS, check_replay
from .trace import ReplayTrace

_DEFAULTS = SOURCE_DEFAULTS["ngram"]  # this source's --draft and match lengths
DEFAULT_DRAFT, DEFAULT_MIN_MATCH, DEFAULT_MAX_MATCH = (_DEFAULTS[k] for k in ("n_draft", "min_match", "max_match"))
MAX_COPY = 8  # the most tokens one call copies after its match: --draft's limit with --source ngram
MAX_MATCH = 64
MAX_ENTRIES = 1 << 27  # the compiled replay's index: 2 GiB


def check_params(n_draft: int, min_match: int, max_match: int) -> None:
    """Refuse parameters the source cannot use, naming the flag."""
    if not 1 <= n_draft <= MAX_COPY:
        raise InputError(f"--draft must be between 1 and {MAX_COPY} for --source ngram, got {n_draft}")
    if not 1 <= max_match <= MAX_MATCH:
        raise InputError(f"--ngram-max-match must be between 1 and {MAX_MATCH}, got {max_match}")
    if not 1 <= min_match <= max_match:
        raise InputError(f"--ngram-min-match must be between 1 and --ngram-max-match ({max_match}), got {min_match}")


def ngram_draft(tokens: Sequence[int], n_draft: int = DEFAULT_DRAFT, min_match: int = DEFAULT_MIN_MATCH,
                max_match: int = DEFAULT_MAX_MATCH) -> list[int]:
    """The tokens that followed the longest (then most recent) earlier match of the sequence's end."""
    check_params(n_draft, min_match, max_match)
    toks = [int(t) for t in tokens]
    last = len(toks) - 1
    best_len, best_end = 0, -1
    for j in range(last - 1, -1, -1):  # most recent first: a later equal-length match never replaces it
        m = 0
        while m < max_match and m <= j and toks[j - m] == toks[last - m]:
            m += 1
        if m > best_len:
            best_len, best_end = m, j
            if m == max_match:
                break
    if best_len < min_match:
        return []
    return toks[best_end + 1:best_end + 1 + n_draft]


@kernel
def _run_chunk(truth, chunk, n_draft, index, calls, n_calls, drafted, n_toks):
    """The lookup-stats loop over one chunk with the ngram source; returns (calls, drafted) recorded."""
    n_ctx = truth.shape[0]
    clear_index(index)
    out = 1
    indexed = 1  # the m-grams ending before position indexed - 1 are in the index (their followers are known)
    while out < n_ctx:
        index_positions(index, truth, indexed, out)  # the match must end before the last token
        indexed = out
        j = match_end(index, truth, out, truth, 0, out)[0]
        k = 0
        if j >= 0:
            k = min(n_draft, out - 1 - j)
            for i in range(k):
                drafted[n_toks + i] = truth[j + 1 + i]
        out = verify_call(truth, chunk, out, k, drafted, n_toks, calls, n_calls)
        n_calls += 1
        n_toks += k
    return n_calls, n_toks


@kernel
def verify_call(truth, chunk, out, k, drafted, n_toks, calls, n_calls):
    """lookup-stats' verification of a cache-free source's call (this one, replay.suffix_run): the prefix of
    drafted[n_toks:n_toks+k] that agrees with truth from `out` on is accepted, then one true token is emitted;
    the call is recorded as row n_calls (chunk, pos, k, accepted). Returns the new `out`."""
    n_ctx = truth.shape[0]
    pos = out
    while out - pos < k and out < n_ctx and truth[out] == drafted[n_toks + out - pos]:
        out += 1
    accepted = out - pos
    if out < n_ctx:
        out += 1
    calls[n_calls, 0], calls[n_calls, 1], calls[n_calls, 2], calls[n_calls, 3] = chunk, pos, k, accepted
    return out


def replay_ngram(tokens, n_ctx: int, n_draft: int = DEFAULT_DRAFT, min_match: int = DEFAULT_MIN_MATCH,
                 max_match: int = DEFAULT_MAX_MATCH) -> ReplayTrace:
    """lookup-stats over `tokens` with the longest-match source (compiled); t_draft_s times the chunk loop."""
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    n_ctx, n_draft = int(n_ctx), int(n_draft)
    check_replay(len(tokens), n_ctx, n_draft)
    check_params(n_draft, min_match, max_match)
    n_chunks = (len(tokens) - 1) // n_ctx
    entries = n_ctx * (max_match - min_match + 1)  # at most one per end position and match length
    if entries > MAX_ENTRIES:
        raise InputError(f"--ctx-size {n_ctx} with match lengths {min_match}..{max_match} needs an index of "
                         f"{entries} entries for --source ngram; at most {MAX_ENTRIES} are allowed")
    index = new_index(n_ctx, np.arange(max_match, min_match - 1, -1))
    calls = np.full((n_chunks * (n_ctx - 1), 4), 0, np.int32)  # np.full: no first-touch faults while timed
    drafted = np.full(len(calls) * n_draft, 0, np.int32)
    _run_chunk(tokens[:1], 0, n_draft, index, calls, 0, drafted, 0)  # compile or load
    n_calls = n_toks = 0
    t0 = time.perf_counter()
    for chunk in range(n_chunks):
        n_calls, n_toks = _run_chunk(tokens[chunk * n_ctx:(chunk + 1) * n_ctx], chunk, n_draft, index, calls, n_calls,
                                     drafted, n_toks)
    t_draft = time.perf_counter() - t0
    return ReplayTrace.of_calls(n_ctx, n_draft, len(tokens), calls, n_calls, drafted, n_toks, LONGEST_MATCH, t_draft,
                                {"source": "ngram", "ngram_min_match": min_match, "ngram_max_match": max_match})
