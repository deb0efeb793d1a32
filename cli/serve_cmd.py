"""`lookupkit serve`: an OpenAI-compatible server (and llama-server's /completion) that drafts with
lookupkit, its caches opened once at start-up (lookupkit.serve.startup) and shared by every slot.

Start-up prints what it opened and how long each part took, then `listening on http://HOST:PORT`
(--port 0: a free port, printed). SIGTERM (or Ctrl-C) stops accepting connections, lets requests in
flight finish for up to --shutdown-timeout seconds, aborts the rest, saves the history (--state) and
exits 0 (Ctrl-C: 130). SIGHUP opens the -lcs file again and drafts from it from each slot's next request
(replace the file by a rename; one that fails its checks is refused in the log and the old one kept).
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from lookupkit.errors import InputError, LookupkitError
from lookupkit.rules import ENGINE_DRAFT, HISTORY_BUDGET, HISTORY_TENANTS, LEARN_SCOPES, MAX_DRAFT, DEFAULT_CTX
from lookupkit.cli.common import guarded
from lookupkit.cli.model_options import (LCD, LCS, MODEL, POLICY, POLICY_TABLE, THREADS, VERIFY_COST, LearnMode,
                                         PolicyName)
from lookupkit.serve.chat import LEGACY
from lookupkit.serve.config import HOST, PORT, QUEUE, SHUTDOWN_S, ServeConfig
from lookupkit.serve.state import SAVE_EVERY



EXAMPLES = """Examples:

\b
  lookupkit serve -m gemma-3-270m                                   # http://127.0.0.1:8080/v1, drafting from the context
  lookupkit serve -m gemma-3-270m -lcs gemma-wiki100.lkc --policy lookupkit --verify-cost gemma.curve.json
  lookupkit serve -m model.gguf --parallel 4 -c 8192 --port 0       # 4 slots of 2048 tokens, any free port
  lookupkit serve -m gemma-3-270m --draft 0                         # no drafting: the plain baseline
  lookupkit serve -m gemma-3-270m --no-jinja --chat-template gemma   # chat in Gemma's turns (default: ChatML)
  lookupkit serve -m gemma-3-270m --policy lookupkit --learn history --state served.lkh   # learns, kept across restarts
  lookupkit serve -m gemma-3-270m --policy lookupkit --learn history --api-key-file keys.txt  # each key learns apart

