"""Dict-free builder of fastconstmap's serialized VerifiedConstMap (`VMAP0001`), in numba.

Produces the bytes `fastconstmap.VerifiedConstMap(d).to_bytes()` (fastconstmap 0.10.x) writes for
`d = {struct.pack('<ii', t0, t1): v, ...}`, from an (n, 2) int32 key array and an (n,) uint64 value
array, with no Python objects per key.

Why the output is the same although we do not follow fastconstmap's code step by step:
  * the per-slot state after all keys are added (count of keys, XOR of the slot kinds 0/1/2, and the
    XOR of the keys' hashes or, here, of their indices) does not depend on the order keys are added;
  * the peeling order only depends on that state (initial scan of slots in ascending order, then a
    LIFO queue, the "next" slot kind pushed before the "previous" one), and so does the assignment;
  * for 8-byte keys XXH64 is a bijection of the 64-bit word, and so is the mixing with the seed, so
    distinct keys never collide and the hash -> value association is exact.
So we are free to pick our own insertion order (an exact counting sort by the top bits of the hash,
for cache locality) and to carry key indices instead of hashes and a sorted (hash, value) table.

Memory: the construction's work arrays live inside the output buffer's data+checks region (filled
only once peeling succeeded); the only other O(n) array is the peeling stack (4 B/key). Peak beyond
the caller's keys and values (16 B/key): ~22 B/key. `build()` returning `bytes` adds one 18 B/key copy.

Duplicate keys always raise `DuplicateKeyError` (fastconstmap: ValueError or RuntimeError): they make
peeling fail, and on the first failed seed the keys are checked for duplicates (a sort in scratch space).
"""

from __future__ import annotations

import math
import struct
import sys

import numpy as np
from numba import njit

from lookupkit.errors import FormatError, InputError
from lookupkit.formats.constmap import HEADER, HEADER_SIZE, MAGIC, MAX_SEGMENT_LENGTH, TRAILER_SIZE
from lookupkit.formats.constmap_probe import check_of, fnv1a, key_hash, slots
from lookupkit.kernels import GOLDEN, SPLITMIX1, SPLITMIX2

MAX_ITERATIONS = 100  # fastconstmap tries seeds for iterations 0..100, i.e. 101 seeds

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("constmap_build assumes a little-endian host (keys are viewed as LE uint64 words)")


class DuplicateKeyError(InputError, ValueError):
    """Two equal keys were given (fastconstmap raises ValueError or RuntimeError for these)."""


class ConstructionError(FormatError, RuntimeError):
    """No seed out of 101 gave a peelable graph (fastconstmap raises RuntimeError too)."""


# --------------------------------------------------------------------------------------------
# Sizing (pure Python, O(1)): uses the C library's log(), as the C code does, so ties such as
# n = 100 (100 * 1.625 = 162.5, which C's round() takes to 163) come out the same.
# --------------------------------------------------------------------------------------------

def _c_round(x: float) -> int:
    """C99 round(): halves go away from zero (Python's round() goes to even)."""
    f = math.floor(x)
    return int(f) + (1 if x - f >= 0.5 else 0)


