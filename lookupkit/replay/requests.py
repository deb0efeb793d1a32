"""Replay a log of served requests with what a server learns carried from one request to the next.

"Would learning pay on my traffic?" A server's slot drafts for each request as `lookupkit serve` does:
the first token comes from the prompt, then every step drafts up to n_draft tokens, keeps the prefix the
response agrees with (what greedy verification accepts) and one more token, until the response's length;
at the request's end the slot learns the request as --learn says (serve.engine: off, dynamic, history).
No draft runs past the request's budget (rules.draft_room): a log line's "max_tokens", else the response's
length (exact for a response its budget stopped, as the serving bench's all are; a server drafts further near the
end of one that an end token or a stop word cut short). Drafted and accepted counts therefore equal the server's
own `draft_n` / `draft_n_accepted` for the same responses (tests/test_replay_requests.py holds them equal); a
verify-cost curve turns them into the decode-time speed-up the server should see.

A log is JSON Lines, one request per line: {"prompt": [ids], "response": [ids]}, optionally "max_tokens" (other
keys ignored), as the serving bench and any client that records `tokens` write it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..rules import draft_room
from ..verify_cost import VerifyCost

LOG_HINT = 'one JSON object per line: {"prompt": [token ids], "response": [token ids], optionally "max_tokens": n}'


@dataclass
class RequestTrace:
    n_prompt: int
    n_response: int
    drafted: list  # per verify step: tokens drafted
    accepted: list  # per verify step: drafted tokens the response agrees with (in the output)

    def predicted_speedup(self, cost: VerifyCost) -> float | None:
        """Decode-time speed-up over plain decoding: the response's tokens after the first (which comes from
        the prompt's evaluation, drafted or not) over the verify steps' cost in single-token steps."""
        if not self.drafted:
            return None
        return (self.n_response - 1) / float(cost.call_costs(np.asarray(self.drafted)).sum())


def read_log(path: str | Path, n_vocab: int | None = None) -> list[tuple[list[int], list[int], int]]:
    """The (prompt, response, max_tokens) of each request of a log (max_tokens: the response's length where the
    line has none); one line naming the line and the remedy otherwise."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"request log {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read request log {path}: {exc} ({LOG_HINT})") from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            pair = [rec["prompt"], rec["response"]]
        except (json.JSONDecodeError, TypeError, KeyError):
            raise InputError(f"{path}:{i} is not a request ({LOG_HINT})") from None
        for name, ids in zip(("prompt", "response"), pair):
            if not isinstance(ids, list) or not ids or not all(type(t) is int and t >= 0 for t in ids):
                raise InputError(f"{path}:{i}: {name} must be a non-empty list of token ids ({LOG_HINT})")
            if n_vocab is not None and max(ids) >= n_vocab:
                raise InputError(f"{path}:{i}: {name} holds id {max(ids)}, outside the vocabulary of {n_vocab}: "
                                 "a log of another model?")
        budget = rec.get("max_tokens")
        budget = len(pair[1]) if budget is None or budget == -1 else budget  # null / -1: no limit was set
        if type(budget) is not int or budget < len(pair[1]):
            raise InputError(f"{path}:{i}: max_tokens must be an integer no smaller than the response's "
                             f"{len(pair[1])} tokens, got {budget!r} (or leave it out: the response's length "
                             "stands for it)")
        out.append((pair[0], pair[1], budget))
    if not out:
        raise InputError(f"request log {path} holds no requests ({LOG_HINT})")
    return out


def with_budgets(requests) -> list[tuple]:
    """(prompt, response, max_tokens) of each request, (prompt, response) taking the response's length."""
    return [(r[0], r[1], r[2] if len(r) > 2 else len(r[1])) for r in requests]


def room(n_draft: int, n_ctx: int | None, request: tuple, pos: int) -> int:
    """The longest draft the server makes `pos` tokens into a request (prompt, response, max_tokens): n_draft, or
    less near the end of its budget or of the slot's context (none: unbounded)."""
    prompt, _, budget = request
    return min(n_draft, draft_room(budget, len(prompt) + budget if n_ctx is None else n_ctx, len(prompt), pos))


def replay_requests(requests, drafter, n_draft: int, learn: str, n_ctx: int | None = None) -> list[RequestTrace]:
    """Replay `requests` [(prompt, response[, max_tokens])] in order through one slot's `drafter` (a Drafter, with a
    History if learn == "history"), learning each as `lookupkit serve --learn LEARN` does; n_ctx: the
    slot's context (drafts near its end are shortened as the server shortens them)."""
    from ..draft.learning import end_sequence

    traces = []
    for request in with_budgets(requests):
        prompt, response, _ = request
        drafter.accept(prompt)  # as the server's slot: the prompt, then the token its evaluation gives
        drafter.accept(response[:1])
        pos, drafted, accepted = 1, [], []
        while pos < len(response):
            k = room(n_draft, n_ctx, request, pos)
            d = drafter.draft(None, k) if k > 0 else []
            a = 0
            while a < len(d) and pos + a < len(response) and d[a] == response[pos + a]:
                a += 1
            step = response[pos:pos + a + 1]
            drafter.accept(step)
            pos += len(step)
            drafted.append(len(d))
            accepted.append(a)
        traces.append(RequestTrace(len(prompt), len(response), drafted, accepted))
        end_sequence(drafter, learn)
    return traces


def replay_parallel(requests, make_drafter, n_draft: int, learn: str, cost: VerifyCost, parallel: int,
                    n_ctx: int | None = None) -> tuple[list[RequestTrace], dict]:
    """Replay `requests` as `parallel` clients send them to a server: that many in flight at once, each in its own
    slot (a Drafter from make_drafter(), learning at its end as --learn says), every step drafting for each busy
    slot as the engine does (verify_cost.StepPricer's plan and floor) and costing the step's passes as it does; a
    log has no prompt timings, so its prompts take no step here (the engine drafts nothing while it feeds one).
    Returns the traces (in the log's order) and {"cost": the steps' cost, "plain_cost": the same schedule's steps
    without drafts, "steps", "plain_steps"}: plain_cost / cost is the aggregate decode speed-up predicted."""
    from collections import deque

    from ..draft.learning import end_sequence
    from ..verify_cost import StepPricer

    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise InputError(f"--parallel must be 1 or more, got {parallel!r}")
    pricer = StepPricer(cost)
    waiting = deque(enumerate(with_budgets(requests)))
    slots: list = [None] * parallel
    drafters = [make_drafter() for _ in range(parallel)]
    traces: dict = {}
    spent, steps = 0.0, 0
    while waiting or any(slots):
        for i in range(parallel):
            while slots[i] is None and waiting:
                idx, (prompt, response, budget) = waiting.popleft()
                drafters[i].accept(prompt)
                drafters[i].accept(response[:1])
                if len(response) > 1:
                    slots[i] = [idx, (prompt, response, budget), 1, [], []]
                else:  # its first token, from the prompt, ends it: no verify step
                    traces[idx] = RequestTrace(len(prompt), len(response), [], [])
                    end_sequence(drafters[i], learn)
        live = [i for i in range(parallel) if slots[i] is not None]
        if not live:
            continue
        drafts = pricer.drafts([(i, drafters[i], room(n_draft, n_ctx, slots[i][1], slots[i][2])) for i in live])
        for i in live:
            idx, (prompt, response, _), pos, drafted, accepted = slots[i]
            d = drafts[i]
            a = 0
            while a < len(d) and pos + a < len(response) and d[a] == response[pos + a]:
                a += 1
            drafters[i].accept(response[pos:pos + a + 1])
            slots[i][2] = pos + a + 1
            drafted.append(len(d))
            accepted.append(a)
        spent += pricer.cost_of_step()
        steps += 1
        for i in live:
            idx, (prompt, response, _), pos, drafted, accepted = slots[i]
            if pos >= len(response):
                traces[idx] = RequestTrace(len(prompt), len(response), drafted, accepted)
                end_sequence(drafters[i], learn)
                slots[i] = None
        pricer.settle({i: slots[i][4][-1] + 1 for i in live if slots[i] is not None})
    plain, plain_steps = plain_schedule([len(r[1]) - 1 for r in requests], parallel, cost)
    return [traces[i] for i in range(len(requests))], {"cost": spent, "steps": steps, "plain_cost": plain,
                                                       "plain_steps": plain_steps}


def plain_schedule(lengths: list[int], parallel: int, cost: VerifyCost) -> tuple[float, int]:
    """(cost, steps) of decoding responses of `lengths` tokens after their first, `parallel` at a time, one token
    per busy slot per step."""
    waiting, left, spent, steps = list(lengths), [], 0.0, 0
    while waiting or left:
        left = [n for n in left if n > 0]
        while waiting and len(left) < parallel:
            left.append(waiting.pop(0))
        left = [n for n in left if n > 0]  # (one with nothing after its first token ends at once)
        if not left:
            continue
        spent += cost.step(len(left), len(left))
        steps += 1
        left = [n - 1 for n in left]
    return spent, steps


def predicted(result: dict) -> float | None:
    """The decode speed-up a replay-requests result predicts: the aggregate over its clients (--parallel), else
    its one slot's."""
    return result["aggregate"]["predicted_speedup"] if "aggregate" in result else result.get("predicted_speedup")


def summary(traces: list[RequestTrace], cost: VerifyCost | None) -> dict:
    drafted = [d for t in traces for d in t.drafted]
    accepted = [a for t in traces for a in t.accepted]
    tokens = sum(t.n_response - 1 for t in traces)
    out = {"requests": len(traces), "tokens": tokens, "calls": len(drafted), "drafted": int(sum(drafted)),
           "accepted": int(sum(accepted))}
    if cost is not None and drafted:
        out["predicted_speedup"] = tokens / float(cost.call_costs(np.asarray(drafted)).sum())
    return out
