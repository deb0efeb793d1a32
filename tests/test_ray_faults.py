"""`--ray`: a Ray worker killed (SIGKILL) while it counts a piece. With Ray's retries the build finishes
and writes the local build's bytes; with retries off it fails with one line, and nothing (no partial or
temporary file, no work directory) is left at the target."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

import needs  # noqa: E402

ray = needs.module("ray", "pip install 'lookupkit[ray]'")

from lookupkit.create import build_static, parallel  # noqa: E402
from lookupkit.create import ray_tasks as ray_build  # noqa: E402
from lookupkit.corpora import TokenFile  # noqa: E402
from lookupkit.errors import LookupkitError  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def ids_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ids") / "a.i32"
    rng = np.random.default_rng(11)
    path.write_bytes((rng.zipf(1.2, 6_000_000).clip(1, 2_000_000) - 1).astype("<i4").tobytes())
    return path


def _busy_workers() -> list[psutil.Process]:
    """Ray worker processes running a `_piece` task now (Ray titles them ray::<function>)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith("ray::_piece"):
            out.append(p)
    return out


class Killer(threading.Thread):
    """Kill the first worker seen running a piece; records its pid."""

    def __init__(self):
        super().__init__(daemon=True)
        self.killed, self.stop = None, threading.Event()

    def run(self):
        while not self.stop.is_set() and self.killed is None:
            for p in _busy_workers():
                try:
                    os.kill(p.pid, signal.SIGKILL)
                    self.killed = p.pid
                    break
                except OSError:
                    continue
            time.sleep(0.01)


def _build(ids_file, out, **kw):
    killer = Killer()
    killer.start()
    try:
        return build_static([TokenFile(ids_file)], None, out, token_cache=False, jobs=2, ray="local",
                            temp_dir=out.parent, **kw)
    finally:
        killer.stop.set()
        killer.join()
        assert killer.killed is not None, "no Ray worker was seen running a piece"


def test_killed_worker_is_retried_same_bytes(tmp_path, cluster, ids_file, monkeypatch):
    local = tmp_path / "local.lkc"
    build_static([TokenFile(ids_file)], None, local, token_cache=False, jobs=1)
    monkeypatch.setattr(parallel, "IDS_PIECE", 400_000)  # 15 pieces: a kill lands on one of them
    out = tmp_path / "ray" / "r.lkc"
    out.parent.mkdir()
    _build(ids_file, out)
    assert out.read_bytes() == local.read_bytes()
    assert sorted(os.listdir(out.parent)) == ["r.lkc"]  # the work directory is gone


def test_killed_worker_without_retries_one_line_no_file(tmp_path, cluster, ids_file, monkeypatch):
    monkeypatch.setattr(parallel, "IDS_PIECE", 400_000)
    monkeypatch.setattr(ray_build, "RETRIES", 0)
    out = tmp_path / "r.lkc"
    with pytest.raises(LookupkitError) as info:
        _build(ids_file, out)
    msg = str(info.value)
    assert "\n" not in msg and "Ray task failed" in msg and "nothing was written" in msg, msg
    assert os.listdir(tmp_path) == []  # no output, no temp file, no work directory
