"""formats/constmap_build (the numba VMAP0001 builder) against fastconstmap 0.10.x, the reference: byte identity on
many random key sets (sizes 0..5000, hypothesis, seed retries, ids at the int32 edges), lookups through an
independent numpy reader and lookupkit's own, edge cases. LOOKUPKIT_LARGE_TESTS=1 adds 1-1.5 M keys."""

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from numba import njit

from lookupkit.formats import constmap, constmap_probe
from lookupkit.formats import constmap_build as vb
from lookupkit.formats.spans import SPAN_BITS

fastconstmap = pytest.importorskip("fastconstmap")
assert fastconstmap.__version__.startswith("0.10."), fastconstmap.__version__

NOT_FOUND = 0xFFFFFFFFFFFFFFFF
I32MAX = 2**31 - 1
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------------------------------------
# reference, readers
# ---------------------------------------------------------------------------------------------

def ref_bytes(keys, values):
    kb = np.ascontiguousarray(keys, dtype="<i4").tobytes()
    d = {kb[i:i + 8]: v for i, v in zip(range(0, len(kb), 8), np.asarray(values, np.uint64).tolist())}
    assert len(d) == len(values)
    return fastconstmap.VerifiedConstMap(d).to_bytes()


def _u(x):
    return np.uint64(x)


def _rotl(x, r):
    return (x << _u(r)) | (x >> _u(64 - r))


def mini_lookup(buf, keys):
    """Independent numpy reader of a VMAP0001 map (vectorised over keys)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    magic, seed, seg_len, seg_count, data_len, n = struct.unpack_from("<8sQIIII", raw[:32].tobytes())
    assert magic == b"VMAP0001"
    assert len(raw) == 32 + 16 * data_len + 8
    keys = np.ascontiguousarray(keys, dtype="<i4").reshape(-1, 2)
    if data_len == 0:
        return np.full(len(keys), NOT_FOUND, dtype=np.uint64)
    words = raw[32:32 + 16 * data_len].view("<u8")
    data, checks = words[:data_len], words[data_len:]
    w = keys.view("<u8").reshape(-1)
    p1, p2, p3 = _u(0x9E3779B185EBCA87), _u(0xC2B2AE3D27D4EB4F), _u(0x165667B19E3779F9)
    p4, p5 = _u(0x85EBCA77C2B2AE63), _u(0x27D4EB2F165667C5)
    h = (p5 + _u(8)) ^ (_rotl(w * p2, 31) * p1)
    h = _rotl(h, 27) * p1 + p4
    h = (h ^ (h >> _u(33))) * p2
    h = (h ^ (h >> _u(29))) * p3
    h ^= h >> _u(32)
    x = h + _u(seed)
    x = (x ^ (x >> _u(33))) * _u(0xFF51AFD7ED558CCD)
    x = (x ^ (x >> _u(33))) * _u(0xC4CEB9FE1A85EC53)
    x ^= x >> _u(33)
    scl = _u(seg_count * seg_len)
    h0 = ((x >> _u(32)) * scl + (((x & _u(0xFFFFFFFF)) * scl) >> _u(32))) >> _u(32)
    m = _u(seg_len - 1)
    h1 = (h0 + _u(seg_len)) ^ ((x >> _u(18)) & m)
    h2 = (h0 + _u(2 * seg_len)) ^ (x & m)
    ok = (checks[h0] ^ checks[h1] ^ checks[h2]) == (x ^ (x >> _u(32)))
    return np.where(ok, data[h0] ^ data[h1] ^ data[h2], M64)


def fnv1a(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


_lk_lookup = constmap_probe.lookup


@njit
def _lk_lookup_many(keys, seed, seg_len, scl, data, checks, out):
    for i in range(keys.shape[0]):
        out[i] = _lk_lookup(keys[i, 0], keys[i, 1], seed, seg_len, scl, data, checks)


def lk_get_many(buf, keys):
    """lookupkit's reader: parse() + its numba lookup(t0, t1, seed, seg_len, seg_count_len, data, checks)."""
    v = constmap.parse(memoryview(buf))
    keys = np.ascontiguousarray(keys, dtype=np.int32).reshape(-1, 2)
    out = np.empty(len(keys), np.uint64)
    _lk_lookup_many(keys, np.uint64(v.seed), np.uint64(v.segment_length),
                    np.uint64(v.segment_count * v.segment_length), v.data, v.checks, out)
    return out


