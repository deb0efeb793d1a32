"""The compiled half of bench/suffix/filter.py: n-gram keys, a binary fuse filter's lookup over
pyfusefilter's arrays, and the drafter's sequential suffix search replayed three ways (plain, bounded by
the filter, and the oracle that probes only the true match length: what no filter can beat).

Binary fuse filter lookup (Graf & Lemire, "Binary Fuse Filters", 2022), written here from the paper's
definition over the fields pyfusefilter's Fuse8 stores (Seed, SegmentLength, SegmentLengthMask,
SegmentCountLength, Fingerprints): h = fmix64(key + Seed); the 8-bit fingerprint h ^ (h >> 32); slots
h0 = high 64 bits of h * SegmentCountLength, h1 = (h0 + SegmentLength) ^ ((h >> 18) & mask),
h2 = (h0 + 2 SegmentLength) ^ (h & mask); a key is held when the fingerprint xor the three slots is 0.
The tests hold it equal to pyfusefilter's own contain on members and non-members.
"""

from __future__ import annotations

import numpy as np

from lookupkit.kernels import M2, SPLITMIX1, kernel, mix
from lookupkit.suffix.search import continuation_kernel, find, longest_match_kernel

PLAIN, FILTERED, ORACLE = 0, 1, 2  # replay modes
MODES = {"plain": PLAIN, "filtered": FILTERED, "oracle": ORACLE}
# One row per order of a filter: order, Seed, SegmentLength, SegmentLengthMask, SegmentCountLength,
# offset of its fingerprints in the concatenated array, their count.
ORDER, SEED, SEG_LEN, SEG_MASK, SEG_COUNT_LEN, FP_OFF, FP_LEN = range(7)
FMIX1 = np.uint64(0xFF51AFD7ED558CCD)  # MurmurHash3's fmix64 multipliers (the filter's hash)
FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
LOW32 = np.uint64(0xFFFFFFFF)


@kernel
def gram_key(seq, end, k):
    """The 64-bit key of the k-gram seq[end - k:end] (the order is part of the key)."""
    h = SPLITMIX1 * np.uint64(k)
    for j in range(end - k, end):
        h = mix((h ^ np.uint64(seq[j])) * M2)
    return h


@kernel
def gram_keys(text, k, out):
    """Keys of every k-gram of `text` that holds no separator (< 0) into out; their count."""
    n, run = 0, 0
    for i in range(text.shape[0]):
        run = run + 1 if text[i] >= 0 else 0
        if run >= k:
            out[n] = gram_key(text, i + 1, k)
            n += 1
    return n


@kernel
def mulhi(a, b):
    """The high 64 bits of the 128-bit product a * b (uint64)."""
    a0, a1, b0, b1 = a & LOW32, a >> np.uint64(32), b & LOW32, b >> np.uint64(32)
    mid = a1 * b0 + ((a0 * b0) >> np.uint64(32))
    mid2 = a0 * b1 + (mid & LOW32)
    return a1 * b1 + (mid >> np.uint64(32)) + (mid2 >> np.uint64(32))


@kernel
def fuse_contains(params, fp, r, key):
    """Whether order row r of the filter holds key (false positives ~0.4 %, never a false negative)."""
    h = key + params[r, SEED]
    h ^= h >> np.uint64(33)
    h *= FMIX1
    h ^= h >> np.uint64(33)
    h *= FMIX2
    h ^= h >> np.uint64(33)
    f = (h ^ (h >> np.uint64(32))) & np.uint64(255)
    seg, mask = params[r, SEG_LEN], params[r, SEG_MASK]
    h0 = mulhi(h, params[r, SEG_COUNT_LEN]) & LOW32
    h1 = ((h0 + seg) ^ ((h >> np.uint64(18)) & mask)) & LOW32
    h2 = ((h0 + seg + seg) ^ (h & mask)) & LOW32
    base = params[r, FP_OFF]
    return (f ^ np.uint64(fp[base + h0]) ^ np.uint64(fp[base + h1]) ^ np.uint64(fp[base + h2])) == 0


@kernel
def filter_bound(params, fp, ctx, n_ctx, top):
    """The longest match the filter allows: k - 1 for the smallest order k <= top whose k-gram ending at
    n_ctx it does not hold (then no longer suffix occurs either), else top."""
    for r in range(params.shape[0]):
        k = np.int64(params[r, ORDER])
        if k > top:
            break
        if not fuse_contains(params, fp, r, gram_key(ctx, n_ctx, k)):
            return k - 1
    return top


@kernel
def replay(text, sa, starts, second, ev, p0, p1, max_len, n_run, min_share, mode, params, fp, truth, lens, bounds,
           runs, tok, cnt, tot):
    """Draft calls at positions p0 .. p1 - 1 of ev as the drafter makes them (each search bounded by the
    previous match + 1, at most max_len; then the run of at most n_run tokens): lens/bounds/runs[q] get the
    match length, the bound searched and the run's length. ORACLE probes only truth[q], the true length."""
    prev = max_len
    for q in range(p1 - p0):
        p = p0 + q
        top = min(max_len, prev + 1, p)
        if mode == ORACLE:
            m = truth[q]
            lo, hi = (find(text, sa, starts, second, ev, p - m, p) if m > 0 else (np.int64(0), np.int64(text.shape[0])))
        else:
            if mode == FILTERED:
                top = filter_bound(params, fp, ev, p, top)
            m, lo, hi = longest_match_kernel(text, sa, starts, second, ev, p, top)
        lens[q], bounds[q] = m, top
        runs[q] = 0
        if m > 0 and n_run > 0:
            runs[q] = continuation_kernel(text, sa, m, lo, hi, n_run, min_share, tok, cnt, tot)
        prev = m


@kernel
def probe_counts(lens, bounds, out):
    """out[q] = (probes, failing probes) longest_match_kernel makes for a true length lens[q] under the bound
    bounds[q]: its probe sequence (whole window, gallop 1, 2, 4, ..., bisection) replayed on the fact that a
    suffix occurs exactly when it is no longer than the match."""
    for q in range(lens.shape[0]):
        m, top = lens[q], bounds[q]
        n, bad_n = 0, 0
        if top > 0:
            n = 1
            if m < top:
                bad_n, good, bad, step = 1, 0, top, 1
                while step < top:
                    n += 1
                    if step > m:
                        bad, bad_n = step, bad_n + 1
                        break
                    good, step = step, step * 2
                while bad - good > 1:
                    mid = (good + bad) // 2
                    n += 1
                    if mid <= m:
                        good = mid
                    else:
                        bad, bad_n = mid, bad_n + 1
        out[q, 0], out[q, 1] = n, bad_n
