"""What a program pays before its first draft, paid early: the compiled kernels loaded in a background
thread while an engine loads its model, and a first compile announced once through logging.

`import lookupkit` loads no numba; the first draft then imports numba, the kernel modules, and loads
each kernel it calls from numba's cache (or compiles it, once after an install). An engine
adapter calls `start(...)` when it is constructed, so that the model's own load hides that
work, and `Warmup.wait()` before its first draft: it blocks until the warm-up is done and re-raises
what failed in it. Two threads never compile one kernel twice (numba compiles under one lock and
finds the other thread's result).

A first compile is announced by compile_notice (switched on by lookupkit.kernels, which every kernel
module imports).
"""

from __future__ import annotations

import threading
import time


WARM_TOKENS = (1, 2, 3, 1, 2, 3, 1, 2)  # a sequence whose 2-grams repeat: context, dynamic and static paths all run

_lock = threading.Lock()
_default: "Warmup | None" = None  # the process's one warm-up of the default kernels (kernels())


class Warmup:
    """One background warm-up: `wait()` blocks until it has run and re-raises what failed in it."""

    def __init__(self, fn, name: str = "lookupkit-warmup"):
        self.error: BaseException | None = None
        self.seconds: float | None = None
        self.value = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fn,), name=name, daemon=True)
        self._thread.start()

    def _run(self, fn) -> None:
        t = time.perf_counter()
        try:
            self.value = fn()
        except BaseException as exc:  # re-raised in the thread that waits: never lost in this one
            self.error = exc
        finally:
            self.seconds = time.perf_counter() - t
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self):
        """The warm-up's result, once it is done; its exception, raised here, if it failed."""
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self.value


def start(drafter_args: dict | None = None) -> Warmup:
    """Load the drafting kernels in a background thread. With `drafter_args` (Drafter's keyword
    arguments) the thread builds that Drafter, `wait()`'s result, and warms the kernels on a throwaway
    Drafter of the same configuration over the same static cache (same argument types, so the same
    compiled signatures); without, it warms them as a default Drafter uses them, with and without a
    static cache, and returns None."""
    return Warmup(lambda: _warm(drafter_args))


def kernels() -> Warmup:
    """The process's one warm-up of the default drafting kernels, started at the first call (a model
    loader calls it before loading; `wait_kernels()` before the first draft)."""
    global _default
    with _lock:
        if _default is None:
            _default = start()
        return _default


def wait_kernels() -> None:
    """Wait for kernels()' warm-up if one was started, re-raising what failed in it; else return at once."""
    if _default is not None:
        _default.wait()


def _warm(drafter_args: dict | None):
    from .draft.drafter import Drafter

    if drafter_args is None:
        drafter, probes = None, [Drafter(), Drafter(static=_tiny_static())]
    else:
        drafter = Drafter(**drafter_args)
        probes = [Drafter(**{**drafter_args, "dynamic": None, "history": None})]
    for probe in probes:
        probe.draft(list(WARM_TOKENS), 4)
        probe.draft(list(WARM_TOKENS) * 2, 4)  # tokens after a draft: the policy's trust learns (policy.chain.learn)
    return drafter


def _tiny_static():
    """A 2-gram static cache in memory, laid out as an opened file is (read-only arrays)."""
    import numpy as np

    from .counts.tables import StaticTable
    from .static.cache import StaticCache

    keys = np.array([[1, 2], [2, 3]], np.int32)
    return StaticCache.from_table(StaticTable(keys, np.array([0, 1, 2], np.int64), np.array([[3, 2], [1, 2]], np.int32)))
