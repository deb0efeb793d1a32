"""The public Drafter API: an ordinary Python inference loop reproduces llama.cpp's replays exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lookupkit import Drafter
from lookupkit.errors import InputError, VocabMismatchError
from lookupkit.formats.lkc_write import write_file
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.formats import llama
from lookupkit.static.cache import StaticCache
from lookupkit.counts.tables import StaticTable
import needs

REF = needs.SHARED / "reference"
CASES = json.loads((REF / "cases.json").read_text()) if (REF / "cases.json").is_file() else []
TINY = [1, 5, 6, 7, 5, 6, 7, 5, 6, 8, 5, 6, 7, 5, 6, 7, 9, 5, 6, 7]


def static_of(parts: dict, vocab: dict | None = None) -> StaticCache:
    cache = NgramCache()
    cache.parts = parts
    return StaticCache.from_table(StaticTable.from_ngrams(cache.to_table()), meta={"vocab": vocab} if vocab else None)


def generate(drafter: Drafter, truth: np.ndarray, n_draft: int) -> list[str]:
    """llama.cpp's lookup-stats loop over one chunk written as a user would, with the public API."""
    out = truth[:1].copy()
    lines = []
    while len(out) < len(truth):
        draft = drafter.draft(out, n_draft)
        pos = len(out)
        accepted = 0
        for tok in draft:  # the "model" accepts the drafted prefix that equals the ground truth
            if pos + accepted >= len(truth) or truth[pos + accepted] != tok:
                break
            accepted += 1
        out = truth[:min(pos + accepted + 1, len(truth))]  # + the token the model samples itself
        lines.append(f"{pos} {len(draft)} {accepted} | {' '.join(map(str, draft))} | {' '.join(drafter.last_sources)}")
    drafter.reset(out)  # the end of the sequence: learnt into the dynamic cache, as lookup-stats does per chunk
    return lines


@needs.shared_mark("reference/cases.json")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["case"])
def test_a_plain_python_loop_reproduces_every_reference_case(case):
    drafter = Drafter(static=REF / case["static"] if case["static"] else None,
                      dynamic=REF / case["dynamic"] if case["dynamic"] else None)
    tokens = np.fromfile(REF / case["tokens"], "<i4")
    n_ctx = case["n_ctx"]
    lines = []
    for chunk, start in enumerate(range(0, len(tokens) - n_ctx, n_ctx)):
        lines += [f"{chunk} {line}" for line in generate(drafter, tokens[start:start + n_ctx], case["n_draft"])]
    expected = (REF / case["steps_file"]).read_text().splitlines()[1:]
    assert [line.replace("|  |", "| |").rstrip() for line in lines] == expected


def test_tiny_example_and_sources():
    drafter = Drafter()
    assert drafter.draft(TINY[:1], 4) == []
    assert drafter.draft(TINY[:7], 4) == [5, 6, 7, 5]
    assert drafter.last_sources == ["c3", "c4", "c4", "c3"]


def test_accept_then_draft_equals_drafting_from_the_whole_sequence():
    a, b = Drafter(), Drafter()
    a.accept(TINY[:5])
    a.accept(TINY[5:12])
    assert a.draft(None, 6) == b.draft(TINY[:12], 6)
    assert a.sequence.tolist() == b.sequence.tolist() == TINY[:12]


def test_a_sequence_that_diverges_starts_over():
    d = Drafter()
    d.draft(TINY[:12], 4)
    fresh = Drafter()
    other = [9, 9, 1, 5, 6]
    assert d.draft(other, 4) == fresh.draft(other, 4)
    assert d.sequence.tolist() == other


def test_reset_learns_into_the_dynamic_cache_unless_told_not_to():
    learnt, forgot = Drafter(), Drafter()
    learnt.reset(TINY[:8])
    forgot.reset(TINY[:8], learn=False)
    assert learnt.dynamic_table().to_dict()[(5, 6, 7)] == {5: 2}
    assert forgot.dynamic_table().to_dict() == {}
    # chunk 1 of the worked example: the dynamic cache drafts 5 after 6 8 5 6 7 (d3)
    assert learnt.draft([6, 8, 5, 6, 7], 4) == [5] and learnt.last_sources == ["d3"]
    assert forgot.draft([6, 8, 5, 6, 7], 4) == []


def test_static_cache_drafts_alone_and_as_a_path(tmp_path):
    static = static_of({(1, 2): {3: 5, 4: 1}})
    assert Drafter(static=static).draft([0, 1, 2], 2) == [3]
    path = tmp_path / "s.lcs"
    llama.save(static.to_table().to_ngrams(), path)
    d = Drafter(static=path)
    assert d.draft([0, 1, 2], 2) == [3] and d.last_sources == ["s2"]


def test_dynamic_cache_from_a_legacy_file(tmp_path):
    lcd = NgramCache()
    lcd.update([4, 4, 4, 4, 4, 4])
    llama.save(lcd.to_table(), tmp_path / "d.lcd")
    d = Drafter(dynamic=tmp_path / "d.lcd")
    assert d.draft([7, 4], 3) == [4, 4, 4] and d.last_sources == ["d1", "d2", "d3"]
    assert d.dynamic_table().to_dict() == lcd.to_table().to_dict()


def test_a_static_cache_for_another_vocabulary_is_refused(tmp_path):
    vocab = {"name": "v1", "n_vocab": 10, "fingerprint": "aaaa"}
    with pytest.raises(VocabMismatchError, match="built for v1 .vocab fingerprint aaaa"):
        Drafter(static=static_of({(1, 2): {3: 5}}, vocab), expect_vocab="bbbb")
    table = static_of({(1, 2): {3: 5}}).to_table()
    with open(tmp_path / "s.lkc", "wb") as f:
        write_file(f, table, {"vocab": vocab})
    with pytest.raises(VocabMismatchError, match="bbbb"):
        Drafter(static=tmp_path / "s.lkc", expect_vocab="bbbb")
    assert Drafter(static=tmp_path / "s.lkc", expect_vocab="aaaa").draft([1, 2], 1) == [3]


@pytest.mark.parametrize("n_draft", [0, -1, 1025, 2.5, True, "4"])
def test_bad_n_draft_is_refused(n_draft):
    with pytest.raises(InputError, match="n_draft"):
        Drafter().draft(TINY, n_draft)


@pytest.mark.parametrize("tokens, what", [([1, -2], "outside"), ([[1, 2]], "1-D"), ([1.5, 2.0], "integer"),
                                          ([2**31], "outside")])
def test_bad_tokens_are_refused(tokens, what):
    with pytest.raises(InputError, match=what):
        Drafter().draft(tokens, 4)
    with pytest.raises(InputError, match=what):
        Drafter().accept(tokens)


def test_bad_dynamic_argument():
    with pytest.raises(InputError, match="NgramTable"):
        Drafter(dynamic={"not": "a table"})
