"""lookupkit drafting inside llama-cpp-python's real speculative loop, on a tiny random GGUF built here.

Greedy output with the draft model is plain greedy output; the draft model's counters are what
lookup-stats' loop predicts for the generated sequence (llama-cpp-python drafts first after the token
it samples from the prompt, so the replay starts one token after the prompt); threads share one mapping;
bad input is one line. Also `calibrate` on the same GGUF.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

import needs  # noqa: E402

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")

from lookupkit import StaticCache, Tokenizer  # noqa: E402
from lookupkit.errors import FormatError, InputError, VocabMismatchError  # noqa: E402
from lookupkit.integrations.engines import MissingExtraError  # noqa: E402
from lookupkit.integrations.session import WINDOW, DraftSession  # noqa: E402
from lookupkit.integrations.calibrate import calibrate  # noqa: E402
from lookupkit.verify_cost import VerifyCost, load_curve, save_curve, speedup  # noqa: E402
from lookupkit.integrations.llama_cpp import LookupDraftModel, load_llama  # noqa: E402
from lookupkit.rules import MAX_DRAFT  # noqa: E402
from lookupkit.replay import replay_generation  # noqa: E402
from tiny_models import (in_threads, README, foreign_static, learnt, static_from_text,  # noqa: E402,F401
                         tiny_gguf)

PROMPTS = ["Prompt lookup decoding drafts tokens from n-gram caches.", "def main():\n    return 0\n",
           "The static cache is opened with mmap, in microseconds."]
N_NEW = 120
N_CTX = 1024


def llama(path, draft=None) -> "llama_cpp.Llama":
    return llama_cpp.Llama(model_path=str(path), n_ctx=N_CTX, n_threads=1, n_threads_batch=1, seed=0,
                           verbose=False, draft_model=draft)


def generate(llm, prompt: list[int], n: int = N_NEW) -> list[int]:
    out = []
    for tok in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
        out.append(int(tok))
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def plain(tiny_gguf):
    """Prompt ids and plain greedy continuations, and a static cache built from README + the first one's text."""
    llm = llama(tiny_gguf)
    prompts = [llm.tokenize(p.encode()) for p in PROMPTS]
    outs = [generate(llm, p) for p in prompts]
    llm.close()
    return prompts, outs


@pytest.fixture(scope="module")
def static_path(plain, tmp_path_factory):
    text = README.read_text(encoding="utf-8") + Tokenizer.default().decode(plain[1][0])
    return static_from_text(text, tmp_path_factory.mktemp("llama-static") / "static.lkc")


@pytest.mark.parametrize("n_draft", [1, 5, 16])
def test_greedy_output_is_plain_and_counters_are_the_replays(tiny_gguf, plain, static_path, n_draft):
    prompts, outs = plain
    draft = LookupDraftModel(static=static_path, n_draft=n_draft)
    llm = llama(tiny_gguf, draft)
    draft.bind(llm)
    out = generate(llm, prompts[0])
    assert out == outs[0]
    seq = prompts[0] + out
    with StaticCache.open(static_path) as cache:
        rep = replay_generation(seq, len(prompts[0]) + 1, n_draft, static=cache)
        assert rep.n_accepted.sum() != replay_generation(seq, len(prompts[0]) + 1, n_draft).n_accepted.sum(), \
            "the static cache must change the drafts, or this test would not check that it is used"
    assert draft.n_calls == len(rep.n_drafted) > 0 and draft.n_drafted == rep.n_drafted.sum() > 0
    # the generator stopped at N_NEW tokens: the last draft's outcome is only known from the final tokens
    assert draft.n_accepted == rep.n_accepted[:-1].sum() and draft.stats()["pending"] == rep.n_drafted[-1]
    draft.finish(seq)
    s = draft.stats()
    assert (s["calls"], s["drafted"], s["accepted"]) == (len(rep.n_drafted), rep.n_drafted.sum(), rep.n_accepted.sum())
    assert (s["pending"], s["unresolved"], s["sequences"], s["full_checks"]) == (0, 0, 1, 0)


