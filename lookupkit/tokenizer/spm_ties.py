"""llama.cpp's SentencePiece merge with its own tie rule, for vocabularies `spm` cannot rank.

Where equal-score tokens can compete for one symbol (Llama 2's runs of "\\u2581", Baichuan's "---" and
"-->"), llama.cpp takes the leftmost pair and no fixed rank order can: this engine replays
`llm_tokenizer_spm` itself, in numba. Symbols are token ids (or, for a character that is not a
token, n_tokens + its index); a hash table maps (left, right) to the token their concatenation is;
a binary heap pops the pair of highest score, ties to the smallest left position, and a popped pair
counts only if both symbols are still the ones it was made from (llama.cpp's size check). A final
symbol that is not a token becomes its bytes' byte tokens. The whole segment is one sequence: the
"\x00" placeholder standing for each special token is marked as no symbol, so nothing merges
across it (one heap over each 1 MB segment). Exact but many times slower than `spm`'s tiktoken path
(bench/RESULTS.md: Figures the code's comments rely on), so it is used only where `spm` refuses the vocabulary's ties.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import FormatError
from ..kernels import GOLDEN
from .spm import NO_BYTE_TOKEN, SPACE, _byte_tokens, _utf8


class SpmTiesBackend:
    """Ids of a partitioned segment, exactly as llama.cpp's SPM session produces them."""

    def __init__(self, name: str, tokens: list[str], scores, excluded: set[int], add_space_prefix: bool):
        self._prefix = add_space_prefix
        n = len(tokens)
        token_id = {t: i for i, t in enumerate(tokens)}
        live = [i for i, t in enumerate(tokens) if i not in excluded and _utf8(t)]
        chars = sorted({c for i in live for c in tokens[i]})
        char_sym = {c: token_id.get(c, n + k) for k, c in enumerate(chars)}
        self._cp = np.full(0x110000, -1, np.int32)  # code point -> initial symbol (-1: in no token)
        for c, s in char_sym.items():
            self._cp[ord(c)] = s
        byte_ids = _byte_tokens(tokens, token_id)
        # a char symbol that is not a token: its UTF-8 bytes' byte tokens (-1 if one is missing)
        self._char_bytes = [np.array([byte_ids[b] for b in c.encode()], np.int32) for c in chars]
        self._extra_start = n
        distinct = np.unique(np.asarray([scores[i] for i in live], np.float32))[::-1]
        rank_of = {float(s): r for r, s in enumerate(distinct)}
        lefts, rights, merged, ranks = [], [], [], []
        for i in live:
            t = tokens[i]
            if len(t) < 2:
                continue
            for k in range(1, len(t)):
                a, b = _sym(t[:k], token_id, char_sym, excluded), _sym(t[k:], token_id, char_sym, excluded)
                if a is not None and b is not None:
                    lefts.append(a)
                    rights.append(b)
                    merged.append(i)
                    ranks.append(rank_of[float(np.float32(scores[i]))])
        self._table = _build_table(np.array(lefts, np.int64), np.array(rights, np.int64),
                                   np.array(merged, np.int32), np.array(ranks, np.int32), n + len(chars))
        self._byte_ids = byte_ids

    def encode(self, text: str, at_start: bool = False) -> np.ndarray:
        return self.encode_parts([text], at_start)

    def encode_parts(self, parts: list, at_start: bool) -> np.ndarray:
        specials, texts, placeholder, prev = [], [], [], at_start
        for p in parts:
            if isinstance(p, int):
                specials.append(p)
                texts.append("\x00")
                prev = True
            else:
                texts.append(" " + p if self._prefix and prev else p)
                prev = False
            placeholder.append(isinstance(p, int))  # (a text part may be a "\x00" of its own)
        text = "".join(texts)
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32).astype(np.int64)
        syms = self._cp[cps]
        if specials:  # the "\x00" placeholders that stand for specials, in order
            joints = np.flatnonzero(cps == 0)
            syms[joints[_placeholders(texts, placeholder)]] = -2
        syms[cps == ord(" ")] = self._cp[ord(SPACE)]
        out = _merge(syms, *self._table)
        return self._finish(out, cps, specials)

    def _finish(self, out: np.ndarray, cps: np.ndarray, specials: list) -> np.ndarray:
        # out holds token ids, -2 for a special, -(3 + position) for a char that is not a token
        # (its position in cps), and n + k for a char symbol k that is not a token
        parts, start = [], 0
        bad = np.flatnonzero((out < 0) | (out >= self._extra_start))
        it = iter(specials)
        for k in bad:
            parts.append(out[start:k])
            v = int(out[k])
            if v == -2:
                parts.append(np.array([next(it)], np.int32))
            else:
                cp = int(cps[-3 - v]) if v <= -3 else None
                ids = (self._byte_ids[list(chr(cp).encode())] if cp is not None
                       else self._char_bytes[v - self._extra_start])
                if (ids < 0).any():
                    raise FormatError(NO_BYTE_TOKEN)
                parts.append(ids.astype(np.int32))
            start = k + 1
        parts.append(out[start:])
        return np.concatenate(parts).astype(np.int32)


