"""Replaying a request log (replay.requests, `lookupkit replay-requests`) counts what `lookupkit serve`
counts: the same drafted and accepted tokens per request as the server's own timings, with the learnt state
carried across requests (history, dynamic) or not (off); and a bad log is one line."""

from __future__ import annotations

import json

import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

from lookupkit.bench.serve import client  # noqa: E402
from lookupkit.cli.common import EXIT_ERROR  # noqa: E402
from lookupkit.draft.history import History  # noqa: E402
from lookupkit.errors import InputError  # noqa: E402
from lookupkit.integrations.engines import drafter_factory  # noqa: E402
from lookupkit.replay.requests import read_log, replay_requests, summary  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import running  # noqa: E402
from tiny_models import tiny_gguf  # noqa: E402,F401

N_DRAFT, N_NEW = 8, 40


def cli(*args):
    from typer.testing import CliRunner

    from lookupkit.cli.main import app

    return CliRunner().invoke(app, ["replay-requests", *map(str, args)])


@pytest.fixture(scope="module")
def prompts(tiny_gguf):
    llm = llama_cpp.Llama(model_path=str(tiny_gguf), vocab_only=True, verbose=False)
    texts = ["The quick brown fox", "def add(a, b):\n    return a + b\n", "The quick brown fox", "Once upon a time"]
    return [llm.tokenize(t.encode(), add_bos=True) for t in texts]


@pytest.mark.parametrize("learn", ["off", "dynamic", "history"])
def test_the_replay_counts_what_the_server_counted(tiny_gguf, prompts, learn, tmp_path):
    policy = "llama.cpp" if learn == "dynamic" else "lookupkit"
    served = open_server(tiny_gguf, policy=policy, n_draft=N_DRAFT, parallel=1, n_ctx=1024, threads=1, learn=learn)
    try:
        with running(served) as url:
            port = int(url.rsplit(":", 1)[1])
            got = [client.complete(port, p, N_NEW) for p in prompts]
    finally:
        served.llm.close()
    log = tmp_path / "served.jsonl"
    log.write_text("".join(json.dumps({"prompt": p, "response": g["tokens"]}) + "\n" for p, g in zip(prompts, got)))
    history = History(1 << 16) if learn == "history" else None
    make, _ = drafter_factory(tiny_gguf, policy=policy, history=history)
    traces = replay_requests(read_log(log), make(), N_DRAFT, learn, n_ctx=1024)
    assert [(sum(t.drafted), sum(t.accepted)) for t in traces] == [(g["drafted"] or 0, g["accepted"] or 0) for g in got]
    if learn == "history":  # the repeated request is drafted from what the first one taught
        assert traces[2].accepted and sum(traces[2].accepted) > sum(traces[0].accepted)


def test_the_command_compares_learning_with_learning_nothing(tiny_gguf, prompts, tmp_path):
    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, verbose=False)
    from lookupkit.integrations.llama_generate import generate

    log = tmp_path / "served.jsonl"
    log.write_text("".join(json.dumps({"prompt": p, "response": generate(llm, p, N_NEW, stop_at_eos=False).tokens})
                           + "\n" for p in prompts))
    llm.close()
    out = cli(log, "-m", tiny_gguf, "--policy", "lookupkit", "--verify-cost", "0.1", "--json")
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)["results"]
    assert set(res) == {"off", "history"} and res["off"]["requests"] == 4
    assert res["history"]["accepted"] > res["off"]["accepted"]
    assert res["history"]["predicted_speedup"] > res["off"]["predicted_speedup"]
    text = cli(log, "-m", tiny_gguf, "--policy", "lookupkit", "--verify-cost", "0.1")
    assert "--learn history" in text.stdout and "the speed of learning nothing" in text.stdout
    two = cli(log, "-m", tiny_gguf, "--policy", "lookupkit", "--verify-cost", "0.1", "--parallel", "2", "--json")
    agg = json.loads(two.stdout)["results"]["off"]["aggregate"]
    assert agg["plain_steps"] < sum(len(r) for r in map(json.loads, log.read_text().splitlines()) for r in [r["response"]])
    assert agg["predicted_speedup"] == pytest.approx(agg["plain_cost"] / agg["cost"])
    unpriced = cli(log, "-m", tiny_gguf, "--parallel", "2")
    assert unpriced.exit_code == EXIT_ERROR and "--verify-cost" in unpriced.output
    bad = cli(log, "-m", tiny_gguf, "--learn", "history")
    assert bad.exit_code == EXIT_ERROR and "--policy lookupkit" in bad.output and "Traceback" not in bad.output


