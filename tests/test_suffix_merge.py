"""The suffix index's out-of-core sort (lookupkit.suffix.merge): whatever the parts, the sections are the
in-memory sort's bytes; a part's tail is exactly its suffixes that are proper prefixes of others (brute
force); the work guard stops a merge of long repeats with one line and no file left; lookup-create with a
budget below the sort writes the file it writes in memory."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupkit.errors import InputError
from lookupkit.formats import lkc_suffix
from lookupkit.suffix import build_index, corpus_text, merge
from lookupkit.suffix import write as suffix_write


def _sections(part) -> dict[str, bytes]:
    raw = open(part.path, "rb").read()
    return {s: raw[part.offsets[s]:part.offsets[s] + part.nbytes(s)] for s in lkc_suffix.NAMES}


def _build(tmp_path, docs, per_part, name="p"):
    n = sum(len(d) + 1 for d in docs)
    return suffix_write.build_part(([np.asarray(d, np.int64)] for d in docs), n, str(tmp_path / name),
                                   budget=per_part * suffix_write.BYTES_PER_TOKEN_TO_BUILD)


docs_strategy = st.lists(st.lists(st.integers(0, 3), max_size=60), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(docs=docs_strategy, twin=st.booleans(), cut=st.integers(1, 400))
def test_any_parts_give_the_in_memory_bytes(tmp_path_factory, docs, twin, cut):
    """Small alphabets and repeated documents: the parts' tails are long and the merge compares deep."""
    docs = docs + [docs[0]] * twin
    tmp = tmp_path_factory.mktemp("m")
    n = sum(len(d) + 1 for d in docs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(suffix_write, "MIN_PART_POSITIONS", 1)
        mp.setattr(merge, "WORK_PER_LEVEL", 10**6)
        part = _build(tmp, docs, min(cut, n))
    arrays, header = lkc_suffix.sections_of(build_index(corpus_text(docs)))
    assert part.header == header and _sections(part) == {s: a.tobytes() for s, a in arrays.items()}
    assert part.parts == -(-n // min(cut, n)) and os.listdir(tmp) == ["p"]  # (the rows file is gone)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 2), min_size=1, max_size=80))
def test_the_tail_is_the_suffixes_that_are_proper_prefixes_of_others(ids):
    part = np.array(ids, np.int32)
    sa = _local_sa(part)
    n = len(part)
    prefix_of_another = [i for i in range(n) if any(j != i and n - j > n - i and
                                                     np.array_equal(part[j:j + n - i], part[i:])
                                                     for j in range(n))]
    m = merge.tail_length(part, sa)
    assert prefix_of_another == list(range(n - m, n))


def _local_sa(part):
    """The part's suffix array with its end lowest (what a part's sort gives)."""
    return np.array(sorted(range(len(part)), key=lambda i: list(part[i:])), np.int32)


def test_hand_worked_tails():
    # 1 2 1 2: "2" (3) and "1 2" (2) are prefixes of "2 1 2" and "1 2 1 2"; "2 1 2" (1) is no one's
    assert merge.tail_length(np.array([1, 2, 1, 2], np.int32), _local_sa([1, 2, 1, 2])) == 2
    assert merge.tail_length(np.array([1, 2, 3], np.int32), _local_sa([1, 2, 3])) == 0
    assert merge.tail_length(np.array([5, 5, 5, 5], np.int32), _local_sa([5, 5, 5, 5])) == 3


def test_compare_puts_the_end_of_the_text_lowest():
    text = np.array([2, 1, -1, 2, 1], np.int32)
    assert merge.compare(text, 3, 0) == (-1, 3)  # "2 1" ends before "2 1 -1 ...": lower, 3 tokens read
    assert merge.compare(text, 0, 3) == (1, 3)
    assert merge.compare(text, 2, 1) == (-1, 1)  # the separator below every id


def test_the_merge_of_long_repeats_stops_with_the_budget_that_avoids_it(tmp_path, monkeypatch):
    monkeypatch.setattr(suffix_write, "MIN_PART_POSITIONS", 1)
    passage = np.random.default_rng(1).integers(0, 50, 3000)
    with pytest.raises(InputError, match=r"compared more than .* tokens per position: the corpus repeats long "
                                         r"passages .*; pass --memory-budget 1MiB or more to sort it in one part"):
        _build(tmp_path, [passage, passage], 3001)
    assert os.listdir(tmp_path) == ["p"]  # (the raw file stays for the build's work directory to remove)
    monkeypatch.setattr(merge, "WORK_PER_LEVEL", 10**4)  # the same corpus with room to compare: exact
    part = _build(tmp_path, [passage, passage], 3001, "q")
    assert _sections(part)["suffix_sa"] == lkc_suffix.sections_of(
        build_index(corpus_text([passage, passage])))[0]["suffix_sa"].tobytes()


def test_budgets_refused_before_the_build():
    with pytest.raises(InputError, match="too small for the suffix index of 1,048,576 positions: .* pass "
                                         "--memory-budget 1MiB or more"):
        suffix_write.part_positions(2**20, 2**19)
    assert suffix_write.part_positions(2**20, 2**30) == 2**20  # in memory
    assert suffix_write.part_positions(2**20, 15 * 2**17) == 2**17
    assert suffix_write.part_positions(100, 15 * 100) == 100  # a text smaller than a part: no minimum


def test_lookup_create_below_the_sorts_budget_writes_the_same_file(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lookupkit.cli.create import app

    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(3)
    words = rng.integers(0, 5000, 400)  # a Zipf-ish text of 1.3 M ids with repeated phrases
    ids = words[np.minimum(rng.zipf(1.3, 1_300_000), len(words)) - 1].astype(np.int32)
    np.save(tmp_path / "ids.npy", ids)
    outs = {}
    for budget, jobs in (("1GiB", 2), ("16MiB", 1)):  # 16 MiB: parts of 1,118,481 positions, so two
        out = tmp_path / f"{budget}.lkc"
        result = CliRunner().invoke(app, ["--tokens", str(tmp_path / "ids.npy"), "--suffix-index", "-j", str(jobs),
                                          "--memory-budget", budget, "-lcs", str(out), "--json"])
        assert result.exit_code == 0, result.output
        outs[budget] = (out.read_bytes(), json.loads(result.stdout)["suffix_index"])
    assert outs["1GiB"][1]["sorted_in_parts"] == 1 and outs["16MiB"][1]["sorted_in_parts"] == 2
    assert outs["16MiB"][1]["merge_compared_tokens"] > 0
    assert outs["1GiB"][0] == outs["16MiB"][0]