def check_lookups(buf, keys, values, rng=None, absent=200):
    keys = np.asarray(keys, dtype=np.int32).reshape(-1, 2)
    values = np.asarray(values, dtype=np.uint64)
    got = mini_lookup(buf, keys)
    assert np.array_equal(got, values)
    # absent keys: random pairs, minus any that happen to be present
    rng = rng or np.random.default_rng(0)
    probe = rng.integers(0, I32MAX, size=(absent, 2), dtype=np.int32)
    keep = ~np.isin(probe.view("<u8").reshape(-1), np.ascontiguousarray(keys).view("<u8").reshape(-1))
    assert np.all(mini_lookup(buf, probe[keep]) == M64)
    assert np.array_equal(lk_get_many(buf, keys), values)
    assert np.all(lk_get_many(buf, probe[keep]) == M64)
    assert constmap_probe.checksum_ok(memoryview(buf), 0, len(buf))


def build_checked(keys, values, info=None):
    """Our bytes == fastconstmap's bytes; returns them."""
    ours = vb.build(keys, values, info=info)
    ref = ref_bytes(keys, values)
    assert len(ours) == len(ref) == vb.nbytes_for(len(values))
    if ours != ref:
        a, b = np.frombuffer(ours, np.uint8), np.frombuffer(ref, np.uint8)
        first = int(np.flatnonzero(a != b)[0])
        pytest.fail(f"bytes differ from offset {first} (n={len(values)}); header ours {ours[:32].hex()} "
                    f"ref {ref[:32].hex()}")
    return ours


def unique_keys(rng, n, lo=0, hi=I32MAX + 1):
    """n distinct (t0, t1) pairs with ids in [lo, hi)."""
    out = np.empty((0, 2), np.int32)
    while len(out) < n:
        more = rng.integers(lo, hi, size=(n - len(out) + 16, 2), dtype=np.int64).astype(np.int32)
        out = np.unique(np.concatenate([out, more]), axis=0)
    out = out[rng.permutation(len(out))[:n]]
    return np.ascontiguousarray(out)


def rand_values(rng, n):
    return rng.integers(0, 2**64, size=n, dtype=np.uint64)


# ---------------------------------------------------------------------------------------------
# sizing and format details
# ---------------------------------------------------------------------------------------------

def test_empty_map():
    keys = np.empty((0, 2), np.int32)
    vals = np.empty(0, np.uint64)
    ours = build_checked(keys, vals)
    assert len(ours) == 40 == vb.nbytes_for(0)
    assert ours[:8] == b"VMAP0001" and ours[8:32] == bytes(24)  # seed 0, no geometry, n 0
    assert struct.unpack("<Q", ours[32:])[0] == fnv1a(ours[:32])
    assert np.all(mini_lookup(ours, np.array([[1, 2], [0, 0]], np.int32)) == M64)
    assert np.all(lk_get_many(ours, np.array([[1, 2], [0, 0]], np.int32)) == M64)
    # empty inputs in other shapes
    assert vb.build(np.empty(0, np.int32), np.empty(0, np.uint64)) == ours


@pytest.mark.parametrize("key", [(0, 0), (1, 2), (I32MAX, I32MAX), (0, I32MAX), (I32MAX, 0)])
@pytest.mark.parametrize("value", [0, 1, 2**63, 2**64 - 2, 2**64 - 1])
def test_single_key(key, value):
    keys = np.array([key], np.int32)
    vals = np.array([value], np.uint64)
    buf = build_checked(keys, vals)
    assert len(buf) == 32 + 16 * 12 + 8  # n = 1: 3 segments of 4
    assert np.array_equal(mini_lookup(buf, keys), vals)  # (2^64-1 reads back as NOT_FOUND: same bits)


def test_header_fields_and_checksum():
    rng = np.random.default_rng(7)
    keys, vals = unique_keys(rng, 1234), rand_values(rng, 1234)
    info = {}
    buf = build_checked(keys, vals, info=info)
    magic, seed, seg_len, seg_count, data_len, n = struct.unpack_from("<8sQIIII", buf)
    assert (magic, n, data_len) == (b"VMAP0001", 1234, info["array_len"])
    assert (seed, seg_len, seg_count) == (info["seed"], info["segment_length"], info["segment_count"])
    assert data_len == (seg_count + 2) * seg_len
    assert struct.unpack("<Q", buf[-8:])[0] == fnv1a(buf[:-8])
    assert seed == 10451216379200822465 or info["iterations"] > 1  # first splitmix64(1) output


