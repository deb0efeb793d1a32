"""What every numba module of lookupkit shares: the `kernel` decorator and the hashing constants.

`kernel` compiles without numba's reference counting (NRT, numba's own option for its library code):
the kernels never allocate and every array they touch belongs to the Python caller for the whole
call, while counting references costs an atomic update per array use in a loop, which made the
drafting loop 20 times slower (measured: 1 us of pure overhead per draft call).
"""

from __future__ import annotations

import numpy as np
from numba import njit

kernel = njit(cache=True, _nrt=False)

# 2^64 / golden ratio: Fibonacci hashing's multiplier and splitmix64's increment.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# The odd multipliers of the n-gram key hashes (xxHash's and murmur3's 64-bit primes).
M2 = np.uint64(0xC2B2AE3D27D4EB4F)
M3 = np.uint64(0x165667B19E3779F9)
M4 = np.uint64(0xD6E8FEB86659FD93)


@kernel
def mix(h):
    """A 64-bit finaliser: every input bit moves the high 32 bits (slot index) and the low ones (tag)."""
    h ^= h >> np.uint64(32)
    h *= M4
    h ^= h >> np.uint64(29)
    return h
