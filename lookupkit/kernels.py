"""What the numba modules of lookupkit share: the `kernel` decorator, the hashing constants, and how a
kernel reads the lookup sequence (the real sequence, then the tokens drafted so far in this call).

`kernel` compiles without numba's reference counting (NRT, numba's own option for its library code):
the kernels never allocate and every array they touch belongs to the Python caller for the whole
call, while counting references costs an atomic update per array use in a loop, which made the
drafting loop many times slower (bench/RESULTS.md: Figures the code's comments rely on).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .compile_notice import announce_first_compile

kernel = njit(cache=True, _nrt=False)
announce_first_compile()  # every kernel module imports this one: a first compile anywhere is announced

# 2^64 / golden ratio: Fibonacci hashing's multiplier and splitmix64's increment.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# The odd multipliers of the n-gram key hashes: XXH64's PRIME64_2 and PRIME64_3 (the constmap's key hash
# uses them as such, formats.constmap_probe), and the finaliser `mix`'s odd multiplier M4.
M2 = np.uint64(0xC2B2AE3D27D4EB4F)
M3 = np.uint64(0x165667B19E3779F9)
M4 = np.uint64(0xD6E8FEB86659FD93)
# splitmix64's two output multipliers (Steele, Lea and Flood), also the higher orders' n-gram hash steps.
SPLITMIX1 = np.uint64(0xBF58476D1CE4E5B9)
SPLITMIX2 = np.uint64(0x94D049BB133111EB)


@kernel
def mix(h):
    """A 64-bit finaliser: every input bit moves the high 32 bits (slot index) and the low ones (tag)."""
    h ^= h >> np.uint64(32)
    h *= M4
    h ^= h >> np.uint64(29)
    return h


@kernel
def token_at(seq, n_seq, drafted, d0, j):
    """Token j of the lookup sequence: seq[:n_seq], then drafted[d0:] (what this call drafted so far)."""
    return seq[j] if j < n_seq else drafted[d0 + j - n_seq]


@kernel
def ngram_before(seq, n_seq, drafted, d0, end, n):
    """The n-gram (n = 1..4) of the lookup sequence ending before position `end`, as llama.cpp keys it:
    (k0, k1, k2, k3) padded with -1. The caller checks that it starts at 0 or later."""
    b = end - n
    k0 = token_at(seq, n_seq, drafted, d0, b)
    k1 = token_at(seq, n_seq, drafted, d0, b + 1) if n >= 2 else -1
    k2 = token_at(seq, n_seq, drafted, d0, b + 2) if n >= 3 else -1
    k3 = token_at(seq, n_seq, drafted, d0, b + 3) if n >= 4 else -1
    return k0, k1, k2, k3


@kernel
def same_run(seq, a, b, m):
    """Whether the m tokens ending at a equal the m tokens ending at b: seq[a-m+1 .. a] == seq[b-m+1 .. b]."""
    for i in range(m):
        if seq[a - i] != seq[b - i]:
            return False
    return True
