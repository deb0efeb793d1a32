"""`lookupkit model-corpus`: prompts from a text file, the model's greedy outputs written as a corpus (tiny model)."""

from __future__ import annotations

import zstandard

import needs  # noqa: E402

gguf = needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")

from lookupkit.integrations.llama_cpp import generate  # noqa: E402
from lookupkit.integrations.model_corpus import SEPARATOR, prompts  # noqa: E402
from tiny_models import tiny_gguf  # noqa: E402,F401

LINES = [" = Title = ", " short line ", " one two three four five six seven ", " = = Heading = = ",
         " alpha beta gamma delta epsilon ", "", " a b c d e f g h i j "]


def cli(*args):
    from typer.testing import CliRunner

    from lookupkit.cli.main import app

    return CliRunner().invoke(app, ["model-corpus", *map(str, args)])


def test_prompts_are_the_long_lines_first_words_plain_or_zstd(tmp_path):
    plain = tmp_path / "p.txt"
    plain.write_text("\n".join(LINES) + "\n")
    packed = tmp_path / "p.txt.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    for path in (plain, packed):
        assert list(prompts(path, 5, 10)) == [" one two three four five", " alpha beta gamma delta epsilon", " a b c d e"]
        assert list(prompts(path, 5, 1, skip=1)) == [" alpha beta gamma delta epsilon"]
        assert list(prompts(path, 8, 10)) == [" a b c d e f g h"]
    last = tmp_path / "last.txt"
    last.write_text("one two three\nfour five six")  # no newline after the last line
    assert list(prompts(last, 2, 10)) == [" one two", " four five"]


def test_the_corpus_is_the_models_greedy_outputs(tiny_gguf, tmp_path):
    src = tmp_path / "prompts.txt"
    src.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "own.txt"
    r = cli("-m", tiny_gguf, "-f", src, "--prompt-words", 5, "--prompts", 2, "-n", 24, "-t", 1, "-c", 256, "-o", out,
            "--draft", 8, "-q")
    assert r.exit_code == 0, r.output
    assert "2 documents, 48 tokens" in r.output
    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False)
    try:
        want = []
        for text in list(prompts(src, 5, 2)):
            g = generate(llm, llm.tokenize(text.encode(), add_bos=True, special=True), 24)
            want.append(llm.detokenize(g.tokens).decode("utf-8", errors="replace").strip())
    finally:
        llm.close()
    assert out.read_text(encoding="utf-8") == SEPARATOR.join(want) + "\n"  # drafted output = plain on exact arithmetic


def test_bad_input_is_one_line(tiny_gguf, tmp_path):
    from cli_checks import assert_one_line_error

    short = tmp_path / "short.txt"
    short.write_text("too short\n")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    out = tmp_path / "o.txt"
    cases = [
        (["-f", tmp_path / "missing.txt"], "does not exist"),
        (["-f", short], "no line of 250 words or more"),
        (["-f", binary], "binary"),
        (["-f", short, "-n", 0], "-n and -t must be >= 1"),
        (["-f", short, "--prompt-words", 0], "prompt words and prompts must be >= 1"),
    ]
    for args, fragment in cases:
        assert_one_line_error(cli("-m", tiny_gguf, "-o", out, "-q", *args), fragment)
    assert not out.exists()
