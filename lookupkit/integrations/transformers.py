"""transformers' greedy assisted generation, drafted by lookupkit: `model.generate(..., custom_generate=lookup)`.

    lookup = LookupGenerate(static="wiki.lkc", n_draft=8)
    out = model.generate(input_ids, max_new_tokens=128, do_sample=False, custom_generate=lookup)
    lookup.stats()          # calls, drafted, accepted, ...

`generate(custom_generate=<callable>)` (documented in transformers 5.x) prepares inputs, cache, logits
processors and stopping criteria, then hands the decoding loop to the callable. LookupGenerate runs
transformers' own assisted-decoding loop (`GenerationMixin._assisted_decoding`, private) with a
`CandidateGenerator` (public) that drafts with lookupkit: verification, cache cropping, EOS and
max_length handling, logits processors and `return_dict_in_generate` stay transformers' own, so greedy
output is plain greedy `generate`'s. The loop asks for candidates once per verify forward pass (the
first time with the prompt itself, in the prefill) and reports each outcome, so every draft resolves.
Drafts are not cut at max_length (lookup-stats does not cut them either; the loop drops what lies past it).
The private entry points are checked at call time and the tested versions are pinned by
tests/test_integration_transformers.py (TESTED_VERSIONS).

Importing this module imports torch and transformers (lookupkit itself never does).
"""

from __future__ import annotations

from .engines import open_static, require, vocab_identity
from .session import Counted, DraftSession
from ..errors import InputError, VocabMismatchError
from ..rules import ENGINE_DRAFT

torch = require("torch", "torch", "transformers")
transformers = require("transformers", "transformers", "transformers")
CandidateGenerator = require("transformers.generation.candidate_generator", "transformers",
                             "transformers").CandidateGenerator
GenerationMixin = transformers.GenerationMixin

TESTED_VERSIONS = ("5.24", "5.25")  # transformers minor versions whose _assisted_decoding the tests ran


class LookupCandidateGenerator(CandidateGenerator):
    """Candidates for transformers' assisted decoding from a DraftSession (batch size 1)."""

    def __init__(self, session: DraftSession):
        self.session = session

    @property
    def num_drafting_tokens(self) -> int:
        """The most tokens one call drafts: 5.25's loop keeps that many recurrent states to roll back."""
        return self.session.n_draft

    def get_candidates(self, input_ids, **kwargs):
        draft = self.session.draft(_History(input_ids))
        if not len(draft):
            return input_ids, None
        tail = torch.as_tensor(draft, dtype=input_ids.dtype, device=input_ids.device)[None, :]
        return torch.cat((input_ids, tail), dim=1), None

    def update_candidate_strategy(self, input_ids, scores, num_matches: int):
        self.session.observe(_History(input_ids))


class LookupGenerate(Counted):
    """A `custom_generate` callable: greedy assisted generation drafted by lookupkit.

    static: a path or an open StaticCache (share one between LookupGenerate objects: one mapping);
    dynamic: an -lcd file or an NgramTable; n_draft: 1..MAX_DRAFT; vocab: a GGUF or tokenizer.json
    whose vocabulary the static cache must have (checked at construction; the model's vocab_size is
    always checked against the cache's); policy, verify_cost and policy_table (e.g.
    policy.confidence.for_model("gemma-3-270m")) and history (a shared draft.history.History) as for the
    Drafter (verify_cost None: the Drafter's default).
    The Drafter is built and its kernels loaded in a background thread from construction on (the
    model's load hides them); the first generate waits for it and raises what failed there.
    Counters: n_calls, n_drafted, n_accepted, `stats()`.
    One sequence at a time: one LookupGenerate per concurrent generation (the model may be shared).
    """

    def __init__(self, static=None, dynamic=None, n_draft: int = ENGINE_DRAFT, vocab=None, policy: str = "llama.cpp",
                 verify_cost=None, policy_table=None, history=None):
        self.static = open_static(static)
        if vocab is not None:
            if self.static is not None:
                self.static.check_vocab(vocab_identity(vocab))
        self._start(dict(static=self.static, dynamic=dynamic, policy=policy, verify_cost=verify_cost,
                         policy_table=policy_table, history=history), n_draft)

    def __call__(self, model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
        _check_supported()
        if generation_config.do_sample:
            raise InputError("lookupkit's transformers adapter is greedy: pass do_sample=False")
        if input_ids.shape[0] != 1:
            raise InputError(f"assisted generation drafts one sequence at a time, got a batch of {input_ids.shape[0]}; "
                             f"call generate per sequence (LookupGenerate objects may share one StaticCache)")
        n_vocab = getattr(self.static, "n_vocab", None)
        model_vocab = model.config.get_text_config().vocab_size
        if n_vocab and n_vocab > model_vocab:
            raise VocabMismatchError(f"{self.static.name} was built for a vocabulary of {n_vocab} tokens but the "
                                     f"model has {model_vocab}; rebuild it with the model's tokenizer "
                                     f"(lookup-create -m tokenizer.json)")
        proxy = _WithCandidates(model, LookupCandidateGenerator(self.session))
        return GenerationMixin._assisted_decoding(proxy, input_ids, logits_processor=logits_processor,
                                                  stopping_criteria=stopping_criteria,
                                                  generation_config=generation_config, **model_kwargs)


class _WithCandidates:
    """The model as `_assisted_decoding` sees it, with lookupkit's candidate generator. A wrapper, not a
    patch of the model, so several threads may generate with one model at once."""

    def __init__(self, model, generator: LookupCandidateGenerator):
        self._model, self._generator = model, generator

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __call__(self, *args, **kwargs):
        return self._model(*args, **kwargs)

    def _get_candidate_generator(self, **kwargs) -> LookupCandidateGenerator:
        return self._generator


class _History:
    """A (1, n) id tensor as the session reads it: its length, and slices as int32 arrays (only the
    slices the session asks for leave the device)."""

    def __init__(self, input_ids):
        self._ids = input_ids[0]

    def __len__(self) -> int:
        return int(self._ids.shape[0])

    def __getitem__(self, s: slice):
        return self._ids[s].cpu().numpy()


def _check_supported() -> None:
    if not hasattr(GenerationMixin, "_assisted_decoding") or not hasattr(GenerationMixin, "_get_candidate_generator"):
        raise InputError(f"transformers {transformers.__version__} lacks the assisted-decoding loop lookupkit drives "
                         f"(tested: {', '.join(TESTED_VERSIONS)}.x): pip install 'lookupkit[transformers]'")
