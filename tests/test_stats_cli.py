"""lookup-stats and lookup-merge as a user runs them: outputs, dumps, saved caches, and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lookupkit import StaticCache
from lookupkit.cli.stats import app as stats_app
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.formats import llama, read_ngrams
from lookupkit.verify_cost import save_curve
from cli_checks import assert_one_line_error
import needs

REF = needs.SHARED / "reference"
TINY = REF / "tiny.tokens.i32"
GPT2 = Path(__file__).resolve().parents[1] / "lookupkit" / "data" / "ggml-vocab-gpt-2.gguf"  # bundled
needs_reference = needs.shared_mark("reference")
runner = CliRunner()

SEVEN = [r"n_draft      = \d+", r"n_predict    = \d+", r"n_drafted    = \d+", r"t_draft_flat = \d+\.\d\d ms",
         r"t_draft      = \d+\.\d\d ms, (\d+\.\d\d|n/a) us per token, (\d+\.\d\d|n/a) tokens per second",
         r"n_accept     = \d+", r"accept       = (\d+\.\d\d\d%|n/a)"]


def stats(*args):
    return runner.invoke(stats_app, [str(a) for a in args])


def write_tokens(path: Path, ids) -> Path:
    np.asarray(ids, dtype="<i4").tofile(path)
    return path


@needs_reference
def test_seven_lines_from_the_installed_command():
    proc = subprocess.run([sys.executable, "-m", "lookupkit.cli.stats", "--tokens", str(TINY), "-c", "8",
                           "--draft", "4"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for pattern, line in zip(SEVEN, lines[:7]):
        assert re.fullmatch(pattern, line), line
    assert lines[0] == "n_draft      = 4" and lines[1] == "n_predict    = 16" and lines[2] == "n_drafted    = 5"
    assert lines[5] == "n_accept     = 2" and lines[6] == "accept       = 40.000%"
    assert "draft_calls  = 13" in lines and any(line.startswith("peak_rss") for line in lines)


def test_nothing_drafted_prints_n_a_where_llama_cpp_prints_nan(tmp_path):
    ids = write_tokens(tmp_path / "t.i32", np.arange(40) % 37)  # no repeats within a chunk: no drafts
    result = stats("--tokens", ids, "-c", 16, "--draft", 4)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[2] == "n_drafted    = 0" and lines[6] == "accept       = n/a"
    assert "n/a us per token" in lines[4] and "inf" not in result.stdout
    assert re.fullmatch(SEVEN[4], lines[4])
    assert "t_static_open" not in result.stdout  # no static cache was used


@needs_reference
@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_json_has_every_key_and_the_case_numbers(engine):
    result = stats("--tokens", REF / "synth.eval.i32", "-c", 512, "--draft", 8, "--engine", engine, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("n_draft n_predict n_drafted n_accept accept t_load_ms t_draft_ms us_per_drafted_token "
                "draft_calls drafted_steps coverage tokens_per_verify accepted_per_position per_source "
                "peak_rss_mb").split():
        assert key in out
    assert "t_static_open_ms" not in out  # this case uses no static cache
    assert (out["n_predict"], out["n_drafted"], out["n_accept"]) == (9728, 12886, 4920)  # synth_nostatic_c512_d8
    assert out["draft_calls"] == 4795 and len(out["accepted_per_position"]) == 8
    assert sum(v["drafted"] for v in out["per_source"].values()) == out["n_drafted"]


@needs_reference
@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_dump_equals_the_reference_steps(tmp_path, engine):
    dump = tmp_path / "run.steps"
    result = stats("--tokens", REF / "synth.eval.i32", "-c", 512, "--draft", 4, "-lcs", REF / "synth.static.lcs",
                   "-lcd", REF / "synth.dynamic.lcd", "--engine", engine, "--dump", dump)
    assert result.exit_code == 0, result.output
    assert dump.read_text().splitlines() == (REF / "synth_lcd_c512_d4.steps").read_text().splitlines()


@needs_reference
@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_save_dynamic_holds_every_chunk_and_the_lcd(tmp_path, engine):
    out = tmp_path / "dyn.lcd"
    result = stats("--tokens", TINY, "-c", 8, "--draft", 4, "--engine", engine, "--save-dynamic", out)
    assert result.exit_code == 0, result.output
    expected = NgramCache()
    tokens = np.fromfile(TINY, "<i4").tolist()
    for start in (0, 8):
        chunk = NgramCache()
        chunk.update(tokens[start:start + 8])
        expected.merge(chunk)
    assert NgramCache.from_table(read_ngrams(out)).parts == expected.parts
    # feeding it back: the saved cache grows by the same chunks again
    again = tmp_path / "dyn2.lcd"
    assert stats("--tokens", TINY, "-c", 8, "--draft", 4, "--engine", engine, "-lcd", out,
                 "--save-dynamic", again).exit_code == 0
    expected.merge(expected)
    assert NgramCache.from_table(read_ngrams(again)).parts == expected.parts


@pytest.mark.parametrize("content, fragments", [
    (b"\x01\x00\x00\x00\x02\x00", ["not a multiple of 4"]),
    (b"", ["no tokens"]),
    (np.array([5], "<i4").tobytes(), ["1 tokens", "needs more than 4096"]),
    (np.array([1, 2, -3, 4], "<i4").tobytes(), ["invalid token id -3"]),
])
def test_bad_token_files(tmp_path, content, fragments):
    path = tmp_path / "bad.i32"
    path.write_bytes(content)
    assert_one_line_error(stats("--tokens", path), *fragments)


@pytest.mark.parametrize("args, fragment", [
    (["--draft", 0], "--draft must be between 1 and 1024"),
    (["--draft", -3], "--draft must be between 1 and 1024"),
    (["--draft", 10**6], "--draft must be between 1 and 1024"),
    (["-c", 1], "--ctx-size must be between 2"),
    (["-c", 0], "--ctx-size must be between 2"),
    (["-c", -8], "--ctx-size must be between 2"),
    (["-c", 10**12], "--ctx-size must be between 2"),
])
def test_bad_numbers(tmp_path, args, fragment):
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 7)
    assert_one_line_error(stats("--tokens", ids, *args), fragment)


def test_bad_input_combinations(tmp_path):
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 7)
    text = tmp_path / "t.txt"
    text.write_text("hello\n")
    assert_one_line_error(stats(), "give exactly one input")
    assert_one_line_error(stats("--tokens", ids, "-f", text), "give exactly one input")
    assert_one_line_error(stats("--tokens", ids, "-m", GPT2), "-m is only used to tokenize -f")
    assert_one_line_error(stats("--tokens", tmp_path / "missing.i32"), "does not exist")
    assert_one_line_error(stats("--tokens", tmp_path), "directory")
    assert_one_line_error(stats("--tokens", ids, "-c", 8, "-lcd", tmp_path / "none.lcd"), "does not exist")


def test_a_non_number_is_a_usage_error(tmp_path):
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 7)
    result = stats("--tokens", ids, "-c", "abc")
    assert result.exit_code == 2 and "Traceback" not in result.output and "--ctx-size" in result.stderr


def test_corrupt_lcd_is_refused_and_never_overwritten(tmp_path):
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 7)
    lcd = tmp_path / "dyn.lcd"
    lcd.write_bytes(np.array([1, -1, -1, -1, 2, 5, 1], "<i4").tobytes())  # ends inside a record
    before = lcd.read_bytes()
    result = stats("--tokens", ids, "-c", 8, "-lcd", lcd, "--save-dynamic", lcd)
    assert_one_line_error(result, str(lcd), "truncated")
    assert lcd.read_bytes() == before


def test_unwritable_outputs_are_one_line_errors(tmp_path):
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 7)
    result = stats("--tokens", ids, "-c", 8, "--save-dynamic", tmp_path / "no" / "dir" / "dyn.lcd")
    assert_one_line_error(result, "does not exist")
    result = stats("--tokens", ids, "-c", 8, "--dump", tmp_path)
    assert_one_line_error(result, "is a directory")


# ---- vocabularies --------------------------------------------------------------------------------

def static_file(path: Path, tokens, vocab: dict | None = None) -> Path:
    """A static cache (2-grams of `tokens`) written in the format of path's extension."""
    from lookupkit import formats
    from lookupkit.counts.tables import StaticTable

    cache = NgramCache()
    cache.update(list(tokens), 2, 2)
    formats.write_table(StaticTable.from_ngrams(cache.to_table()), path, meta={"vocab": vocab} if vocab else None)
    return path


