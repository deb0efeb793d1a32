"""lookupkit's own greedy loop over llama-cpp-python's low-level API, on tiny exact-arithmetic models.

An F32 random-weight GGUF built here (seconds, nothing downloaded): plain output equals llama-cpp-python's
own greedy generation; drafted output (llama.cpp's rule and lookupkit's policy, drafts of 1..64) is
bit-identical to plain, and the counters equal replay_generation for the same tokens; EOS, max_tokens
and n_ctx end a generation where they should; bad input is one line.
"""

from __future__ import annotations

import numpy as np
import pytest

import needs  # noqa: E402

gguf = needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")

from lookupkit import Drafter, StaticCache, Tokenizer  # noqa: E402
from lookupkit.policy.confidence import load as load_tables  # noqa: E402
from lookupkit.policy.chain import make_policy  # noqa: E402
from lookupkit.errors import InputError, VocabMismatchError  # noqa: E402
from lookupkit.integrations.llama_cpp import generate  # noqa: E402
from lookupkit.replay import replay_generation  # noqa: E402
from tiny_models import README, VOCAB, foreign_static, learnt, static_from_text, tiny_gguf, write_llama_gguf  # noqa: E402,F401

PROMPT = "Prompt lookup decoding drafts tokens from n-gram caches."
N_NEW = 160


def llama(path, n_ctx: int = 2048, **kw):
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=1, n_threads_batch=1, verbose=False, **kw)


@pytest.fixture(scope="module")
def llm(tiny_gguf):
    model = llama(tiny_gguf)
    yield model
    model.close()


@pytest.fixture(scope="module")
def prompt(llm):
    return llm.tokenize(PROMPT.encode())


@pytest.fixture(scope="module")
def plain(llm, prompt):
    return generate(llm, prompt, N_NEW, stop_at_eos=False)


@pytest.fixture(scope="module")
def static_path(plain, tmp_path_factory):
    text = README.read_text(encoding="utf-8") + Tokenizer.default().decode(plain.tokens[:60])
    return static_from_text(text, tmp_path_factory.mktemp("gen-static") / "static.lkc")


def llama_generate(llm, prompt, n):
    out = []
    for tok in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
        out.append(int(tok))
        if len(out) == n:
            return out


def test_the_plain_loop_is_llama_cpp_pythons_greedy_output(llm, prompt, plain):
    assert plain.tokens == llama_generate(llm, prompt, N_NEW)
    assert plain.stop == "length" and len(plain.tokens) == N_NEW and plain.prompt_len == len(prompt)
    assert plain.n_calls == N_NEW - 1 and plain.n_drafted == plain.n_accepted == 0
    assert plain.t_prompt_s > 0 and plain.t_gen_s > 0 and plain.tokens_per_s > 0
    assert generate(llm, prompt, N_NEW, stop_at_eos=False).tokens == plain.tokens  # the KV cache starts clean


def policy_for(static_path, n_draft, cost=0.1):
    with StaticCache.open(static_path) as cache:
        return make_policy(load_tables(), lambda k: 1 + cost * k, n_draft, cache.high)


@pytest.mark.parametrize("policy", ["llama.cpp", "lookupkit"])
@pytest.mark.parametrize("n_draft", [1, 8, 64])
def test_drafted_output_is_plain_and_counters_are_the_replays(llm, prompt, plain, static_path, policy, n_draft):
    drafter = Drafter(static=static_path, policy=policy, verify_cost=0.1)
    g = generate(llm, prompt, N_NEW, drafter=drafter, n_draft=n_draft, stop_at_eos=False)
    assert g.tokens == plain.tokens
    seq = list(prompt) + g.tokens
    with StaticCache.open(static_path) as cache:
        pol = policy_for(static_path, n_draft) if policy == "lookupkit" else None
        rep = replay_generation(seq, len(prompt) + 1, n_draft, static=cache, policy=pol)
    assert np.array_equal(g.drafted, rep.n_drafted) and np.array_equal(g.accepted, rep.n_accepted)
    assert g.n_accepted > 0 and g.n_calls < plain.n_calls
    # every call emits its accepted drafts plus one token, except a last call whose drafts reach max_tokens
    assert g.n_calls + g.n_accepted - (N_NEW - 1) in (0, 1)
    if n_draft == 64:
        assert g.drafted.max() > 16, "long drafts must be exercised"


