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
  can span (`_piece_pattern`, read from the vocabulary): before every "\\u2581" not preceded by a
  character that precedes "\\u2581" inside a token (for Gemma 3 only ">", from ">\\u2581</"), and
  between an ASCII punctuation mark or digit and a character no token holds next to one (for Gemma
  3 every letter but "\\u02c8"): code and markup become pieces that are mostly whole tokens.

Tokens the partition always splits out (user-defined ones; control ones too with parse_special)
can never appear inside a fragment and are left out, so a backend is built per parse_special. A
segment is one tiktoken call: over its code points (numpy) each special's span becomes the joint, a
control character no token holds, which is a piece of its own and gets the special's id back.

Why tiktoken and not a numba SPM of lookupkit's own: tiktoken's Rust merge loop is already the fast
part, and this mapping reuses it unchanged (the numba engine, `spm_ties`, is many times slower). It gives
llama.cpp's ids many times faster than llama.cpp does, also on text dense in special tokens (code: each
newline and indentation is one), where the partition replayed in Python before took nearly all the time
(python -m lookupkit.bench.tokenize_corpora --replay; bench/RESULTS.md: Figures the code's comments rely on).
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import FormatError
from .specials import NO_SPANS, Spans, code_points, fragments

SPACE = "\u2581"
_SENTINEL = b"\xff"  # never in UTF-8 text: appended so tiktoken cannot shortcut a whole token
_NEVER = "\x00lookupkit: no special token\x00"  # tiktoken's special token that is never allowed
_PUNCT = frozenset(chr(c) for c in range(0x21, 0x7F) if not chr(c).isalpha())  # ASCII punctuation, digits
NO_BYTE_TOKEN = ("the text has a character that is not in the vocabulary and a byte without a byte token "
                 "(llama.cpp fails on it too)")  # spm's and spm_ties' refusal


class TiedScores(FormatError):
    """Equal-score tokens that could compete for one symbol: ranks cannot order them as llama.cpp."""


class SpmBackend:
    """Ids of a partitioned segment, as llama.cpp's SPM session produces them."""

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
        # _NEVER: with no special token at all, tiktoken's encode_to_numpy searches an empty pattern
        # at every character (slower); it is never allowed, so its rank is never returned
        self._enc = tiktoken.Encoding(f"lookupkit-{name}", pat_str=_piece_pattern(tokens, kept, self._joint),
                                      mergeable_ranks=ranks, special_tokens={_NEVER: len(ranks)})
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

    def encode_spans(self, text: str, spans: Spans, at_start: bool, cps: np.ndarray | None = None) -> np.ndarray:
        """Ids of a segment whose special tokens are at `spans` (`cps`: its code points, if known),
        in one tiktoken call: each special's span becomes the joint character, built over the code
        points (fragment by fragment if the text holds the joint itself)."""
        cps = code_points(text) if cps is None else cps
        joint, n = self._joint, len(spans.ids)
        if n and (joint is None or (cps == ord(joint)).any()):
            return self._by_fragment(text, spans, at_start)
        out = np.where(cps == ord(" "), ord(SPACE), cps)
        if n:  # each span becomes the joint: its first character replaced, the others dropped
            out[spans.starts] = ord(joint)
        inner = _inside(spans)
        out = np.delete(out, inner) if len(inner) else out
        if self._prefix:  # llama.cpp's space before the first fragment (at_start) and after each special
            after = np.setdiff1d(spans.ends[spans.ends < len(cps)], spans.starts)
            if at_start and len(cps) and not (n and spans.starts[0] == 0):
                after = np.concatenate(([0], after))
            out = np.insert(out, after - np.searchsorted(inner, after), ord(SPACE))
        ranks = self._enc.encode_to_numpy(out.tobytes().decode("utf-32-le", "surrogatepass"), disallowed_special=())
        ids = self._id[ranks]
        if n:
            ids[ranks == ord(joint)] = spans.ids
        if ids.size and ids.min() < 0:
            return self._expand(ranks, ids)
        return ids

    def _by_fragment(self, text: str, spans: Spans, at_start: bool) -> np.ndarray:
        out, prev = [], at_start
        for part in fragments(text, spans):
            if isinstance(part, int):
                out.append(np.array([part], np.int32))
            else:
                out.append(self.encode_spans(part, NO_SPANS, prev))
            prev = isinstance(part, int)
        return np.concatenate(out) if out else np.zeros(0, np.int32)

    def _expand(self, ranks: np.ndarray, ids: np.ndarray) -> np.ndarray:
        if (ids == -3).any():
            raise FormatError(NO_BYTE_TOKEN)
        parts, start = [], 0
        for k in np.flatnonzero(ids == -2):
            parts += [ids[start:k], self._spill[int(ranks[k])]]
            start = k + 1
        parts.append(ids[start:])
        return np.concatenate(parts).astype(np.int32)


def _inside(spans: Spans) -> np.ndarray:
    """Every position of the spans but their first ones, increasing."""
    inner = spans.ends - spans.starts - 1
    first = np.repeat(spans.starts + 1 - (np.cumsum(inner) - inner), inner)
    return first + np.arange(len(first))


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
    """Pieces that no kept token spans, cut only between two characters no kept token holds side by side:

    * before each SPACE, unless the character before it is one (G) that precedes SPACE inside some
      token: G keeps the SPACE (all of a run if SPACE SPACE is in a token) in its piece;
    * between an ASCII punctuation mark or digit (P) and a character of W: all characters but
      SPACE, P, G, the joint and those some token holds next to a P (O, which join both sides).
      No Gemma 3 token has a letter next to one, so code and markup are cut at every such
      boundary ("self" "." "assertEqual" "(");
    * around the joint character, a piece of its own.
    """
    texts = [tokens[i] for i in kept]
    before = {t[k - 1] for t in texts for k in range(1, len(t)) if t[k] == SPACE}
    glue = before - {SPACE}
    punct = _PUNCT - glue
    has_punct = re.compile(f"[{re.escape(''.join(sorted(punct)))}]").search
    other = {c for t in texts if has_punct(t) for x, y in zip(t, t[1:]) if (x in punct) != (y in punct)
             for c in (x, y) if c not in punct} - glue - {SPACE}
    sp, run = _cls([SPACE]), SPACE in before
    lead, tail = (f"{sp}+", f"{sp}*") if run else (sp, f"{sp}?")
    j, p, o, g = _cls([joint] if joint else []), _cls(sorted(punct)), _cls(sorted(other)), _cls(sorted(glue))
    block = f"(?:[^{sp}{p}{o}{g}{j}]+|[{p}]+)" if punct else f"[^{sp}{o}{g}{j}]+"
    links = ([f"[{o}]"] if other else []) + ([f"[{g}]+{tail}"] if glue else [])
    alone = f"|{j}" if joint else ""
    if not links:
        return f"{lead}{block}?|{block}{alone}"
    unit = f"(?:(?:{'|'.join(links)})+{block}?)"
    return f"{lead}{block}?{unit}*|(?:{block}|{unit}){unit}*{alone}"


def _cls(chars) -> str:
    return "".join(f"\\x{{{ord(c):X}}}" for c in chars)