def test_nbytes_for_matches_fastconstmap_for_every_n_up_to_3000():
    rng = np.random.default_rng(11)
    keys, vals = unique_keys(rng, 3000), rand_values(rng, 3000)
    for n in range(0, 3001):
        d = {bytes(keys[i].tobytes()): int(vals[i]) for i in range(n)}
        assert len(fastconstmap.VerifiedConstMap(d).to_bytes()) == vb.nbytes_for(n), n


# n where the sizing formula changes: C round() tie at n=100 (100*1.625 = 162.5 -> 163, where
# Python's round() gives 162), segment-length steps, the n>4 / n<10^6 retry-alternation bounds
BOUNDARY_N = [2, 3, 4, 5, 8, 9, 27, 28, 91, 92, 99, 100, 101, 303, 304, 1009, 1010, 3361, 3362,
              8408, 11192, 11193, 37272, 37273, 124117, 124118]


@pytest.mark.parametrize("n", BOUNDARY_N)
def test_sizing_boundaries(n):
    rng = np.random.default_rng(n)
    keys, vals = unique_keys(rng, n), rand_values(rng, n)
    buf = build_checked(keys, vals)
    check_lookups(buf, keys, vals, rng)


def test_c_round_tie_at_100():
    assert vb.params_for(100)[2] == 192  # capacity 163 -> 3 segments of 64
    assert vb._c_round(162.5) == 163 and round(162.5) == 162


# ---------------------------------------------------------------------------------------------
# random and adversarial key sets
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", list(range(1, 65)))
def test_tiny_sizes_many_key_sets(n):
    rng = np.random.default_rng(1000 + n)
    for _ in range(25):
        keys, vals = unique_keys(rng, n), rand_values(rng, n)
        buf = build_checked(keys, vals)
        assert np.array_equal(mini_lookup(buf, keys), vals)


def _keyset(kind, n, rng, base):
    if kind == "random":
        return unique_keys(rng, n)
    if kind == "small_vocab":  # ids < 2*sqrt(n)+2, dense like real 2-grams
        v = int(2 * np.sqrt(n)) + 2
        return unique_keys(rng, n, 0, v)
    if kind == "consecutive_t1":  # one t0, t1 = base .. base+n-1
        t1 = (base + np.arange(n, dtype=np.int64)) % (I32MAX + 1)
        return np.stack([np.full(n, base % 1000, np.int64), t1], 1).astype(np.int32)
    if kind == "consecutive_t0":
        t0 = (base + np.arange(n, dtype=np.int64)) % (I32MAX + 1)
        return np.stack([t0, np.full(n, 7, np.int64)], 1).astype(np.int32)
    if kind == "grid":  # all pairs of a small id range
        side = int(np.ceil(np.sqrt(n)))
        a = np.arange(side, dtype=np.int64) + base % 5000
        g = np.stack(np.meshgrid(a, a, indexing="ij"), -1).reshape(-1, 2)[:n]
        return g.astype(np.int32)
    if kind == "near_max":  # ids in [2^31 - 1 - 2*sqrt(n) - 2, 2^31 - 1]
        v = int(2 * np.sqrt(n)) + 2
        return unique_keys(rng, n, I32MAX + 1 - v, I32MAX + 1)
    if kind == "diagonal":  # t0 == t1 (both halves of the word equal)
        t = (base + np.arange(n, dtype=np.int64) * 3) % (I32MAX + 1)
        return np.stack([t, t], 1).astype(np.int32)
    if kind == "one_bit":  # keys one bit apart: t = 1 << j, plus 0
        bits = [0] + [1 << j for j in range(31)]
        pairs = np.array([(a, b) for a in bits for b in bits], np.int64)
        return pairs[rng.permutation(len(pairs))[:n]].astype(np.int32)
    if kind == "zero_and_max":
        pairs = np.array([(a, b) for a in (0, 1, I32MAX - 1, I32MAX) for b in (0, 1, I32MAX - 1, I32MAX)])
        return pairs[rng.permutation(len(pairs))[:n]].astype(np.int32)
    raise AssertionError(kind)


