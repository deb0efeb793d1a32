"""The scale test's generator at a tiny size: deterministic, prefix-stable, Heaps-like growth of distinct
2-grams; a build of its ids under a tiny --memory-budget spills sorted runs and still writes the bytes of
the in-memory build."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest

from lookupkit.create import memory_budget as budget
from lookupkit.bench.scale import gen as scale_gen
from lookupkit.bench.scale.gen import ZipfMarkov, fit_power, generate, growth
from lookupkit.create.pipeline import _meta, _tokenize, build_static
from lookupkit.corpora import TokenFile
from lookupkit.corpora.stream import TextBudget
from lookupkit.counts import spill
from lookupkit.counts.bigrams import count_static
from lookupkit.formats import write_table
from lookupkit.tokenizer.store import TokenStore

N = 300_000


@pytest.fixture(scope="module")
def ids_file(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("scale") / "zm.i32", N, ZipfMarkov(seed=3))


def test_generator_deterministic_prefix_stable(tmp_path, ids_file, monkeypatch):
    monkeypatch.setattr(scale_gen, "BLOCK", 1 << 16)  # several blocks
    a = generate(tmp_path / "a.i32", 200_000, ZipfMarkov(seed=3))
    b = generate(tmp_path / "b.i32", 300_000, ZipfMarkov(seed=3))
    ids = np.fromfile(b, "<i4")
    assert np.array_equal(np.fromfile(a, "<i4"), ids[:200_000])  # a smaller size is a prefix
    assert ids.min() >= 0 and ids.max() < ZipfMarkov().vocab
    assert not np.array_equal(ids, np.fromfile(generate(tmp_path / "c.i32", 300_000, ZipfMarkov(seed=4)), "<i4"))
    assert not list(tmp_path.glob("*.part"))


def test_growth_is_sublinear(ids_file):
    ids = np.fromfile(ids_file, "<i4")
    rows = growth(ids, [N // 8, N // 4, N // 2, N])
    assert all(r1["keys"] > r0["keys"] for r0, r1 in zip(rows, rows[1:]))
    _, b = fit_power(rows, "keys")
    assert 0.5 < b < 0.95  # Heaps-like, as real text (0.64-0.72 on wiki541 prefixes)


def reference(path, out):
    with tempfile.TemporaryDirectory() as root:
        docs, _ = _tokenize([TokenFile(path)], None, TokenStore(root), TextBudget(None, "line"), None)
        table = count_static([list(d.arrays()) for d in docs], 2**31)
        write_table(table, out, None, _meta(None, docs, sum(d.n_tokens for d in docs), None, "line"))
        for d in docs:
            d.close()
    return out.read_bytes()


@pytest.mark.parametrize("fmt", ["lkc", "ggngcmap"])
def test_tiny_budget_spills_same_bytes(tmp_path, ids_file, monkeypatch, fmt):
    ref = reference(ids_file, tmp_path / f"ref.{fmt}")
    monkeypatch.setattr(budget, "MIN_PER_JOB", 1 << 20)  # allow a 4 MiB budget: runs spilled beyond ~1.3 MiB
    monkeypatch.setattr(spill, "MIN_CHUNK_TOKENS", 2000)
    monkeypatch.setattr(spill, "BYTES_PER_CHUNK_TOKEN", 500)  # chunks of ~2.8k ids
    spilled = []
    real = spill.write_run
    monkeypatch.setattr(spill, "write_run", lambda *a: spilled.append(a[0]) or real(*a))
    out = tmp_path / f"j1.{fmt}"
    s = build_static([TokenFile(ids_file)], None, out, token_cache=False, jobs=1, memory_budget=4 << 20,
                     temp_dir=tmp_path)
    assert len(spilled) >= 3, len(spilled)
    assert out.read_bytes() == ref and s["n_tokens"] == N
    out2 = tmp_path / f"j2.{fmt}"
    build_static([TokenFile(ids_file)], None, out2, token_cache=False, jobs=2, memory_budget=8 << 20,
                 temp_dir=tmp_path)
    assert out2.read_bytes() == ref
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"ref.{fmt}", f"j1.{fmt}", f"j2.{fmt}"])