def _placeholders(texts: list, placeholder: list) -> np.ndarray:
    """Index, among all "\\x00" characters of "".join(texts), of each special's placeholder (placeholder[i]:
    whether texts[i] is one; a text's own NUL characters are not)."""
    idx, seen = [], 0
    for t, stands_for_special in zip(texts, placeholder):
        if stands_for_special:
            idx.append(seen)
        seen += t.count("\x00")
    return np.array(idx, np.int64)


def _sym(text: str, token_id: dict, char_sym: dict, excluded: set[int]) -> int | None:
    """The symbol `text` is while merging: a token (not one the partition removed), or a lone char."""
    if len(text) == 1:
        return char_sym.get(text)
    t = token_id.get(text)
    return t if t is not None and t not in excluded else None


def _build_table(lefts, rights, merged, ranks, n_sym):
    size = 1 << max(4, int(2 * max(len(lefts), 1) - 1).bit_length())
    keys = np.full(size, -1, np.int64)
    vals = np.zeros(size, np.int32)
    rks = np.zeros(size, np.int32)
    _fill(keys, vals, rks, lefts * n_sym + rights, merged, ranks)
    return keys, vals, rks, np.int64(n_sym)


@njit(cache=True)
def _fill(keys, vals, rks, pair_keys, merged, ranks):
    mask = len(keys) - 1
    for j in range(len(pair_keys)):
        h = (pair_keys[j] * GOLDEN) >> 20 & mask
        while keys[h] != -1 and keys[h] != pair_keys[j]:
            h = (h + 1) & mask
        keys[h], vals[h], rks[h] = pair_keys[j], merged[j], ranks[j]


@njit(cache=True, inline="always")
def _find(keys, key):
    mask = len(keys) - 1
    h = (key * GOLDEN) >> 20 & mask
    while keys[h] != -1:
        if keys[h] == key:
            return h
        h = (h + 1) & mask
    return -1


@njit(cache=True)
def _merge(syms, keys, vals, rks, n_sym):
    """llm_tokenizer_spm over one symbol sequence; -1 symbols (chars in no token) never merge."""
    n = len(syms)
    out = np.empty(n, np.int32)
    nxt = np.arange(1, n + 1)
    prv = np.arange(-1, n - 1)
    cur = syms.astype(np.int64)
    # heap of (rank << 32 | left), with the right index and the two symbols it was made from
    cap = 3 * n + 4  # n - 1 first pairs, at most 2 more per merge
    hk = np.empty(cap, np.int64)
    hr = np.empty(cap, np.int64)
    ha = np.empty(cap, np.int64)
    hb = np.empty(cap, np.int64)
    size = 0
    for i in range(n - 1):
        size = _push(cur, i, i + 1, keys, rks, n_sym, hk, hr, ha, hb, size)
    while size > 0:
        key, right, a, b = hk[0], hr[0], ha[0], hb[0]
        size = _pop(hk, hr, ha, hb, size)
        left = key & 0xFFFFFFFF
        if cur[left] != a or cur[right] != b or nxt[left] != right:
            continue
        cur[left] = vals[_find(keys, a * n_sym + b)]
        cur[right] = -9
        nxt[left] = nxt[right]
        if nxt[right] < n:
            prv[nxt[right]] = left
        if prv[left] >= 0:
            size = _push(cur, prv[left], left, keys, rks, n_sym, hk, hr, ha, hb, size)
        if nxt[left] < n:
            size = _push(cur, left, nxt[left], keys, rks, n_sym, hk, hr, ha, hb, size)
    m, i = 0, 0
    while i < n:
        s = cur[i]
        out[m] = s if s >= 0 else (-2 if s == -2 else -3 - i)
        m += 1
        i = nxt[i]
    return out[:m]


@njit(cache=True, inline="always")
def _push(cur, left, right, keys, rks, n_sym, hk, hr, ha, hb, size):
    a, b = cur[left], cur[right]
    if a < 0 or b < 0:
        return size
    h = _find(keys, a * n_sym + b)
    if h < 0:
        return size
    k = (np.int64(rks[h]) << 32) | left
    i = size
    hk[i], hr[i], ha[i], hb[i] = k, right, a, b
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] <= hk[i]:
            break
        _swap(hk, hr, ha, hb, p, i)
        i = p
    return size + 1


@njit(cache=True, inline="always")
def _swap(hk, hr, ha, hb, i, j):
    """Swap heap entries i and j (key, right symbol, and the pair's two symbols are parallel arrays)."""
    hk[i], hk[j] = hk[j], hk[i]
    hr[i], hr[j] = hr[j], hr[i]
    ha[i], ha[j] = ha[j], ha[i]
    hb[i], hb[j] = hb[j], hb[i]


@njit(cache=True, inline="always")
def _pop(hk, hr, ha, hb, size):
    size -= 1
    hk[0], hr[0], ha[0], hb[0] = hk[size], hr[size], ha[size], hb[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and hk[c + 1] < hk[c]:
            c += 1
        if hk[i] <= hk[c]:
            break
        _swap(hk, hr, ha, hb, c, i)
        i = c
    return size
