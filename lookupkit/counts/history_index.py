"""Where earlier sequences held each of their m-grams (m in MATCH_LENGTHS): the kernels of the policy's
history source (draft.history keeps the arrays, the lock and the budget).

The same evidence as the sequence's own longest-match index (counts.match_index), over a log of
earlier sequences instead of the current one: the log holds them one after another, each led by a
separator (-1, never a token), and an open-addressing table maps (m, hash of an m-gram) to the most
recent end position of that m-gram in the log whose follower is a token. A hit is verified token by
token against the log, so a hash collision never proposes a wrong follower (llama-server's ngram-mod
keeps no keys: its collisions are false drafts). Slots are int32, (end + 1) << 3 | length row (0 empty),
so the log holds at most MAX_LOG tokens; the table is allocated once for the budget at a load of at most
1/2 (new_hist), and eviction (draft.history) rebuilds it in place: the arrays never move, so any number
of drafters can keep views of them.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..kernels import kernel
from .match_index import MATCH_LENGTHS, _suffix_hashes

SEPARATOR = -1  # leads every sequence in the log: no m-gram spans two sequences
ROW_BITS = 3  # slot = (end + 1) << ROW_BITS | row of MATCH_LENGTHS
MAX_LOG = (1 << (31 - ROW_BITS)) - 2  # the largest end + 1 an int32 slot holds

Hist = namedtuple("Hist", "log n slots hashes")
Hist.__doc__ = """The history's arrays as the compiled policy reads them: log int32 (tokens and separators,
log[:n[0]] live), n int64[1], slots int32 (a power of two), hashes uint64 scratch (one per MATCH_LENGTHS
entry: each drafter's view has its own)."""


def slots_for(capacity: int) -> int:
    """Slots for `capacity` log positions at a load of at most 1/2 (every position holds up to one entry per length)."""
    return 1 << max(4, (2 * capacity * len(MATCH_LENGTHS) - 1).bit_length())


def new_hist(capacity: int) -> Hist:
    """Empty arrays for a log of `capacity` positions (np.zeros: pages become resident as they are used)."""
    return Hist(np.zeros(max(1, capacity), np.int32), np.zeros(1, np.int64), np.zeros(slots_for(capacity), np.int32),
                np.zeros(len(MATCH_LENGTHS), np.uint64))


def no_history() -> Hist:
    """The stand-in when a drafter has no history (every lookup misses at once)."""
    return new_hist(1)


def view(h: Hist) -> Hist:
    """The same arrays with scratch of its own (for one drafter)."""
    return h._replace(hashes=np.zeros_like(h.hashes))


@kernel
def _run_before(log, i, most):
    """How many tokens (no separator) end at position i - 1, counting at most `most`."""
    r = 0
    while r < most and i - 1 - r >= 0 and log[i - 1 - r] != -1:
        r += 1
    return r


@kernel
def insert_positions(h, start, stop):
    """Record, for each position i in start..stop-1 whose token is a follower, the m-grams ending at i - 1."""
    log, slots = h.log, h.slots
    mask = np.uint64(slots.shape[0] - 1)
    for i in range(max(start, 1), stop):
        if log[i] == -1:
            continue
        run = _run_before(log, i, MATCH_LENGTHS[0])
        if run < MATCH_LENGTHS[MATCH_LENGTHS.shape[0] - 1]:
            continue
        end = i - 1
        _suffix_hashes(log, i, log, 0, i, MATCH_LENGTHS, h.hashes)
        for r in range(MATCH_LENGTHS.shape[0]):
            m = MATCH_LENGTHS[r]
            if run < m:
                continue
            s = (h.hashes[r] >> np.uint64(32)) & mask
            while True:
                v = slots[s]
                if v == 0:
                    break
                e, vr = (v >> ROW_BITS) - 1, v & ((1 << ROW_BITS) - 1)
                if vr == r:
                    same = True
                    for j in range(m):
                        if log[e - j] != log[end - j]:
                            same = False
                            break
                    if same:
                        break  # the same m-gram: keep the most recent end
                s = (s + np.uint64(1)) & mask
            slots[s] = np.int32(((end + 1) << ROW_BITS) | r)


@kernel
def clear_slots(h):
    for s in range(h.slots.shape[0]):
        h.slots[s] = 0


@kernel
def history_match(h, seq, n_seq, drafted, d0, length, min_m):
    """(follower, m) of the longest m-gram (m in MATCH_LENGTHS, m >= min_m) the log holds that equals the last
    m tokens of the lookup sequence (seq[:n_seq], then drafted[d0:]) before `length`, at its most recent end;
    or (-1, 0)."""
    if h.n[0] == 0:
        return np.int64(-1), np.int64(0)
    log, slots = h.log, h.slots
    mask = np.uint64(slots.shape[0] - 1)
    _suffix_hashes(seq, n_seq, drafted, d0, length, MATCH_LENGTHS, h.hashes)
    for r in range(MATCH_LENGTHS.shape[0]):
        m = MATCH_LENGTHS[r]
        if m < min_m:
            break
        if length < m:
            continue
        s = (h.hashes[r] >> np.uint64(32)) & mask
        while slots[s] != 0:
            v = slots[s]
            e, vr = np.int64(v >> ROW_BITS) - 1, v & ((1 << ROW_BITS) - 1)
            if vr == r and e + 1 < h.n[0]:
                ok = True
                for j in range(m):
                    a = seq[length - 1 - j] if length - 1 - j < n_seq else drafted[d0 + length - 1 - j - n_seq]
                    if log[e - j] != a:
                        ok = False
                        break
                if ok:
                    return np.int64(log[e + 1]), np.int64(m)
            s = (s + np.uint64(1)) & mask
    return np.int64(-1), np.int64(0)
