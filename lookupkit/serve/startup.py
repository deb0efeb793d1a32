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

from ..errors import InputError
from ..rules import MAX_DRAFT, DEFAULT_CTX, PARALLEL_MAX


@dataclass
class Served:
    """What the handlers share: the Llama (tokenizing), the engine, the chat template, the model's id."""

    llm: object
    engine: object
    metrics: object
    chat: object
    model_id: str
    n_vocab: int
    n_ctx_slot: int
    loaded: list = field(default_factory=list)  # (what, seconds, detail) in the order they were opened
    tenants: object = None  # every tenant's History, a serve.tenants.Tenants (--learn history), else None
    keeper: object = None  # its serve.state.StateKeeper (--state), else None
    keys: tuple = ()  # the API keys a request must give one of (none: every request is let in)
    lcs: object = None  # the -lcs path, opened again by reload_static
    vocab: object = None  # the model's vocabulary, which a static cache must have
    model_path: str = ""  # the GGUF served (GET /props)
    sources: tuple = ()  # what every slot's drafter drafts from (GET /slots)

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


def open_server(model, *, lcs=None, lcd=None, policy: str = "llama.cpp", policy_table=None, verify_cost=None,
                n_draft: int = 8, n_ctx: int = DEFAULT_CTX, threads: int | None = None, parallel: int = 1, queue: int = 32,
                on_batch=None, learn: str = "off", history_budget: int | None = None, state=None,
                state_reset: bool = False, save_every: int | None = None, learn_scope: str = "tenant",
                tenant_budget: int | None = None, api_keys=(), api_key_file=None, alias: str | None = None,
                chat_template: str | None = None, chat_template_file=None, jinja: bool = True) -> Served:
    """Open everything (see the module docstring); n_draft 0 serves without drafting (the plain baseline);
    learn, history_budget, state, state_reset, save_every, learn_scope, tenant_budget: serve.state,
    serve.tenants and the engine's docstring; api_keys and the lines of api_key_file: the keys let in; alias:
    the model's name in responses and /v1/models (llama-server's --alias); chat_template, chat_template_file,
    jinja: serve.chat."""
    from .. import models, warmup
    from ..integrations.engines import drafter_factory
    from ..integrations.llama_generate import batch_size, model_vocab, open_model
    from ..verify_cost import DEFAULT_COST, VerifyCost
    from .chat import ChatTemplate, chosen
    from .engine import Engine
    from .metrics import Metrics

    from ..draft.history import BUDGET_MIN, History
    from .state import SAVE_EVERY, StateKeeper, open_tenants

    _check(n_draft, n_ctx, threads, parallel, queue)
    _check_learning(learn, policy, n_draft, history_budget, state, state_reset, save_every, learn_scope,
                    tenant_budget)
    keys = read_keys(api_keys, api_key_file)
    if alias is not None and not alias.strip():
        raise InputError("--alias is empty: give the name clients should see")
    template = chosen(chat_template, chat_template_file)
    loaded = []

    def timed(what: str, fn, detail=""):
        t = time.perf_counter()
        value = fn()
        loaded.append((what, time.perf_counter() - t, detail(value) if callable(detail) else detail))
        return value

    path = models.resolve(model)
    vocab = timed("model vocabulary", lambda: model_vocab(path), lambda v: v.name)
    static = dynamic = make_drafter = history = tenants = keeper = pricing = None
    if learn == "history":
        tenants = timed("history" + (f" {state}" if state is not None else ""), lambda: open_tenants(
            state, history_budget, tenant_budget, vocab.fingerprint, learn_scope, state_reset), lambda t: t.describe())
        history = History(BUDGET_MIN, vocab=vocab.fingerprint)  # each slot's Drafter starts empty, and is pointed
        if state is not None:                                    # at its job's tenant's History (Engine.history_for)
            keeper = StateKeeper(tenants, state, SAVE_EVERY if save_every is None else save_every)
    if n_draft:
        from ..static import StaticCache

        if lcs is not None:
            static = timed(f"static cache {lcs}", lambda: StaticCache.open(lcs, expect_vocab=vocab),
                           "mapped, vocabulary checked")
        if lcd is not None:
            from ..formats import read_ngrams

            dynamic = timed(f"dynamic cache {lcd}", lambda: read_ngrams(lcd), lambda t: f"{len(t.ngrams):,} n-grams")
        if policy == "lookupkit":  # its drafts are priced by what they add to the step all busy slots share
            pricing = VerifyCost.of(DEFAULT_COST if verify_cost is None else verify_cost)
        make_drafter, _ = drafter_factory(path, static=static, dynamic=dynamic, policy=policy, policy_table=policy_table,
                                          verify_cost=pricing, history=history)
    elif lcs is not None or lcd is not None:
        raise InputError("--draft 0 serves without drafting: leave out -lcs/-lcd, or give --draft 1 or more")
    n_batch = batch_size(n_draft, parallel)
    llm = timed(f"model {path}", lambda: open_model(path, n_ctx=n_ctx, threads=threads, parallel=parallel,
                                                    n_batch=n_batch), f"{parallel} sequences, n_batch {n_batch}")
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

        engine = timed(f"{parallel} slot{'s' * (parallel > 1)}", lambda: Engine(
            llm, make_drafter, parallel=parallel, queue=queue, n_draft=n_draft, metrics=metrics, on_batch=on_batch,
            learn=learn, on_learnt=learnt if tenants is not None else None,
            history_for=tenants.history if tenants is not None else None, pricing=pricing),
            "a Drafter each" if make_drafter else "no drafting")
        metrics.gauge("slots_total", parallel)
        if tenants is not None:
            tenants.n_vocab = engine.m.n_vocab  # recorded in the state file: verify bounds every id by it
            history_gauges()
        chat = timed("chat template", lambda: ChatTemplate(llm, template, jinja),
                     lambda c: c.describe())
    except BaseException:
        llm.close()
        raise
    model_id = alias if alias is not None else str(model) if str(model) in models.MODELS else Path(path).name
    sources = () if not n_draft else ("context", *("dynamic",) * (dynamic is not None or learn == "dynamic"),
                                      *("static",) * (static is not None), *("history",) * (learn == "history"))
    return Served(llm=llm, engine=engine, metrics=metrics, chat=chat, model_id=model_id, n_vocab=engine.m.n_vocab,
                  n_ctx_slot=engine.n_ctx_slot, loaded=loaded, tenants=tenants, keeper=keeper, keys=keys,
                  lcs=lcs if static is not None else None, vocab=vocab, model_path=str(path), sources=sources)


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


