"""lookupkit drafting inside transformers' assisted-decoding loop, on a tiny random Qwen2 built here.

Greedy output through `generate(custom_generate=LookupGenerate(...))` is plain greedy `generate`'s; the
counters are what lookup-stats' loop predicts for the generated sequence (transformers drafts first
from the prompt itself, in the prefill, so the replay starts at the prompt); threads share one model
and one mapping; bad input is one line; the transformers versions the private loop was tested with
are pinned here.
"""

from __future__ import annotations

import sys

import pytest

import needs  # noqa: E402

torch = needs.module("torch", "pip install torch==2.13.0 (the CPU build), then 'lookupkit[transformers]'")
transformers = needs.module("transformers", "pip install torch==2.13.0, then 'lookupkit[transformers]'")

from lookupkit import StaticCache, Tokenizer  # noqa: E402
from lookupkit.errors import InputError, VocabMismatchError  # noqa: E402
from lookupkit.integrations.engines import MissingExtraError  # noqa: E402
from lookupkit.integrations.transformers import TESTED_VERSIONS, LookupGenerate  # noqa: E402
from lookupkit.rules import MAX_DRAFT  # noqa: E402
from lookupkit.replay import replay_generation  # noqa: E402
from tiny_models import (in_threads, README, VOCAB, foreign_static, learnt, qwen2_model,  # noqa: E402
                         static_from_text)

PROMPTS = ["Prompt lookup decoding drafts tokens from n-gram caches.", "def main():\n    return 0\n",
           "The static cache is opened with mmap, in microseconds."]
N_NEW = 80


def greedy(model, prompt: list[int], lookup=None) -> list[int]:
    ids = torch.tensor([prompt])
    kw = {"custom_generate": lookup} if lookup is not None else {}
    out = model.generate(ids, max_new_tokens=N_NEW, do_sample=False, **kw)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def model():
    return qwen2_model()


@pytest.fixture(scope="module")
def plain(model):
    tok = Tokenizer.default()
    prompts = [tok.encode(p).tolist() for p in PROMPTS]
    return prompts, [greedy(model, p) for p in prompts]


@pytest.fixture(scope="module")
def static_path(plain, tmp_path_factory):
    text = README.read_text(encoding="utf-8") + Tokenizer.default().decode(plain[1][0])
    return static_from_text(text, tmp_path_factory.mktemp("hf-static") / "static.lkc")


def test_the_private_loop_is_driven_only_on_tested_versions():
    assert ".".join(transformers.__version__.split(".")[:2]) in TESTED_VERSIONS, (
        f"transformers {transformers.__version__} is not among the tested versions {TESTED_VERSIONS}: run these "
        f"tests against it, then add it to TESTED_VERSIONS in lookupkit/integrations/transformers.py")


@pytest.mark.parametrize("n_draft", [1, 8])
def test_greedy_output_is_plain_and_counters_are_the_replays(model, plain, static_path, n_draft):
    prompts, outs = plain
    lookup = LookupGenerate(static=static_path, n_draft=n_draft, vocab=VOCAB)
    assert greedy(model, prompts[0], lookup) == outs[0]
    seq = prompts[0] + outs[0]
    with StaticCache.open(static_path) as cache:
        rep = replay_generation(seq, len(prompts[0]), n_draft, static=cache)
        assert rep.n_accepted.sum() != replay_generation(seq, len(prompts[0]), n_draft).n_accepted.sum(), \
            "the static cache must change the drafts, or this test would not check that it is used"
    s = lookup.stats()
    assert s["calls"] == len(rep.n_drafted) > 0 and s["drafted"] == rep.n_drafted.sum() > 0
    assert s["accepted"] == rep.n_accepted.sum() and lookup.n_accepted == s["accepted"]
    assert (s["pending"], s["unresolved"], s["sequences"], s["full_checks"]) == (0, 0, 1, 0)


def test_a_new_prompt_restarts_and_learns_the_previous_sequence(model, plain, static_path):
    prompts, outs = plain
    lookup = LookupGenerate(static=static_path, n_draft=6)
    assert greedy(model, prompts[0], lookup) == outs[0]
    assert greedy(model, prompts[2], lookup) == outs[2]
    first, second = prompts[0] + outs[0], prompts[2] + outs[2]
    with StaticCache.open(static_path) as cache:
        rep_a = replay_generation(first, len(prompts[0]), 6, static=cache)
        rep_b = replay_generation(second, len(prompts[2]), 6, static=cache, dynamic=learnt(first))
    s = lookup.stats()
    assert s["sequences"] == 2 and s["unresolved"] == 0
    assert s["calls"] == len(rep_a.n_drafted) + len(rep_b.n_drafted)
    assert s["drafted"] == rep_a.n_drafted.sum() + rep_b.n_drafted.sum()
    assert s["accepted"] == rep_a.n_accepted.sum() + rep_b.n_accepted.sum()


