"""A server's settings, checked once: every `lookupkit serve` flag as one frozen ServeConfig.

The command line, `open_server` and the tests all make one; a value out of range, or a flag that does not apply
with the others, is refused here, in one line naming the flag, before anything is opened. Each limit is named
once (rules, or below).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import InputError
from ..rules import DEFAULT_CTX, ENGINE_DRAFT, HISTORY_BUDGET_MAX, MAX_DRAFT, PARALLEL_MAX

CTX_MIN = 16  # tokens per slot: -c below this cannot hold a prompt and an answer
QUEUE = 32  # requests that may wait behind busy slots (--queue's default)
HOST, PORT, PORT_MAX = "127.0.0.1", 8080, 65535
SHUTDOWN_S = 10.0  # after SIGTERM, seconds requests in flight may take to finish (--shutdown-timeout's default)


@dataclass(frozen=True)
class ServeConfig:
    """model: a GGUF path or a lookupkit.models name; n_draft 0 serves without drafting (the plain baseline);
    learn, history_budget, state, state_reset, save_every, learn_scope, tenant_budget: serve.state, serve.tenants
    and the engine's docstring; api_keys and the lines of api_key_file: the keys let in; alias: the model's name
    in responses (llama-server's --alias); chat_template, chat_template_file, jinja: serve.chat; host, port,
    shutdown_timeout: the command's listening socket and how long requests may finish after SIGTERM."""

    model: str | Path
    lcs: Path | None = None
    lcd: Path | None = None
    policy: str = "llama.cpp"
    policy_table: Path | None = None
    verify_cost: object = None  # a number, a calibration file or a VerifyCost (verify_cost.VerifyCost.of)
    n_draft: int = ENGINE_DRAFT
    n_ctx: int = DEFAULT_CTX
    threads: int | None = None
    parallel: int = 1
    queue: int = QUEUE
    learn: str = "off"
    history_budget: int | None = None
    state: Path | None = None
    state_reset: bool = False
    save_every: int | None = None
    learn_scope: str = "tenant"
    tenant_budget: int | None = None
    api_keys: tuple = ()
    api_key_file: Path | None = None
    alias: str | None = None
    chat_template: str | None = None
    chat_template_file: Path | None = None
    jinja: bool = True
    host: str = HOST
    port: int = PORT
    shutdown_timeout: float = SHUTDOWN_S

    def __post_init__(self):
        object.__setattr__(self, "api_keys", tuple(self.api_keys))
        _check_sizes(self)
        _check_learning(self)
        if self.alias is not None and not self.alias.strip():
            raise InputError("--alias is empty: give the name clients should see")
        if not (isinstance(self.port, int) and 0 <= self.port <= PORT_MAX):
            raise InputError(f"--port must be between 0 and {PORT_MAX}, got {self.port!r}")
        if not (isinstance(self.shutdown_timeout, (int, float)) and self.shutdown_timeout >= 0):
            raise InputError(f"--shutdown-timeout must be 0 or more seconds, got {self.shutdown_timeout!r}")
        if not self.n_draft and (self.lcs is not None or self.lcd is not None):
            raise InputError("--draft 0 serves without drafting: leave out -lcs/-lcd, or give --draft 1 or more")

    @classmethod
    def of(cls, model, **settings) -> "ServeConfig":
        """A config from keyword settings (open_server's); an unknown keyword is one InputError, not a TypeError."""
        known = {f.name for f in fields(cls)} - {"model"}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise InputError(f"unknown server setting {unknown[0]!r} (settings: {', '.join(sorted(known))})")
        return cls(model=model, **settings)


def _check_sizes(c: ServeConfig) -> None:
    if isinstance(c.n_draft, bool) or not isinstance(c.n_draft, int) or not 0 <= c.n_draft <= MAX_DRAFT:
        raise InputError(f"--draft must be between 0 (no drafting) and {MAX_DRAFT}, got {c.n_draft!r}")
    if isinstance(c.parallel, bool) or not isinstance(c.parallel, int) or not 1 <= c.parallel <= PARALLEL_MAX:
        raise InputError(f"--parallel must be between 1 and {PARALLEL_MAX}, got {c.parallel!r}")
    if isinstance(c.n_ctx, bool) or not isinstance(c.n_ctx, int) or c.n_ctx < CTX_MIN * c.parallel:
        raise InputError(f"-c must be at least {CTX_MIN} per slot ({CTX_MIN * c.parallel} for --parallel "
                         f"{c.parallel}), got {c.n_ctx!r}")
    if c.threads is not None and (isinstance(c.threads, bool) or not isinstance(c.threads, int) or c.threads < 1):
        raise InputError(f"--threads must be at least 1, got {c.threads!r}")
    if isinstance(c.queue, bool) or not isinstance(c.queue, int) or c.queue < 0:
        raise InputError(f"--queue must be 0 or more, got {c.queue!r}")


def _check_learning(c: ServeConfig) -> None:
    from ..draft.history import check_budget
    from ..draft.learning import check_learn
    from .tenants import check_scope, check_tenant_budget

    check_learn(c.learn)
    if c.learn != "off" and not c.n_draft:
        raise InputError(f"--learn {c.learn} learns what drafting uses: it needs --draft 1 or more")
    if c.learn == "history" and c.policy != "lookupkit":
        raise InputError("--learn history is drafted from by --policy lookupkit only (llama.cpp's rule has no such "
                         "source; --learn dynamic learns into its dynamic cache)")
    if c.learn != "history" and (c.history_budget is not None or c.state is not None or c.state_reset
                                 or c.save_every is not None or c.learn_scope != "tenant"
                                 or c.tenant_budget is not None):
        raise InputError("--history-budget, --state, --state-reset, --save-every, --learn-scope and --tenant-budget "
                         "apply to --learn history only")
    check_scope(c.learn_scope)
    if c.learn_scope == "global" and c.tenant_budget is not None:
        raise InputError("--tenant-budget applies to --learn-scope tenant only (global keeps one History)")
    if c.history_budget is not None:
        check_budget(c.history_budget, "--history-budget")
    if c.tenant_budget is not None:  # (against the budget in use: a --state file's unless --history-budget is given)
        check_tenant_budget(c.tenant_budget, HISTORY_BUDGET_MAX if c.history_budget is None else c.history_budget)
    if c.state is None and (c.state_reset or c.save_every is not None):
        raise InputError("--state-reset and --save-every apply to a --state FILE only")
    if c.save_every is not None and (isinstance(c.save_every, bool) or not isinstance(c.save_every, int)
                                     or c.save_every < 0):
        raise InputError(f"--save-every must be 0 (at shutdown only) or more requests, got {c.save_every!r}")
