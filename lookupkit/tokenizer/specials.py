"""Which tokens llama.cpp splits out before tokenizing, and how (`tokenizer_st_partition`).

llama.cpp's vocabulary loader marks some texts control whatever the GGUF says (end-of-generation
and FIM markers), a few user-defined (gpt-oss), and gives some models lstrip/rstrip attributes
(`vocab.Vocab.strip`). The partition then takes each special token, longest first, and splits every
remaining text fragment at its occurrences, left to right; control and unknown tokens only when
parse_special is on, user-defined ones always. An lstrip/rstrip token also eats the C-locale
whitespace next to it inside its fragment.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .vocab import CONTROL, FIM_TEXTS, UNKNOWN, USER_DEFINED, Vocab

# llama.cpp marks these texts control even when the GGUF says normal (end-of-generation list;
# it covers the EOT and EOM candidates too). qwen2's normal "</s>" is the case that matters here.
EOG_TEXTS = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
}
FORCED_USER_DEFINED = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}  # gpt-oss hack
_C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale, which llama.cpp's strip uses


@dataclass(frozen=True)
class Special:
    text: str
    id: int
    always: bool          # split even without parse_special (user-defined)
    lstrip: bool = False
    rstrip: bool = False


def special_tokens(v: Vocab) -> list[Special]:
    """Every token llama.cpp splits out first, longest first (ties by id)."""
    texts = set(v.tokens)
    forced = set(EOG_TEXTS)
    for (kind, _), fim in FIM_TEXTS.items():
        if kind not in v.fim_named:
            forced |= fim
    user_forced = set(FORCED_USER_DEFINED)
    if {"<|return|>", "<|call|>", "<|end|>"} <= texts or {"<|calls|>", "<|flush|>", "<|end|>"} <= texts:
        forced.discard("<|end|>")      # o200k_harmony / solar-open: "<|end|>" is user-defined
        user_forced.add("<|end|>")
    normal = {"</s>"} if texts & {"<|tool_response>", "<|plamo:eos|>"} else set()  # gemma4, plamo
    out = []
    for i, (t, ty) in enumerate(zip(v.tokens, v.types)):
        if t in normal:
            continue
        control = ty in (CONTROL, UNKNOWN) or t in forced
        user = ty == USER_DEFINED
        if t in user_forced:
            control, user = False, True
        if control or user:
            ls, rs = v.strip.get(i, (False, False))
            out.append(Special(t, i, not control, ls, rs))
    return sorted(out, key=lambda s: (-len(s.text.encode("utf-8", "surrogateescape")), s.id))


class Spans(NamedTuple):
    """Where a text's special tokens are: [start, end) in characters (any whitespace a token strips
    included) and the token ids, in text order, as int64 arrays."""
    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray


NO_SPANS = Spans(*(np.zeros(0, np.int64),) * 3)


def code_points(text: str) -> np.ndarray:
    """The text's code points (uint32, a view of its UTF-32; lone surrogates kept as they are)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)


