"""A server process of either kind, started on a free port: its command, time to ready, memory.

`Server(cmd, port)` starts `cmd`, polls /health until it answers 200 (llama-server answers 503 while it
loads; `lookupkit serve` listens only once it is ready) and records the wall time from the spawn to that
answer and the process's memory then. Memory: VmRSS/VmHWM from /proc/PID/status; the resident and
proportional set of one file's mappings (a static cache) from /proc/PID/smaps, where the kernel splits a
shared page's PSS among the processes that map it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from lookupkit.errors import InputError
from lookupkit.bench.llama_server import free_port, healthy, proc_memory, stop

READY_TIMEOUT_S = 600.0  # llama-server parses a 541 MB .lcs for ~90 s


def llama_server_cmd(binary: Path, model: Path, port: int, threads: int, ctx: int, parallel: int,
                     extra: list[str]) -> list[str]:
    """llama-server, greedy, no prompt cache (as every request is a new prompt), -np slots."""
    return [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
            "-tb", str(threads), "-c", str(ctx), "-np", str(parallel), "--temp", "0", "--no-cache-prompt", *extra]


def lookupkit_cmd(model: Path, port: int, threads: int, ctx: int, parallel: int, extra: list[str]) -> list[str]:
    """`lookupkit serve` as a user starts it (the installed module, not an in-process app)."""
    return [sys.executable, "-m", "lookupkit", "serve", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-c", str(ctx), "-np", str(parallel), *extra]


class Server:
    """`with Server(make_cmd, log) as s:` s.port, s.t_ready_s, s.memory_ready; stopped (SIGTERM) on exit."""

    def __init__(self, make_cmd, log: Path | None = None, name: str = ""):
        self.port = free_port()
        self.cmd = make_cmd(self.port)
        self.log, self.name = log, name
        self.proc = None
        self.t_ready_s = None
        self.memory_ready = {}

    def __enter__(self) -> "Server":
        out = open(self.log, "w") if self.log else subprocess.DEVNULL
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        while time.perf_counter() - t0 < READY_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise InputError(f"{self.name or self.cmd[0]} exited with {self.proc.returncode} before it was "
                                 f"ready (log: {self.log})")
            if healthy(self.port):
                self.t_ready_s = time.perf_counter() - t0
                self.memory_ready = proc_memory(self.proc.pid)
                return self
            time.sleep(0.02)
        self.stop()
        raise InputError(f"{self.name} not ready after {READY_TIMEOUT_S:.0f} s (log: {self.log})")

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        stop(self.proc, timeout=60)

    def memory(self) -> dict:
        return proc_memory(self.proc.pid)

    def file_memory(self, path: Path) -> dict:
        """Rss and Pss (bytes) of every mapping of `path` in this process (zeros if it maps none)."""
        return file_memory(self.proc.pid, path)


def file_memory(pid: int, path: Path) -> dict:
    target = str(Path(path).resolve())
    out = {"rss": 0, "pss": 0, "mappings": 0}
    inside = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
                inside = len(head) >= 6 and head[5] == target
                out["mappings"] += inside
            elif inside and head[0] in ("Rss:", "Pss:"):
                out[head[0][:-1].lower()] += int(head[1]) * 1024
    return out
