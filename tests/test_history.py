"""The History (draft.history): its longest-match lookups against brute force, the compiled policy drafting
from it as its reference, its budget and eviction, sharing between threads, and its state file (.lkh:
round trip, every corruption refused, a kill -9 during a save leaves the previous file loadable)."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookupkit import Drafter, History
from lookupkit.counts.dict_cache import NgramCache
from lookupkit.counts.history_index import history_match
from lookupkit.counts.match_index import MATCH_LENGTHS
from lookupkit.policy.chain import N_SOURCES, P_BINS, AGREE_MAX, SHARE_BINS, TOTAL_BINS, make_policy
from lookupkit.policy.reference import draft_policy_reference
from lookupkit.errors import FormatError, InputError, VocabMismatchError
from lookupkit.formats import history_state

NO_TRUST = (0.0, 0.0)  # these tests pin the sources; the trust (policy.trust) is pinned in test_policy


LONGEST = int(MATCH_LENGTHS[0])


def phrases(rng, n: int, alphabet: int = 6, bank=None) -> np.ndarray:
    """Token ids built from a few short phrases (of `bank`, else new ones) over a small alphabet: long
    earlier matches happen, and some are followed by different tokens."""
    bank = bank or [rng.integers(0, alphabet, rng.integers(3, 12)) for _ in range(5)]
    out = np.concatenate([bank[i] for i in rng.integers(0, len(bank), max(1, n // 3))])[:n]
    return out.astype(np.int32)


def bank_of(rng, alphabet: int) -> list:
    return [rng.integers(0, alphabet, rng.integers(3, 12)) for _ in range(5)]


def brute(log: list[int], query: list[int]) -> tuple[int, int]:
    """(follower, m) of the longest m whose last m query tokens the log holds followed by a token, latest first."""
    for m in MATCH_LENGTHS.tolist():
        ends = [e for e in range(m - 1, len(log) - 1) if len(query) >= m and log[e - m + 1:e + 1] == query[-m:]
                and log[e + 1] >= 0]
        if ends:
            return log[ends[-1] + 1], m
    return -1, 0


def lookup(hist: History, query: np.ndarray) -> tuple[int, int]:
    tok, m = history_match(hist.view(), query, len(query), query, 0, len(query), 0)  # every length
    return int(tok), int(m)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), budget=st.integers(64, 700), n_seqs=st.integers(1, 12))
def test_lookups_equal_brute_force_and_the_budget_holds(seed, budget, n_seqs):
    rng = np.random.default_rng(seed)
    hist, bank = History(budget), bank_of(rng, 6)
    learnt = []
    for _ in range(n_seqs):
        seq = phrases(rng, int(rng.integers(1, 300)), bank=bank)
        hist.learn(seq)
        learnt.append(seq)
        assert hist.n_tokens <= budget
    log = hist.tokens().tolist()
    everything = np.concatenate([np.concatenate([[-1], s[-(budget - 1):]]) for s in learnt]).tolist()
    assert log == everything[len(everything) - len(log):]  # the newest positions, in order
    assert log[-len(learnt[-1][-(budget - 1):]) - 1] == -1  # the newest sequence is whole (up to the budget)
    for _ in range(25):
        query = phrases(rng, int(rng.integers(1, 60)), bank=bank)
        assert lookup(hist, query) == brute(log, query.tolist())
    tail = learnt[-1][-min(len(learnt[-1]), budget - 1):]
    if len(tail) > LONGEST:  # a suffix of what was learnt last is always found, at the longest length
        tok, m = lookup(hist, tail[:LONGEST])
        assert m == LONGEST and tok >= 0


def random_tables(rng):
    table = np.sort(rng.random((N_SOURCES, SHARE_BINS, TOTAL_BINS)), axis=1)
    agree = np.sort(np.sort(rng.random((P_BINS, AGREE_MAX + 1)), axis=0), axis=1)
    return table, agree


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), cost=st.sampled_from([0.0, 0.1, 0.5]), n_draft=st.integers(1, 12))
def test_compiled_policy_drafts_from_a_history_as_its_reference(seed, cost, n_draft):
    rng = np.random.default_rng(seed)
    hist, bank = History(int(rng.integers(200, 2000))), bank_of(rng, 12)
    learnt = [phrases(rng, 250, bank=bank) for _ in range(6)]
    for s in learnt:
        hist.learn(s)
    tables = random_tables(rng)
    cost_of = lambda k: 1 + cost * k  # noqa: E731
    drafter = Drafter(policy="lookupkit", history=hist)
    drafter._pol = make_policy(tables, cost_of, 1024, None, None, hist.view(), trust=NO_TRUST)
    seq = np.concatenate([learnt[-1][40:160], phrases(rng, 180, bank=bank)])
    log = hist.tokens()
    for i in range(1, len(seq), 11):
        ctx = NgramCache()
        ctx.update(seq[:i].tolist())
        want = draft_policy_reference(seq[:i].tolist(), n_draft, ctx, None, None, {}, tables,
                                      [cost_of(k) for k in range(n_draft + 1)], history=log)
        assert drafter.draft(seq[:i], n_draft) == want, i
    drafter.reset(learn=False)
    assert np.array_equal(hist.tokens(), log)  # learn=False teaches nothing


def test_a_repeated_sequence_is_drafted_from_the_history_and_old_text_is_evicted():
    rng = np.random.default_rng(1)
    hist = History(budget=1000)
    first = rng.integers(0, 50_000, 400)
    a = Drafter(policy="lookupkit", history=hist)
    a.reset(first)  # learnt at the end of the sequence
    b = Drafter(policy="lookupkit", history=hist)  # another drafter shares it
    draft = b.draft(first[:100], 16)
    assert draft and draft == first[100:100 + len(draft)].tolist() and set(b.last_sources) == {"hx"}
    assert Drafter(policy="lookupkit").draft(first[:100], 16) == []  # without it: nothing to draft
    for _ in range(5):  # 5 x 401 positions through a budget of 1000: the first sequence is evicted
        b.reset(rng.integers(0, 50_000, 400))
        assert hist.n_tokens <= 1000
    assert "hx" not in (b.draft(first[:100], 16) and b.last_sources) and hist.learnt == 6
    assert len(b.dynamic_table().ngrams) == 0  # learnt into the bounded history, not the dynamic cache


def test_history_is_refused_where_it_cannot_be_used():
    with pytest.raises(InputError, match="policy='lookupkit' only"):
        Drafter(history=History(100))
    with pytest.raises(InputError, match="must be a lookupkit History"):
        Drafter(policy="lookupkit", history=[1, 2, 3])
    with pytest.raises(InputError, match="budget must be an integer between"):
        History(10)
    with pytest.raises(VocabMismatchError):
        Drafter(policy="lookupkit", history=History(100, vocab="aa"), expect_vocab="bb")


def test_threads_drafting_while_another_learns():
    """Two drafters draft from threads while a third thread learns (and evicts): no error, drafts only of
    tokens the sequences hold, and the history ends as one fed the same sequences in one thread."""
    rng = np.random.default_rng(2)
    bank = bank_of(rng, 40)
    seqs = [phrases(rng, 500, bank=bank) for _ in range(200)]
    hist, errors, drafted = History(budget=5000), [], set()

    def learner():
        for s in seqs:
            hist.learn(s)

    def drafter(k):
        d = Drafter(policy="lookupkit", history=hist)
        try:
            for j in range(1000):
                s = seqs[(7 * j + k) % len(seqs)]
                drafted.update(d.draft(s[:50 + j % 200], 8))
                d.reset(learn=False)
        except Exception as exc:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(exc)

    threads = [threading.Thread(target=learner)] + [threading.Thread(target=drafter, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and drafted and drafted <= set(np.concatenate(bank).tolist())
    alone = History(budget=5000)
    for s in seqs:
        alone.learn(s)
    assert np.array_equal(hist.tokens(), alone.tokens()) and hist.learnt == len(seqs)


def learnt_history(n=5, budget=3000, vocab="f" * 64) -> History:
    rng = np.random.default_rng(3)
    hist = History(budget, vocab=vocab)
    for _ in range(n):
        hist.learn(rng.integers(0, 50_000, 700))
    return hist


def test_state_file_round_trips(tmp_path):
    hist = learnt_history()
    path = tmp_path / "h.lkh"
    hist.save(path)
    back = History.load(path, expect_vocab="f" * 64)
    assert np.array_equal(back.tokens(), hist.tokens()) and back.budget == hist.budget
    assert back.learnt == hist.learnt and back.vocab == hist.vocab
    query = hist.tokens()[-300:-200]
    assert lookup(back, query) == lookup(hist, query) and lookup(back, query)[1] == LONGEST
    small = History.load(path, budget=1000)  # a smaller budget keeps the newest positions
    assert np.array_equal(small.tokens(), hist.tokens()[-1000:])
    (one,), head = history_state.read(path)
    assert head["format"] == "lkh" and head["format_version"] == history_state.VERSION and one.id == "global"
    assert len(one.log) == hist.n_tokens and np.count_nonzero(one.log == -1) == 3  # 5 x 701 positions through 3000: the newest half kept once


def test_state_file_corruption_is_refused(tmp_path):
    path = tmp_path / "h.lkh"
    learnt_history().save(path)
    good = path.read_bytes()
    bad = tmp_path / "bad.lkh"
    cases = {"truncated": good[:-7], "preamble only": good[:history_state.PREAMBLE.size], "empty": b"",
             "another file": b"LKCACHE\0" + good[8:]}
    rng = np.random.default_rng(4)
    for at in [0, 9, 13, 17, 30, 60, 70, 150, 400, len(good) // 2, len(good) - 1, *rng.integers(0, len(good), 20)]:
        flipped = bytearray(good)
        flipped[int(at)] ^= 0x10
        cases[f"byte {at} flipped"] = bytes(flipped)
    for what, data in cases.items():
        bad.write_bytes(data)
        with pytest.raises(FormatError, match="not a valid lookupkit history state"):
            History.load(bad)
            pytest.fail(what)
    with pytest.raises(VocabMismatchError, match="another vocabulary"):
        History.load(path, expect_vocab="0" * 64)


def test_a_kill_during_a_save_leaves_the_previous_state_loadable(tmp_path):
    """A process killed (-9) inside its second save, once the new file is written beside the old one but not
    yet renamed over it (its fsync made to wait): the first save is what is left, whole."""
    path = tmp_path / "h.lkh"
    script = (f"import os, time\nimport numpy as np\nfrom lookupkit import History\nh = History(1 << 16)\n"
              f"h.learn(np.arange(1000))\nh.save({str(path)!r})\nprint('saved', flush=True)\nreal = os.fsync\n"
              f"def slow(fd):\n    print('in save', flush=True)\n    time.sleep(60)\n    real(fd)\n"
              f"os.fsync = slow\nh.learn(np.arange(500))\nh.save({str(path)!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "saved\n" and proc.stdout.readline() == "in save\n"
        temps = list(tmp_path.glob(".h.lkh.*.tmp"))
        assert len(temps) == 1 and temps[0].stat().st_size > path.stat().st_size  # the second save, all written
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()
    back = History.load(path)
    assert back.learnt == 1 and back.tokens().tolist() == [-1, *range(1000)]


def test_inspect_shows_a_state_file_and_refuses_a_damaged_one(tmp_path):
    path = tmp_path / "h.lkh"
    learnt_history(n=2).save(path)
    run = lambda p: subprocess.run([sys.executable, "-m", "lookupkit", "inspect", str(p)], capture_output=True,  # noqa: E731
                                   text=True, timeout=60)
    r = run(path)
    assert r.returncode == 0 and "lkh v2 (a served history)" in r.stdout and "one history shared" in r.stdout
    assert "1,402 of 3,000 positions: 2 sequences kept" in r.stdout and "f" * 64 in r.stdout
    (tmp_path / "cut.lkh").write_bytes(path.read_bytes()[:-1])
    r = run(tmp_path / "cut.lkh")
    assert r.returncode == 2 and "truncated" in r.stderr and r.stderr.strip().count("\n") == 0


def test_the_server_opens_a_state_with_its_own_budget_unless_told(tmp_path):
    from lookupkit.rules import HISTORY_BUDGET
    from lookupkit.serve.state import open_tenants

    path = tmp_path / "h.lkh"
    assert open_tenants(path, None, None, "f" * 64).budget == HISTORY_BUDGET and not path.exists()  # nothing yet
    learnt_history(budget=5000).save(path)  # one History: the anonymous tenant's, or everyone's
    assert open_tenants(path, None, None, "f" * 64, "global").budget == 5000
    assert open_tenants(path, 1000, None, "f" * 64, "global").n_tokens == 1000
    tenants = open_tenants(path, None, None, "f" * 64)
    assert tenants.budget == 5000 and len(tenants) == 1 and tenants.n_tokens == tenants.tenant_budget == 78  # 5000 / 64
    assert open_tenants(path, None, None, "f" * 64, reset=True).n_tokens == 0
    with pytest.raises(InputError, match="another vocabulary.*start afresh with --state-reset"):
        open_tenants(path, None, None, "e" * 64)


def test_a_state_whose_ids_its_vocabulary_cannot_hold_is_refused_where_it_is_read(tmp_path):
    """Valid checksums, a vocabulary fingerprint that matches, no size recorded (a file from before it was), and
    ids 2^31-1 and 300000 in its log: read for a tokenizer of 50,257 ids, it is refused in one line, so no drafting
    loop ever sees those ids; read without one, it loads (the ids are checked where a vocabulary is known)."""
    from lookupkit import Tokenizer

    tok = Tokenizer.default()
    hist = History(1 << 12, vocab=tok.fingerprint)  # a fingerprint only: the file records no n_vocab
    hist.learn([5, 6, 7, 2**31 - 1, 300000, 8])
    hist.save(tmp_path / "s.lkh")
    with pytest.raises(FormatError, match=r"token id 2147483647, outside the 50,257 ids"):
        History.load(tmp_path / "s.lkh", expect_vocab=tok)
    assert History.load(tmp_path / "s.lkh").n_tokens > 0
