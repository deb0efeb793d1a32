"""Every build path writes the bytes of the single-process in-memory build: -j N, any memory budget
(spilling), token ids, several documents, all four formats; bad jobs/budgets, killed workers, full disks."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import numpy as np
import pytest

from lookupkit import Tokenizer
from lookupkit.create import parallel
from lookupkit.create.pipeline import _meta, _tokenize, build_static
from lookupkit.corpora import TextFile, TokenFile
from lookupkit.corpora.stream import TextBudget
from lookupkit.counts.bigrams import count_static
from lookupkit.errors import InputError, LookupkitError
from lookupkit.formats import write_table
from lookupkit.tokenizer.store import TokenStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = [os.path.join(ROOT, p) for p in ("README.md", "formats/SPEC.md", "lookupkit/create/pipeline.py")]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.default()


def reference(sources, tok, path, fmt=None, max_bytes=None):
    """Today's single-process build: tokenize, count in memory, write_table (what build_static did)."""
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        docs, _ = _tokenize(sources, tok, TokenStore(root), TextBudget(max_bytes, "line"), None)
        table = count_static([list(d.arrays()) for d in docs], tok.n_vocab if tok else 2**31)
        meta = _meta(tok, docs, sum(d.n_tokens for d in docs), max_bytes, "line")
        write_table(table, path, fmt, meta)
        for d in docs:
            d.close()
    with open(path, "rb") as f:
        return f.read()


def built(tmp_path, sources, tok, name, **kw):
    out = tmp_path / name
    build_static(sources, tok, out, token_cache=False, **kw)
    return out.read_bytes()


@pytest.mark.parametrize("fmt", ["lkc", "ggngcmap", "lcs", "lkc.zst"])
@pytest.mark.parametrize("jobs,budget", [(1, None), (2, None), (2, 32 << 20), (3, 48 << 20)])
def test_same_bytes(tmp_path, tok, fmt, jobs, budget, monkeypatch):
    monkeypatch.setattr(parallel, "PIECE_BYTES", 3000)  # many pieces, many cuts inside one document
    sources = [TextFile(p) for p in TEXTS]
    ref = reference(sources, tok, tmp_path / f"ref.{fmt}")
    assert built(tmp_path, sources, tok, f"out.{fmt}", jobs=jobs, memory_budget=budget) == ref


def test_spilling_tiny_chunks_same_bytes(tmp_path, tok, monkeypatch):
    """Chunks of 2^16 tokens and runs spilled after every chunk (a corpus of ~100k ids, 16 MiB per job)."""
    from lookupkit.counts import spill

    monkeypatch.setattr(spill, "MIN_CHUNK_TOKENS", 500)
    monkeypatch.setattr(spill, "BYTES_PER_CHUNK_TOKEN", 10_000)
    monkeypatch.setattr(parallel, "PIECE_BYTES", 5000)
    sources = [TextFile(p) for p in TEXTS]
    ref = reference(sources, tok, tmp_path / "ref.lkc")
    for jobs in (1, 2):
        assert built(tmp_path, sources, tok, f"j{jobs}.lkc", jobs=jobs, memory_budget=jobs * (16 << 20)) == ref


def test_token_ids_and_max_bytes(tmp_path, tok):
    rng = np.random.default_rng(3)
    ids = (rng.zipf(1.3, 300_000).clip(1, 5_000_000) - 1).astype("<i4")
    (tmp_path / "a.i32").write_bytes(ids.tobytes())
    (tmp_path / "b.i32").write_bytes(ids[:1000].tobytes())
    srcs = [TokenFile(tmp_path / "a.i32"), TokenFile(tmp_path / "b.i32")]
    ref = reference(srcs, None, tmp_path / "ref.lkc")
    for jobs in (1, 2):
        srcs = [TokenFile(tmp_path / "a.i32"), TokenFile(tmp_path / "b.i32")]
        assert built(tmp_path, srcs, None, f"t{jobs}.lkc", jobs=jobs) == ref
    text = [TextFile(p) for p in TEXTS]
    ref = reference(text, tok, tmp_path / "refm.lkc", max_bytes=30_000)
    assert built(tmp_path, [TextFile(p) for p in TEXTS], tok, "m.lkc", jobs=2, max_bytes=30_000) == ref


