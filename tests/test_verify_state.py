"""`lookupkit verify` on the history state `lookupkit serve --state` writes (`.lkh`, issue 34): every file `inspect`
reads, `verify` checks (checksums, bounds, token ids below the vocabulary size the file records); a damaged,
truncated or foreign file is one line naming the file and what is wrong, exit 2, as a damaged cache is."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from cli_checks import assert_one_line_error
from lookupkit.cli.main import app
from lookupkit.formats import history_state
from lookupkit.serve.tenants import Tenants, tenant_id

N_VOCAB = 1000


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def state(path, n_vocab=N_VOCAB, top=100):
    tenants = Tenants(1 << 16, None, "f" * 64, n_vocab=n_vocab)
    for i, user in enumerate(["alice", "bob"]):
        tenants.history(tenant_id(user=user)).learn(np.arange(top, dtype=np.int32) + i)
    tenants.save(path)
    return path


def test_verify_reads_every_state_inspect_reads(tmp_path):
    path = state(tmp_path / "served.lkh")
    assert cli("inspect", path).exit_code == 0
    r = cli("verify", path)
    assert r.exit_code == 0, r.output
    assert f"ok: {path} (lkh v2): 2 tenants, " in r.output and "checked: token ids >= -1 and < n_vocab 1,000" in r.output
    assert json.loads(cli("verify", path, "--json").stdout)["tenants"] == 2
    # a state written before the size was recorded: checked, and verify says the ids were not bounded above
    old = state(tmp_path / "old.lkh", n_vocab=None)
    assert "the file records no vocabulary size" in cli("verify", old).output
    # found by its magic whatever its name
    renamed = tmp_path / "state.bin"
    renamed.write_bytes(path.read_bytes())
    assert cli("verify", renamed).exit_code == 0


def test_a_history_saved_with_a_tokenizer_records_its_vocabulary_size(tmp_path):
    from lookupkit import Tokenizer
    from lookupkit.draft.history import History

    tok = Tokenizer.default()
    hist = History(1 << 12, vocab=tok)
    hist.learn(np.arange(50, dtype=np.int32))
    hist.save(tmp_path / "h.lkh")
    assert history_state.read(tmp_path / "h.lkh")[1]["n_vocab"] == tok.n_vocab
    assert History.load(tmp_path / "h.lkh").n_vocab == tok.n_vocab  # and keeps it for the next save


def damage(kind, path):
    raw = bytearray(path.read_bytes())
    if kind == "a log byte":
        raw[-3] ^= 0x40
    elif kind == "truncated":
        raw = raw[:-8]
    elif kind == "empty":
        raw = bytearray()
    elif kind == "the header":
        raw[80] ^= 0x01
    elif kind == "foreign":
        raw = bytearray(b"GGUF" + bytes(range(200)))
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("kind, says", [
    ("a log byte", "log's sha256 does not match"), ("truncated", "truncated"), ("empty", "shorter than the 64-byte"),
    ("the header", "header's sha256 does not match"), ("foreign", "its first bytes are b'GGUF"),
])
def test_a_damaged_state_is_one_line_naming_the_file(tmp_path, kind, says):
    path = state(tmp_path / "served.lkh")
    damage(kind, path)
    for command in ("verify", "inspect"):
        assert_one_line_error(cli(command, path), str(path), says)


def test_ids_outside_the_recorded_vocabulary_are_refused(tmp_path):
    path = state(tmp_path / "served.lkh", n_vocab=60, top=100)  # written as is; read, every id is checked
    assert_one_line_error(cli("verify", path), str(path), "outside the vocabulary of 60 tokens")
    raw, head = path.read_bytes(), history_state.read(state(tmp_path / "ok.lkh"))[1]
    assert head["n_vocab"] == N_VOCAB and raw != (tmp_path / "ok.lkh").read_bytes()


def test_a_bad_vocabulary_size_in_the_header_is_refused(tmp_path):
    path = tmp_path / "bad.lkh"
    log = history_state.TenantLog("anonymous", np.array([-1, 1, 2], np.int32), 100, 1)
    history_state.write(path, [log], vocab=None, budget=1 << 12, tenant_budget=100, n_vocab=0)
    assert_one_line_error(cli("verify", path), str(path), "'n_vocab' is not a vocabulary size")