class Partition:
    """tokenizer_st_partition for one vocabulary: where its special tokens are in a text.

    llama.cpp passes over the text once per special token (6,414 of them for Gemma 3), longest
    first, each left to right, skipping occurrences that overlap text already taken. Two shortcuts
    give the same spans in one pass when the specials allow it (`_Plan`; Gemma 3's do):

    * runs: a family of specials that are one character repeated, every length from the family's
      shortest to its longest, of a character no other special holds (Gemma 3: "\\n" x 1-31,
      " " x 2-31, "\\t" x 1-31). llama.cpp then cuts each maximal run of the character into
      longest-special pieces from its left, and what is left is one special, or text if shorter
      than the shortest; numpy does that over the code points.
    * the other specials, when none overlaps another or itself (none inside another, no proper
      suffix of one a proper prefix of one): every occurrence is taken, found by one regex scan
      over a trie of their texts.

    Otherwise (a special that strips whitespace, overlapping specials) the replay: one regex pass
    over the specials' first two characters finds every place a special starts and the specials
    found there are replayed in llama.cpp's order, in Python. The shortcuts give the same spans (the tests
    check it) up to two orders of magnitude faster on text dense in specials, code and markup
    (bench/RESULTS.md: Figures the code's comments rely on).
    """

    def __init__(self, specials: list[Special]):
        self.specials = specials
        self._rank = {s.id: k for k, s in enumerate(specials)}
        self._heads: dict[bool, tuple] = {}  # the replay's, made when first needed
        self._plans = {ps: _Plan.make([s for s in specials if ps or s.always]) for ps in (False, True)}

    def split(self, text: str, parse_special: bool) -> list:
        """Text fragments (str) and special ids (int), in order, as llama.cpp's partition leaves them."""
        return fragments(text, self.locate(text, parse_special))

    def locate(self, text: str, parse_special: bool, cps: np.ndarray | None = None) -> Spans:
        """The specials' spans in `text` (`cps`: its code points, if the caller has them)."""
        plan = self._plans[parse_special]
        if not text:
            return NO_SPANS
        if plan is not None:
            return plan.locate(text, cps)
        return self._replay(text, parse_special)

    def _replay(self, text: str, parse_special: bool) -> Spans:
        if parse_special not in self._heads:
            groups: dict[str, dict[int, dict[str, Special]]] = {}
            for sp in self.specials:
                if parse_special or sp.always:
                    groups.setdefault(sp.text[:2], {}).setdefault(len(sp.text), {})[sp.text] = sp
            heads = sorted(groups, key=len, reverse=True)
            self._heads[parse_special] = (re.compile("|".join(map(re.escape, heads))) if groups else None,
                                          {h: sorted(g.items()) for h, g in groups.items()})
        pattern, groups = self._heads[parse_special]
        if pattern is None:
            return NO_SPANS
        found: dict[int, list[int]] = {}   # rank of a special -> its start positions, increasing
        seen = set()
        for m in pattern.finditer(text):
            for q in (m.start(), m.start() + 1) if m.end() - m.start() == 2 else (m.start(),):
                if q in seen:
                    continue
                seen.add(q)
                for head in (text[q:q + 2], text[q:q + 1]):
                    for length, texts in groups.get(head, ()):
                        sp = texts.get(text[q:q + length])
                        if sp is not None:
                            found.setdefault(self._rank[sp.id], []).append(q)
        return _cut(text, self.specials, found) if found else NO_SPANS


