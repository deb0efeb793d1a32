"""`--ray`: a local Ray cluster started by the test builds the same bytes as the local build (text, ids,
several documents, spilling on the driver side irrelevant); a worker killed mid-build is retried by Ray."""

from __future__ import annotations

import os

import numpy as np
import pytest

import needs  # noqa: E402

ray = needs.module("ray", "pip install 'lookupkit[ray]'")

from lookupkit import Tokenizer  # noqa: E402
from lookupkit.create import build_static  # noqa: E402
from lookupkit.create import parallel  # noqa: E402
from lookupkit.corpora import TextFile, TokenFile  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = [os.path.join(ROOT, p) for p in ("README.md", "formats/SPEC.md", "lookupkit/create/pipeline.py")]


@pytest.fixture(scope="module")
def cluster():
    """A 2-CPU local Ray instance for the module (started here, shut down after)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_local_same_bytes(tmp_path, cluster, monkeypatch):
    monkeypatch.setattr(parallel, "PIECE_BYTES", 3000)
    tok = Tokenizer.default()
    for fmt in ("lkc", "ggngcmap"):
        local, dist = tmp_path / f"local.{fmt}", tmp_path / f"ray.{fmt}"
        build_static([TextFile(p) for p in TEXTS], tok, local, token_cache=False, jobs=1)
        s = build_static([TextFile(p) for p in TEXTS], tok, dist, token_cache=False, jobs=2, ray="local")
        assert s["ray"] == "local" and dist.read_bytes() == local.read_bytes()


def test_ray_token_ids_same_bytes(tmp_path, cluster):
    rng = np.random.default_rng(5)
    ids = (rng.zipf(1.3, 200_000).clip(1, 3_000_000) - 1).astype("<i4")
    (tmp_path / "a.i32").write_bytes(ids.tobytes())
    local, dist = tmp_path / "l.lkc", tmp_path / "r.lkc"
    build_static([TokenFile(tmp_path / "a.i32")], None, local, token_cache=False)
    build_static([TokenFile(tmp_path / "a.i32")], None, dist, token_cache=False, ray="local")
    assert dist.read_bytes() == local.read_bytes()
