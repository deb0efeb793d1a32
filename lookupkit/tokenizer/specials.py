"""Which tokens llama.cpp splits out before tokenizing, and how (`tokenizer_st_partition`).

llama.cpp's vocabulary loader marks some texts control whatever the GGUF says (end-of-generation
and FIM markers), a few user-defined (gpt-oss), and gives some models lstrip/rstrip attributes
(`vocab.Vocab.strip`). The partition then takes each special token, longest first, and splits every
remaining text fragment at its occurrences, left to right; control and unknown tokens only when
parse_special is on, user-defined ones always. An lstrip/rstrip token also eats the C-locale
whitespace next to it inside its fragment.
"""

from __future__ import annotations

from dataclasses import dataclass

import bisect
import re

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


class Partition:
    """tokenizer_st_partition for one vocabulary: text -> fragments (str) and special ids (int).

    Rather than llama.cpp's pass over the text per special token (6,414 of them for Gemma 3), one
    regex pass over the specials' first two characters finds every place a special starts, the
    specials found there are replayed in llama.cpp's order (longest first, each left to right,
    skipping occurrences that overlap text already taken), and the text is cut once.
    """

    def __init__(self, specials: list[Special]):
        self.specials = specials
        self._rank = {s.id: k for k, s in enumerate(specials)}
        self._heads: dict[bool, tuple] = {}
        for ps in (False, True):
            active = [s for s in specials if ps or s.always]
            groups: dict[str, dict[int, dict[str, Special]]] = {}
            for sp in active:
                groups.setdefault(sp.text[:2], {}).setdefault(len(sp.text), {})[sp.text] = sp
            pattern = re.compile("|".join(re.escape(h) for h in sorted(groups, key=len, reverse=True))) if groups else None
            self._heads[ps] = (pattern, {h: sorted(g.items()) for h, g in groups.items()})

    def split(self, text: str, parse_special: bool) -> list:
        pattern, groups = self._heads[parse_special]
        if not text or pattern is None:
            return [text] if text else []
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
        if not found:
            return [text]
        return _cut(text, self.specials, found)


def _cut(text: str, specials: list[Special], found: dict[int, list[int]]) -> list:
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
    out: list = []
    pos = 0
    for a, b, tid in zip(starts, ends, ids):
        if a > pos:
            out.append(text[pos:a])
        out.append(tid)
        pos = b
    if pos < len(text):
        out.append(text[pos:])
    return out