@pytest.mark.parametrize("cost", [0.0, 0.25])
def test_the_lookupkit_policy_in_the_engine_is_plain_greedy_and_its_replay(tiny_gguf, plain, static_path, cost):
    from lookupkit.policy.confidence import load as load_tables
    from lookupkit.policy.chain import make_policy

    prompts, outs = plain
    draft = LookupDraftModel(static=static_path, n_draft=8, policy="lookupkit", verify_cost=cost)
    llm = llama(tiny_gguf, draft)
    draft.bind(llm)
    out = generate(llm, prompts[0])
    assert out == outs[0]
    seq = prompts[0] + out
    draft.finish(seq)
    with StaticCache.open(static_path) as cache:
        pol = make_policy(load_tables(), lambda k: 1 + cost * k, 8, cache.high)
        rep = replay_generation(seq, len(prompts[0]) + 1, 8, static=cache, policy=pol)
    s = draft.stats()
    assert (s["calls"], s["drafted"], s["accepted"]) == (len(rep.n_drafted), rep.n_drafted.sum(), rep.n_accepted.sum())
    assert s["drafted"] > 0


def test_a_new_prompt_restarts_and_learns_the_previous_sequence(tiny_gguf, plain, static_path):
    prompts, outs = plain
    draft = LookupDraftModel(static=static_path, n_draft=8, model=tiny_gguf)
    llm = llama(tiny_gguf, draft)
    first = prompts[0] + generate(llm, prompts[0])
    with StaticCache.open(static_path) as cache:
        rep_a = replay_generation(first, len(prompts[0]) + 1, 8, static=cache)
        seen = first[:rep_a.pos[-1]]  # what the draft model saw: the history of its last call
        assert generate(llm, prompts[1]) == outs[1]
        second = prompts[1] + outs[1]
        rep_b = replay_generation(second, len(prompts[1]) + 1, 8, static=cache, dynamic=learnt(seen))
    s = draft.stats()
    assert s["sequences"] == 2 and s["unresolved"] == rep_a.n_drafted[-1]
    assert s["calls"] == len(rep_a.n_drafted) + len(rep_b.n_drafted)
    assert s["drafted"] == rep_a.n_drafted.sum() + rep_b.n_drafted.sum()
    assert s["accepted"] == rep_a.n_accepted[:-1].sum() + rep_b.n_accepted[:-1].sum()


def test_the_readme_form_binds_itself_and_runs_past_n_batch(tiny_gguf, plain, static_path):
    """Llama(draft_model=LookupDraftModel(...)) without logits_all: llama-cpp-python sizes its logits buffer
    for n_batch rows; the hook binds to the Llama at its first call and makes room, so the history may pass
    n_batch (it failed with "could not broadcast input array ... into shape (0,)")."""
    prompts, outs = plain
    draft = LookupDraftModel(static=static_path, n_draft=8)
    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=N_CTX, n_batch=32, n_threads=1, n_threads_batch=1,
                          verbose=False, draft_model=draft)
    assert len(prompts[0]) < 32 < len(prompts[0]) + N_NEW
    assert generate(llm, prompts[0]) == outs[0]
    assert draft.n_ctx == N_CTX and draft.n_drafted > 0
    long = (prompts[1] * 10)[:100]  # a first prompt past n_batch: bind before generating
    draft2 = LookupDraftModel(n_draft=8)
    llm2 = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=N_CTX, n_batch=32, n_threads=1, n_threads_batch=1,
                           verbose=False, draft_model=draft2)
    draft2.bind(llm2)
    assert generate(llm2, long, 40) == generate(llama(tiny_gguf), long, 40)


def test_load_llama_checks_the_vocabulary_then_drafts(tiny_gguf, plain, static_path):
    prompts, outs = plain
    llm = load_llama(tiny_gguf, static=static_path, n_draft=4, n_ctx=N_CTX, n_threads=1, n_threads_batch=1,
                     verbose=False)
    assert generate(llm, prompts[2]) == outs[2]
    assert llm.draft_model.n_drafted > 0 and llm.draft_model.n_ctx == N_CTX