def test_a_reused_drafter_learns_each_generation_like_llama_lookups_dynamic_cache(llm, prompt, plain):
    drafter = Drafter()
    first = generate(llm, prompt, N_NEW, drafter=drafter, stop_at_eos=False)
    second = generate(llm, prompt, N_NEW, drafter=drafter, stop_at_eos=False)
    assert first.tokens == second.tokens == plain.tokens
    seq = list(prompt) + plain.tokens
    rep = replay_generation(seq, len(prompt) + 1, 8, dynamic=learnt(seq))
    assert np.array_equal(second.drafted, rep.n_drafted) and np.array_equal(second.accepted, rep.n_accepted)
    assert second.n_accepted > first.n_accepted


def test_max_tokens_cuts_the_output_not_the_counters(llm, prompt, plain, static_path):
    for n in (1, 2, 37):
        g = generate(llm, prompt, n, drafter=Drafter(static=static_path), n_draft=16, stop_at_eos=False)
        assert g.tokens == plain.tokens[:n] and g.stop == "length"
        with StaticCache.open(static_path) as cache:
            rep = replay_generation(list(prompt) + g.tokens, len(prompt) + 1, 16, static=cache)
        assert np.array_equal(g.drafted, rep.n_drafted) and np.array_equal(g.accepted, rep.n_accepted)


def vocab_with_eos(path, eos: int):
    """The bundled GPT-2 vocabulary with another EOS id (a token the tiny model emits)."""
    reader = gguf.GGUFReader(VOCAB)
    w = gguf.GGUFWriter(str(path), "gpt2")
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            value = eos if key == "tokenizer.ggml.eos_token_id" else field.contents()
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, value, field.types[0], sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def eos_llm(plain, tmp_path_factory):
    """The tiny model with the token plain emits at 40 as its vocabulary's EOS; and where plain first emits it."""
    tmp = tmp_path_factory.mktemp("eos")
    eos = plain.tokens[40]
    m = llama(write_llama_gguf(tmp / "eos.gguf", vocab=vocab_with_eos(tmp / "vocab.gguf", eos)))
    yield m, plain.tokens.index(eos)
    m.close()


def test_generation_stops_at_the_first_eos_drafted_or_not(plain, prompt, eos_llm):
    m, first = eos_llm
    for drafter in (None, Drafter(), Drafter(policy="lookupkit", verify_cost=0.0)):
        g = generate(m, prompt, N_NEW, drafter=drafter, n_draft=32)
        assert g.tokens == plain.tokens[:first + 1] and g.stop == "eos" and g.eos
        if drafter is not None:
            pol = make_policy(load_tables(), lambda k: 1.0, 32, None) if drafter.policy == "lookupkit" else None
            rep = replay_generation(list(prompt) + g.tokens, len(prompt) + 1, 32, policy=pol)
            assert np.array_equal(g.drafted, rep.n_drafted) and np.array_equal(g.accepted, rep.n_accepted)
    assert generate(m, prompt, N_NEW, stop_at_eos=False).tokens == plain.tokens


def test_each_emitted_token_is_checked_for_eog_once(plain, prompt, eos_llm, monkeypatch):
    """The end-of-generation check costs one is_eog per emitted token (none after the first EOG is known),
    not a second pass over the step's last token and a rescan of the whole output at the end."""
    from lookupkit.integrations import llama_model

    m, first = eos_llm
    calls = []
    real = llama_model.Model.is_eog
    monkeypatch.setattr(llama_model.Model, "is_eog", lambda self, t: calls.append(t) or real(self, t))
    for drafter, stop_at_eos in ((None, True), (Drafter(), True), (None, False), (Drafter(), False)):
        calls.clear()
        g = generate(m, prompt, N_NEW, drafter=drafter, n_draft=32, stop_at_eos=stop_at_eos)
        assert g.eog == first and g.tokens[:first + 1] == plain.tokens[:first + 1]
        assert calls == g.tokens[:first + 1], (drafter, stop_at_eos)
    g = generate(m, prompt, first, stop_at_eos=True)
    assert g.stop == "length" and g.eog is None