def test_return_dict_and_eos_handling_stay_transformers_own(model, plain, static_path):
    prompts, outs = plain
    eos = outs[0][30]  # a token the model writes: generation must stop right after it, as plain greedy does
    plain_out = model.generate(torch.tensor([prompts[0]]), max_new_tokens=N_NEW, do_sample=False,
                               eos_token_id=eos, return_dict_in_generate=True, output_scores=True)
    ours = model.generate(torch.tensor([prompts[0]]), max_new_tokens=N_NEW, do_sample=False, eos_token_id=eos,
                          return_dict_in_generate=True, output_scores=True,
                          custom_generate=LookupGenerate(static=static_path, n_draft=8))
    assert torch.equal(plain_out.sequences, ours.sequences) and ours.sequences[0, -1].item() == eos
    assert len(plain_out.scores) == len(ours.scores)
    assert all(torch.equal(a.argmax(-1), b.argmax(-1)) for a, b in zip(plain_out.scores, ours.scores))


def test_concurrent_sequences_share_one_model_and_one_mapping(model, plain, static_path):
    prompts, outs = plain
    cache = StaticCache.open(static_path)
    lookups = [LookupGenerate(static=cache, n_draft=6) for _ in prompts]
    assert in_threads(lambda i: greedy(model, prompts[i], lookups[i]), len(prompts)) == outs
    for i, lk in enumerate(lookups):
        assert lk.session.drafter.static is cache
        alone = LookupGenerate(static=static_path, n_draft=6)
        assert greedy(model, prompts[i], alone) == outs[i]
        assert lk.stats() == alone.stats()


def test_a_cache_for_another_vocabulary_is_refused_with_both_names(tmp_path, static_path):
    foreign = foreign_static(tmp_path / "qwen2.lkc")
    with pytest.raises(VocabMismatchError) as exc:
        LookupGenerate(static=foreign, vocab=VOCAB)
    msg = str(exc.value)
    assert "qwen2" in msg and "gpt-2" in msg and "lookup-create -m" in msg and "\n" not in msg
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tiny_vocab = Qwen2ForCausalLM(Qwen2Config(vocab_size=1000, hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(VocabMismatchError, match="50257 tokens but the model has 1000"):
        tiny_vocab.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=False,
                            custom_generate=LookupGenerate(static=static_path))


def test_sampling_and_batches_are_refused_in_one_line(model):
    with pytest.raises(InputError, match="greedy: pass do_sample=False"):
        model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4, do_sample=True, custom_generate=LookupGenerate())
    with pytest.raises(InputError, match="one sequence at a time, got a batch of 2"):
        model.generate(torch.tensor([[1, 2, 3], [4, 5, 6]]), max_new_tokens=4, do_sample=False,
                       custom_generate=LookupGenerate())


@pytest.mark.parametrize("bad", [0, MAX_DRAFT + 1, False, 1.0])
def test_n_draft_out_of_range_is_refused(bad):
    with pytest.raises(InputError, match=f"between 1 and {MAX_DRAFT}"):
        LookupGenerate(n_draft=bad)


def test_the_drafter_is_built_meanwhile_and_its_failure_raised_at_first_use():
    lookup = LookupGenerate(policy="no-such-policy")
    with pytest.raises(InputError, match="unknown policy 'no-such-policy'"):
        lookup.session  # noqa: B018


@pytest.mark.parametrize("missing", ["torch", "transformers"])
def test_missing_torch_or_transformers_names_the_extra(monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)
    monkeypatch.delitem(sys.modules, "lookupkit.integrations.transformers")
    with pytest.raises(MissingExtraError) as exc:
        import lookupkit.integrations.transformers  # noqa: F401
    assert str(exc.value) == f"{missing} is not installed: pip install 'lookupkit[transformers]'"



def test_the_policy_drafts_by_the_table_it_is_given():
    import numpy as np

    from lookupkit.policy import confidence
    from lookupkit.policy.chain import history_rows

    path = confidence.for_model("gemma-3-270m")
    lookup = LookupGenerate(policy="lookupkit", policy_table=path)
    compiled = history_rows(confidence.load(path)[0])  # the stored rows and the history's (the longest match's)
    assert np.array_equal(lookup.session.drafter._pol.table, compiled)
    assert not np.array_equal(LookupGenerate(policy="lookupkit").session.drafter._pol.table, compiled)
