"""`lookupkit inspect | verify | convert` as a user runs them: outputs, conversions, and bad input."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest
import typer
from typer.testing import CliRunner

from lookupkit import files as atomic
from lookupkit import formats
from lookupkit.static import read_table
from lookupkit.cli.cache_cmds import register
from cli_checks import assert_one_line_error as one_line_error
from test_formats import EXT, META, same, table_of, text_like

app = typer.Typer(add_completion=False)
register(app)
runner = CliRunner()
TABLE = table_of(text_like(3000, vocab=400, seed=9))
# the same commands in a fresh process (no CliRunner), to see real exit codes and stderr
SCRIPT = ("import typer, sys; from lookupkit.cli.cache_cmds import register; "
          "app = typer.Typer(add_completion=False); register(app); app()")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "unpacked"))


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def written(tmp_path, fmt, **kw):
    path = tmp_path / f"c{EXT[fmt]}"
    formats.write_table(TABLE, path, meta=META, **kw)
    return path


@pytest.mark.parametrize("fmt", list(EXT))
def test_inspect(tmp_path, fmt):
    path = written(tmp_path, fmt)
    result = cli("inspect", path, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["format"] == ("lkc" if fmt == "lkc.zst" else fmt)
    assert info["stats"]["n_keys"] == TABLE.n_keys and info["stats"]["n_pairs"] == TABLE.n_pairs
    assert info["stats"]["followers_cdf"][-1]["keys"] == 1.0
    assert (info["vocab"] == META["vocab"]) == fmt.startswith("lkc")
    text = cli("inspect", path)
    assert text.exit_code == 0
    assert f"2-grams     {TABLE.n_keys:,}" in text.stdout and "<= k followers" in text.stdout
    if fmt == "lkc":
        assert "fingerprint toy-fp" in text.stdout and "section     pairs" in text.stdout


@pytest.mark.parametrize("fmt", ["lkc", "ggngcmap", "llama"])
def test_verify(tmp_path, fmt):
    path = written(tmp_path, fmt)
    result = cli("verify", path)
    assert result.exit_code == 0 and result.stdout.startswith(f"ok: {path}")
    data = json.loads(cli("verify", path, "--json").stdout)
    assert data["ok"] and data["n_keys"] == TABLE.n_keys and data["checks"]


def test_verify_fails_on_corruption(tmp_path):
    path = written(tmp_path, "lkc")
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF  # inside key_t1, the last section
    path.write_bytes(bytes(raw))
    one_line_error(cli("verify", path), "key_t1", "sha256")
    assert cli("inspect", path).exit_code == 0  # inspect reads no section: it still works


def test_convert_chain(tmp_path):
    src = written(tmp_path, "lkc")
    chain = ["c.ggngcmap", "c.lcs", "d.lkc", "e.lkc.zst", "f.lkc"]
    prev = src
    for name in chain:
        result = cli("convert", prev, tmp_path / name)
        assert result.exit_code == 0, result.output
        assert same(read_table(tmp_path / name), TABLE)
        prev = tmp_path / name
    assert "note: ggngcmap files cannot record" in cli("convert", src, tmp_path / "g.ggngcmap").stderr
    header = json.loads(cli("inspect", tmp_path / "d.lkc", "--json").stdout)
    assert header["build"]["converted_from"] == {"format": "llama", "file": "c.lcs"}
    lkc_meta = json.loads(cli("inspect", tmp_path / "f.lkc", "--json").stdout)
    assert lkc_meta["vocab"] is None  # lost on the way through ggngcmap: not invented
    kept = cli("convert", src, tmp_path / "h.lkc")
    assert kept.exit_code == 0 and json.loads(cli("inspect", tmp_path / "h.lkc", "--json").stdout)["vocab"] == META["vocab"]


def test_convert_options(tmp_path):
    src = written(tmp_path, "lkc")
    assert cli("convert", src, tmp_path / "small.lkc", "--no-keys").exit_code == 0
    assert (tmp_path / "small.lkc").stat().st_size < src.stat().st_size
    assert not json.loads(cli("inspect", tmp_path / "small.lkc", "--json").stdout)["keys_stored"]
    assert cli("convert", src, tmp_path / "any.bin", "--format", "ggngcmap").exit_code == 0
    assert formats.detect(tmp_path / "any.bin") == "ggngcmap"
    one_line_error(cli("convert", src, tmp_path / "x.lcs", "--no-keys"), "--no-keys applies to lkc output only")
    one_line_error(cli("convert", src, tmp_path / "x.lkc", "--format", "safetensors"), "unknown format 'safetensors'",
                   "lkc, lkc.zst, ggngcmap, llama")
    one_line_error(cli("convert", src, tmp_path / "x.parquet"), "cannot tell the format")
    assert not (tmp_path / "x.lkc").exists() and not (tmp_path / "x.parquet").exists()


def test_bad_inputs_give_one_line(tmp_path):
    good = written(tmp_path, "lkc")
    raw = good.read_bytes()
    cases = {
        "missing.lkc": (None, "does not exist"),
        "truncated.lkc": (raw[:5000], "truncated"),
        "magic.lkc": (b"NOTACACH" + raw[8:], "wrong magic"),
        "future.lkc": (raw[:8] + (7).to_bytes(4, "little") + raw[12:], "newer lookupkit (format version 7)"),
        "text.lkc.zst": (b"plain text pretending to be zstd", "not zstd-compressed"),
        "short.ggngcmap": (b"ggngcmap" + b"\0" * 10, "shorter than its 24-byte header"),
        "odd.lcs": (b"\x01\0\0\0" * 6, "not a valid llama.cpp n-gram cache"),
        "dynamic.lcd": (b"\x01\0\0\0" * 7, "dynamic.lcd: not a static cache"),
    }
    for name, (data, fragment) in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        for command in ("inspect", "verify"):
            one_line_error(cli(command, path), fragment)
        one_line_error(cli("convert", path, tmp_path / "out.lkc"), fragment)
    one_line_error(cli("inspect", tmp_path), "is a directory")
    assert not (tmp_path / "out.lkc").exists()


def test_unwritable_output(tmp_path, monkeypatch):
    src = written(tmp_path, "lkc")
    one_line_error(cli("convert", src, tmp_path / "nodir" / "x.lkc"), "does not exist")

    def denied(*args, **kwargs):  # what mkstemp raises in a directory the user may not write
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", denied)
    one_line_error(cli("convert", src, tmp_path / "x.lkc"), "permission denied")
    assert not (tmp_path / "x.lkc").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions; the mkstemp EACCES path is "
                                               "covered by test_unwritable_output")
def test_unwritable_directory_for_a_normal_user(tmp_path):
    src = written(tmp_path, "lkc")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    one_line_error(cli("convert", src, locked / "x.lkc"), "permission denied")


def test_disk_full_in_a_real_process(tmp_path):
    """The file-size limit makes the write fail half-way, as a full disk does: one line, exit 2, no file."""
    src = written(tmp_path, "lkc")
    dst = tmp_path / "big.lcs"
    # A warm-up conversion first compiles (or loads) the kernels in this process, so numba's cache files
    # are never written under the limit (with a fresh NUMBA_CACHE_DIR they would be, and fail instead).
    limit = textwrap.dedent(f"""
        import resource, signal, runpy, sys
        sys.argv = ["lookupkit", "convert", {str(src)!r}, {str(tmp_path / "warm.lkc")!r}]
        try:
            exec({SCRIPT!r})
        except SystemExit:
            pass
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        sys.argv = ["lookupkit", "convert", {str(src)!r}, {str(dst)!r}]
        exec({SCRIPT!r})
    """)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "fresh-numba-cache")}
    proc = subprocess.run([sys.executable, "-c", limit], capture_output=True, text=True, timeout=300, env=env)
    assert (tmp_path / "warm.lkc").stat().st_size > 20000  # the limit is what stops the real conversion
    assert proc.returncode == 2, proc.stderr
    # the fresh numba cache also makes the warm-up announce its compile (once, before the failure)
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("compiling lookupkit's kernels (once")]
    assert len(lines) == 1 and lines[0].startswith("error: cannot write"), proc.stderr
    assert not dst.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".big")] == []


def test_real_process_exit_codes(tmp_path):
    good = written(tmp_path, "ggngcmap")
    ok = subprocess.run([sys.executable, "-c", SCRIPT, "verify", str(good)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: ")
    bad = tmp_path / "bad.ggngcmap"
    bad.write_bytes(good.read_bytes()[:-5])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, "inspect", str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_inspect_without_recoverable_keys(tmp_path):
    """A ggngcmap whose keys cannot be recovered still shows what the pairs tell; verify refuses it."""
    path = tmp_path / "odd.ggngcmap"
    formats.write_table(table_of([2**20 + 1, 2**20 + 2, 3]), path)
    result = cli("inspect", path)
    assert result.exit_code == 0 and "followers   per 2-gram: unavailable" in result.stdout
    assert json.loads(cli("inspect", path, "--json").stdout)["stats"]["source"] == "partial"
    one_line_error(cli("verify", path), "could not recover")
