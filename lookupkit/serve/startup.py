"""Everything `lookupkit serve` opens, opened once at start-up and timed: the model (one llama.cpp context
of --parallel sequences), the static cache (mapped once, shared read-only by every slot's Drafter),
the dynamic cache (read once; each slot's Drafter starts every request from it), the policy tables, the
tenants' histories (--learn history: serve.tenants, loaded from --state by serve.state), the API keys, the
drafting kernels and the chat template. A bad cache, table, state or key file or flag is refused before the
model loads."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .config import ServeConfig
from .lifecycle import Lifecycle

if TYPE_CHECKING:
    from llama_cpp import Llama

    from ..tokenizer.vocab import Vocab
    from .chat import ChatTemplate
    from .engine import Engine
    from .metrics import Metrics
    from .state import StateKeeper
    from .tenants import Tenants


@dataclass
class Served:
    """What the handlers share: the settings, the Llama (tokenizing), the engine, the chat template, the model's id."""

    config: ServeConfig
    llm: "Llama"
    engine: "Engine"
    metrics: "Metrics"
    chat: "ChatTemplate"
    model_id: str
    n_vocab: int
    n_ctx_slot: int
    loaded: list = field(default_factory=list)  # (what, seconds, detail) in the order they were opened
    tenants: "Tenants | None" = None  # every tenant's History (--learn history), else None
    keeper: "StateKeeper | None" = None  # the --state file's keeper, else None
    keys: tuple = ()  # the API keys a request must give one of (none: every request is let in)
    lcs: Path | None = None  # the -lcs path, opened again by reload_static
    vocab: "Vocab | None" = None  # the model's vocabulary, which a static cache must have
    model_path: str = ""  # the GGUF served (GET /props)
    sources: tuple = ()  # what every slot's drafter drafts from (GET /slots)
    life: "Lifecycle" = field(init=False, repr=False)  # its one owner: start, stop, the model's readers

    def __post_init__(self):
        self.life = Lifecycle(self)

    def reload_static(self) -> str:
        """Open the -lcs file again (O(1): its header checked, then mapped) and have the engine draft from it
        (SIGHUP, POST /static/reload); a file that fails its checks is refused and the old mapping stays."""
        from ..static import StaticCache

        if self.lcs is None:
            raise InputError("this server was started without -lcs: there is no static cache to reload")
        t = time.perf_counter()
        static = StaticCache.open(self.lcs, expect_vocab=self.vocab)
        self.engine.swap_static(static)
        return f"static cache {self.lcs} opened again in {1e3 * (time.perf_counter() - t):.2f} ms"


