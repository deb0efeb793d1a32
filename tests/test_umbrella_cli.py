"""The umbrella command's `tokenize` and `demo`, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import needs

SHARED = needs.SHARED


def lookupkit(*args: str, env_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from lookupkit.cli.main import main; main()", *args],
                          capture_output=True, text=True, env={"LOOKUPKIT_CACHE_DIR": str(env_dir), "PATH": "/usr/bin:/bin"})


def test_tokenize_gives_llamacpp_ids_of_the_wikitext_test_split(tmp_path):
    raw = needs.shared("corpora/wiki.test.raw")
    out = tmp_path / "ids.i32"
    r = lookupkit("tokenize", "-f", str(raw), "-m", str(SHARED / "vocab" / "ggml-vocab-qwen2.gguf"), "-o", str(out),
                  "--json", env_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tokens"] == out.stat().st_size // 4
    expected = np.fromfile(SHARED / "reference" / "wikitext" / "wiki.test.qwen2.i32", dtype="<i4")
    assert np.array_equal(np.fromfile(out, dtype="<i4"), expected)


def test_tokenize_bad_input_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "ids.i32"
    r = lookupkit("tokenize", "-f", str(tmp_path / "missing.txt"), "-o", str(out), env_dir=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr and not out.exists()


def test_demo_builds_opens_drafts_and_replays(tmp_path):
    r = lookupkit("demo", "--json", "--cache-dir", str(tmp_path), env_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["n_keys"] > 100_000 and Path(res["cache"]).exists()
    none, static = res["replay"]["no static cache"], res["replay"]["stdlib static cache"]
    assert res["verdict"].startswith("verdict: ") and res["verify_cost"] == 0.1
    assert static["speedup"] == pytest.approx((static["n_accept"] + static["draft_calls"])
                                              / (static["draft_calls"] + 0.1 * static["n_drafted"]))
    # the static cache drafts where the context alone has nothing, and some of it is right
    assert static["n_drafted"] > none["n_drafted"] and static["n_accept"] > none["n_accept"]
    assert len(res["examples"]) == 3 and all(isinstance(t, int) for e in res["examples"] for t in e["draft"])
    assert any(e["draft"] for e in res["examples"])
    again = lookupkit("demo", "--json", "--cache-dir", str(tmp_path), env_dir=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["built"] is None  # reused, not rebuilt


def test_demo_explains_what_the_cache_did(tmp_path):
    r = lookupkit("demo", "--cache-dir", str(tmp_path), env_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    for words in ("compiled drafting kernels", "tok/verify  tokens produced per verify call", "speed-up    (accepted",
                  "verdict: the static cache", "at C = 0.1", "drafts from the static cache alone"):
        assert words in r.stdout, words


def test_demo_refuses_absurd_flags_and_unusable_cache_dir_before_building(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    for args, fragment in ((["--draft", "0"], "--draft must be between"), (["-c", "1"], "--ctx-size must be between"),
                           (["--cache-dir", str(not_a_dir)], "cannot use")):
        r = lookupkit("demo", *args, env_dir=tmp_path / "env")
        assert r.returncode == 2 and r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert fragment in r.stderr and "Traceback" not in r.stderr
    assert not any((tmp_path / "env").glob("demo-*.lkc"))  # refused before any build


@pytest.mark.parametrize("module,args,fragment", [
    ("main", ["inspect"], "Missing argument 'path'"), ("main", ["bogus"], "No such command 'bogus'"),
    ("main", ["demo", "--draft", "abc"], "Invalid value for '--draft'"),
    ("stats", ["--tokens", "x.i32", "-c", "abc"], "Invalid value for '-c'"), ("create", ["-lcs"], "requires an argument"),
    ("merge", [], "Missing argument"),
])
def test_usage_errors_are_one_line_too(tmp_path, module, args, fragment):
    """Typer's own refusals (missing or garbage arguments) follow the same rule as lookupkit's: one line, exit 2."""
    r = subprocess.run([sys.executable, "-c", f"from lookupkit.cli.{module} import main; main()", *args],
                       capture_output=True, text=True, env={"LOOKUPKIT_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: ") and fragment in r.stderr


def test_bench_refuses_bad_flags_before_running(tmp_path):
    (tmp_path / "bad.json").write_text("not json")
    for args, fragment in ((["--report", str(tmp_path / "missing.json")], "does not exist"),
                           (["--report", str(tmp_path / "bad.json")], "not a readable results JSON"),
                           (["--sizes", "25,-1"], "--sizes takes"), (["--sizes", "lots"], "--sizes takes")):
        r = lookupkit("bench", "--out-dir", str(tmp_path / "out"), *args, env_dir=tmp_path)
        assert r.returncode == 2 and r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert fragment in r.stderr
    assert not any((tmp_path / "out").iterdir())  # nothing measured, nothing written


def test_tune_policy_learns_the_tables_confidence_learns_and_refuses_bad_input(tmp_path):
    """`lookupkit tune-policy` on a tiny input: the tables it writes are confidence.learn's on the same slice
    (and learn_generations' on a generations file), with what they were learnt on; bad input is one line."""
    from typer.testing import CliRunner

    from cli_checks import assert_one_line_error
    from lookupkit import StaticCache
    from lookupkit.cli.create import app as create_app
    from lookupkit.cli.main import app
    from lookupkit.policy import confidence
    from test_policy import phrase_stream

    corpus, held = tmp_path / "corpus.i32", tmp_path / "held.i32"
    phrase_stream(1, n=20_000).astype("<i4").tofile(corpus)
    ids = phrase_stream(2, n=12_000)
    ids.astype("<i4").tofile(held)
    runner = CliRunner()
    built = runner.invoke(create_app, ["--tokens", str(corpus), "--orders", "2-5", "-lcs", str(tmp_path / "c.lkc")])
    assert built.exit_code == 0, built.output
    out = tmp_path / "tables.json"
    r = runner.invoke(app, ["tune-policy", "--cache", str(tmp_path / "c.lkc"), "--tokens", str(held), "--slice",
                            "1000:10000", "-c", "512", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"wrote {out}: learnt on 10,000 held-out tokens with c.lkc (orders [2, 3, 4, 5])")
    # progress off a terminal: one line per stage (issue 34); nothing with -q
    assert r.stderr.splitlines() == ["per-source tables (first half) (2) ...", "agreement table (second half)"]
    quiet = runner.invoke(app, ["tune-policy", "--cache", str(tmp_path / "c.lkc"), "--tokens", str(held), "--slice",
                                "1000:10000", "-c", "512", "-o", str(tmp_path / "quiet.json"), "-q"])
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == r.stdout.replace(str(out), str(tmp_path / "quiet.json"))
    with StaticCache.open(tmp_path / "c.lkc") as cache:
        want = confidence.learn(ids[1000:11000], 512, static=cache)
        gens = {"model": "tiny", "text": "test", "seed": 0,
                "sequences": [{"task": "wiki", "prompt_len": 100, "tokens": ids[:3000].tolist()},
                              {"task": "copy", "prompt_len": 50, "tokens": ids[3000:5000].tolist()},
                              {"task": "wiki", "prompt_len": 80, "tokens": ids[5000:8000].tolist()}]}
        want_gens = confidence.learn_generations([ids[:3000], ids[5000:8000]], [100, 80], static=cache)
    got = confidence.load(out)
    assert all(np.allclose(g, w, atol=1e-6) for g, w in zip(got, want))
    assert json.loads(out.read_text())["about"]["n_ctx"] == 512
    (tmp_path / "gens.json").write_text(json.dumps(gens))
    r = runner.invoke(app, ["tune-policy", "--cache", str(tmp_path / "c.lkc"), "--generations",
                            str(tmp_path / "gens.json"), "--task", "wiki", "-o", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    assert all(np.allclose(g, w, atol=1e-6) for g, w in zip(confidence.load(tmp_path / "g.json"), want_gens))
    base = ["tune-policy", "--cache", str(tmp_path / "c.lkc"), "-o", str(tmp_path / "x.json")]
    for args, fragment in [([], "exactly one of --tokens"),
                           (["--tokens", str(held), "--generations", str(tmp_path / "gens.json")], "exactly one of"),
                           (["--tokens", str(held), "--slice", "5:x"], "--slice takes START:COUNT"),
                           (["--tokens", str(held), "--slice", "11000:5000"], f"reaches past the {len(ids):,} tokens"),
                           (["--generations", str(tmp_path / "gens.json"), "--task", "chat"], "--task is one of"),
                           (["--generations", str(held)], "is not a generations file")]:
        assert_one_line_error(runner.invoke(app, base + args), fragment)
    assert not (tmp_path / "x.json").exists()


def test_the_demos_verdicts_name_what_each_comparison_is_against():
    """A static cache that lowers the speed-up against drafting from the context alone, while drafting with it
    still beats plain decoding, reads as two statements about two baselines, not as a contradiction."""
    from lookupkit.cli.demo import _policy_verdict, _verdict
    from lookupkit.verify_cost import DEFAULT_COST

    without = {"tokens_per_verify": 1.30, "accept": 40.0, "speedup": 1.25, "n_drafted": 900}
    with_cache = {"tokens_per_verify": 1.35, "accept": 20.0, "speedup": 1.10, "break_even_cost": 0.22, "n_drafted": 3000}
    text = _verdict(without, with_cache)
    assert "against drafting from the context alone, raises the tokens per verify call" in text
    assert f"so adding it does not pay at C = {DEFAULT_COST}" in text
    assert f"Against plain decoding (no drafting), drafting with it pays at C = {DEFAULT_COST} and would up to C = 0.22" in text
    assert "does not pay" in _verdict(without, {**with_cache, "speedup": 0.9}).split("Against plain decoding")[1]
    policy = {"speedup": 1.3, "n_drafted": 500, "accept": 60.0}
    assert "against llama.cpp's rule on the same caches, pays more: expected speed-up over plain decoding 1.100x -> 1.300x" in (
        _policy_verdict(with_cache, policy))


@pytest.mark.parametrize("command", ["demo", "tokenize", "calibrate", "generate", "model", "bench", "tune-policy"])
def test_the_umbrella_commands_share_lookup_creates_help_style_with_examples(command):
    from typer.testing import CliRunner

    from lookupkit.cli.main import app

    text = CliRunner().invoke(app, [command, "--help"]).output
    assert "Examples:" in text and f"lookupkit {command}" in text.split("Examples:")[1]
    assert not set("╭╮╰╯│─") & set(text)  # plain text, as lookup-create and lookup-stats print it


def test_tokenize_ctrl_c_after_the_rename_keeps_the_complete_ids(tmp_path, monkeypatch):
    """As lookup-create: a Ctrl-C that lands after the ids were renamed into place is a success (exit 0, a note)."""
    from typer.testing import CliRunner

    from lookupkit import files as atomic
    from lookupkit.cli.main import app

    corpus, out = tmp_path / "c.txt", tmp_path / "ids.i32"
    corpus.write_text("def f(x):\n    return x + 1\n" * 50)
    real = atomic.os.replace

    def replace(src, dst):
        real(src, dst)
        if Path(dst) == out:
            raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", replace)
    result = CliRunner().invoke(app, ["tokenize", "-f", str(corpus), "-o", str(out), "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert np.fromfile(out, dtype="<i4").size > 0 and [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
    assert f"note: interrupted after {out} was completely written; the file is kept" in result.output