def params_for(n: int) -> tuple[int, int, int]:
    """(segment_length, segment_count = total - 2, array_len) fastconstmap picks for n >= 1 keys."""
    if n < 1 or n > 0xFFFFFFFF:
        raise ValueError(f"key count {n} outside 1..2^32-1")
    seg_len = 1 << int(math.floor(math.log(float(n)) / math.log(3.33) + 2.25))
    seg_len = min(seg_len, MAX_SEGMENT_LENGTH)
    capacity = 0
    if n > 1:
        factor = max(1.125, 0.875 + 0.25 * math.log(1000000.0) / math.log(float(n)))
        capacity = _c_round(float(n) * factor) & 0xFFFFFFFF  # (uint32_t) cast, as in C
    total = max(3, (capacity + seg_len - 1) // seg_len)
    return seg_len, total - 2, total * seg_len


def nbytes_for(n: int) -> int:
    """Serialized size of a VerifiedConstMap of n keys (the retries never change it)."""
    if n == 0:
        return HEADER_SIZE + TRAILER_SIZE
    return HEADER_SIZE + 16 * params_for(n)[2] + TRAILER_SIZE


# --------------------------------------------------------------------------------------------
# numba kernels (a key's hash and slots are constmap_probe's, the reader's own). All hash arithmetic
# is in uint64 with uint64 constants (mixing int64 and uint64 in numba gives float64).
# --------------------------------------------------------------------------------------------

# splitmix64's multipliers: fastconstmap's sequence of seeds
_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U3 = np.uint64(3)

# status codes of _construct
OK, DUPLICATE, FAILED = 0, 1, 2


@njit(cache=True, inline="always")
def _seed(state):
    """splitmix64's output for `state`: the seed fastconstmap tries next."""
    z = (state ^ (state >> np.uint64(30))) * SPLITMIX1
    z = (z ^ (z >> np.uint64(27))) * SPLITMIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def _pick(kind, a, b, c):
    if kind == 0:
        return a
    if kind == 1:
        return b
    return c


@njit(cache=True, inline="always")
def _remove(slot, kind, i, t2count, t2idx, alone, qsize):
    """Take key i (of slot kind `kind` there) out of `slot`, pushing the slot on the peeling queue
    `alone[:qsize]` if one key is left in it; returns the new queue size."""
    alone[qsize] = slot
    c = t2count[slot]
    if (c >> 2) == 2:
        qsize += 1
    t2count[slot] = np.uint8(((np.int64(c) - 4) ^ kind) & 255)
    t2idx[slot] ^= i
    return qsize


@njit(cache=True)
def _has_duplicates(words, scratch):
    """True if two entries of `words` are equal; sorts a copy held in `scratch` (len >= n)."""
    n = words.shape[0]
    s = scratch[:n]
    s[:] = words
    s.sort()
    for i in range(1, n):
        if s[i] == s[i - 1]:
            return True
    return False


@njit(cache=True)
def _construct(words, seg_len0, seg_count0, array_len, alternate, t2idx, t2count, sorted_hash,
               alone, stack, bucket_bits_extra):
    """Seed loop + peeling. Returns (status, seed, seg_len, seg_count, iterations_used).

    On success `stack[0:n]` holds (key index << 2 | slot kind) in peeling order.
    t2idx/t2count/alone have array_len entries, sorted_hash n entries (it may share memory with
    alone: the hashes are dead once all keys are added).
    """
    n = words.shape[0]
    state = np.uint64(1)
    seg_len = np.uint64(seg_len0)
    seg_count = np.uint64(seg_count0)
    dup_checked = False
    for iteration in range(MAX_ITERATIONS + 1):
        state += GOLDEN  # splitmix64's increment
        seed = _seed(state)

        # fastconstmap alternately halves / restores the segment length for 4 < n < 10^6
        if alternate:
            r = iteration % 4
            if r == 2:
                seg_len = seg_len // _U2
                seg_count = seg_count * _U2 + _U2
            elif r == 3:
                seg_len = seg_len * _U2
                seg_count = seg_count // _U2 - _U1
        scl = seg_count * seg_len

        # --- exact counting sort of the keys by the top bits of their hash (h0 is monotone in
        # the hash, so adding keys in this order walks the slot arrays nearly sequentially) ---
        bits = 1
        while (1 << bits) < np.int64(seg_count):
            bits += 1
        bits += bucket_bits_extra
        nb = 1 << bits
        shift = np.uint64(64 - bits)
        counts = np.zeros(nb + 1, dtype=np.int64)
        for i in range(n):
            counts[np.int64(key_hash(words[i], seed) >> shift) + 1] += 1
        for b in range(nb):
            counts[b + 1] += counts[b]
        for i in range(n):
            h = key_hash(words[i], seed)
            b = np.int64(h >> shift)
            p = counts[b]
            counts[b] = p + 1
            sorted_hash[p] = h
            stack[p] = i

        # --- add every key to its three slots ---
        t2idx[:] = 0
        t2count[:] = 0
        overflow = False
        for p in range(n):
            h0, h1, h2 = slots(sorted_hash[p], seg_len, scl)
            i = np.uint32(stack[p])
            c0 = np.int64(t2count[h0]) + 4
            c1 = (np.int64(t2count[h1]) + 4) ^ 1
            c2 = (np.int64(t2count[h2]) + 4) ^ 2
            t2count[h0] = np.uint8(c0 & 255)
            t2count[h1] = np.uint8(c1 & 255)
            t2count[h2] = np.uint8(c2 & 255)
            t2idx[h0] ^= i
            t2idx[h1] ^= i
            t2idx[h2] ^= i
            # a uint8 count wraps at 64 keys in one slot; fastconstmap then retries with a new seed
            if (c0 & 255) < 4 or (c1 & 255) < 4 or (c2 & 255) < 4:
                overflow = True
                break

        if not overflow:
            # --- peeling: queue of slots holding one key, LIFO ---
            qsize = 0
            for s in range(array_len):
                alone[qsize] = s
                if (t2count[s] >> 2) == 1:
                    qsize += 1
            top = 0
            while qsize > 0:
                qsize -= 1
                s = np.int64(alone[qsize])
                c = t2count[s]
                if (c >> 2) != 1:
                    continue
                kind = np.int64(c & 3)
                i = t2idx[s]
                stack[top] = (np.uint64(i) << _U2) | np.uint64(kind)
                top += 1
                h0, h1, h2 = slots(key_hash(words[i], seed), seg_len, scl)
                # the key's "next" slot kind first, then its "previous" one
                k1 = (kind + 1) % 3
                k2 = (kind + 2) % 3
                qsize = _remove(_pick(k1, h0, h1, h2), k1, i, t2count, t2idx, alone, qsize)
                qsize = _remove(_pick(k2, h0, h1, h2), k2, i, t2count, t2idx, alone, qsize)
            if top == n:
                return OK, seed, seg_len, seg_count, iteration + 1

        # failed seed: duplicates make every seed fail, so rule them out once
        if not dup_checked:
            if _has_duplicates(words, sorted_hash):
                return DUPLICATE, seed, seg_len, seg_count, iteration + 1
            dup_checked = True
    return FAILED, np.uint64(0), seg_len, seg_count, MAX_ITERATIONS + 1


@njit(cache=True)
def _assign(words, values, stack, seed, seg_len, seg_count, data, checks):
    """Fill data/checks (zeroed here) from the peeling stack, last peeled key first."""
    data[:] = 0
    checks[:] = 0
    scl = seg_count * seg_len
    for t in range(stack.shape[0] - 1, -1, -1):
        e = np.uint64(stack[t])
        i = np.int64(e >> _U2)
        kind = np.int64(e & _U3)
        x = key_hash(words[i], seed)
        h0, h1, h2 = slots(x, seg_len, scl)
        a = _pick(kind, h0, h1, h2)
        b = _pick((kind + 1) % 3, h0, h1, h2)
        c = _pick((kind + 2) % 3, h0, h1, h2)
        data[a] = values[i] ^ data[b] ^ data[c]
        checks[a] = check_of(x) ^ checks[b] ^ checks[c]


# Python front-ends

def _prepare(keys, values):
    keys = np.asarray(keys)
    if keys.size == 0:
        keys = keys.reshape(0, 2)
    if keys.ndim != 2 or keys.shape[1] != 2:
        raise ValueError(f"keys must have shape (n, 2), got {keys.shape}")
    if keys.dtype != np.int32:
        if not np.issubdtype(keys.dtype, np.integer):
            raise TypeError(f"keys must be integers, got {keys.dtype}")
        if keys.size and (keys.min() < np.iinfo(np.int32).min or keys.max() > np.iinfo(np.int32).max):
            raise ValueError("key token ids do not fit in int32")
    keys = np.ascontiguousarray(keys, dtype="<i4")
    words = keys.view("<u8").reshape(-1)  # t0 | t1 << 32, i.e. the 8 key bytes read as LE u64
    if not isinstance(values, np.ndarray):
        # a list of Python ints: np.asarray would turn one >= 2^63 into float64; convert directly
        try:
            values = np.array(values, dtype=np.uint64)
        except OverflowError as e:
            raise ValueError(f"values must fit in uint64: {e}") from None
    if values.dtype != np.uint64:
        if not np.issubdtype(values.dtype, np.integer):
            raise TypeError(f"values must be integers, got {values.dtype}")
        if values.size and values.min() < 0:
            raise ValueError("values must be >= 0 (uint64)")
    values = np.ascontiguousarray(values, dtype=np.uint64).reshape(-1)
    if values.shape[0] != words.shape[0]:
        raise ValueError(f"{words.shape[0]} keys but {values.shape[0]} values")
    if words.shape[0] > 0xFFFFFFFF:
        raise ValueError("more than 2^32-1 keys")
    return words, values


def _header(seed, seg_len, seg_count, data_len, n):
    return HEADER.pack(MAGIC, seed, seg_len, seg_count, data_len, n)


def build_into(keys, values, out, *, info=None, bucket_bits_extra=4):
    """Serialize into `out` (writable uint8 numpy array / buffer, len >= nbytes_for(n), first byte
    8-aligned); returns the number of bytes written. `info`, if a dict, receives seed, geometry and
    the number of seeds tried."""
    words, values = _prepare(keys, values)
    n = words.shape[0]
    size = nbytes_for(n)
    buf = np.frombuffer(out, dtype=np.uint8) if not isinstance(out, np.ndarray) else out
    if buf.dtype != np.uint8 or buf.ndim != 1 or not buf.flags.c_contiguous:
        raise TypeError("out must be a contiguous 1-d uint8 buffer")
    if not buf.flags.writeable:
        raise ValueError("out is read-only")
    if buf.shape[0] < size:
        raise ValueError(f"out has {buf.shape[0]} bytes, {size} needed")
    if buf.ctypes.data % 8:
        raise ValueError("out must be 8-byte aligned (the map is read as uint64 words)")
    buf = buf[:size]
    if n == 0:
        # fastconstmap's empty map: a header of zeros (no seed, no arrays) and the checksum
        buf[:HEADER_SIZE] = np.frombuffer(_header(0, 0, 0, 0, 0), dtype=np.uint8)
        buf[HEADER_SIZE:] = np.frombuffer(struct.pack("<Q", int(fnv1a(buf[:HEADER_SIZE]))), dtype=np.uint8)
        if info is not None:
            info.update(seed=0, segment_length=0, segment_count=0, array_len=0, iterations=0)
        return size

    seg_len0, seg_count0, a = params_for(n)
    body = buf[HEADER_SIZE:HEADER_SIZE + 16 * a]
    # scratch layout inside the (not yet written) data+checks region:
    #   [0, 4a) t2idx u32 | [4a, 5a) t2count u8 | [off, off + max(8n, 4a)) sorted hashes u64 / alone u32
    off = (5 * a + 7) & ~7
    assert off + max(8 * n, 4 * a) <= 16 * a
    t2idx = body[:4 * a].view(np.uint32)
    t2count = body[4 * a:5 * a]
    sorted_hash = body[off:off + 8 * n].view(np.uint64)
    alone = body[off:off + 4 * a].view(np.uint32)
    stack = np.empty(n, dtype=np.uint32 if n < (1 << 30) else np.uint64)
    alternate = 4 < n < 1000000
    status, seed, seg_len, seg_count, iters = _construct(
        words, np.uint64(seg_len0), np.uint64(seg_count0), np.int64(a), bool(alternate), t2idx, t2count,
        sorted_hash, alone, stack, np.int64(bucket_bits_extra))
    if status == DUPLICATE:
        raise DuplicateKeyError("duplicate keys (the same (t0, t1) 2-gram given twice)")
    if status == FAILED:
        raise ConstructionError(f"failed to construct the map with {MAX_ITERATIONS + 1} seeds")
    words_data = body.view(np.uint64)
    _assign(words, values, stack, np.uint64(seed), np.uint64(seg_len), np.uint64(seg_count),
            words_data[:a], words_data[a:])
    del stack
    buf[:HEADER_SIZE] = np.frombuffer(_header(int(seed), int(seg_len), int(seg_count), a, n), dtype=np.uint8)
    buf[size - TRAILER_SIZE:] = np.frombuffer(struct.pack("<Q", int(fnv1a(buf[:size - TRAILER_SIZE]))),
                                              dtype=np.uint8)
    if info is not None:
        info.update(seed=int(seed), segment_length=int(seg_len), segment_count=int(seg_count),
                    array_len=a, iterations=int(iters))
    return size


def build_array(keys, values, **kw) -> np.ndarray:
    """Serialized map in a new uint8 array (no copy: what the writers write)."""
    out = np.empty(nbytes_for(len(np.asarray(keys).reshape(-1, 2))), dtype=np.uint8)
    build_into(keys, values, out, **kw)
    return out


def build(keys, values, **kw) -> bytes:
    """Serialized map as `bytes` (one extra copy of the map at the end; prefer build_array/build_into)."""
    return build_array(keys, values, **kw).tobytes()

