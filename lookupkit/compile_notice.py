"""A first compile of lookupkit's kernels, announced once per process through logging, by the library.

numba compiles a kernel only when its cache (NUMBA_CACHE_DIR, else the source's __pycache__, else
~/.cache/numba) holds none for it: once after an install, ~COMPILE_S s for the drafting kernels, a
silent pause without this notice. `announce_first_compile()` listens to numba's "numba:compile" event
(fired on a cache miss only, never when a kernel loads from the cache) and logs the first one that
compiles a lookupkit kernel (lookupkit.kernels switches it on at import) to the "lookupkit" logger at WARNING: shown on stderr without any logging
configuration; `logging.getLogger("lookupkit").setLevel(logging.ERROR)` silences it.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("lookupkit")

COMPILE_S = 15  # a first compile of the drafting kernels, the most bench/startup/run.py timed (bench/RESULTS.md)

_lock = threading.Lock()
_listening = False
_announced = False


def announce_first_compile() -> None:
    """Log once, at the first compile of a lookupkit kernel in this process (a numba cache miss)."""
    global _listening
    with _lock:
        if _listening:
            return
        _listening = True
    from numba.core import event

    class CompileNotice(event.Listener):
        def on_start(self, ev) -> None:
            _announce((ev.data or {}).get("dispatcher"))

        def on_end(self, ev) -> None:
            pass

    event.register("numba:compile", CompileNotice())


def _announce(dispatcher) -> None:
    global _announced
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
    if not module.startswith("lookupkit."):
        return
    with _lock:
        if _announced:
            return
        _announced = True
    where = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
    log.warning("compiling lookupkit's kernels (once after an install, ~%d s; cached in %s)", COMPILE_S,
                where or "numba's cache directory")
