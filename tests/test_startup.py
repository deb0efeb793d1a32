"""A free start-up: `import lookupkit` and the commands that need no kernel import no numba (fresh
processes, sys.modules), the engine adapters load the kernels in a background thread (one warm-up,
its failure re-raised at first use), and a first compile is announced once through logging."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lookupkit.counts.tables import StaticTable
from lookupkit.formats import write_table

REPORT = ("import json, sys; print(json.dumps({'numba': 'numba' in sys.modules, "
          "'modules': sorted(m for m in sys.modules if m.startswith('lookupkit'))}))")


def fresh(code: str, *args, env: dict | None = None, cwd="/") -> dict:
    """Run `code` in a new interpreter (from `cwd`, so no source folder shadows the install); its last JSON line."""
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "stderr": r.stderr}


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory) -> Path:
    keys = np.array([[1, 2], [1, 3], [5, 9]], np.int32)
    starts = np.array([0, 2, 3, 5], np.int64)
    pairs = np.array([[4, 3], [7, 1], [2, 2], [1, 1], [8, 5]], np.int32)
    path = tmp_path_factory.mktemp("startup") / "small.lkc"
    write_table(StaticTable(keys, starts, pairs), path)
    return path


def test_import_lookupkit_imports_no_numba():
    out = fresh("import lookupkit; " + REPORT)
    assert out["numba"] is False, out["modules"]


def test_a_face_still_imports_on_first_use():
    out = fresh("import sys, lookupkit; d = lookupkit.Drafter; from lookupkit import StaticCache, Tokenizer; "
                "from lookupkit.replay import ReplayTrace; import json; print(json.dumps({'d': d.__module__}))")
    assert out["d"] == "lookupkit.draft.drafter"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        import lookupkit

        lookupkit.Nope  # noqa: B018


def test_reading_a_gguf_vocabulary_loads_no_encoder_and_no_numba():
    out = fresh("import lookupkit.tokenizer.gguf, lookupkit.tokenizer.vocab; " + REPORT)
    assert out["numba"] is False and "lookupkit.tokenizer.encode" not in out["modules"]


WRAP = ("import atexit, json, sys; atexit.register(lambda: print(json.dumps({'numba': 'numba' in sys.modules}))); "
        "sys.argv = ['lookupkit', *sys.argv[1:]]; from lookupkit.cli.main import main; main()")


BUILDS_A_MAP = pytest.mark.xfail(strict=True, reason="convert writes its output's binary-fuse map with the compiled "
                                 "builder (formats.constmap_build); reading and checking the input need no kernel")


@pytest.mark.parametrize("command", ["inspect", pytest.param("convert", marks=BUILDS_A_MAP), "open"])
def test_commands_that_need_no_kernel_import_no_numba(command, small_cache, tmp_path):
    if command == "open":
        out = fresh("import sys; from lookupkit import StaticCache; StaticCache.open(sys.argv[1]); " + REPORT,
                    small_cache)
    else:
        argv = [small_cache] if command == "inspect" else [small_cache, tmp_path / "b.ggngcmap"]
        out = fresh(WRAP, command, *argv)
    assert out["numba"] is False


def test_a_failed_warm_up_is_raised_where_it_is_waited_for_every_time():
    from lookupkit.errors import InputError
    from lookupkit.warmup import Warmup, start

    w = start({"policy": "no-such-policy"})
    for _ in range(2):
        with pytest.raises(InputError, match="unknown policy 'no-such-policy'"):
            w.wait()
    assert w.done() and w.seconds is not None
    boom = Warmup(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        boom.wait()


def test_the_warm_up_builds_the_drafter_it_was_asked_for_over_the_same_cache(small_cache):
    from lookupkit import Drafter, StaticCache
    from lookupkit.warmup import start

    cache = StaticCache.open(small_cache)
    drafter = start({"static": cache, "policy": "lookupkit"}).wait()
    assert isinstance(drafter, Drafter) and drafter.static is cache and drafter.policy == "lookupkit"
    assert len(drafter.sequence) == 0  # warmed on a throwaway Drafter: this one follows no sequence yet
    assert drafter.draft([1, 2], 4) == Drafter(static=cache, policy="lookupkit").draft([1, 2], 4)


COMPILES = r'''
import json, sys, threading
import numpy as np
from numba.core import event
from lookupkit.compile_notice import announce_first_compile
from lookupkit.warmup import Warmup
from lookupkit import kernels

compiled = []
class Record(event.Listener):
    def on_start(self, ev): compiled.append(ev.data["dispatcher"].py_func.__qualname__)
    def on_end(self, ev): pass
event.register("numba:compile", Record())
announce_first_compile()
announce_first_compile()  # a second call adds no second listener
ws = [Warmup(lambda: kernels.mix(np.uint64(7))) for _ in range(3)]
here = kernels.mix(np.uint64(7))
assert all(w.wait() == here for w in ws)
kernels.same_run(np.arange(4, dtype=np.int32), 3, 3, 2)
print(json.dumps({"compiled": compiled}))
'''


def test_a_first_compile_is_announced_once_and_a_cached_kernel_not_at_all(tmp_path):
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("NUMBA_DEBUG_CACHE", None)
    first = fresh(COMPILES, env=env)
    assert first["compiled"].count("mix") == 1  # four threads asked at once: compiled once
    assert "same_run" in first["compiled"]
    notes = [ln for ln in first["stderr"].splitlines() if "compiling lookupkit's kernels" in ln]
    assert len(notes) == 1 and str(tmp_path / "numba") in notes[0], first["stderr"]
    again = fresh(COMPILES, env=env)  # the same cache directory: loaded, not compiled
    assert again["compiled"] == [] and "compiling" not in again["stderr"], again["stderr"]


def test_a_models_vocabulary_is_read_once_and_remembered_per_file(tmp_path, monkeypatch):
    import os
    import shutil

    from lookupkit.integrations import engines

    model = tmp_path / "m.gguf"
    shutil.copy(next((Path(engines.__file__).parents[1] / "data").glob("*.gguf")), model)
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path / "cache"))
    reads = []
    real = engines.vocab_identity
    monkeypatch.setattr(engines, "vocab_identity", lambda p: reads.append(p) or real(p))
    first = engines.gguf_vocab(model)
    assert engines.gguf_vocab(model) == first and len(reads) == 1  # the second process-like call reads nothing
    os.utime(model, ns=(1, 1))  # the file changed (as far as size and mtime tell): read again
    assert engines.gguf_vocab(model) == first and len(reads) == 2
    (tmp_path / "cache" / engines.REMEMBERED).write_text("not json")
    assert engines.gguf_vocab(model) == first and len(reads) == 3  # a damaged store is a miss, not an error