def _check_learning(learn, policy, n_draft, budget, state, reset, save_every, scope, tenant_budget) -> None:
    from ..draft.history import check_budget
    from ..draft.learning import check_learn
    from ..rules import HISTORY_BUDGET_MAX
    from .tenants import check_scope, check_tenant_budget

    check_learn(learn)
    if learn != "off" and not n_draft:
        raise InputError(f"--learn {learn} learns what drafting uses: it needs --draft 1 or more")
    if learn == "history" and policy != "lookupkit":
        raise InputError("--learn history is drafted from by --policy lookupkit only (llama.cpp's rule has no such "
                         "source; --learn dynamic learns into its dynamic cache)")
    if learn != "history" and (budget is not None or state is not None or reset or save_every is not None
                               or scope != "tenant" or tenant_budget is not None):
        raise InputError("--history-budget, --state, --state-reset, --save-every, --learn-scope and --tenant-budget "
                         "apply to --learn history only")
    check_scope(scope)
    if scope == "global" and tenant_budget is not None:
        raise InputError("--tenant-budget applies to --learn-scope tenant only (global keeps one History)")
    if budget is not None:
        check_budget(budget, "--history-budget")
    if tenant_budget is not None:  # (against the budget in use: a --state file's unless --history-budget is given)
        check_tenant_budget(tenant_budget, HISTORY_BUDGET_MAX if budget is None else budget)
    if state is None and (reset or save_every is not None):
        raise InputError("--state-reset and --save-every apply to a --state FILE only")
    if save_every is not None and (isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 0):
        raise InputError(f"--save-every must be 0 (at shutdown only) or more requests, got {save_every!r}")


def _check(n_draft, n_ctx, threads, parallel, queue) -> None:
    if isinstance(n_draft, bool) or not isinstance(n_draft, int) or not 0 <= n_draft <= MAX_DRAFT:
        raise InputError(f"--draft must be between 0 (no drafting) and {MAX_DRAFT}, got {n_draft!r}")
    if not isinstance(parallel, int) or not 1 <= parallel <= PARALLEL_MAX:
        raise InputError(f"--parallel must be between 1 and {PARALLEL_MAX}, got {parallel!r}")
    if not isinstance(n_ctx, int) or n_ctx < CTX_MIN * parallel:
        raise InputError(f"-c must be at least {CTX_MIN} per slot ({CTX_MIN * parallel} for --parallel {parallel}), "
                         f"got {n_ctx!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise InputError(f"--threads must be at least 1, got {threads!r}")
    if not isinstance(queue, int) or queue < 0:
        raise InputError(f"--queue must be 0 or more, got {queue!r}")


CTX_MIN = 16  # tokens per slot: -c below this cannot hold a prompt and an answer