class Recorded(np.ndarray):
    """A history that records how many of its elements each call reads."""

    reads: list

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, _ = key.indices(len(self))
            Recorded.reads.append(max(0, stop - start))
        return np.asarray(super().__getitem__(key))


def test_each_call_reads_only_the_new_tokens_and_a_window_whatever_the_history():
    from lookupkit import Drafter

    rng = np.random.default_rng(1)
    history = rng.integers(0, 1000, 200_000).astype(np.intc)
    session = DraftSession(Drafter(), 8)
    Recorded.reads = []
    n = 100_000
    d = session.draft(history[:n].view(Recorded))
    for _ in range(300):
        a = int(rng.integers(0, len(d) + 1))
        history[n:n + a] = d[:a]
        history[n + a] = (d[a] + 1) % 1000 if a < len(d) else 7  # a rejection (or a full accept + one token)
        n += a + 1
        Recorded.reads = []
        d = session.draft(history[:n].view(Recorded))
        assert 0 < sum(Recorded.reads) <= 2 * WINDOW + 2 * (8 + 1), Recorded.reads
    assert session.n_full_checks == 0 and session.n_sequences == 1


def test_concurrent_sequences_share_one_mapping_and_match_sequential_runs(tiny_gguf, plain, static_path):
    prompts, outs = plain
    cache = StaticCache.open(static_path)
    drafts = [LookupDraftModel(static=cache, n_draft=6) for _ in prompts]
    assert in_threads(lambda i: generate(llama(tiny_gguf, drafts[i]), prompts[i]), len(prompts)) == outs
    for i, d in enumerate(drafts):
        assert d.session.drafter.static is cache
        alone = LookupDraftModel(static=static_path, n_draft=6)
        assert generate(llama(tiny_gguf, alone), prompts[i]) == outs[i]
        assert d.stats() == alone.stats()


def test_a_cache_for_another_vocabulary_is_refused_with_both_names(tiny_gguf, tmp_path):
    foreign = foreign_static(tmp_path / "qwen2.lkc")
    for attempt in (lambda: LookupDraftModel(static=foreign, model=tiny_gguf),
                    lambda: LookupDraftModel(static=foreign).bind(llama(tiny_gguf)),
                    lambda: generate(llama(tiny_gguf, LookupDraftModel(static=foreign)), [1, 2, 3], 4),  # first call
                    lambda: load_llama(tiny_gguf, static=foreign, verbose=False)):
        with pytest.raises(VocabMismatchError) as exc:
            attempt()
        msg = str(exc.value)
        assert "qwen2" in msg and "gpt-2" in msg and "lookup-create -m" in msg and "\n" not in msg


@pytest.mark.parametrize("bad", [0, -1, MAX_DRAFT + 1, True, 2.5, "8"])
def test_n_draft_out_of_range_is_refused(bad):
    with pytest.raises(InputError, match=f"between 1 and {MAX_DRAFT}"):
        LookupDraftModel(n_draft=bad)


def test_the_drafter_is_built_meanwhile_and_its_failure_raised_at_the_first_draft():
    from lookupkit.warmup import Warmup

    d = LookupDraftModel(policy="no-such-policy", n_draft=4)  # constructing returns while the kernels load
    assert isinstance(d.warmup, Warmup)
    for _ in range(2):
        with pytest.raises(InputError, match="unknown policy 'no-such-policy'"):
            d(np.array([1, 2, 3], np.intc))
    ok = LookupDraftModel(n_draft=4)
    assert len(ok(np.array([5, 6, 5, 6, 5], np.intc))) <= 4 and ok.warmup.done()


def test_a_model_that_is_not_gguf_is_refused(tmp_path):
    fake = tmp_path / "model.safetensors"
    fake.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}" + bytes(64))
    for attempt in (lambda: LookupDraftModel(model=fake), lambda: load_llama(fake), lambda: calibrate(fake, reps=1)):
        with pytest.raises(FormatError, match="is not a GGUF model file") as exc:
            attempt()
        assert "\n" not in str(exc.value)


