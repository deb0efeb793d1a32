"""`lookup-merge` streams 2-gram caches through sorted runs on disk: with a tiny memory budget (many spilled
runs, several key ranges) its output is byte-identical to the in-memory merge, for inputs and outputs of
every format; dynamic (1..4-gram) inputs still merge in memory; bad budgets are one line."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from lookupkit.create import merge as merge_mod
from lookupkit.cli.merge import app as merge_app
from lookupkit.counts.bigrams import count_static
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.formats import llama, write_table

runner = CliRunner()
VOCAB = {"name": "synth", "n_vocab": 3_000_000, "fingerprint": "f" * 64}


def ids(seed: int, n: int, top: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.25, n).clip(1, top) - 1).astype(np.int32)


def cache(path, docs, vocab=VOCAB, n_vocab=3_000_000):
    write_table(count_static(docs, n_vocab), path, meta={"vocab": vocab} if vocab else None)
    return path


def old_merge(inputs, out, fmt):
    """Today's merge (everything in memory): what the streamed merge must write, byte for byte."""
    opened = [merge_mod._Input(p) for p in inputs]
    for inp in opened:
        inp.close()
    merge_mod._merge_in_memory(opened, out, fmt, merge_mod._common_vocab(opened))
    return out.read_bytes()


@pytest.fixture
def tiny_blocks(monkeypatch):
    monkeypatch.setattr(merge_mod, "BLOCK_PAIRS", 5_000)  # many blocks per input


@pytest.mark.parametrize("top", [50_000, 3_000_000])  # packed (< 2^21) and wide run keys
@pytest.mark.parametrize("fmt", ["lkc", "ggngcmap", "llama", "lkc.zst"])
def test_streamed_merge_same_bytes(tmp_path, tiny_blocks, monkeypatch, top, fmt):
    a = cache(tmp_path / "a.lkc", [ids(1, 120_000, top)])
    b = cache(tmp_path / "b.ggngcmap", [ids(2, 60_000, top), ids(3, 5_000, top)])
    c = tmp_path / "c.lcs"
    write_table(count_static([ids(4, 30_000, top)], 3_000_000), c)
    inputs = [a, b, c, a]
    ext = {"llama": "lcs"}.get(fmt, fmt)
    ref = old_merge(inputs, tmp_path / f"ref.{ext}", fmt)
    runs_written = []
    real = merge_mod.write_run
    monkeypatch.setattr(merge_mod, "write_run", lambda *a: runs_written.append(1) or real(*a))
    n_keys, _ = merge_mod.merge_caches(inputs, tmp_path / f"out.{ext}", fmt, memory_budget=16 << 20,
                                       temp_dir=tmp_path)
    assert (tmp_path / f"out.{ext}").read_bytes() == ref and n_keys > 0
    assert len(runs_written) >= 4  # several runs per large input at this budget (limit ~5.6 MB, 24 B/triple)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("lookupkit-build-")]


def test_cli_tiny_budget_many_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(merge_mod, "BLOCK_PAIRS", 2_000)
    a = cache(tmp_path / "a.lkc", [ids(5, 400_000, 60_000)])
    b = cache(tmp_path / "b.lkc", [ids(6, 400_000, 60_000)])
    ref = old_merge([a, b], tmp_path / "ref.lkc", "lkc")
    seen = []
    real = merge_mod.merge_range
    monkeypatch.setattr(merge_mod, "merge_range", lambda runs, lo, hi, stem, block: seen.append((len(runs), block))
                        or real(runs, lo, hi, stem, block))
    r = runner.invoke(merge_app, [str(a), str(b), str(tmp_path / "m.lkc"), "--memory-budget", "16MiB",
                                      "--temp-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "m.lkc").read_bytes() == ref
    ((k, block),) = seen
    assert k >= 4 and block * k * 96 <= (16 << 20)  # a k-way merge of several runs, buffers within the budget


def test_dynamic_inputs_still_merge(tmp_path):
    d = NgramCache()
    d.update([1, 2, 3, 1, 2, 4, 5, 1, 2, 3])
    llama.save(d.to_table(), tmp_path / "d.lcd")
    s = cache(tmp_path / "s.lkc", [ids(7, 5000, 100)], vocab=None)
    ref = old_merge([tmp_path / "d.lcd", s], tmp_path / "ref.lcd", "llama")
    r = runner.invoke(merge_app, [str(tmp_path / "d.lcd"), str(s), str(tmp_path / "o.lcd")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "o.lcd").read_bytes() == ref


@pytest.mark.parametrize("budget,words", [("-1MiB", "negative"), ("1MiB", "minimum is 16 MiB"),
                                          ("1000TB", "exceeds this machine")])
def test_bad_budgets_one_line(tmp_path, budget, words):
    a = cache(tmp_path / "a.lkc", [ids(8, 1000, 100)])
    r = runner.invoke(merge_app, [str(a), str(tmp_path / "o.lkc"), "--memory-budget", budget])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "o.lkc").exists()


def test_vocab_mismatch_before_any_work(tmp_path):
    a = cache(tmp_path / "a.lkc", [ids(9, 1000, 100)])
    b = cache(tmp_path / "b.lkc", [ids(9, 1000, 100)], vocab={"name": "qwen2", "n_vocab": 151_936, "fingerprint": "e" * 64})
    r = runner.invoke(merge_app, [str(a), str(b), str(tmp_path / "o.lkc")])
    assert r.exit_code == 2 and "e" * 64 in r.output and not (tmp_path / "o.lkc").exists()
    assert len(r.output.strip().splitlines()) == 1, r.output
    assert (f"{b} was built for the qwen2 vocabulary (151,936 tokens) (vocab fingerprint {'e' * 64}) but {a} for the "
            f"synth vocabulary (3,000,000 tokens) (fingerprint {'f' * 64})") in r.output.replace("\n", "")
    assert "rebuild one with lookup-create -m VOCAB" in r.output


def test_ctrl_c_after_the_rename_keeps_the_merged_file(tmp_path, monkeypatch):
    """lookup-merge, as lookup-create: a Ctrl-C landing right after OUT's rename is a success."""
    from lookupkit import files

    a = cache(tmp_path / "a.lkc", [ids(10, 5000, 100)])
    b = cache(tmp_path / "b.lkc", [ids(11, 5000, 100)])
    ref = old_merge([a, b], tmp_path / "ref.lkc", "lkc")
    out = tmp_path / "o.lkc"
    real = files.os.replace

    def replace(src, dst):
        real(src, dst)
        if dst == out or str(dst) == str(out):
            raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", replace)
    r = runner.invoke(merge_app, [str(a), str(b), str(out)])
    assert r.exit_code == 0 and "the file is kept" in r.stderr, r.output
    assert out.read_bytes() == ref


def test_help_has_examples_in_the_commands_style():
    from lookupkit.create.memory_budget import DEFAULT_MEMORY_BUDGET, size_text

    r = runner.invoke(merge_app, ["--help"])
    text = " ".join(r.stdout.split())
    assert r.exit_code == 0 and "Examples:" in r.stdout and "lookup-merge a.lkc b.lkc ab.lkc" in r.stdout
    assert f"(default {size_text(DEFAULT_MEMORY_BUDGET)})" in text and "refused" in text