@pytest.mark.parametrize("content,fragment", [
    ("", "holds no requests"),
    ("not json\n", ":1 is not a request"),
    ('{"prompt": [1, 2]}\n', ":1 is not a request"),
    ('{"prompt": [1, 2], "response": []}\n', "response must be a non-empty list"),
    ('{"prompt": [1, -2], "response": [3]}\n', "prompt must be a non-empty list"),
    ('{"prompt": [1, 2], "response": [3, 999999]}\n', "outside the vocabulary"),
    ('{"prompt": [1, 2], "response": [3, 4], "max_tokens": 1}\n', ":1: max_tokens must be an integer no smaller"),
    ('{"prompt": [1, 2], "response": [3, 4], "max_tokens": "8"}\n', ":1: max_tokens must be an integer"),
])
def test_a_bad_log_is_one_line_naming_the_line(tmp_path, content, fragment):
    log = tmp_path / "log.jsonl"
    log.write_text(content)
    with pytest.raises(InputError, match=fragment):
        read_log(log, n_vocab=1000)
    with pytest.raises(InputError, match="does not exist"):
        read_log(tmp_path / "missing.jsonl")


def test_summary_prices_the_steps_with_the_curve():
    from lookupkit.replay.requests import RequestTrace
    from lookupkit.verify_cost import VerifyCost

    t = RequestTrace(10, 9, drafted=[4, 0, 4], accepted=[4, 0, 2])  # 8 tokens after the first in 3 steps
    cost = VerifyCost(constant=0.25)  # a step of 4 drafted costs 2
    assert t.predicted_speedup(cost) == pytest.approx(8 / (2 + 1 + 2))
    s = summary([t], cost)
    assert (s["calls"], s["drafted"], s["accepted"], s["tokens"]) == (3, 8, 6, 8)


def test_a_draft_ends_where_the_budget_or_the_context_does(tmp_path):
    """The server's rules.draft_room, by hand: a step emits what it accepts and one more token, so at 200 of 256
    tokens 55 more may be drafted, the last token none; a context of 250 around a 20-token prompt leaves
    250 - 20 - 200 = 30 cells, one of them for the token the step emits; a log line's max_tokens is the budget
    (else the response's length)."""
    from lookupkit.replay.requests import room

    prompt, response = [1] * 20, [2] * 256
    assert room(64, None, (prompt, response, 256), 200) == 55
    assert room(16, None, (prompt, response, 256), 200) == 16
    assert room(64, None, (prompt, response, 256), 255) == 0
    assert room(64, 300, (prompt, response, 256), 200) == 55  # the budget is nearer than the context's end
    assert room(64, 250, (prompt, response, 256), 200) == 29
    assert room(64, None, (prompt, response, 300), 200) == 64 and room(64, None, (prompt, response, 300), 250) == 49
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"prompt": [1, 2], "response": [3, 4, 5], **extra}) + "\n"
                           for extra in ({"max_tokens": 16}, {}, {"max_tokens": None}, {"max_tokens": -1})))
    assert read_log(log) == [([1, 2], [3, 4, 5], 16)] + [([1, 2], [3, 4, 5], 3)] * 3  # null, -1: no limit set