def open_server(model, *, on_batch=None, **settings) -> Served:
    """Open everything (see the module docstring) for a ServeConfig, or for a model and the config's keyword
    settings (checked there, once); on_batch: the engine's check hook (tests)."""
    from .. import models, warmup
    from ..integrations.engines import drafter_factory
    from ..integrations.llama_model import batch_size, model_vocab, open_model
    from ..verify_cost import DEFAULT_COST, VerifyCost
    from .chat import ChatTemplate, chosen
    from .engine import Engine
    from .metrics import Metrics

    from ..draft.history import BUDGET_MIN, History
    from .state import SAVE_EVERY, StateKeeper, open_tenants

    c = model if isinstance(model, ServeConfig) else ServeConfig.of(model, **settings)
    keys = read_keys(c.api_keys, c.api_key_file)
    template = chosen(c.chat_template, c.chat_template_file)
    loaded = []

    def timed(what: str, fn, detail=""):
        t = time.perf_counter()
        value = fn()
        loaded.append((what, time.perf_counter() - t, detail(value) if callable(detail) else detail))
        return value

    path = models.resolve(c.model)
    vocab = timed("model vocabulary", lambda: model_vocab(path), lambda v: v.name)
    static = dynamic = make_drafter = history = tenants = keeper = pricing = None
    if c.learn == "history":
        tenants = timed("history" + (f" {c.state}" if c.state is not None else ""), lambda: open_tenants(
            c.state, c.history_budget, c.tenant_budget, vocab.fingerprint, c.learn_scope, c.state_reset),
            lambda t: t.describe())
        history = History(BUDGET_MIN, vocab=vocab.fingerprint)  # each slot's Drafter starts empty, and is pointed
        if c.state is not None:                                  # at its job's tenant's History (Engine.history_for)
            keeper = StateKeeper(tenants, c.state, SAVE_EVERY if c.save_every is None else c.save_every)
    if c.n_draft:
        from ..static import StaticCache

        if c.lcs is not None:
            static = timed(f"static cache {c.lcs}", lambda: StaticCache.open(c.lcs, expect_vocab=vocab),
                           "mapped, vocabulary checked")
        if c.lcd is not None:
            from ..formats import read_ngrams

            dynamic = timed(f"dynamic cache {c.lcd}", lambda: read_ngrams(c.lcd),
                            lambda t: f"{len(t.ngrams):,} n-grams")
        if c.policy == "lookupkit":  # its drafts are priced by what they add to the step all busy slots share
            pricing = VerifyCost.of(DEFAULT_COST if c.verify_cost is None else c.verify_cost)
        make_drafter, _ = drafter_factory(path, static=static, dynamic=dynamic, policy=c.policy,
                                          policy_table=c.policy_table, verify_cost=pricing, history=history)
    n_batch = batch_size(c.n_draft, c.parallel)
    llm = timed(f"model {path}", lambda: open_model(path, n_ctx=c.n_ctx, threads=c.threads, parallel=c.parallel,
                                                    n_batch=n_batch), f"{c.parallel} sequences, n_batch {n_batch}")
    try:
        timed("drafting kernels (after the model)", warmup.wait_kernels)
        metrics = Metrics()

        def history_gauges() -> None:
            metrics.gauge("history_tokens", tenants.n_tokens)
            metrics.gauge("history_tenants", len(tenants))

        def learnt() -> None:
            history_gauges()
            if keeper is not None:
                keeper.learnt()

        engine = timed(f"{c.parallel} slot{'s' * (c.parallel > 1)}", lambda: Engine(
            llm, make_drafter, parallel=c.parallel, queue=c.queue, n_draft=c.n_draft, metrics=metrics,
            on_batch=on_batch,
            learn=c.learn, on_learnt=learnt if tenants is not None else None,
            history_for=tenants.history if tenants is not None else None, pricing=pricing),
            "a Drafter each" if make_drafter else "no drafting")
        metrics.gauge("slots_total", c.parallel)
        if tenants is not None:
            check_ids(tenants, engine.m.n_vocab, c.state)  # ids enter the drafting loops here, checked once
            tenants.n_vocab = engine.m.n_vocab  # recorded in the state file: verify bounds every id by it
            history_gauges()
        chat = timed("chat template", lambda: ChatTemplate(llm, template, c.jinja), lambda ch: ch.describe())
    except BaseException:
        llm.close()
        raise
    name = str(c.model)
    model_id = c.alias if c.alias is not None else name if name in models.MODELS else Path(path).name
    sources = () if not c.n_draft else ("context", *("dynamic",) * (dynamic is not None or c.learn == "dynamic"),
                                        *("static",) * (static is not None), *("history",) * (c.learn == "history"))
    return Served(config=c, llm=llm, engine=engine, metrics=metrics, chat=chat, model_id=model_id,
                  n_vocab=engine.m.n_vocab,
                  n_ctx_slot=engine.n_ctx_slot, loaded=loaded, tenants=tenants, keeper=keeper, keys=keys,
                  lcs=c.lcs if static is not None else None, vocab=vocab, model_path=str(path), sources=sources)


def check_ids(tenants, n_vocab: int, state) -> None:
    """Refuse a --state whose histories hold an id this model's vocabulary cannot (a file of another model whose
    vocabulary has the same identity is impossible; a file edited with valid checksums is not)."""
    from ..draft.history import top_id
    from .state import RESET_FLAG

    top = top_id(tenants.snapshot())
    if top >= n_vocab:
        raise InputError(f"--state {state} holds the token id {top}, outside this model's {n_vocab:,} ids; start "
                         f"afresh with {RESET_FLAG} (the file is replaced at the next save) or delete it")


def read_keys(keys, key_file) -> tuple:
    """The API keys: those given, and one per line of key_file (blank lines skipped); a key file that cannot
    be read or holds no key is refused (a server meant to be closed must not start open)."""
    keys = list(keys)
    if key_file is not None:
        from ..files import open_input

        with open_input(key_file, "--api-key-file") as f:
            try:
                lines = [line.strip() for line in f.read().decode("utf-8").splitlines()]
            except UnicodeDecodeError:
                raise InputError(f"--api-key-file {key_file} is not UTF-8 text: give one key per line") from None
        keys += [line for line in lines if line]
        if not any(lines):
            raise InputError(f"--api-key-file {key_file} holds no key: give one key per line")
    if any(not key.strip() or key != key.strip() for key in keys):
        raise InputError("an --api-key is empty or starts or ends with a space: give the key alone")
    return tuple(dict.fromkeys(keys))
