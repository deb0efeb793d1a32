"""llama.cpp's SentencePiece merge (`llm_tokenizer_spm`), exactly, run by tiktoken's BPE core.

llama.cpp splits a fragment into UTF-8 characters, then repeatedly merges the adjacent pair whose
concatenation is a vocabulary token of the highest score (ties: leftmost); a final symbol that is
not a token becomes its bytes' `<0xXX>` tokens. tiktoken merges the adjacent pair whose
concatenation has the lowest rank (ties: leftmost) over bytes, so with

* ranks 0..K-1 for every byte and every UTF-8 prefix of every character of the vocabulary
  (characters form first: SPM's initial symbols; a single character's own score never matters,
  no merge produces one), then
* the multi-character tokens by descending score,

its merges are llama.cpp's merges. Three facts make that exact, each checked at load time:

* tiktoken emits a piece that is itself a token without merging. A token T whose own text SPM
  does not merge into T is never formed in any context either (the merges inside T's span are
  those of T alone), so such tokens are left out of the ranks and the shortcut is then right.
* Ranks break score ties by id, llama.cpp by position; tied tokens are accepted only when no
  proper suffix of one is a proper prefix of another (then they never compete for a symbol).
* tiktoken's time grows with the square of a piece's length, so fragments are cut where no token
  can span: before every "\\u2581" not preceded by a character that precedes "\\u2581" inside a
  token (read from the vocabulary: for Gemma 3 only ">", from ">\\u2581</").

Tokens the partition always splits out (user-defined ones; control ones too with parse_special)
can never appear inside a fragment and are left out, so a backend is built per parse_special.

Why tiktoken and not a numba SPM of lookupkit's own: tiktoken's Rust merge loop is already the fast
part, and this mapping reuses it unchanged. Measured (bench/tokenize_speed.py, first 25 MB of
wiki541, 2 shared cores at load 5-8): 11.0 MB/s of CPU time on one core (7.7-8.2 MB/s wall), ids
identical to llama-cpp-python's for all 5,586,362 tokens, which took 280 s (0.09 MB/s) for the same
bytes; tiktoken is ~65 % of the time, the special-token partition the rest. The HF-tokenizers
rebuild used before for SentencePiece ran at 2-4 MB/s and could not order Gemma's newline tokens.
"""

from __future__ import annotations

import numpy as np

from ..errors import FormatError

SPACE = "\u2581"
_SENTINEL = b"\xff"  # never in UTF-8 text: appended so tiktoken cannot shortcut a whole token


class TiedScores(FormatError):
    """Equal-score tokens that could compete for one symbol: ranks cannot order them as llama.cpp."""