Then point any OpenAI client at http://HOST:PORT/v1 (any api_key unless --api-key is given), or llama-server's
clients at /completion.
Needs pip install 'lookupkit[serve,llama]'.
"""


@guarded
def serve_cmd(
    model: str = MODEL,
    lcs: Optional[Path] = LCS,
    lcd: Optional[Path] = LCD,
    policy: PolicyName = POLICY,
    policy_table: Optional[Path] = POLICY_TABLE,
    verify_cost: Optional[str] = VERIFY_COST,
    n_draft: int = typer.Option(ENGINE_DRAFT, "--draft", help=f"Most tokens drafted per call (0..{MAX_DRAFT}; "
                                "0: no drafting, the plain baseline)."),
    n_ctx: int = typer.Option(DEFAULT_CTX, "-c", "--ctx-size", help="Context size of all slots together (each gets "
                              "-c / --parallel, as llama-server's -np)."),
    threads: int = THREADS,
    parallel: int = typer.Option(1, "-np", "--parallel", help="Slots: requests generated at once, their drafts "
                                 "verified in one batch."),
    queue: int = typer.Option(QUEUE, "--queue", help="Requests that may wait for a slot; one more is refused with "
                              "503 and Retry-After."),
    host: str = typer.Option(HOST, "--host", help="Address to listen on."),
    port: int = typer.Option(PORT, "--port", help="Port to listen on (0: any free port, printed)."),
    shutdown_timeout: float = typer.Option(SHUTDOWN_S, "--shutdown-timeout", metavar="S", help="On SIGTERM, seconds "
                                           "requests in flight may take to finish before they are aborted."),
    learn: LearnMode = typer.Option(LearnMode.off, "--learn", help="What a finished request teaches later ones: off "
                                    "(nothing: no request's text reaches another's drafts), dynamic (each slot's "
                                    "dynamic cache, llama.cpp's rule), history (a history per tenant, --learn-scope, every slot "
                                    "drafts from; --policy lookupkit). Drafts are verified: outputs never change."),
    learn_scope: str = typer.Option("tenant", "--learn-scope", metavar="|".join(LEARN_SCOPES), help="--learn history: "
                                    "tenant (a request drafts only from what its tenant was served: its API key's, "
                                    "else its body's `user`'s, else the anonymous one's) or global (one history for "
                                    "every client: one client's text drafts another's)."),
    tenant_budget: Optional[int] = typer.Option(None, "--tenant-budget", metavar="N", help="--learn-scope tenant: "
                                                "tokens each tenant's history keeps; at most --history-budget / N "
                                                "tenants are kept, the least recently used dropped for a new one "
                                                f"(default: the --state file's, else --history-budget / "
                                                f"{HISTORY_TENANTS})."),
    api_key: list[str] = typer.Option([], "--api-key", metavar="KEY", help="Let in only requests with "
                                      "'Authorization: Bearer KEY' (repeatable; /health stays open); each key is a "
                                      "tenant."),
    api_key_file: Optional[Path] = typer.Option(None, "--api-key-file", metavar="FILE", help="As --api-key, one "
                                                "key per line of FILE."),
    history_budget: Optional[int] = typer.Option(None, "--history-budget", metavar="N", help="--learn history: "
                                                 f"tokens kept, the oldest evicted (default: the --state file's, "
                                                 f"else {HISTORY_BUDGET:,}; ~68 B each)."),
    state: Optional[Path] = typer.Option(None, "--state", metavar="FILE", help="--learn history: load the history "
                                         "from FILE (.lkh) at start-up if it exists, save it there atomically at "
                                         "shutdown and every --save-every requests."),
    save_every: Optional[int] = typer.Option(None, "--save-every", metavar="N", help=f"--state: save after every N "
                                             f"learnt requests (default {SAVE_EVERY}; 0: at shutdown only)."),
    state_reset: bool = typer.Option(False, "--state-reset", help="--state: start from an empty history, ignoring "
                                     "(and at the next save replacing) the FILE, e.g. one refused as corrupt."),
    alias: Optional[str] = typer.Option(None, "-a", "--alias", metavar="NAME", help="The model's name in /v1/models, "
                                        "/props and every response (default: the model's name or file name)."),
    chat_template: Optional[str] = typer.Option(None, "--chat-template", metavar="NAME|TEMPLATE", help="Chat's "
                                                "template instead of the GGUF's: a Jinja template's text, chatml, or, "
                                                f"with --no-jinja, a llama.cpp built-in format ({', '.join(LEGACY)}); "
                                                "as llama-server, Jinja renders another name as its own text (default: "
                                                "the GGUF's tokenizer.chat_template, else ChatML, as llama-server)."),
    chat_template_file: Optional[Path] = typer.Option(None, "--chat-template-file", metavar="FILE", help="As "
                                                      "--chat-template, the template read from FILE."),
    jinja: bool = typer.Option(True, "--jinja/--no-jinja", help="Render the template with Jinja (llama-server's "
                               "default), or as the llama.cpp built-in format it names or resembles."),
) -> None:
    """Serve the model over HTTP (OpenAI /v1 API and llama-server's /completion), drafting with lookupkit."""
    from lookupkit.integrations.engines import require

    require("uvicorn", "uvicorn", "serve")
    require("starlette", "starlette", "serve")
    from lookupkit.serve.app import make_app
    from lookupkit.serve.startup import open_server

    # every flag is checked here, once
    config = ServeConfig(model=model, lcs=lcs, lcd=lcd, policy=policy.value, policy_table=policy_table,
                         verify_cost=verify_cost, n_draft=n_draft, n_ctx=n_ctx, threads=threads, parallel=parallel,
                         queue=queue, learn=learn.value, history_budget=history_budget, state=state,
                         state_reset=state_reset, save_every=save_every, learn_scope=learn_scope,
                         tenant_budget=tenant_budget, api_keys=tuple(api_key), api_key_file=api_key_file, alias=alias,
                         chat_template=chat_template, chat_template_file=chat_template_file, jinja=jinja, host=host,
                         port=port, shutdown_timeout=shutdown_timeout)
    t0 = time.perf_counter()
    served = open_server(config)
    try:
        sock = _listen(host, port)
    except BaseException:
        served.life.close()
        raise
    for what, seconds, detail in served.loaded:
        typer.echo(f"  {what}: {_duration(seconds)}" + (f" ({detail})" if detail else ""))
    how = "no drafting" if not n_draft else f"--draft {n_draft}, --policy {policy.value}, --learn {learn.value}"
    how += f", {len(served.keys)} API key{'s' * (len(served.keys) != 1)}" if served.keys else ", no API key"
    typer.echo(f"lookupkit serve: {served.model_id}, {parallel} slot{'s' * (parallel > 1)} of {served.n_ctx_slot} "
               f"tokens, {how}; ready in {_duration(time.perf_counter() - t0)}")
    address = sock.getsockname()
    typer.echo(f"listening on http://{address[0]}:{address[1]} (OpenAI API at /v1; /completion, /health, "
               f"/metrics, /tokenize, /detokenize, /apply-template, /props, /slots)")
    sys.stdout.flush()
    _log_to_stderr()
    served.life.serve(sock, make_app(served), shutdown_timeout, FLUSH_S, lambda: _reload(served))
    if served.life.saved is not None:
        typer.echo(f"lookupkit serve: saved the histories to {state} ({served.life.saved})")
    typer.echo("lookupkit serve: stopped")


FLUSH_S = 2.0  # after --shutdown-timeout, what uvicorn gives aborted streams to send their last event


def _reload(served) -> None:
    """SIGHUP: the -lcs file opened again (replace it by a rename first); a bad file is one log line."""
    log = logging.getLogger("lookupkit.serve")
    try:
        log.warning("SIGHUP: %s", served.reload_static())
    except LookupkitError as exc:
        log.warning("SIGHUP: %s (the server drafts from the cache it had)", exc)


def _listen(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror} (give another --port; 0 picks a free "
                         f"one)") from None
    return sock


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _log_to_stderr() -> None:
    """The engine's warnings (a damaged cache's drafts, an engine failure) as lines on stderr."""
    logger = logging.getLogger("lookupkit.serve")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("lookupkit serve: %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def register(app: typer.Typer) -> None:
    app.command("serve", epilog=EXAMPLES)(serve_cmd)