def _values(kind, n, rng):
    if kind == "random":
        return rand_values(rng, n)
    if kind == "zero":
        return np.zeros(n, np.uint64)
    if kind == "all_ones":  # NOT_FOUND as a stored value: still byte-identical
        return np.full(n, 2**64 - 1, np.uint64)
    if kind == "index":
        return np.arange(n, dtype=np.uint64)
    if kind == "span":  # lookupkit's (offset << SPAN_BITS) | length
        return ((np.arange(n, dtype=np.uint64) << np.uint64(SPAN_BITS))
                | rng.integers(1, 1 << SPAN_BITS, n, dtype=np.uint64))
    raise AssertionError(kind)


KEY_KINDS = ["random", "small_vocab", "consecutive_t1", "consecutive_t0", "grid", "near_max",
             "diagonal", "one_bit", "zero_and_max"]
VALUE_KINDS = ["random", "zero", "all_ones", "index", "span"]
_FEW = {"one_bit": 32 * 32, "zero_and_max": 16}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KEY_KINDS), vkind=st.sampled_from(VALUE_KINDS),
       n=st.one_of(st.integers(0, 100), st.integers(0, 20000)), seed=st.integers(0, 2**32 - 1),
       base=st.integers(0, I32MAX))
def test_hypothesis_key_sets(kind, vkind, n, seed, base):
    rng = np.random.default_rng(seed)
    n = min(n, _FEW.get(kind, n))
    keys = _keyset(kind, n, rng, base)
    assert len(np.unique(keys.view("<u8"))) == n
    vals = _values(vkind, n, rng)
    buf = build_checked(keys, vals)
    if vkind != "all_ones":
        check_lookups(buf, keys, vals, rng, absent=50)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, I32MAX), st.integers(0, I32MAX)), unique=True, max_size=300),
       st.data())
def test_hypothesis_explicit_lists(pairs, data):
    keys = np.array(pairs, np.int32).reshape(-1, 2)
    vals = np.array(data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=len(pairs), max_size=len(pairs))),
                    np.uint64)
    buf = build_checked(keys, vals)
    assert np.array_equal(mini_lookup(buf, keys), vals)


def test_input_order_does_not_matter():
    rng = np.random.default_rng(3)
    keys, vals = unique_keys(rng, 5000), rand_values(rng, 5000)
    a = build_checked(keys, vals)
    p = rng.permutation(5000)
    assert build_checked(keys[p], vals[p]) == a
    assert build_checked(keys[::-1], vals[::-1]) == a


# ---------------------------------------------------------------------------------------------
# seed retries (incl. fastconstmap's halving of the segment length on the 3rd, 7th.. seed)
# ---------------------------------------------------------------------------------------------

def _find(n, pred, start, limit=20000):
    rng = np.random.default_rng(start)
    for _ in range(limit):
        keys, vals = unique_keys(rng, n), rand_values(rng, n)
        info = {}
        vb.build(keys, vals, info=info)
        if pred(info):
            return keys, vals, info
    pytest.fail(f"no key set of {n} keys with {pred} in {limit} tries")


@pytest.mark.parametrize("n,iters", [(2, 2), (2, 3), (4, 2), (8, 2), (8, 3), (8, 4), (20, 3), (20, 4),
                                     (50, 2), (50, 3), (200, 2), (1000, 2)])
def test_seed_retry_paths(n, iters):
    keys, vals, info = _find(n, lambda i: i["iterations"] == iters, start=n * 100 + iters)
    buf = build_checked(keys, vals)
    seed, seg_len = struct.unpack_from("<QI", buf, 8)
    assert seed != 10451216379200822465  # not the first seed
    l0 = vb.params_for(n)[0]
    halved = 4 < n < 1000000 and iters % 4 == 3  # success on iteration index 2, 6, ...
    assert seg_len == (l0 // 2 if halved else l0)
    check_lookups(buf, keys, vals)


def test_five_or_more_seeds():
    keys, vals, info = _find(8, lambda i: i["iterations"] >= 5, start=77, limit=200000)
    build_checked(keys, vals)


# ---------------------------------------------------------------------------------------------
# duplicates, API, validation
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 100, 5000])
def test_duplicates_refused(n):
    rng = np.random.default_rng(n)
    keys = unique_keys(rng, n)
    dup = np.concatenate([keys, keys[:1]])
    with pytest.raises(vb.DuplicateKeyError):
        vb.build(dup, rand_values(rng, n + 1))
    with pytest.raises(ValueError):  # DuplicateKeyError is a ValueError
        vb.build(np.concatenate([keys, keys]), rand_values(rng, 2 * n))


