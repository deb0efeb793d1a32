"""A server's life with one owner, in order: start the engine thread; serve; and stop — stop accepting, let the
requests in flight finish for --shutdown-timeout, abort the rest, wait until the engine thread has ended, save the
histories, wait until no handler reads the model, free the model.

The command (`serve`), the app's lifespan hook and the tests all go through one Lifecycle, so nothing frees what
another thread still uses: the engine thread decodes until its step ends (one n_batch chunk at most), and handlers
tokenize in the threadpool only through `reading`, which close() waits for and refuses once it has begun.
"""

from __future__ import annotations

import signal
import threading

from .engine import Busy


class Lifecycle:
    def __init__(self, served):
        self.served = served
        self._cv = threading.Condition()
        self._readers = 0
        self._closing = False
        self._engine_stopped = False
        self.saved: str | None = None  # what the last save of the histories wrote (--state), once closed

    def start(self) -> None:
        """The engine thread (the app's lifespan start)."""
        self.served.engine.start()

    def stop_engine(self) -> None:
        """Abort the jobs left and wait until the engine thread has ended (the app's lifespan end); again: nothing."""
        with self._cv:
            if self._engine_stopped:
                return
            self._engine_stopped = True
        self.served.engine.close()

    def close(self) -> None:
        """The end, in order: the engine stopped, the histories saved (--state), the model freed once no handler
        reads it; any thread may call it, more than once."""
        self.stop_engine()
        with self._cv:
            if self._closing:
                return
            self._closing = True
            while self._readers:
                self._cv.wait()
        try:
            if self.served.keeper is not None:
                self.saved = self.served.keeper.close()
        finally:
            self.served.llm.close()

    def reading(self, fn, *args):
        """fn(*args) while it may read the model (a handler's tokenizing, in the threadpool): close() waits for
        it; once close() has begun, the server is shutting down (503)."""
        with self._cv:
            if self._closing:
                raise Busy("the server is shutting down: send the request to another server")
            self._readers += 1
        try:
            return fn(*args)
        finally:
            with self._cv:
                self._readers -= 1
                self._cv.notify_all()

    def serve(self, sock, app, shutdown_timeout: float, flush_s: float, on_hup) -> None:
        """uvicorn on `sock` until SIGTERM or SIGINT, then close(): requests in flight get shutdown_timeout
        seconds to finish, then the engine aborts them (their streams end with an error event, flush_s to send
        it). SIGHUP calls on_hup in a thread of its own."""
        import uvicorn

        life = self

        class Server(uvicorn.Server):
            timer = None

            def handle_exit(self, sig, frame) -> None:
                super().handle_exit(sig, frame)
                if self.timer is None:
                    self.timer = threading.Timer(shutdown_timeout, life.stop_engine)
                    self.timer.daemon = True
                    self.timer.start()

        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=shutdown_timeout + flush_s)
        # uvicorn handles SIGTERM (stop accepting, wait, shut the app down) and then raises the signal again for
        # the handler it found installed: with this one, a no-op, the command exits 0.
        signal.signal(signal.SIGTERM, lambda *_: None)
        signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=on_hup, daemon=True).start())
        try:
            Server(config).run(sockets=[sock])
        finally:
            self.close()