def test_text_input_is_tokenized_as_llama_cpp_does(tmp_path):
    from lookupkit.tokenizer.encode import Tokenizer

    text = "The cat sat on the mat. The cat sat on the hat. " * 30
    (tmp_path / "t.txt").write_text(text + "\n")  # exactly one trailing newline is cut
    ids = Tokenizer.from_file(GPT2).encode(text)
    write_tokens(tmp_path / "t.i32", ids)
    by_text = stats("-f", tmp_path / "t.txt", "-m", GPT2, "-c", 64, "--draft", 4, "--json")
    by_ids = stats("--tokens", tmp_path / "t.i32", "-c", 64, "--draft", 4, "--json")
    by_default = stats("-f", tmp_path / "t.txt", "-c", 64, "--draft", 4, "--json")  # -m defaults to gpt-2
    for r in (by_text, by_ids, by_default):
        assert r.exit_code == 0, r.output
    a, b, c = (json.loads(r.stdout) for r in (by_text, by_ids, by_default))
    assert a["n_input"] == len(ids) and a["n_drafted"] > 0
    keys = ("n_predict", "n_drafted", "n_accept")
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys} == {k: c[k] for k in keys}


def test_a_cache_for_another_vocabulary_is_refused_with_both_fingerprints(tmp_path):
    from lookupkit.tokenizer.encode import Tokenizer

    ours = Tokenizer.from_file(GPT2).fingerprint
    other = "0" * 64
    vocab = {"name": "other", "n_vocab": 100, "fingerprint": other}
    lkc = static_file(tmp_path / "other.lkc", [1, 2, 3, 1, 2, 3], vocab)
    (tmp_path / "t.txt").write_text("hello world, hello world, hello world " * 20)
    result = stats("-f", tmp_path / "t.txt", "-m", GPT2, "-c", 16, "-lcs", lkc)
    assert_one_line_error(result, other, ours, "built for other", "used with gpt-2")


