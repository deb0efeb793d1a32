"""llama.cpp's prompt-lookup facts and lookupkit's defaults, written once: thresholds, the static weight,
limits, source codes; each draft source's defaults, the context size, the history's budget, the trust's constants;
and the checks of the values they bound (token_ids: int32 everywhere, the one validation of ids from outside).

From llama.cpp's common/ngram-cache.{h,cpp} and examples/lookup (its drafting rule and lookup-stats' loop).
Both drafting engines, the replay loops, the Drafter and the CLI read them from here; nothing else
spells these numbers. lookupkit's two determinism rules (ties go to the smallest token id; an n-gram
window starting before position 0 is a miss) are behaviour, not constants: see draft.rule_reference.
"""

from __future__ import annotations

from .errors import InputError

# n-gram sizes of the context and dynamic caches (LLAMA_NGRAM_MIN/MAX), and of the static cache.
NGRAM_MIN, NGRAM_MAX = 1, 4
NGRAM_STATIC = 2

# Drafting thresholds indexed by n - 1: MIN_N (minimum total samples), MIN_P (minimum share, %, of the
# chosen token). Context: llama.cpp's "lax" arrays; dynamic: its "strict" arrays.
CONTEXT_MIN_N, CONTEXT_MIN_P = (2, 2, 1, 1), (66, 50, 50, 50)
DYNAMIC_MIN_N, DYNAMIC_MIN_P = (4, 3, 2, 2), (75, 66, 66, 66)
# The static cache on its own: llama.cpp applies the context thresholds of n = 2.
STATIC_MIN_N, STATIC_MIN_P = CONTEXT_MIN_N[NGRAM_STATIC - 1], CONTEXT_MIN_P[NGRAM_STATIC - 1]
# A follower the static cache also knows scores count * STATIC_WEIGHT * static count (else count * 1).
STATIC_WEIGHT = 100

# Stored counts saturate here instead of wrapping (llama.cpp's int32 counts wrap).
COUNT_MAX = 2**31 - 1
# Token ids are int32: 0 .. ID_MAX.
ID_MAX = 2**31 - 1

# lookup-stats' defaults per draft source, the one table of them (replay.run.Replay fills in what is not given;
# the --help texts, the sweeps and the sources' own modules read it): --draft, and for the longest-match sources
# --ngram-min-match/--ngram-max-match. lookup: llama.cpp's rule over its caches; policy: lookupkit's policy over
# them (--policy lookupkit), whose --draft is only a ceiling, as the policy itself decides how much of it pays;
# ngram: the longest earlier match in the sequence (replay.longest_match); suffix: the run after the longest
# match in the static cache's corpus (replay.suffix_run).
SOURCE_DEFAULTS = {
    "lookup": {"n_draft": 16},
    "policy": {"n_draft": 8},
    "ngram": {"n_draft": 3, "min_match": 3, "max_match": 8},
    "suffix": {"n_draft": 8, "min_match": 4},
}
DEFAULT_DRAFT = SOURCE_DEFAULTS["lookup"]["n_draft"]
POLICY_DRAFT = SOURCE_DEFAULTS["policy"]["n_draft"]
# The engine adapters' and `lookupkit generate`'s n_draft default: a verify batch of 1 + 8 per call, which a small
# model verifies for far less than 9 single steps cost (bench/RESULTS.md: Figures the code's comments rely on).
ENGINE_DRAFT = 8
# How long a draft may grow on short evidence, and the match that lets it grow beyond (policy.chain): past
# SHORT_DRAFT tokens a chain goes on only with a token that follows a match of at least LONG_MATCH tokens (in the
# sequence, the history or the static corpus: text being copied), as far as its curve says it pays.
SHORT_DRAFT = 16
LONG_MATCH = 32
# The largest --draft and --ctx-size, and the most slots (serve --parallel, calibrate --slots; llama.cpp's own limit
# is llama_max_parallel_sequences(), 256).
MAX_DRAFT = 1024
MAX_CTX = 2**31 - 1
PARALLEL_MAX = 64
# --ctx-size's default everywhere (lookup-stats' chunk, tune-policy, generate, serve, replay-requests): llama.cpp's
# lookup examples replay in chunks of n_ctx 4096, and Gemma 3 270M's engine loops were measured at it.
DEFAULT_CTX = 4096

# Source codes of drafted tokens (the .steps files' last column): 1..4 context n-gram of size n,
# 5..8 dynamic of size code - 4, 9 the static 2-gram, 10 lookupkit's longest-match source, and for
# lookupkit's policy 11 the static cache's suffix index (the longest match in its corpus) and the static
# cache's higher orders n = 3..16 as 20 + n, and 12 the history (the longest match in earlier sequences:
# draft.history).
STATIC = 9
LONGEST_MATCH = 10
SUFFIX = 11
HISTORY = 12
MAX_STATIC_ORDER = 16
SOURCE_NAMES = {1: "c1", 2: "c2", 3: "c3", 4: "c4", 5: "d1", 6: "d2", 7: "d3", 8: "d4", STATIC: "s2",
                LONGEST_MATCH: "ng", SUFFIX: "sx", HISTORY: "hx",
                **{20 + n: f"s{n}" for n in range(3, MAX_STATIC_ORDER + 1)}}
