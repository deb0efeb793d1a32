"""The tenants' state file (.lkh version 2, issue 30) and the merge of a fleet's: every tenant's History
round-trips apart (a property over random tenants too), a version 1 file of one History still loads as the
shared one, damaged and foreign files are refused whole in one line, and `lookupkit state-merge` keeps each
tenant's newest sequences within the budgets, refuses another vocabulary or scope, and leaves its inputs and
no output when killed (-9) in the middle of writing."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lookupkit import History
from lookupkit.errors import FormatError, InputError, VocabMismatchError
from lookupkit.formats import history_state
from lookupkit.formats.history_state import GLOBAL, TenantLog
from lookupkit.serve.state import merge_states, open_tenants
from lookupkit.serve.tenants import ANONYMOUS, Tenants, newest_first, tenant_id

VOCAB = "f" * 64


def tenants_of(seqs: dict, budget: int = 1 << 14, tenant_budget: int = 1024) -> Tenants:
    """Tenants that learnt, tenant by tenant in order, each list of sequences."""
    out = Tenants(budget, tenant_budget, VOCAB)
    for name, sequences in seqs.items():
        for seq in sequences:
            out.history(tenant_id(user=name)).learn(seq)
    return out


def logs(tenants: Tenants) -> dict:
    return {t.id: t.log.tolist() for t in tenants.snapshot()}


def v1_file(path, log: np.ndarray, vocab: str | None, budget: int, learnt: int) -> None:
    """A version 1 file as formats/SPEC.md lays it out (what lookupkit wrote before tenants)."""
    data = np.asarray(log, "<i4").tobytes()
    head = {"format": "lkh", "format_version": 1, "vocab": vocab, "budget": budget, "n_positions": len(log),
            "n_sequences": int((np.asarray(log) == -1).sum()), "learnt": learnt, "tool": {"name": "lookupkit"},
            "log": {"offset": 0, "length": len(data), "dtype": "<i4", "sha256": hashlib.sha256(data).hexdigest()}}
    head["log"]["offset"] = offset = 1024
    header = json.dumps(head).encode()
    pre = history_state.PREAMBLE.pack(history_state.MAGIC, 1, history_state.BYTE_ORDER_MARK, len(header),
                                      hashlib.sha256(header).digest(), offset + len(data))
    path.write_bytes(pre + header + b"\0" * (offset - len(pre) - len(header)) + data)


def test_every_tenant_round_trips_apart(tmp_path):
    rng = np.random.default_rng(5)
    tenants = tenants_of({name: [rng.integers(0, 5000, int(n)) for n in rng.integers(1, 400, 6)]
                          for name in ("ann", "bo", "cy")})
    path = tmp_path / "state.lkh"
    tenants.save(path)
    back = open_tenants(path, None, None, VOCAB)
    assert logs(back) == logs(tenants) and list(logs(back)) == [tenant_id(user=n) for n in ("ann", "bo", "cy")]
    assert back.budget == tenants.budget and back.tenant_budget == tenants.tenant_budget == 1024
    assert back.learnt == 18 and back.n_tokens == tenants.n_tokens
    assert [t.last_used_ms for t in back.snapshot()] == [t.last_used_ms for t in tenants.snapshot()]
    back.history(tenant_id(user="new"))  # the least recently used (ann) is dropped first, as before the save
    assert len(back) == 4 and back.most == 16
    with pytest.raises(InputError, match="keeps 3 tenants' histories apart"):
        History.load(path)
    shared = open_tenants(path, None, None, VOCAB, scope="global")  # on purpose: all of them in one History
    (everyone,) = shared.snapshot()
    assert everyone.id == GLOBAL and shared.learnt == 18
    assert sorted(everyone.log[everyone.log >= 0]) == sorted(np.concatenate([t.log[t.log >= 0] for t in
                                                                              tenants.snapshot()]))
    raw = path.read_bytes()
    header = raw[history_state.PREAMBLE.size:history_state.PREAMBLE.size + history_state.PREAMBLE.unpack_from(raw)[3]]
    assert not any(f'"{name}'.encode() in header for name in ("ann", "bo", "cy"))  # their ids, never the strings


def test_a_version_1_file_loads_as_the_shared_history(tmp_path):
    path = tmp_path / "old.lkh"
    log = np.array([-1, *range(100), -1, *range(50, 90)], np.int32)
    v1_file(path, log, VOCAB, 4096, 7)
    assert History.load(path).tokens().tolist() == log.tolist() and History.load(path).learnt == 7
    shared = open_tenants(path, None, None, VOCAB, scope="global")
    assert logs(shared) == {GLOBAL: log.tolist()} and shared.budget == 4096
    tenants = open_tenants(path, None, 1024, VOCAB)  # tenants: it was everyone's, now the anonymous tenant's
    assert logs(tenants) == {ANONYMOUS: log.tolist()} and tenants.learnt == 7
    with pytest.raises(InputError, match="another vocabulary.*--state-reset"):
        open_tenants(path, None, None, "e" * 64)


def test_a_damaged_tenant_state_is_refused_whole(tmp_path):
    path = tmp_path / "state.lkh"
    tenants_of({"a": [np.arange(300)], "b": [np.arange(200)]}).save(path)
    good = path.read_bytes()
    bad = tmp_path / "bad.lkh"
    cases = {"truncated": good[:-3], "one byte more": good + b"\0", "version 3": good[:8] + b"\3" + good[9:]}
    for at in [8, 20, 70, len(good) - 900, len(good) - 500, len(good) - 1]:  # header, both logs
        flipped = bytearray(good)
        flipped[at] ^= 0x04
        cases[f"byte {at}"] = bytes(flipped)
    for what, data in cases.items():
        bad.write_bytes(data)
        with pytest.raises(InputError, match="not a valid lookupkit history state.*start afresh with --state-reset"):
            open_tenants(bad, None, None, VOCAB)
            pytest.fail(what)
    with pytest.raises(InputError, match="another vocabulary"):
        open_tenants(path, None, None, "0" * 64)


def test_newest_first_takes_each_inputs_newest_sequences_in_turn():
    a = np.array([-1, 1, 1, -1, 2, 2, -1, 3, 3], np.int32)  # oldest first: 1, 2, 3
    b = np.array([7, -1, 8, 8, -1, 3, 3], np.int32)  # its first sequence lost its start to eviction
    assert newest_first([a, b], 64).tolist() == [-1, 7, -1, 1, 1, -1, 8, 8, -1, 2, 2, -1, 3, 3]  # 3 3 once
    assert newest_first([b, a], 9).tolist() == [-1, 2, 2, -1, 8, 8, -1, 3, 3]  # within 9 positions
    assert newest_first([np.arange(100, dtype=np.int32)], 64).tolist() == [-1, *range(37, 100)]
    assert newest_first([], 64).tolist() == []


def test_merge_keeps_each_tenants_newest_sequences_within_the_budget(tmp_path):
    one, two = tmp_path / "one.lkh", tmp_path / "two.lkh"
    r1 = tenants_of({"ann": [np.full(400, 1), np.full(400, 2)], "bo": [np.full(100, 5)]})
    time.sleep(0.01)  # replica two served after replica one: its tenants are the more recently used
    r2 = tenants_of({"ann": [np.full(400, 3)], "cy": [np.full(100, 6)]})
    r1.save(one)
    r2.save(two)
    out = tmp_path / "fleet.lkh"
    assert "3 tenants kept apart" in merge_states([one, two], out)
    merged = open_tenants(out, None, None, VOCAB)
    got = {t: [int(x) for x in set(log) - {-1}] for t, log in logs(merged).items()}
    # ann: 3 (replica two's newest, the most recently used), then 2, then no room for 1 in 1,024 positions
    assert got == {tenant_id(user="ann"): [2, 3], tenant_id(user="bo"): [5], tenant_id(user="cy"): [6]}
    assert logs(merged)[tenant_id(user="ann")] == [-1, *[2] * 400, -1, *[3] * 400]
    assert merged.learnt == 5 and merged.tenant_budget == 1024
    small = tmp_path / "small.lkh"
    merge_states([one, two], small, budget=1024, tenant_budget=512)  # 2 tenants of 512: the 2 used last
    kept = open_tenants(small, None, None, VOCAB)
    assert list(logs(kept)) == [tenant_id(user="ann"), tenant_id(user="cy")] and kept.tenant_budget == 512
    assert logs(kept)[tenant_id(user="ann")] == [-1, *[3] * 400]


def test_merge_refuses_another_vocabulary_or_scope_and_writes_nothing(tmp_path):
    one, foreign, shared = tmp_path / "one.lkh", tmp_path / "foreign.lkh", tmp_path / "shared.lkh"
    tenants_of({"a": [np.arange(100)]}).save(one)
    other = Tenants(4096, 1024, "0" * 64)
    other.history("anonymous").learn(np.arange(10))
    other.save(foreign)
    history = History(4096, vocab=VOCAB)
    history.learn(np.arange(100))
    history.save(shared)
    out = tmp_path / "out.lkh"
    with pytest.raises(VocabMismatchError, match=f"{foreign} holds ids of another vocabulary.*{one}"):
        merge_states([one, foreign], out)
    with pytest.raises(InputError, match="shared.lkh keeps one history shared by every client.*one.lkh keeps "
                                         "tenants apart"):
        merge_states([one, shared], out)
    with pytest.raises(InputError, match="--tenant-budget applies to states that keep tenants apart"):
        merge_states([shared, shared], out, tenant_budget=1024)
    assert not out.exists()
    assert "one History for every client" in merge_states([shared, shared], out)
    assert History.load(out).tokens().tolist() == [-1, *range(100)]  # one shared History: the same sequence once
    out.unlink()
    assert not out.exists()


def test_the_merge_command_says_what_it_wrote_and_refuses_in_one_line(tmp_path):
    one, two = tmp_path / "one.lkh", tmp_path / "two.lkh"
    tenants_of({"a": [np.arange(100)]}).save(one)
    other = Tenants(4096, 1024, "0" * 64)
    other.history("anonymous").learn(np.arange(10))
    other.save(two)
    out = tmp_path / "out.lkh"
    run = lambda *a: subprocess.run([sys.executable, "-m", "lookupkit", "state-merge", *map(str, a)],  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    r = run(one, one, "-o", out)
    assert r.returncode == 0 and r.stdout.startswith(f"wrote {out}: 1 tenants kept apart"), r.stderr
    r = subprocess.run([sys.executable, "-m", "lookupkit", "inspect", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "lkh v2" in r.stdout and "1, kept apart (a request drafts only from its own" in r.stdout
    assert f"{tenant_id(user='a')}           101 of 1,024 positions, 1 sequences kept, 2 learnt" in r.stdout
    cut = tmp_path / "cut.lkh"
    cut.write_bytes(one.read_bytes()[:-1])
    for args, fragment in [((one, two, "-o", tmp_path / "x.lkh"), "another vocabulary"),
                           ((one, cut, "-o", tmp_path / "x.lkh"), "truncated"),
                           ((one, tmp_path / "none.lkh", "-o", tmp_path / "x.lkh"), "does not exist"),
                           ((one, "-o", tmp_path / "x.lkh", "--history-budget", 3), "--history-budget must be"),
                           ((one, "-o", tmp_path / "x.lkh", "--tenant-budget", 1 << 20), "--tenant-budget"),
                           ((one, "-o", tmp_path / "no-dir" / "x.lkh"), "does not exist")]:
        r = run(*args)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, (args, r.stderr)
        assert fragment in r.stderr, (args, r.stderr)
    assert not (tmp_path / "x.lkh").exists()


def test_a_kill_during_a_merge_leaves_the_inputs_and_no_output(tmp_path):
    """A merge killed (-9) once its output is written beside the target but not yet renamed (its fsync made
    to wait): the inputs are as they were, and there is no output file."""
    one, two, out = tmp_path / "one.lkh", tmp_path / "two.lkh", tmp_path / "fleet.lkh"
    tenants_of({"a": [np.arange(1000)], "b": [np.arange(500)]}).save(one)
    tenants_of({"a": [np.arange(2000)]}).save(two)
    before = one.read_bytes(), two.read_bytes()
    script = ("import os, sys, time\nreal = os.fsync\n"
              "def slow(fd):\n    print('in fsync', flush=True)\n    time.sleep(60)\n    real(fd)\n"
              "os.fsync = slow\nfrom lookupkit.cli.main import main\n"
              f"sys.argv = ['lookupkit', 'state-merge', {str(one)!r}, {str(two)!r}, '-o', {str(out)!r}]\nmain()\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "in fsync\n"
        temps = list(tmp_path.glob(".fleet.lkh.*.tmp"))
        assert len(temps) == 1 and temps[0].stat().st_size > 4 * 1500  # the merged logs, all written
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()
    assert not out.exists() and (one.read_bytes(), two.read_bytes()) == before


TENANT = st.builds(lambda name, seqs, budget, learnt, used: (name, seqs, budget, learnt, used),
                   st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=64),
                   st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=40), max_size=5),
                   st.integers(220, 4096), st.integers(0, 2**40), st.integers(0, 2**45))


@settings(max_examples=60, deadline=None)
@given(tenants=st.lists(TENANT, max_size=6, unique_by=lambda t: t[0]), vocab=st.none() | st.just(VOCAB),
       data=st.data())
def test_the_state_layout_round_trips_and_refuses_a_cut_of_itself(tmp_path_factory, tenants, vocab, data):
    written = [TenantLog(name, np.array([x for s in seqs for x in (-1, *s)], np.int32), budget, learnt, used)
               for name, seqs, budget, learnt, used in tenants]
    path = tmp_path_factory.mktemp("state") / "s.lkh"
    history_state.write(path, written, vocab=vocab, budget=4096, tenant_budget=1024)
    back, head = history_state.read(path, expect_vocab=VOCAB)
    assert head["budget"] == 4096 and head["tenant_budget"] == 1024 and head["vocab"] == vocab
    assert [(t.id, t.log.tolist(), t.budget, t.learnt, t.last_used_ms) for t in back] == \
        [(t.id, t.log.tolist(), t.budget, t.learnt, t.last_used_ms) for t in written]
    raw = path.read_bytes()
    path.write_bytes(raw[:data.draw(st.integers(0, len(raw) - 1))])
    with pytest.raises(FormatError, match="not a valid lookupkit history state"):
        history_state.read(path)


def test_a_drafter_is_pointed_at_another_history_of_its_vocabulary_only():
    from lookupkit import Drafter

    mine, theirs = History(4096, vocab=VOCAB), History(4096, vocab=VOCAB)
    theirs.learn(np.arange(200))
    drafter = Drafter(policy="lookupkit", history=mine)
    drafter.accept(np.arange(150))
    assert drafter.draft(None, 8) == []  # its own history holds nothing of theirs
    drafter.reset(learn=False)
    drafter.use_history(theirs)
    drafter.accept(np.arange(150))
    draft = drafter.draft(None, 8)
    assert draft and draft == list(range(150, 150 + len(draft))) and drafter.history is theirs
    with pytest.raises(VocabMismatchError):
        drafter.use_history(History(4096, vocab="0" * 64))
    with pytest.raises(InputError, match="make the Drafter with history"):
        Drafter(policy="lookupkit").use_history(mine)