def test_token_ids_beyond_the_cache_vocabulary_are_refused(tmp_path):
    lkc = static_file(tmp_path / "small.lkc", [1, 2, 3, 1, 2, 3], {"name": "tiny", "n_vocab": 10, "fingerprint": "f"})
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 12)
    assert_one_line_error(stats("--tokens", ids, "-c", 16, "-lcs", lkc), "token id 11", "10 tokens")


# ---- lookup-merge --------------------------------------------------------------------------------

def merge_cmd(*args):
    from lookupkit.cli.merge import app

    return runner.invoke(app, [str(a) for a in args])


def parts_of(path: Path) -> dict:
    from lookupkit.create.merge import read_ngrams

    return read_ngrams(path).to_dict()


def summed(*caches: dict) -> dict:
    out: dict = {}
    for cache in caches:
        for key, part in cache.items():
            for tok, n in part.items():
                out.setdefault(key, {})[tok] = out.get(key, {}).get(tok, 0) + n
    return out


@needs_reference
def test_merge_adds_counts_across_formats(tmp_path):
    lcs, lcd = REF / "synth.static.lcs", REF / "synth.dynamic.lcd"
    ggn = static_file(tmp_path / "z.ggngcmap", np.fromfile(REF / "zipf.corpus.i32", "<i4")[:5000])
    out = tmp_path / "all.lcd"
    result = merge_cmd(lcs, lcd, ggn, lcs, out)
    assert result.exit_code == 0, result.output
    expected = summed(*(read_ngrams(p).to_dict() for p in (lcs, lcd)), parts_of(ggn), read_ngrams(lcs).to_dict())
    assert NgramCache.from_table(read_ngrams(out)).parts == expected