SOURCE_LEGEND = ("sources: c1..c4 = this sequence's (context) n-gram of 1..4 tokens, d1..d4 = the dynamic "
                 "cache's (earlier runs), s2..s16 = the static cache's n-gram, ng = longest earlier match, "
                 "sx = longest match in the static cache's corpus (its suffix index), hx = longest match in earlier "
                 "sequences (the history)")

# The history (draft.history): tokens of earlier sequences kept by default, and the most a budget may be
# (its index's int32 slots hold positions below 2^28). 2^20 tokens take ~68 MB (4 B of log + 64 B of index
# per token: the index is sized for the budget at a load of at most 1/2, 7 match lengths per position).
HISTORY_BUDGET = 1 << 20
HISTORY_BUDGET_MAX = 1 << 27
# `lookupkit serve --learn-scope tenant` (serve.tenants): the budget is shared by at most HISTORY_TENANTS
# tenants unless --tenant-budget says otherwise (2^20 / 64: 16,384 tokens each, ~1.1 MB), and never by more
# than TENANTS_MAX (a state file's header lists each one).
HISTORY_TENANTS = 64
TENANTS_MAX = 4096
LEARN_SCOPES = ("tenant", "global")  # --learn-scope: each tenant's history apart, or one for all
# The shortest earlier match the history drafts after: followers of shorter matches in earlier sequences were right
# clearly less often than after as long a match earlier in the same sequence, from 8 tokens on about as often
# (bench/RESULTS.md: Figures the code's comments rely on).
HISTORY_MIN_MATCH = 8
# The policy's online trust in each family of sources (policy.trust): the prior s (in accepted candidates) and the
# window (a family's observations) over which its evidence fades. With both 8 a factor stays within about
# 0.5..1.5: a local correction of the table, never a veto. (8, 8) did best of the pairs tried on Gemma 3 270M's
# outputs of prompts the serving bench does not report (the tuning log:
# bench/RESULTS.md: Figures the code's comments rely on; the held-out check: the sources study there).
TRUST_PRIOR = 8.0
TRUST_WINDOW = 8.0


def draft_room(max_tokens: int, n_ctx: int, n_prompt: int, n_out: int) -> int:
    """The most tokens a served request's next draft may hold after n_out emitted: a step emits the tokens it
    accepts and one more, so one less than what the request's budget and its slot's context leave (a draft past
    them is rows decoded for tokens nobody receives; serve.slots and replay.requests both hold to it)."""
    return min(max_tokens - n_out, n_ctx - n_prompt - n_out) - 1


def context_code(n: int) -> int:
    return n


def dynamic_code(n: int) -> int:
    return NGRAM_MAX + n


def static_code(n: int) -> int:
    return STATIC if n == NGRAM_STATIC else 20 + n


def check_n_draft(n_draft) -> int:
    """n_draft as an int in 1..MAX_DRAFT (a bool, float or string is refused, not converted)."""
    if isinstance(n_draft, bool) or not hasattr(n_draft, "__index__") or not 1 <= n_draft <= MAX_DRAFT:
        raise InputError(f"n_draft must be an integer between 1 and {MAX_DRAFT}, got {n_draft!r}")
    return int(n_draft)


def check_replay(n_input: int, n_ctx: int, n_draft: int, max_draft: int = MAX_DRAFT) -> None:
    """Refuse parameters that cannot give a meaningful lookup-stats replay, with the reason."""
    if not 1 <= n_draft <= max_draft:
        raise InputError(f"--draft must be between 1 and {max_draft}, got {n_draft}")
    if not 2 <= n_ctx <= MAX_CTX:
        raise InputError(f"--ctx-size must be between 2 and {MAX_CTX}, got {n_ctx}")
    if n_input <= n_ctx:
        raise InputError(f"the input has {n_input} tokens; replaying with --ctx-size {n_ctx} needs more than "
                         f"{n_ctx} (only full chunks followed by at least one more token are evaluated)")


def token_ids(tokens, what: str) -> np.ndarray:
    """`tokens` as a contiguous 1-D int32 array; an InputError naming `what` and the first bad id if they
    are not 1-D integers in 0..2^31-1."""
    import numpy as np  # (here: the rules load with every command, numpy with the first ids)

    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise InputError(f"{what} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int32)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{what} must be integer token ids, got {arr.dtype}")
    if int(arr.min()) < 0 or int(arr.max()) > ID_MAX:
        bad = int(np.argmax((arr < 0) | (arr > ID_MAX)))
        raise InputError(f"{what} holds an invalid token id {int(arr[bad])} at index {bad}, outside 0..2^31-1")
    return np.ascontiguousarray(arr, dtype=np.int32)
