"""Conversations through the serving bench's client: a session's turns, and N sessions at once (issue 30).

A session is tasks.session_plan()'s requests: turn 1 sends the first part, each later turn the previous
prompt + the server's answer + the next part, and one turn is re-sent verbatim (a retry). The agent task
sends them with `cache_prompt` false (issue 23's procedure); the `sessions` part with the prompt cache on,
as a chat client does, so a turn may decode only what the slot's cache lacks (`cache_n` reused, `prompt_n`
decoded). At N clients, N different sessions run at once (client.pool), each one's turns in order, on a
server with run.SLOTS slots at every client count: 1 and 4 clients differ only in the load.

Per request the record holds the turn, the retry flag, the client count, TTFT, n_gen, wall_s (prompt
included) and t_gen_s (decoding), the prompt's length, cache_n, prompt_n and drafted/accepted; the report
derives wall tok/s (n_gen / wall_s) and decode tok/s ((n_gen - 1) / t_gen_s) from them.
"""

from __future__ import annotations

from lookupkit.bench.serve import client
from lookupkit.bench.serve.tasks import AGENT_TURNS, chosen_paragraphs, prose_sessions, session_plan, sessions

CTX_STEP = 256  # a slot's context: the longest session rounded up to this


def run_session(port: int, one: dict, n_new: int, cache_prompt: bool = False) -> list[dict]:
    """One session on one server: each request is the previous request's prompt, the server's response to it
    and the next user message; a retry re-sends the previous request verbatim."""
    recs, prompt = [], None
    for turn, retry in session_plan():
        if turn == 1:
            prompt = list(one["start"])
        elif not retry:
            prompt = prompt + recs[-1]["tokens"] + one["messages"][turn - 2]
        rec = client.complete(port, prompt, n_new, cache_prompt)
        rec.update(turn=turn, retry=retry, n_prompt=len(prompt), prompt_ids=prompt)
        recs.append(rec)
    return recs


def conversations(port: int, sess: list[dict], n_new: int, clients: int) -> dict:
    """Every session once, `clients` of them at once, with the prompt cache: aggregate tokens/s = all tokens /
    the wall time from the first request to the last answer (client.concurrent's record, per request more)."""
    done, wall = client.pool(sess, clients, lambda one: run_session(port, one, n_new, cache_prompt=True))
    runs = []
    for i, recs in enumerate(done):
        for k, rec in enumerate(recs):
            del rec["prompt_ids"]  # the results hold the sessions; a turn's prompt follows from them and the tokens
            runs.append({**rec, "session": i, "prompt": f"{i}.{k}", "clients": clients})
    total = sum(r["n_gen"] for r in runs)
    return {"clients": clients, "requests": len(runs), "tokens": total, "wall_s": wall, "tok_per_s": total / wall,
            "runs": runs}


def slot_ctx(sess: list[dict], n_new: int) -> int:
    """The context a slot needs for the longest session's last turn (prompt and answer), rounded up."""
    need = max(len(one["start"]) + sum(map(len, one["messages"])) for one in sess) + AGENT_TURNS * n_new
    return -(-need // CTX_STEP) * CTX_STEP


def session_sets(args, tokenize, bos: int) -> dict:
    """The sessions of each --session-tasks task: code as the agent task's, prose from the paragraphs no prose
    or copy prompt (--prompts, + --concurrency-prompts) uses."""
    out = {}
    for task in args.session_tasks:
        if task == "code":
            out[task] = sessions(args.sessions, args.seed, bos, args.code, args.n_new, args.prompts)
        else:
            used = {p for n in (args.prompts, args.prompts + args.concurrency_prompts)
                    for p in chosen_paragraphs(n, args.seed)}
            out[task] = prose_sessions(args.sessions, args.seed, tokenize, used)
    return out