@needs_reference
def test_merge_writes_lkc_when_all_inputs_are_2_grams(tmp_path):
    lcs = REF / "synth.static.lcs"
    vocab = {"name": "synth", "n_vocab": 60, "fingerprint": "s" * 64}
    a = static_file(tmp_path / "a.lkc", np.fromfile(REF / "synth.eval.i32", "<i4"), vocab)
    out = tmp_path / "m.lkc"
    assert merge_cmd(a, lcs, out).exit_code == 0
    from lookupkit.static.cache import StaticCache

    with StaticCache.open(out) as cache:
        assert cache.vocab_fingerprint == vocab["fingerprint"]
        assert cache.to_table().to_dict() == summed(parts_of(a), read_ngrams(lcs).to_dict())
    assert_one_line_error(merge_cmd(lcs, REF / "synth.dynamic.lcd", tmp_path / "x.lkc"), "2-grams only")
    assert not (tmp_path / "x.lkc").exists()


def test_merge_a_out_resaves_and_out_may_be_an_input(tmp_path):
    a = tmp_path / "a.lcd"
    cache = NgramCache()
    cache.update([1, 2, 3, 1, 2, 4])
    llama.save(cache.to_table(), a)
    assert merge_cmd(a, tmp_path / "copy.bin").exit_code == 0
    assert NgramCache.from_table(read_ngrams(tmp_path / "copy.bin")).parts == cache.parts
    assert merge_cmd(a, a, a).exit_code == 0  # in place: inputs are read before OUT is replaced
    assert NgramCache.from_table(read_ngrams(a)).parts == summed(cache.parts, cache.parts)


def test_merge_saturates_counts(tmp_path):
    big = NgramCache()
    big.parts = {(5, 6): {7: 2**31 - 10}}
    llama.save(big.to_table(), tmp_path / "big.lcs")
    assert merge_cmd(tmp_path / "big.lcs", tmp_path / "big.lcs", tmp_path / "sum.lcs").exit_code == 0
    assert NgramCache.from_table(read_ngrams(tmp_path / "sum.lcs")).parts == {(5, 6): {7: 2**31 - 1}}


def test_merge_refuses_different_vocabularies(tmp_path):
    a = static_file(tmp_path / "a.lkc", [1, 2, 3], {"name": "a", "n_vocab": 10, "fingerprint": "a" * 64})
    b = static_file(tmp_path / "b.lkc", [1, 2, 3], {"name": "b", "n_vocab": 10, "fingerprint": "b" * 64})
    assert_one_line_error(merge_cmd(a, b, tmp_path / "o.lkc"), "a" * 64, "b" * 64)
    assert not (tmp_path / "o.lkc").exists()


def test_merge_bad_input(tmp_path):
    good = tmp_path / "g.lcd"
    llama.save(NgramCache().to_table(), good)
    bad = tmp_path / "bad.lcd"
    bad.write_bytes(np.array([1, 2, -1, -1, 3, 9], "<i4").tobytes())
    out = tmp_path / "out.lcd"
    out.write_bytes(b"keep")
    assert_one_line_error(merge_cmd(good), "at least one input and the output")
    assert_one_line_error(merge_cmd(good, bad, out), str(bad), "truncated")
    assert_one_line_error(merge_cmd(tmp_path / "missing.lcd", out), "does not exist")
    assert_one_line_error(merge_cmd(good, out, "--format", "csv"), "unknown format")
    assert out.read_bytes() == b"keep"
    assert merge_cmd().exit_code == 2


# ---- --source ngram, --verify-cost, --sweep -------------------------------------------------------