def test_missing_llama_cpp_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", None)
    monkeypatch.delitem(sys.modules, "lookupkit.integrations.llama_cpp")
    with pytest.raises(MissingExtraError) as exc:
        import lookupkit.integrations.llama_cpp  # noqa: F401
    assert str(exc.value) == "llama-cpp-python is not installed: pip install 'lookupkit[llama]'"
    assert isinstance(exc.value, ImportError)


def test_calibrate_measures_a_curve_that_round_trips_and_predicts_a_speedup(tiny_gguf, plain, tmp_path):
    result = calibrate(tiny_gguf, reps=3, max_k=4, position=64, threads=1)
    assert sorted(result["curve"]) == [0, 1, 2, 3, 4] and result["curve"][0] == 1.0
    assert all(c > 0 for c in result["curve"].values()) and result["t1_s"] > 0
    assert all(len(v) == 3 for v in result["raw_s"].values()) and result["threads"] == result["threads_batch"] == 1
    back = load_curve(save_curve(result, tmp_path / "curve.json"))
    assert back["curve"] == result["curve"] and back["raw_s"] == result["raw_s"]
    for k in range(5):  # each point's repeat spread: the middle half of its reps, each over its sweep's 1-token decode
        paired = [a / b for a, b in zip(result["raw_s"][k], result["raw_s"][0])]
        lo, hi = result["spread"][k]
        assert min(paired) <= lo <= hi <= max(paired)
    assert result["spread"][0] == (1.0, 1.0) and result["others_cores"] >= 0
    for k in range(5):  # each point is the median of its paired ratios: inside its own spread
        assert result["spread"][k][0] <= result["curve"][k] <= result["spread"][k][1]
    assert VerifyCost.parse(str(tmp_path / "curve.json")).others_cores == pytest.approx(result["others_cores"])

    flat = VerifyCost(curve={k: 1.0 for k in range(5)})  # free verification: speed-up = tokens per call
    assert speedup([4, 0, 2], [4, 0, 1], flat) == pytest.approx(8 / 3)
    assert speedup([2, 1], [2, 0], VerifyCost(curve={0: 1.0, 1: 1.5, 2: 2.0})) == pytest.approx(4 / 3.5)
    assert speedup([2, 1], [2, 0], 0.25) == pytest.approx(4 / 2.75)  # constant: 1 + C k per call
    prompts, outs = plain
    rep = replay_generation(prompts[0] + outs[0], len(prompts[0]) + 1, 4)
    expected = (rep.n_accepted + 1).sum() / sum(result["curve"][int(d)] for d in rep.n_drafted)
    assert speedup(rep.n_drafted, rep.n_accepted, VerifyCost(curve=result["curve"])) == pytest.approx(expected)
    with pytest.raises(InputError, match="--max-k 8"):
        speedup([8], [1], VerifyCost(curve=result["curve"]))


def test_calibrate_command_prints_the_curve_and_writes_json(tiny_gguf, tmp_path):
    import typer
    from typer.testing import CliRunner

    from lookupkit.cli import calibrate_cmd

    app = typer.Typer()
    calibrate_cmd.register(app)
    app.command("noop")(lambda: None)  # a second command keeps `calibrate` a named sub-command
    out = tmp_path / "curve.json"
    r = CliRunner().invoke(app, ["calibrate", "-m", str(tiny_gguf), "-o", str(out), "--reps", "2", "--max-k", "3",
                                 "--position", "32", "--threads", "1", "--slots", "2"])
    assert r.exit_code == 0, r.output
    assert re.search(r"^2 slots, one step of R rows / 1 token: 2: \d+\.\d\d  3: ", r.output, re.M), r.output
    assert "per drafted position" in r.output and f"wrote {out}" in r.output and "repeat spread" in r.output
    assert "the first drafted token alone costs" in r.output and "cores meanwhile" in r.output
    assert re.search(r"^   1  +\d+\.\d{3} +\d+\.\d{3}-\d+\.\d{3}$", r.output, re.M), r.output
    assert sorted(json.loads(out.read_text())["curve"]) == ["0", "1", "2", "3"]
    # off a terminal, one line per stage, and after the first sweep how long the whole run takes (issue 34)
    lines = [line for line in r.stderr.splitlines() if not line.startswith("warning: ")]  # (a busy machine's)
    assert lines[0] == "sweeps of 1..4 tokens and steps of 2 slots (3) ..." and len(lines) == 2, r.stderr
    assert re.fullmatch(r"calibrate: the first of 3 sweeps took \d+\.\d s; the whole run will take about \d+\.\d s",
                        lines[1]), lines[1]
    quiet = CliRunner().invoke(app, ["calibrate", "-m", str(tiny_gguf), "--reps", "1", "--max-k", "1", "--position",
                                     "16", "--threads", "1", "-q"])
    assert quiet.exit_code == 0 and "per drafted position" in quiet.stdout
    assert all(line.startswith("warning: ") for line in quiet.stderr.splitlines()), quiet.stderr
    bad = CliRunner().invoke(app, ["calibrate", "-m", str(tmp_path / "curve.json")])
    assert bad.exit_code == 2 and "is not a GGUF model file" in bad.output