def test_a_plain_schedule_of_several_clients_is_counted_by_hand():
    """Responses of 3, 1 and 2 tokens after their first, 2 at a time, a step of n rows costing 1 + 0.5 (n - 1):
    [3, 1] then [2, 2 (the third joins as the second ends)] then [1, 1]: 3 steps of 2 rows, 4.5."""
    from lookupkit.replay.requests import plain_schedule
    from lookupkit.verify_cost import VerifyCost

    assert plain_schedule([3, 1, 2], 2, VerifyCost(constant=0.5)) == (pytest.approx(4.5), 3)
    assert plain_schedule([3, 1, 2], 1, VerifyCost(constant=0.5)) == (pytest.approx(6.0), 6)
    assert plain_schedule([0, 2], 4, VerifyCost(constant=0.5)) == (pytest.approx(2.0), 2)


def test_the_parallel_replay_of_one_client_is_the_replay_and_of_four_prices_each_step(tiny_gguf, prompts):
    """One client: the same drafts as the one-slot replay (a step of one slot is priced by the curve alone). Four:
    every request is replayed once, in the log's order, and with extra rows priced far above what they could
    yield beside other slots (and nearly free for one), drafts are made only once the others have ended."""
    from lookupkit.replay.requests import replay_parallel
    from lookupkit.verify_cost import VerifyCost

    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, verbose=False)
    from lookupkit.integrations.llama_generate import generate

    reqs = [(p, generate(llm, p, N_NEW, stop_at_eos=False).tokens) for p in prompts]
    llm.close()
    cheap = VerifyCost(constant=0.05)
    make, _ = drafter_factory(tiny_gguf, policy="lookupkit", verify_cost=cheap)
    one = replay_requests(reqs, make(), N_DRAFT, "off", n_ctx=1024)
    alone, steps = replay_parallel(reqs, make, N_DRAFT, "off", cheap, 1, n_ctx=1024)
    assert [(t.drafted, t.accepted) for t in alone] == [(t.drafted, t.accepted) for t in one]
    assert sum(map(sum, (t.accepted for t in one))) > 0 and steps["plain_cost"] > steps["cost"]
    dear = VerifyCost(curve={0: 1.0, 1: 1.05, 2: 1.1}, batch={n: ([n, n + 1, n + 64], [n, 1000.0, 2000.0])
                                                             for n in range(2, 5)})
    four, steps = replay_parallel(reqs, make, 2, "off", dear, 4, n_ctx=1024)
    assert [t.n_response for t in four] == [len(r) for _, r in reqs]
    assert sum(map(sum, (t.drafted for t in four))) < sum(map(sum, (t.drafted for t in one)))
    with pytest.raises(InputError, match="--parallel"):
        replay_parallel(reqs, make, 2, "off", dear, 0)


def test_the_parallel_replay_holds_each_slot_to_the_floor_it_settles(tiny_gguf, prompts, monkeypatch):
    """Two clients at a constant cost (a draft beside an undrafting slot is a second pass): a floor near plain pace
    drafts less than none, and every step settles each slot still serving with the tokens it emitted (a request's
    last step ends it: not settled)."""
    from lookupkit.integrations.llama_generate import generate
    from lookupkit.replay.requests import replay_parallel
    from lookupkit.verify_cost import StepPricer, VerifyCost

    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, verbose=False)
    reqs = [(p, generate(llm, p, N_NEW, stop_at_eos=False).tokens) for p in prompts]
    llm.close()
    cost = VerifyCost(constant=0.1)
    make, _ = drafter_factory(tiny_gguf, policy="lookupkit", verify_cost=cost)
    settled, settle = [], StepPricer.settle
    monkeypatch.setattr(StepPricer, "settle", lambda self, got: (settled.append(dict(got)), settle(self, got)))

    def replay(floor):
        monkeypatch.setattr(StepPricer, "FLOOR", floor)
        settled.clear()
        traces, _ = replay_parallel(reqs, make, N_DRAFT, "off", cost, 2, n_ctx=1024)
        assert [t.n_response for t in traces] == [len(r) for _, r in reqs]
        return traces

    free, held = replay(0.0), replay(0.95)
    assert sum(map(sum, (t.drafted for t in free))) > sum(map(sum, (t.drafted for t in held)))
    assert sum(sum(got.values()) for got in settled) == sum(sum(a + 1 for a in t.accepted[:-1]) for t in held)