def phrases(path: Path, n: int = 3000, seed: int = 0) -> Path:
    """Tokens made of repeated random phrases: enough repetition for every source to draft."""
    rng = np.random.default_rng(seed)
    bank = [rng.integers(0, 50, size=rng.integers(3, 9)) for _ in range(40)]
    out = np.concatenate([bank[i] for i in rng.integers(0, len(bank), size=n // 4)])[:n]
    return write_tokens(path, out)


def run_json(*args) -> dict:
    result = stats(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_ngram_source_replays_the_longest_match_rule(tmp_path):
    from lookupkit.replay.longest_match import replay_ngram

    ids = phrases(tmp_path / "p.i32")
    out = run_json("--tokens", ids, "-c", 256, "--source", "ngram", "--ngram-min-match", 2, "--dump", tmp_path / "d")
    trace = replay_ngram(np.fromfile(ids, "<i4"), 256, 3, 2, 8)
    assert out["n_draft"] == 3 and out["n_drafted"] > 0  # --draft defaults to 3 for this source
    assert (out["n_drafted"], out["n_accept"]) == (int(trace.n_drafted.sum()), int(trace.n_accepted.sum()))
    assert set(out["per_source"]) == {"ng"}
    assert (tmp_path / "d").read_text().splitlines() == list(trace.steps_lines())


@pytest.mark.parametrize("args, fragment", [
    (["--source", "ngram", "--draft", 9], "--draft must be between 1 and 8"),
    (["--source", "ngram", "--ngram-min-match", 0], "--ngram-min-match must be between 1"),
    (["--source", "ngram", "--ngram-max-match", 0], "--ngram-max-match must be between 1"),
    (["--source", "ngram", "--ngram-min-match", 5, "--ngram-max-match", 4], "--ngram-min-match must be between 1"),
    (["--source", "ngram", "--save-dynamic", "x.lcd"], "--save-dynamic cannot be used with --source ngram"),
    (["--source", "ngram", "--engine", "reference"], "--engine reference replays --source lookup only"),
    (["--ngram-min-match", 2], "--ngram-min-match cannot be used with --source lookup"),
    (["--sweep", "--dump", "x.steps"], "--dump cannot be used with --sweep"),
    (["--sweep", "--engine", "reference"], "--engine reference"),
])
def test_mode_and_flag_mismatches(tmp_path, args, fragment):
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 7)
    assert_one_line_error(stats("--tokens", ids, "-c", 16, *[tmp_path / a if str(a).startswith("x.") else a
                                                              for a in args]), fragment)
    assert not any(p.name.startswith("x.") for p in tmp_path.iterdir())


def test_verify_cost_reports_the_speedup_model(tmp_path):
    ids = phrases(tmp_path / "p.i32")
    out = run_json("--tokens", ids, "-c", 256, "--draft", 4, "--verify-cost", 0.1)
    calls, drafted, accepted = out["draft_calls"], out["n_drafted"], out["n_accept"]
    assert out["speedup"] == pytest.approx((accepted + calls) / (calls + 0.1 * drafted))
    assert out["break_even_cost"] == pytest.approx(accepted / drafted)
    text = stats("--tokens", ids, "-c", 256, "--draft", 4, "--verify-cost", 0.1)
    assert f"speed-up     = {out['speedup']:.3f}x" in text.stdout
    assert out["accepted_per_call"] == pytest.approx(accepted / calls)
    assert list(out["expected_speedup"]) == ["0", "0.05", "0.1", "0.25", "0.5", "1"]
    assert out["expected_speedup"]["0.1"] == pytest.approx(out["speedup"])
    assert out["expected_speedup"]["0"] == pytest.approx(out["tokens_per_verify"])
    assert "S(C)         = 0: " in text.stdout
    assert_one_line_error(stats("--tokens", ids, "--verify-cost", -1), "finite number >= 0")


def test_verify_cost_from_a_calibration_curve(tmp_path):
    """--verify-cost CURVE.json: each call costs curve[its drafted tokens], as `lookupkit calibrate` measured."""
    ids = phrases(tmp_path / "p.i32")
    curve = {0: 1.0, 1: 1.02, 2: 1.05, 3: 1.2, 4: 1.9}
    save_curve({"model": "m.gguf", "curve": curve}, tmp_path / "curve.json")
    out = run_json("--tokens", ids, "-c", 256, "--draft", 4, "--verify-cost", tmp_path / "curve.json")
    steps = tmp_path / "s.steps"
    stats("--tokens", ids, "-c", 256, "--draft", 4, "--dump", steps)
    drafted = [int(line.split()[2]) for line in steps.read_text().splitlines()[1:]]
    assert out["speedup"] == pytest.approx((out["n_accept"] + out["draft_calls"]) / sum(curve[d] for d in drafted))
    assert out["verify_cost"] == f"curve {tmp_path / 'curve.json'}"
    short = tmp_path / "short.json"
    save_curve({"curve": {0: 1.0, 1: 1.1}}, short)
    assert_one_line_error(stats("--tokens", ids, "-c", 256, "--draft", 4, "--verify-cost", short), "--max-k 4")
    (tmp_path / "bad.json").write_text("{not json")
    assert_one_line_error(stats("--tokens", ids, "--verify-cost", tmp_path / "bad.json"), "calibrate -m")
    assert_one_line_error(stats("--tokens", ids, "--verify-cost", tmp_path / "none.json"), "does not exist")


def test_sweep_rows_equal_single_replays(tmp_path):
    ids = phrases(tmp_path / "p.i32")
    result = stats("--tokens", ids, "-c", 256, "--sweep")
    assert result.exit_code == 0, result.output
    table = result.stdout.splitlines()
    assert len(table) == 2 + 8 * 3  # title, header, --draft 1..8 x three threshold variants
    rows = run_json("--tokens", ids, "-c", 256, "--sweep", "--draft", 5, "--verify-cost", 0.2)["rows"]
    assert [r["thresholds"] for r in rows] == ["llama.cpp", "ctx-strict", "dyn-lax"]
    single = run_json("--tokens", ids, "-c", 256, "--draft", 5)
    assert (rows[0]["n_drafted"], rows[0]["n_accept"]) == (single["n_drafted"], single["n_accept"])
    assert all("speedup" in r for r in rows)
    ngram_rows = run_json("--tokens", ids, "-c", 256, "--sweep", "--source", "ngram")["rows"]
    assert [r["min_match"] for r in ngram_rows] == list(range(1, 9))
    third = run_json("--tokens", ids, "-c", 256, "--source", "ngram", "--ngram-min-match", 3)
    assert (ngram_rows[2]["n_drafted"], ngram_rows[2]["n_accept"]) == (third["n_drafted"], third["n_accept"])


def test_a_cache_without_vocabulary_warns_and_convert_attaches_one(tmp_path):
    """An .lcs records no vocabulary: used with -m it warns (a mismatch would silently draft nothing);
    `lookupkit convert IN OUT.lkc -m VOCAB` attaches one, after which it is checked."""
    from lookupkit.cli.main import app as main_app

    (tmp_path / "t.txt").write_text("hello world, hello world, hello world " * 20)
    lcs = static_file(tmp_path / "s.lcs", [1, 2, 3, 1, 2, 3])
    result = stats("-f", tmp_path / "t.txt", "-m", GPT2, "-c", 16, "-lcs", lcs)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "records no vocabulary" in warnings[0] and "convert" in warnings[0]
    lkc = tmp_path / "s.lkc"
    converted = CliRunner().invoke(main_app, ["convert", str(lcs), str(lkc), "-m", str(GPT2)])
    assert converted.exit_code == 0, converted.output
    with StaticCache.open(lkc) as cache:
        assert cache.meta["vocab"]["name"] == "gpt-2"
    again = stats("-f", tmp_path / "t.txt", "-m", GPT2, "-c", 16, "-lcs", lkc)
    assert again.exit_code == 0 and "warning" not in again.stderr
    refused = CliRunner().invoke(main_app, ["convert", str(lcs), str(tmp_path / "x.ggngcmap"), "-m", str(GPT2)])
    assert refused.exit_code == 2 and "-m applies to lkc output only" in refused.output


def test_a_static_cache_given_as_lcd_and_a_file_of_no_known_format_say_what_they_are(tmp_path):
    ids = write_tokens(tmp_path / "t.i32", np.arange(100) % 7)
    lkc = static_file(tmp_path / "s.lkc", [1, 2, 3, 1, 2, 3])
    assert_one_line_error(stats("--tokens", ids, "-c", 16, "-lcd", lkc), "is a lookupkit cache (.lkc)",
                          "pass a static cache with -lcs")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x00\x00\x00" * 3)
    assert_one_line_error(stats("--tokens", ids, "-c", 16, "-lcs", junk), "nor a cache of any other known format")


@pytest.mark.parametrize("mode", [["--engine", "fast"], ["--engine", "reference"], ["--source", "ngram"],
                                  ["--policy", "lookupkit"]])
def test_a_replay_checks_its_parameters_once(tmp_path, monkeypatch, mode):
    import lookupkit.replay.longest_match, lookupkit.replay.loop, lookupkit.replay.run  # noqa: F401 (bind names)
    from lookupkit import rules

    calls, real = [], rules.check_replay
    for module in list(sys.modules.values()):
        if getattr(module, "check_replay", None) is real:
            monkeypatch.setattr(module, "check_replay", lambda *a, **k: calls.append(a) or real(*a, **k))
    ids = write_tokens(tmp_path / "t.i32", np.arange(40) % 7)
    result = stats("--tokens", ids, "-c", 16, "--draft", 3, "--json", *mode)  # one replay (no verdict's second)
    assert result.exit_code == 0, result.output
    assert calls == [(40, 16, 3)]
    bad = stats("--tokens", ids, "-c", 0, "--draft", 3, *mode)
    assert bad.exit_code != 0 and len(calls) == 2


def test_help_states_each_policys_draft_default_from_the_constants():
    from lookupkit.verify_cost import DEFAULT_COST
    from lookupkit.replay import longest_match, suffix_run
    from lookupkit.rules import DEFAULT_DRAFT, POLICY_DRAFT

    text = " ".join(stats("--help").output.split())
    assert (f"(default {DEFAULT_DRAFT}; {POLICY_DRAFT} with --policy lookupkit, which drafts only what pays of them; "
            f"{longest_match.DEFAULT_DRAFT} for --source ngram, {suffix_run.DEFAULT_DRAFT} for --source suffix)") in text
    assert (f"(default {longest_match.DEFAULT_MIN_MATCH}/{suffix_run.DEFAULT_MIN_MATCH})") in text
    assert f"cost (default {DEFAULT_COST})" in text and "Examples:" in text


@needs_reference
def test_without_verify_cost_a_verdict_says_whether_drafting_pays_and_which_policy():
    from lookupkit.verify_cost import DEFAULT_COST

    args = ["--tokens", REF / "synth.eval.i32", "-lcs", REF / "synth.static.lcs", "-c", 512]
    rule = json.loads(stats(*args, "--json").stdout)
    policy = json.loads(stats(*args, "--policy", "lookupkit", "--json").stdout)
    s_rule, s_policy = (x["expected_speedup"][f"{DEFAULT_COST:g}"] for x in (rule, policy))
    verdict = stats(*args).stdout.splitlines()[-1]
    assert verdict.startswith(f"verdict      = at verify cost {DEFAULT_COST} (the default")
    assert f"llama.cpp's rule {'pays' if s_rule > 1 else 'does not pay'} against plain decoding (S = {s_rule:.3f}x)" in verdict
    assert f"lookupkit's policy on the same caches makes {s_policy:.3f}x" in verdict
    assert verdict.endswith("use --policy lookupkit" if s_policy > s_rule else "keep this policy")
    at_one = stats(*args, "--verify-cost", 1).stdout.splitlines()[-1]  # drafting loses at cost 1 here
    assert "does not pay" in at_one and at_one.endswith("do not draft")


@needs_reference
@pytest.mark.parametrize("mode", [["--policy", "lookupkit"], ["--source", "ngram"], ["-lcs", REF / "synth.static.lcs"]])
def test_the_command_a_sweep_prints_runs_that_sweep(mode):
    import shlex

    first = stats("--tokens", REF / "synth.eval.i32", "-c", 512, *mode, "--sweep").stdout
    command = first.splitlines()[0].removeprefix("sweep: ").split("  (")[0]
    words = shlex.split(command)
    assert words[0] == "lookup-stats" and "--source policy" not in command
    again = stats(*words[1:])
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[0] == first.splitlines()[0]
    assert [line.split()[:4] for line in again.stdout.splitlines()[1:]] == [
        line.split()[:4] for line in first.splitlines()[1:]]