def test_fastconstmap_duplicates_via_str_and_bytes():
    """fastconstmap can only see a duplicate when a str and a bytes key have the same bytes; it
    refuses it (ValueError 'duplicate key hash detected', or RuntimeError after 101 seeds)."""
    rng = np.random.default_rng(5)
    keys = unique_keys(rng, 1000, 0x41414141, 0x41414141 + 60)  # all 8 bytes ASCII
    keys = keys[np.all(keys.view("u1").reshape(-1, 8) < 0x7F, axis=1)]
    d = {k.tobytes(): i for i, k in enumerate(keys)}
    d[keys[0].tobytes().decode("ascii")] = 12345  # same 8 bytes as the first bytes key
    with pytest.raises((ValueError, RuntimeError)):
        fastconstmap.VerifiedConstMap(d)
    with pytest.raises(vb.DuplicateKeyError):
        vb.build(np.concatenate([keys, keys[:1]]), np.arange(len(keys) + 1, dtype=np.uint64))


def test_build_into_write_and_offsets():
    rng = np.random.default_rng(9)
    n = 3000
    keys, vals = unique_keys(rng, n), rand_values(rng, n)
    ref = ref_bytes(keys, vals)
    size = vb.nbytes_for(n)
    # into a larger buffer at an 8-aligned offset (as inside a ggngcmap file after its header+pairs)
    big = np.full(size + 24 + 8 * 5 + 16, 0xAB, np.uint8)
    off = 24 + 8 * 5
    assert vb.build_into(keys, vals, big[off:], info={}) == size
    assert big[off:off + size].tobytes() == ref
    assert np.all(big[:off] == 0xAB) and np.all(big[off + size:] == 0xAB)
    # bytearray / memoryview targets
    ba = bytearray(size)
    vb.build_into(keys, vals, ba)
    assert bytes(ba) == ref
    # errors
    with pytest.raises(ValueError):
        vb.build_into(keys, vals, np.empty(size - 1, np.uint8))
    with pytest.raises(ValueError):
        vb.build_into(keys, vals, np.empty(size + 8, np.uint8)[1:])
    # reusing a dirty buffer gives the same bytes
    dirty = np.full(size, 0xFF, np.uint8)
    vb.build_into(keys, vals, dirty)
    assert dirty.tobytes() == ref


def test_input_dtypes_and_validation():
    rng = np.random.default_rng(4)
    keys, vals = unique_keys(rng, 500), rand_values(rng, 500)
    ref = ref_bytes(keys, vals)
    assert vb.build(keys.astype(np.int64), vals) == ref
    assert vb.build(np.asfortranarray(keys), vals) == ref
    assert vb.build(keys.tolist(), vals.tolist()) == ref
    small = np.arange(500, dtype=np.int64)
    assert vb.build(keys, small) == ref_bytes(keys, small.astype(np.uint64))
    with pytest.raises(ValueError):
        vb.build(keys, vals[:-1])
    with pytest.raises(ValueError):
        vb.build(keys.reshape(-1), vals)
    with pytest.raises(ValueError):
        vb.build(keys.astype(np.int64) + 2**31, vals)
    with pytest.raises(ValueError):
        vb.build(keys, -np.ones(500, np.int64))


# ---------------------------------------------------------------------------------------------
# large
# ---------------------------------------------------------------------------------------------

@pytest.mark.skipif(not os.environ.get("LOOKUPKIT_LARGE_TESTS"), reason="set LOOKUPKIT_LARGE_TESTS=1 (1-2 M keys, ~30 s)")
@pytest.mark.parametrize("n", [999_999, 1_000_000, 1_500_000])
def test_large(n):
    rng = np.random.default_rng(n)
    keys = unique_keys(rng, n, 0, 152064)  # vocabulary-sized ids, like real 2-grams
    vals = (np.arange(n, dtype=np.uint64) << np.uint64(SPAN_BITS)) | np.uint64(3)
    buf = build_checked(keys, vals)
    check_lookups(buf, keys, vals, rng, absent=10000)
    m = fastconstmap.VerifiedConstMap.from_bytes(buf)
    out = np.empty(1000, np.uint64)
    m.get_many_into([k.tobytes() for k in keys[:1000]], out)
    assert np.array_equal(out, vals[:1000])