def test_calibrate_refuses_an_output_it_cannot_write_before_measuring(tiny_gguf, tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    import lookupkit.integrations.calibrate as measuring
    from lookupkit.cli import calibrate_cmd

    monkeypatch.setattr(measuring, "calibrate", lambda *a, **k: pytest.fail("measured before checking -o"))
    app = typer.Typer()
    calibrate_cmd.register(app)
    app.command("noop")(lambda: None)
    for out, fragment in ((tmp_path / "no" / "such" / "curve.json", "does not exist"), (tmp_path, "is a directory")):
        r = CliRunner().invoke(app, ["calibrate", "-m", str(tiny_gguf), "-o", str(out), "--max-k", "2"])
        assert r.exit_code == 2 and fragment in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_calibrate_names_the_points_where_the_curve_falls_real_or_noise():
    from lookupkit.cli.calibrate_cmd import falls

    curve = {0: 1.0, 1: 1.5, 2: 1.4, 3: 2.0, 4: 1.2}
    spread = {0: (1.0, 1.0), 1: (1.45, 1.55), 2: (1.35, 1.5), 3: (1.9, 2.1), 4: (1.1, 1.3)}
    lines = falls(curve, spread)
    assert len(lines) == 2
    assert lines[0].startswith("note: k = 2 costs less than k = 1 (1.400 vs 1.500), within their repeat spread: noise")
    assert lines[1].startswith("note: k = 4 costs less than k = 3 (1.200 vs 2.000), beyond their repeat spread")
    assert falls({0: 1.0, 1: 1.2, 2: 1.3}, {0: (1, 1), 1: (1.2, 1.2), 2: (1.3, 1.3)}) == []


def test_calibrate_measures_a_servers_shared_step_for_each_slot_count(tiny_gguf, tmp_path):
    """--slots 3: beside the curve, one decode of R rows over n = 2 and 3 sequences for R = n .. n + max_k on the
    grid, relative to one token; the surface round-trips and prices a step (VerifyCost.step)."""
    from lookupkit.integrations.calibrate import split_rows
    from lookupkit.verify_cost import save_curve

    assert split_rows(7, 3) == [3, 2, 2] and split_rows(2, 2) == [1, 1]
    result = calibrate(tiny_gguf, reps=2, max_k=4, position=32, threads=1, slots=3)
    assert sorted(result["batch"]) == [1, 2, 3] and result["slots"] == 3
    assert sorted(result["batch"][2]) == [2, 3, 4, 5, 6] and sorted(result["batch"][3]) == [3, 4, 5, 6, 7]
    assert result["batch"][1] == {k + 1: c for k, c in result["curve"].items()}
    assert all(0 < c < 1e3 for pts in result["batch"].values() for c in pts.values())
    cost = VerifyCost.parse(str(save_curve(result, tmp_path / "c.json")))
    assert cost.step(3, 5) == pytest.approx(result["batch"][3][5]) and cost.step(3, 8) == float("inf")
    with pytest.raises(InputError, match="slots must be"):
        calibrate(tiny_gguf, reps=1, max_k=2, slots=0)