class _Plan:
    """The shortcuts of `Partition` for one set of active specials (`make`: None if they do not apply)."""

    def __init__(self, runs: dict[str, dict[int, int]], others: list[Special]):
        self.family = np.zeros(0x110000 if runs else 0, np.uint8)  # code point -> run family (0: none)
        longest = max((max(r) for r in runs.values()), default=0)
        self.shortest = np.zeros(len(runs) + 1, np.int64)
        self.longest = np.ones(len(runs) + 1, np.int64)
        self.run_ids = np.full((len(runs) + 1, longest + 1), -1, np.int64)  # [family, length] -> id
        for f, (c, lengths) in enumerate(sorted(runs.items()), 1):
            self.family[ord(c)] = f
            self.shortest[f], self.longest[f] = min(lengths), max(lengths)
            for n, tid in lengths.items():
                self.run_ids[f, n] = tid
        self.by_text = {s.text: s.id for s in others}
        self.finder = re.compile(f"({_trie(sorted(self.by_text))})") if others else None

    @classmethod
    def make(cls, active: list[Special]) -> "_Plan | None":
        if any(s.lstrip or s.rstrip or not s.text for s in active):
            return None
        families: dict[str, dict[int, int]] = {}
        for s in active:
            if s.text == s.text[0] * len(s.text):
                families.setdefault(s.text[0], {})[len(s.text)] = s.id
        runs = {c: f for c, f in families.items() if len(f) == max(f) - min(f) + 1}
        others = [s for s in active if not (s.text[0] in runs and s.text == s.text[0] * len(s.text))]
        if len(runs) > 255 or any(c in s.text for s in others for c in runs) or not _overlap_free(others):
            return None
        return cls(runs, others)

    def locate(self, text: str, cps: np.ndarray | None) -> Spans:
        parts = [self._runs(code_points(text) if cps is None else cps)] if len(self.family) else []
        if self.finder is not None:
            cut = self.finder.split(text)  # text, special, text, ...: C loops all the way (HTML has many)
            if len(cut) > 1:
                ends = np.cumsum(np.fromiter(map(len, cut), np.int64, len(cut)))
                ids = np.fromiter(map(self.by_text.__getitem__, cut[1::2]), np.int64, len(cut) // 2)
                parts.append(Spans(ends[0:-1:2], ends[1::2], ids))
        parts = [p for p in parts if len(p.ids)]
        if len(parts) < 2:
            return parts[0] if parts else NO_SPANS
        order = np.argsort(np.concatenate([p.starts for p in parts]), kind="stable")
        return Spans(*(np.concatenate(col)[order] for col in zip(*parts)))

    def _runs(self, cps: np.ndarray) -> Spans:
        fam = self.family[cps]
        at = np.flatnonzero(fam)  # the run characters; a run ends where they stop being adjacent or alike
        if not len(at):
            return NO_SPANS
        f = fam[at]
        cut = np.flatnonzero((np.diff(at) != 1) | (f[1:] != f[:-1])) + 1
        a = at[np.concatenate(([0], cut))]
        b = at[np.concatenate((cut - 1, [len(at) - 1]))] + 1
        f = f[np.concatenate(([0], cut))].astype(np.int64)
        lo, hi = self.shortest[f], self.longest[f]
        whole, rest = np.divmod(b - a, hi)   # longest-special pieces from the run's left, then the rest
        k = np.arange(whole.sum()) - np.repeat(np.cumsum(whole) - whole, whole)
        step = np.repeat(hi, whole)
        s1 = np.repeat(a, whole) + k * step
        tail = rest >= lo
        s2 = (a + whole * hi)[tail]
        starts = np.concatenate((s1, s2))
        ends = np.concatenate((s1 + step, s2 + rest[tail]))
        ids = np.concatenate((self.run_ids[np.repeat(f, whole), step], self.run_ids[f[tail], rest[tail]]))
        order = np.argsort(starts, kind="stable")
        return Spans(starts[order], ends[order], ids[order])


def _overlap_free(specials: list[Special]) -> bool:
    """No special inside another, and no proper suffix of one a proper prefix of one (itself too):
    then occurrences never overlap, and llama.cpp takes every one of them."""
    texts = {s.text for s in specials}
    prefixes = {t[:k] for t in texts for k in range(1, len(t))}
    for t in texts:
        for i in range(len(t)):
            for j in range(i + 1, len(t) + 1):
                if t[i:j] in texts and j - i < len(t):
                    return False             # a special inside t
                if t[i:j] not in prefixes:
                    break                    # nothing longer from i is a special or starts one
            else:
                return False                 # t[i:] starts a longer special
    return True


def _trie(texts: list[str]) -> str:
    """A regex matching exactly `texts`, branching one character at a time (an alternation of 6,000
    literals is tried literal by literal: far slower on HTML)."""
    root: dict = {}
    for t in texts:
        node = root
        for c in t:
            node = node.setdefault(c, {})
        node[""] = {}

    def pattern(node: dict) -> str:
        alts = [re.escape(c) + pattern(child) for c, child in sorted(node.items()) if c]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else f"(?:{'|'.join(alts)})"
        return f"(?:{body})?" if "" in node else body

    return pattern(root)


def fragments(text: str, spans: Spans) -> list:
    """The text between the spans (str, never empty) and the spans' ids (int), in order."""
    out: list = []
    pos = 0
    for a, b, tid in zip(spans.starts.tolist(), spans.ends.tolist(), spans.ids.tolist()):
        if a > pos:
            out.append(text[pos:a])
        out.append(tid)
        pos = b
    if pos < len(text):
        out.append(text[pos:])
    return out


def _cut(text: str, specials: list[Special], found: dict[int, list[int]]) -> Spans:
    starts: list[int] = []   # taken spans (special text plus any whitespace it strips), sorted
    ends: list[int] = []
    ids: list[int] = []
    for rank in sorted(found):
        sp = specials[rank]
        n, scan = len(sp.text), -1
        for p in sorted(found[rank]):
            if p < scan:
                continue
            k = bisect.bisect_right(starts, p)
            lo = ends[k - 1] if k else 0              # the fragment holding p is [lo, hi)
            hi = starts[k] if k < len(starts) else len(text)
            if p < lo or p + n > hi:
                continue
            a, b = p, p + n
            if sp.lstrip:
                while a > lo and text[a - 1] in _C_SPACE:
                    a -= 1
            if sp.rstrip:
                while b < hi and text[b] in _C_SPACE:
                    b += 1
            starts.insert(k, a)
            ends.insert(k, b)
            ids.insert(k, sp.id)
            scan = b
    return Spans(np.array(starts, np.int64), np.array(ends, np.int64), np.array(ids, np.int64))
