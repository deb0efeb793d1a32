"""The suffix index on disk: a round trip is the same index and the same answers; damage is a FormatError."""

from __future__ import annotations

import numpy as np
import pytest

from lookupkit.errors import FormatError, InputError
from lookupkit.suffix import build_index, continuation, corpus_text, longest_match
from lookupkit.suffix.build import doubling_sa
from lookupkit.suffix.store import build_file, open_index, save


def test_round_trip_maps_the_same_index(tmp_path):
    rng = np.random.default_rng(3)
    index = build_index(corpus_text([rng.integers(0, 40, 3000), rng.integers(0, 2**18, 500)]), builder=doubling_sa)
    path = tmp_path / "c.lksx"
    size = save(index, path)
    assert size == path.stat().st_size and size <= 4096 + 8 * index.n + 3 * 64 + index.starts.nbytes + index.second.nbytes
    back = open_index(path)
    for k in ("text", "sa", "starts", "second"):
        assert np.array_equal(getattr(back, k), getattr(index, k)) and getattr(back, k).dtype == getattr(index, k).dtype
    ctx = index.text[100:130].tolist()
    assert longest_match(back, ctx) == longest_match(index, ctx) and longest_match(back, ctx)[0] == 30
    assert continuation(back, *longest_match(back, ctx)).tokens.tolist() == index.text[130:146].tolist()


def test_damage_is_a_format_error(tmp_path):
    path = tmp_path / "c.lksx"
    save(build_index(corpus_text([np.arange(50)]), builder=doubling_sa), path)
    data = path.read_bytes()
    (tmp_path / "bad").write_bytes(b"NOTSUFX!" + data[8:])
    with pytest.raises(FormatError, match="not a lookupkit suffix index"):
        open_index(tmp_path / "bad")
    (tmp_path / "short").write_bytes(data[:len(data) // 2])
    with pytest.raises(FormatError, match="truncated"):
        open_index(tmp_path / "short")


@pytest.mark.parametrize("cut", [1, 7, 1000, 10**6])
def test_build_file_writes_the_file_save_writes(tmp_path, cut):
    rng = np.random.default_rng(cut)
    text = corpus_text([rng.integers(0, 30, 2500), np.zeros(0, np.int64), rng.integers(2**18 - 40, 2**18, 700)])
    save(build_index(text, builder=doubling_sa), tmp_path / "a")
    assert build_file((text[i:i + cut] for i in range(0, len(text), cut)), len(text), tmp_path / "b") == \
        (tmp_path / "b").stat().st_size
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_build_file_of_an_empty_corpus_and_bad_chunks(tmp_path):
    build_file([], 0, tmp_path / "e")
    assert open_index(tmp_path / "e").n == 0 and longest_match(open_index(tmp_path / "e"), [1]) == (0, 0, 0)
    with pytest.raises(InputError, match="ending in SEPARATOR"):
        build_file([np.array([1, 2, -1, 3])], 4, tmp_path / "x")
    with pytest.raises(InputError, match="more than 2 ids"):
        build_file([np.array([1, 2, -1])], 2, tmp_path / "x")
    assert not (tmp_path / "x").exists()