def test_token_cache_parallel_then_reused(tmp_path, tok, monkeypatch):
    """-j 2 stores the ids (with a checkpoint at every cut); a later -j 2 build reuses them; same bytes."""
    monkeypatch.setattr(parallel, "PIECE_BYTES", 4000)
    sources = [TextFile(TEXTS[0])]
    ref = reference(sources, tok, tmp_path / "ref.lkc")
    s1 = build_static(sources, tok, tmp_path / "a.lkc", cache_dir=tmp_path / "c", jobs=2)
    s2 = build_static(sources, tok, tmp_path / "b.lkc", cache_dir=tmp_path / "c", jobs=2)
    assert s1["reused_tokens"] == 0 and s2["reused_tokens"] == s2["n_tokens"] > 0
    assert (tmp_path / "a.lkc").read_bytes() == (tmp_path / "b.lkc").read_bytes() == ref
    from lookupkit.tokenizer.store import Entry

    (entry_path,) = (tmp_path / "c" / "tokens").glob("*.lkt")
    entry = Entry.open(entry_path)
    assert len(entry.checkpoints) >= 2 and entry.n_tokens == s1["n_tokens"]  # a checkpoint at every cut
    entry.close()


@pytest.mark.parametrize("jobs,budget,words", [
    (0, None, "at least 1"), (-3, None, "at least 1"), (10_000, None, "more than"),
    (2, 1 << 20, "minimum is 32 MiB"), (1, 1 << 60, "exceeds this machine"), (1, -5, "positive"),
])
def test_bad_jobs_and_budgets(tmp_path, tok, jobs, budget, words):
    with pytest.raises(InputError, match=words):
        build_static([TextFile(TEXTS[0])], tok, tmp_path / "x.lkc", jobs=jobs, memory_budget=budget)
    assert not list(tmp_path.iterdir())


def test_budget_too_small_to_write(tmp_path, tok, monkeypatch):
    from lookupkit.create import memory_budget

    monkeypatch.setattr(memory_budget, "CONSTMAP_BYTES_PER_KEY", 1 << 20)
    with pytest.raises(InputError, match=r"too small to write .* the minimum for this corpus is"):
        build_static([TextFile(TEXTS[0])], tok, tmp_path / "x.lkc", token_cache=False, jobs=2, memory_budget=64 << 20)
    assert not list(tmp_path.iterdir())


def _work_dirs(tmp):
    return [p for p in os.listdir(tmp) if p.startswith("lookupkit-build-")]


def test_killed_worker_one_line_no_file(tmp_path, tok, monkeypatch):
    monkeypatch.setattr(parallel, "PIECE_BYTES", 2000)
    real = parallel._State.run

    def slow(self, task):  # slow workers, so one can be killed mid-build
        time.sleep(0.05)
        return real(self, task)

    monkeypatch.setattr(parallel._State, "run", slow)
    real_init = parallel.Workers.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        victim = self.procs[1].pid
        threading.Timer(0.5, os.kill, (victim, signal.SIGKILL)).start()

    monkeypatch.setattr(parallel.Workers, "__init__", init)
    with pytest.raises(LookupkitError, match=r"worker process 1 .* died \(killed by SIGKILL\).*nothing was written"):
        build_static([TextFile(p) for p in TEXTS * 4], tok, tmp_path / "x.lkc", token_cache=False, jobs=2,
                     temp_dir=tmp_path)
    assert os.listdir(tmp_path) == []  # no output, no temp file, no work directory


def test_full_temp_disk(tmp_path, tok, monkeypatch):
    from lookupkit.counts import runs

    def full(path, a):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(runs, "_write", full)
    for jobs in (1, 2):
        with pytest.raises(InputError, match="no space left on device.*temporary files removed"):
            build_static([TextFile(TEXTS[0])], tok, tmp_path / "x.lkc", token_cache=False, jobs=jobs,
                         temp_dir=tmp_path)
        assert os.listdir(tmp_path) == []