def test_drafts_never_pass_n_ctx_and_a_full_context_ends_the_generation(tiny_gguf, prompt, plain):
    m = llama(tiny_gguf, n_ctx=256)
    n_ctx = m.n_ctx()
    seen = []
    g = generate(m, prompt, 10_000, drafter=Drafter(), n_draft=64, stop_at_eos=False,
                 on_batch=lambda pos, toks, rows: seen.append((pos, len(toks), rows.shape)))
    assert g.stop == "n_ctx" and len(prompt) + len(g.tokens) == n_ctx
    assert g.tokens[:N_NEW] == plain.tokens
    assert all(pos + n < n_ctx and rows[0] == n for pos, n, rows in seen) and max(n for _, n, _ in seen) > 8
    long = list(prompt) * (n_ctx // len(prompt) + 1)
    with pytest.raises(InputError, match=f"but n_ctx is {n_ctx}") as exc:
        generate(m, long[:n_ctx], 8)
    assert "\n" not in str(exc.value)
    m.close()


def test_a_prompt_longer_than_n_batch_is_decoded_in_chunks(tiny_gguf, llm, prompt):
    long = (list(prompt) * 40)[:700]
    small = llama(tiny_gguf, n_batch=128, n_ubatch=128)
    assert generate(small, long, 20, drafter=Drafter(), n_draft=200).tokens == generate(llm, long, 20).tokens
    small.close()


def test_a_static_cache_of_another_vocabulary_is_refused(llm, prompt, tmp_path):
    drafter = Drafter(static=foreign_static(tmp_path / "qwen2.lkc"))
    with pytest.raises(VocabMismatchError) as exc:
        generate(llm, prompt, 8, drafter=drafter)
    assert "qwen2" in str(exc.value) and "gpt-2" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("kwargs, match", [
    ({"prompt_tokens": []}, "the prompt is empty"),
    ({"prompt_tokens": [1, 50257]}, r"must be in 0\.\.50256"),
    ({"prompt_tokens": [[1, 2]]}, "1-D sequence"),
    ({"prompt_tokens": ["a"]}, "integer token ids"),
    ({"max_tokens": 0}, "max_tokens must be"),
    ({"n_draft": 0}, "n_draft must be"),
    ({"drafter": "wiki.lkc"}, "drafter must be a lookupkit.Drafter"),
])
def test_bad_input_is_one_line(llm, kwargs, match):
    args = {"prompt_tokens": [1, 2, 3], "max_tokens": 4, **kwargs}
    with pytest.raises(InputError, match=match) as exc:
        generate(llm, args.pop("prompt_tokens"), args.pop("max_tokens"), **args)
    assert "\n" not in str(exc.value)
    with pytest.raises(InputError, match="takes a llama_cpp.Llama"):
        generate("model.gguf", [1], 4)


# `lookupkit generate`, the real command (typer's CliRunner on the umbrella app), on the tiny model

def cli(*args):
    from typer.testing import CliRunner

    from lookupkit.cli.main import app

    return CliRunner().invoke(app, ["generate", *map(str, args)])


VERDICT = r"^(drafting (pays|does not pay|breaks even) on this model: \d+\.\d\dx \(median of \d+ pairs|uncertain whether)"


def test_generate_command_reports_paired_runs_and_a_verdict(tiny_gguf, static_path):
    import re

    r = cli("-m", tiny_gguf, "-lcs", static_path, "-p", PROMPT, "-n", 60, "-t", 1, "-c", 512, "--draft", 16,
            "--runs", 3, "-q")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "3 pairs of runs (plain and drafted, interleaved), 60 tokens timed in each" in out
    assert "--- text of plain run 1 (the model's greedy continuation) ---" in out
    assert "--- the drafted runs' texts: identical to it ---" in out
    assert re.search(r"^plain +\d+\.\d tok/s median \(\d+\.\d-\d+\.\d over 3 runs\)$", out, re.M), out
    assert re.search(r"^drafted +\d+\.\d tok/s median", out, re.M), out
    assert f"-lcs {static_path}" in out and "accepted per call" in out and "over 3 drafted runs" in out
    assert re.search(r"^measured speed-up \d+\.\d\dx \(median of 3 pairs, .*other processes used \d\.\d\d cores", out, re.M)
    assert "no prediction: give --verify-cost CURVE.json" in out
    assert re.search(VERDICT, out, re.M), out


def test_generate_command_json_with_the_policy_and_a_verify_cost(tiny_gguf, static_path, prompt):
    import json
    import statistics

    r = cli("-m", tiny_gguf, "-lcs", static_path, "-p", PROMPT, "-n", 50, "-t", 1, "-c", 512, "--draft", 32,
            "--policy", "lookupkit", "--verify-cost", "0.1", "--runs", 3, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["prompt_tokens"] == len(prompt) and doc["first_divergence"] is None and doc["runs"] == 3
    assert doc["order"] == ["plain first", "drafted first", "plain first"]
    assert [g["tokens"] for g in doc["plain"]["runs"] + doc["drafted"]["runs"]] == [50] * 6 and doc["timed_tokens"] == 50
    assert all(g["drafted"] == 0 for g in doc["plain"]["runs"])
    assert doc["drafted"]["accepted"] == sum(g["accepted"] for g in doc["drafted"]["runs"]) > 0
    assert doc["predicted_speedup"] > 1 and doc["policy"] == "lookupkit" and doc["verify_cost"] == 0.1
    assert doc["policy_table"] is None  # no tables ship for the tiny model: the bundled ones
    # each drafted run drafted the same from a fresh drafter (none learnt the previous run's text)
    assert len({(g["calls"], g["drafted"], g["accepted"]) for g in doc["drafted"]["runs"]}) == 1
    pairs = [d["tokens_per_s"] / p["tokens_per_s"] for p, d in zip(doc["plain"]["runs"], doc["drafted"]["runs"])]
    assert doc["speedups"] == pytest.approx(pairs) and doc["speedup"]["median"] == pytest.approx(statistics.median(pairs))
    assert doc["answer"] in ("pays", "does not pay", "breaks even", "uncertain") and doc["verdict"]
    assert doc["text_of"] == "plain run 1" and doc["others_cores"] >= 0


def test_generate_command_times_the_plain_runs_length_when_it_ends_at_eos(plain, tmp_path):
    import json

    eos = plain.tokens[40]
    first = plain.tokens.index(eos)
    model = write_llama_gguf(tmp_path / "eos.gguf", vocab=vocab_with_eos(tmp_path / "vocab.gguf", eos))
    r = cli("-m", model, "-p", PROMPT, "-n", 120, "-t", 1, "-c", 512, "--runs", 2, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["timed_tokens"] == first + 1 and doc["text_eos"] == first
    assert [g["tokens"] for g in doc["plain"]["runs"] + doc["drafted"]["runs"]] == [first + 1] * 4
    r = cli("-m", model, "-p", PROMPT, "-n", 120, "-t", 1, "-c", 512, "--runs", 2, "--ignore-eos", "--json")
    doc = json.loads(r.stdout)
    assert doc["timed_tokens"] == 120 and doc["text_eos"] == first
    assert [g["tokens"] for g in doc["plain"]["runs"] + doc["drafted"]["runs"]] == [120] * 4
    r = cli("-m", model, "-p", PROMPT, "-n", 120, "-t", 1, "-c", 512, "--runs", 2, "--ignore-eos", "-q")
    assert f"cut at its EOS (token {first + 1})" in r.stdout


def test_generate_command_refuses_bad_input_in_one_line(tiny_gguf, tmp_path):
    from cli_checks import assert_one_line_error

    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"not a model at all")
    prompt = tmp_path / "empty.txt"
    prompt.write_text("  \n")
    base = ["-t", 1, "-q"]
    cases = [
        (["-m", tiny_gguf, "-lcs", foreign_static(tmp_path / "qwen2.lkc"), "-p", PROMPT], "was built for qwen2"),
        (["-m", tmp_path / "missing.gguf", "-p", PROMPT], "does not exist"),
        (["-m", "no-such-model", "-p", PROMPT], "lookupkit also knows gemma-3-270m"),
        (["-m", fake, "-p", PROMPT], "is not a GGUF model file"),
        (["-m", tiny_gguf, "-p", PROMPT * 40, "-c", 64], "is too small"),
        (["-m", tiny_gguf, "-p", PROMPT, "-n", 600, "-c", 512], "-c 512 is too small"),
        (["-m", tiny_gguf, "-f", prompt], "the prompt is empty"),
        (["-m", tiny_gguf, "-p", ""], "the prompt is empty"),
        (["-m", tiny_gguf], "exactly one of -p TEXT or -f FILE"),
        (["-m", tiny_gguf, "-p", PROMPT, "-f", prompt], "exactly one of -p TEXT or -f FILE"),
        (["-m", tiny_gguf, "-p", PROMPT, "-c", 100], "-c 100 is too small (give -c"),
        (["-m", tiny_gguf, "-p", PROMPT, "--draft", 0], "--draft must be between 1 and 1024"),
        (["-m", tiny_gguf, "-p", PROMPT, "--draft", 100000], "--draft must be between 1 and 1024"),
        (["-m", tiny_gguf, "-p", PROMPT, "--runs", 0], "--runs must be between 1 and 100"),
        (["-m", tiny_gguf, "-p", PROMPT, "-f", tmp_path / "nope.txt"], "exactly one of"),
        (["-m", tiny_gguf, "-f", tmp_path / "nope.txt"], "prompt file"),
        (["-m", tiny_gguf, "-p", PROMPT, "-lcd", static_path_of(tmp_path)], "a static cache"),
        (["-m", tiny_gguf, "-p", PROMPT, "--policy-table", prompt], "only used with --policy lookupkit"),
    ]
    for args, fragment in cases:
        assert_one_line_error(cli(*args, *base), fragment)


def static_path_of(tmp_path):
    return static_from_text("a b c a b d\n", tmp_path / "as-dynamic.lkc")


def test_bench_models_writes_an_f16_model_without_shared_that_generates(tmp_path):
    """`python -m lookupkit.bench.models` needs nothing from ../shared (the bundled vocabulary) and does not
    default to Q8_0, which crashes llama-cpp-python builds with AMX kernels."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "LOOKUPKIT_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "lookupkit.bench.models", "--n-layer", "1"], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    path = r.stdout.splitlines()[0]
    assert path.startswith(str(tmp_path)) and path.endswith("random-f16.gguf") and "'n_vocab': 50257" in r.stdout
    m = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False)
    ids = m.tokenize(PROMPT.encode())
    plain = generate(m, ids, 12, stop_at_eos=False)
    assert len(plain.tokens) == 12 and generate(m, ids, 12, drafter=Drafter(), stop_at_eos=False).tokens
    m.close()
    bad = subprocess.run([sys.executable, "-m", "lookupkit.bench.models", "--vocab", str(tmp_path / "none.gguf")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--vocab" in bad.stderr


def test_open_model_sets_llama_servers_defaults_and_drafting_stays_plain(tiny_gguf, static_path, prompt):
    from lookupkit.integrations.llama_cpp import open_model

    from lookupkit import warmup
    from lookupkit.integrations.llama_model import model_vocab

    m = open_model(tiny_gguf, n_ctx=1024, threads=1)
    assert warmup.kernels().done() or warmup.kernels().wait() is None  # open_model started the kernels' warm-up
    assert model_vocab(tiny_gguf) is model_vocab(tiny_gguf)  # read once, meanwhile
    assert m.context_params.swa_full is False and m.context_params.n_threads == m.context_params.n_threads_batch == 1
    assert m.context_params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    plain = generate(m, prompt, N_NEW, stop_at_eos=False)
    for policy in ("llama.cpp", "lookupkit"):
        g = generate(m, prompt, N_NEW, drafter=Drafter(static=static_path, policy=policy), n_draft=64,
                     stop_at_eos=False)
        assert g.tokens == plain.tokens and g.n_accepted > 0
    m.close()
    with pytest.raises(InputError, match="does not exist"):
        open_model(tiny_gguf.with_name("missing.gguf"))
