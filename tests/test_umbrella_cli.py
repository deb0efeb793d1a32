"""The umbrella command's `tokenize` and `demo`, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def lookupkit(*args: str, env_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from lookupkit.cli.main import main; main()", *args],
                          capture_output=True, text=True, env={"LOOKUPKIT_CACHE_DIR": str(env_dir), "PATH": "/usr/bin:/bin"})


def test_tokenize_gives_llamacpp_ids_of_the_wikitext_test_split(tmp_path):
    raw = SHARED / "corpora" / "wiki.test.raw"
    if not raw.exists():
        pytest.skip("../shared/corpora is absent (a fresh clone has no shared data)")
    out = tmp_path / "ids.i32"
    r = lookupkit("tokenize", "-f", str(raw), "-m", str(SHARED / "vocab" / "ggml-vocab-qwen2.gguf"), "-o", str(out),
                  "--json", env_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tokens"] == out.stat().st_size // 4
    expected = np.fromfile(SHARED / "reference" / "wikitext" / "wiki.test.qwen2.i32", dtype="<i4")
    assert np.array_equal(np.fromfile(out, dtype="<i4"), expected)


def test_tokenize_bad_input_is_one_line_and_leaves_nothing(tmp_path):
    out = tmp_path / "ids.i32"
    r = lookupkit("tokenize", "-f", str(tmp_path / "missing.txt"), "-o", str(out), env_dir=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr and not out.exists()


def test_demo_builds_opens_drafts_and_replays(tmp_path):
    r = lookupkit("demo", "--json", "--cache-dir", str(tmp_path), env_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["n_keys"] > 100_000 and Path(res["cache"]).exists()
    none, static = res["replay"]["no static cache"], res["replay"]["stdlib static cache"]
    # the static cache drafts where the context alone has nothing, and some of it is right
    assert static["n_drafted"] > none["n_drafted"] and static["n_accept"] > none["n_accept"]
    assert all(isinstance(t, int) for t in res["example"]["draft"])
    again = lookupkit("demo", "--json", "--cache-dir", str(tmp_path), env_dir=tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["built"] is None  # reused, not rebuilt