class SpmBackend:
    """Ids of one special-free fragment, as llama.cpp's SPM session produces them."""

    def __init__(self, name: str, tokens: list[str], scores, excluded: set[int], add_space_prefix: bool):
        import tiktoken

        self._prefix = add_space_prefix
        token_id = {t: i for i, t in enumerate(tokens)}
        multi = [i for i, t in enumerate(tokens) if i not in excluded and len(t) >= 2 and _utf8(t)]
        if any(scores[i] != scores[i] for i in multi):
            raise FormatError(f"{name}: SentencePiece vocabulary with NaN scores")
        chars = {c for i, t in enumerate(tokens) if i not in excluded and _utf8(t) for c in t}
        ranks: dict[bytes, int] = {bytes([b]): b for b in range(256)}
        for c in sorted(chars):
            e = c.encode()
            for k in range(2, len(e) + 1):
                ranks.setdefault(e[:k], len(ranks))
        n_chars = len(ranks)
        multi.sort(key=lambda i: (-scores[i], i))
        probe = dict(ranks)
        for i in multi:
            probe[tokens[i].encode()] = len(probe)
        enc = tiktoken.Encoding(f"lookupkit-{name}-probe", pat_str=".", mergeable_ranks=probe, special_tokens={})
        kept = [i for i in multi if len(enc._encode_single_piece(tokens[i].encode() + _SENTINEL)) == 2]
        _check_ties(name, tokens, scores, kept)
        for i in kept:
            ranks[tokens[i].encode()] = len(ranks)
        # the joint: a character no token holds, standing for each special token between
        # fragments so that one tiktoken call encodes a whole segment (it is its own piece)
        self._joint = next((c for c in map(chr, range(1, 32)) if c not in chars), None)
        self._enc = tiktoken.Encoding(f"lookupkit-{name}", pat_str=_piece_pattern(tokens, kept, self._joint),
                                      mergeable_ranks=ranks, special_tokens={})
        # rank -> ids: a kept token is its id; a character (or partial one, or byte) is its token
        # if it is one, else its bytes' byte tokens (llama.cpp's resegment + byte_to_token)
        n = len(ranks)
        self._id = np.full(n, -1, np.int32)
        self._id[n_chars:] = np.asarray(kept, np.int32)
        self._spill: dict[int, np.ndarray] = {}
        byte_ids = _byte_tokens(tokens, token_id)
        for b, r in ranks.items():
            if r >= n_chars:
                break
            text = b.decode("utf-8", "ignore") if _complete(b) else ""
            if text and text in token_id:
                self._id[r] = token_id[text]
            elif all(byte_ids[x] >= 0 for x in b):
                ids = byte_ids[list(b)]
                self._id[r] = ids[0] if len(ids) == 1 else -2
                if len(ids) > 1:
                    self._spill[r] = ids
            else:
                self._id[r] = -3  # llama.cpp throws (byte_to_token): refused at encode time
        self._spill_ranks = np.array(sorted(self._spill), np.int64)

    def encode(self, text: str, at_start: bool = False) -> np.ndarray:
        return self.encode_parts([text], at_start)

    def encode_parts(self, parts: list, at_start: bool) -> np.ndarray:
        """Ids of a partitioned segment (fragments and special ids), in one tiktoken call when the
        joint character does not occur in the text (else fragment by fragment)."""
        joint, specials, texts, prev = self._joint, [], [], at_start
        for p in parts:
            if isinstance(p, int):
                specials.append(p)
                texts.append(joint)
                prev = True
            else:
                texts.append(" " + p if self._prefix and prev else p)
                prev = False
        text = "".join(texts) if joint is not None else ""
        if specials and (joint is None or text.count(joint) != len(specials)):
            return np.concatenate([np.array([p], np.int32) if isinstance(p, int) else self.encode_parts([p], k == 0 and at_start or isinstance(parts[k - 1], int))
                                   for k, p in enumerate(parts)])
        if not specials:
            text = "".join(texts)
        ranks = self._enc.encode_to_numpy(text.replace(" ", SPACE), disallowed_special=())
        ids = self._id[ranks]
        if specials:
            ids[ranks == ord(joint)] = specials
        if ids.size and ids.min() < 0:
            return self._expand(ranks, ids)
        return ids

    def _expand(self, ranks: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if (ids == -3).any():
            raise FormatError("the text has a character that is not in the vocabulary and a byte without "
                              "a byte token (llama.cpp fails on it too)")
        parts, start = [], 0
        for k in np.flatnonzero(ids == -2):
            parts += [ids[start:k], self._spill[int(ranks[k])]]
            start = k + 1
        parts.append(ids[start:])
        return np.concatenate(parts).astype(np.int32)


def _utf8(t: str) -> bool:
    try:
        t.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False  # a token with invalid UTF-8 never appears in text


def _complete(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _byte_tokens(tokens: list[str], token_id: dict) -> np.ndarray:
    """llama.cpp's byte_to_token for SPM: "<0xXX>", else the byte as a one-character token."""
    out = np.full(256, -1, np.int32)
    for b in range(256):
        t = token_id.get(f"<0x{b:02X}>", token_id.get(chr(b)) if b < 128 else None)
        if t is not None:
            out[b] = t
    return out


def _check_ties(name: str, tokens: list[str], scores, kept: list[int]) -> None:
    """Refuse equal-score tokens that could compete for one symbol (a suffix of one is a prefix of
    another): llama.cpp then takes the leftmost pair, tiktoken the lower rank."""
    groups: dict[float, list[int]] = {}
    for i in kept:
        groups.setdefault(float(scores[i]), []).append(i)
    for group in groups.values():
        if len(group) < 2:
            continue
        heads: dict[str, int] = {}
        for i in group:
            t = tokens[i]
            for k in range(1, len(t)):
                heads.setdefault(t[:k], i)
        for i in group:
            t = tokens[i]
            for k in range(1, len(t)):
                j = heads.get(t[k:])
                if j is not None and j != i:
                    raise TiedScores(f"its tokens {t!r} and {tokens[j]!r} have equal scores and overlap, "
                                     "and lookupkit cannot order their merges as llama.cpp does")


def _piece_pattern(tokens: list[str], kept: list[int], joint: str | None) -> str:
    """Pieces that no kept token spans: a cut before each SPACE unless the character before it is
    one that precedes SPACE inside some token (such characters keep the SPACE in their piece), and
    the joint character alone."""
    before = {t[k - 1] for t in (tokens[i] for i in kept) for k in range(1, len(t)) if t[k] == SPACE}
    sp, run = _cls([SPACE]), SPACE in before  # run: SPACE SPACE occurs in a token
    lead, tail = (f"{sp}+", f"{sp}*") if run else (sp, f"{sp}?")
    j, alone = (_cls([joint]), f"|{_cls([joint])}") if joint else ("", "")
    others = sorted(before - {SPACE})
    if not others:
        return f"{lead}[^{sp}{j}]*|[^{sp}{j}]+{alone}"
    x = _cls(others)
    body = f"(?:[^{sp}{x}{j}]|[{x}]+{tail})"
    return f"{lead}{body}*|{body}+{alone}"


def _cls(chars) -> str:
    return "".join(f"\\x{{{ord(c):X}}}" for c in chars)
