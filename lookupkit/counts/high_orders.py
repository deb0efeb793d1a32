"""Higher-order static counts (n = 3..16): for each n-gram of a corpus, its top follower, that follower's
count and the n-gram's total — only for n-grams whose top follower a policy could ever draft.

llama.cpp's static cache stops at 2-grams; longer contexts predict the next token far better where
they recur (on WikiText-103 the longest matching order up to 6 predicts it at clearly more positions
than orders <= 2: bench/RESULTS.md: Figures the code's comments rely on). An n-gram is kept when its
total reaches `min_total` and its top follower's share reaches `min_share` (both recorded in the file
header). Nothing else of it is needed: no pairs, just one packed value per kept n-gram.

Keys: an n-gram's tokens hashed to 64 bits (`ngram_hash`), its top `64 - follower_bits` bits kept, so
that hash and follower pack into one uint64 and one radix sort groups each n-gram's followers in token
order. Colliding n-grams (a 2^-40-ish chance per pair at qwen2's 18 follower bits) would be counted
together; a lookup of an unseen n-gram matches a stored key with probability ~n_keys / 2^46.
Memory is bounded: the hash space is cut into `parts` ranges, each counted in its own pass over the
ids (hashing is cheap; only one range's entries are held and sorted at a time).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import InputError
from ..formats.lkc_orders import SHARE_ONE, TOTAL_MAX, VALUE_TOKEN_SHIFT, VALUE_TOTAL_SHIFT, OrderParams
from ..kernels import GOLDEN, SPLITMIX1, SPLITMIX2, kernel
from ..rules import MAX_STATIC_ORDER as MAX_ORDER

PART_ENTRIES = 1 << 27  # entries sorted at once: 128 Mi x 8 B = 1 GiB, and as much again to sort into


def parse_orders(text: str) -> tuple[int, ...]:
    """`--orders`: "2" (llama.cpp's static cache only), "2-6", or a list such as "2,3,5"; 2 must be in it."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-"))
            orders = tuple(range(lo, hi + 1))
        else:
            listed = [int(x) for x in text.split(",")]
            orders = tuple(sorted(listed)) if len(set(listed)) == len(listed) else ()
    except ValueError:
        orders = ()
    if not orders or orders[0] != 2 or orders[-1] > MAX_ORDER:
        raise InputError(f"--orders takes 2, 2-N or a list starting at 2, with N <= {MAX_ORDER}; got {text!r}")
    return orders


def follower_bits(id_bound: int) -> int:
    bits = max(1, int(id_bound - 1).bit_length())
    if bits > 24:
        raise InputError(f"higher orders need token ids below 2^24 (hash bits are shared with the follower id); "
                         f"this corpus has ids up to {id_bound - 1}")
    return bits


@kernel
def hash_start(n):
    return np.uint64(n) * GOLDEN


@kernel
def hash_step(h, token):
    h = (h ^ np.uint64(np.uint32(token))) * SPLITMIX1
    return h ^ (h >> np.uint64(31))


@kernel
def hash_final(h):
    h *= SPLITMIX2
    return h ^ (h >> np.uint64(29))


@kernel
def ngram_hash(tokens, end, n):
    """64-bit hash of tokens[end-n:end]; the drafter computes the same, step by step, on its sequence."""
    h = hash_start(n)
    for j in range(end - n, end):
        h = hash_step(h, tokens[j])
    return hash_final(h)


@kernel
def _fill(tokens, n, shift, fbits, lo, hi, out, pos):
    """Append the packed (hash prefix, follower) of every position whose hash prefix is in [lo, hi)."""
    for i in range(n, tokens.shape[0]):
        key = ngram_hash(tokens, i, n) >> shift
        if lo <= key < hi:
            out[pos] = (key << np.uint64(fbits)) | np.uint64(tokens[i])
            pos += 1
    return pos


@njit(cache=True)
def _sort(a, out):
    """Sort uint64 `a` into `out`: one counting pass on the top 16 bits scatters it into 65,536 buckets,
    then each bucket (a few thousand entries, in cache) is sorted on its own: several times faster than
    np.sort of the whole array (bench/RESULTS.md: Figures the code's comments rely on)."""
    count = np.zeros((1 << 16) + 1, np.int64)
    sh = np.uint64(48)
    for i in range(a.shape[0]):
        count[(a[i] >> sh) + np.uint64(1)] += 1
    for d in range(1 << 16):
        count[d + 1] += count[d]
    fill = count[:-1].copy()
    for i in range(a.shape[0]):
        d = a[i] >> sh
        out[fill[d]] = a[i]
        fill[d] += 1
    for d in range(1 << 16):
        out[count[d]:count[d + 1]].sort()


@kernel
def _reduce(sorted_keys, fbits, min_total, min_share_q16, keys_out, values_out):
    """Per n-gram (run of equal hash prefixes): total, top follower (smallest id on ties), its count;
    keep it if total >= min_total and share >= min_share. Returns how many were kept."""
    fmask = np.uint64((1 << fbits) - 1)
    n_out = 0
    i = 0
    n = sorted_keys.shape[0]
    while i < n:
        key = sorted_keys[i] >> np.uint64(fbits)
        total, best, best_tok = 0, 0, -1
        j = i
        while j < n and (sorted_keys[j] >> np.uint64(fbits)) == key:
            tok = sorted_keys[j] & fmask
            k = j
            while k < n and sorted_keys[k] == sorted_keys[j]:
                k += 1
            c = k - j
            total += c
            if c > best:  # followers ascend within the run: strict > keeps the smallest id on ties
                best, best_tok = c, np.int64(tok)
            j = k
        if total >= min_total and best * SHARE_ONE >= min_share_q16 * total:
            share = (best * SHARE_ONE) // total
            keys_out[n_out] = key
            values_out[n_out] = ((np.uint64(best_tok) << np.uint64(VALUE_TOKEN_SHIFT))
                                 | (np.uint64(min(total, TOTAL_MAX)) << np.uint64(VALUE_TOTAL_SHIFT))
                                 | np.uint64(share))
            n_out += 1
        i = j
    return n_out


def count_order(documents: list[list[np.ndarray]], n: int, params: OrderParams,
                part_entries: int = PART_ENTRIES) -> tuple[np.ndarray, np.ndarray]:
    """(keys, values) of the kept n-grams of order n, keys ascending (uint64 hash prefixes).

    `documents`: each a list of int32 arrays in order (no n-gram spans two documents; an array
    boundary inside a document is bridged)."""
    docs = [np.concatenate(d) if len(d) != 1 else np.asarray(d[0]) for d in documents]
    docs = [np.ascontiguousarray(d, dtype=np.int32) for d in docs if len(d) > n]
    fbits = params.follower_bits
    shift = np.uint64(fbits)
    key_space = 1 << (64 - fbits)
    entries = sum(len(d) - n for d in docs)
    parts = max(1, -(-entries // part_entries))
    step = -(-key_space // parts)
    q16 = int(np.ceil(params.min_share * SHARE_ONE))
    out_k, out_v = [], []
    for p in range(parts):
        lo, hi = np.uint64(p * step), np.uint64(min(key_space, (p + 1) * step))
        cap = min(entries, 2 * (entries // parts) + (1 << 16))
        buf = np.empty(cap, np.uint64)
        pos = 0
        for d in docs:
            if pos + len(d) > len(buf):  # an unlucky range: grow
                buf = np.concatenate([buf[:pos], np.empty(max(len(d), len(buf)), np.uint64)])
            pos = _fill(d, n, shift, fbits, lo, hi, buf, pos)
        chunk = np.empty(pos, np.uint64)
        _sort(buf[:pos], chunk)
        del buf
        keys = np.empty(pos, np.uint64)
        values = np.empty(pos, np.uint64)
        kept = _reduce(chunk, fbits, params.min_total, q16, keys, values)
        out_k.append(keys[:kept].copy())
        out_v.append(values[:kept].copy())
        del chunk, keys, values
    return np.concatenate(out_k), np.concatenate(out_v)

