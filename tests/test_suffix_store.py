"""The suffix index on disk: a round trip is the same index and the same answers; damage is a FormatError."""

from __future__ import annotations

import numpy as np
import pytest

from lookupkit.errors import FormatError
from lookupkit.suffix import build_index, continuation, corpus_text, longest_match
from lookupkit.suffix.build import doubling_sa
from lookupkit.suffix.store import open_index, save


def test_round_trip_maps_the_same_index(tmp_path):
    rng = np.random.default_rng(3)
    index = build_index(corpus_text([rng.integers(0, 40, 3000), rng.integers(0, 2**18, 500)]), builder=doubling_sa)
    path = tmp_path / "c.lksx"
    size = save(index, path)
    assert size == path.stat().st_size and size <= 8 * index.n + index.starts.nbytes + 4096
    back = open_index(path)
    for k in ("text", "sa", "starts"):
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
