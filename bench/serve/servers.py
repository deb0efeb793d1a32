"""A server process of either kind, started on a free port: its command, time to ready, memory.

`Server(make_cmd, log, name)` is llama_server.ServerProcess: it starts the command, polls /health until it
answers 200 (llama-server answers 503 while it loads; `lookupkit serve` listens only once it is ready) and
records the wall time from the spawn to that answer and the process's memory then. Memory: VmRSS/VmHWM from /proc/PID/status; the resident and
proportional set of one file's mappings (a static cache) from /proc/PID/smaps, where the kernel splits a
shared page's PSS among the processes that map it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lookupkit.bench.llama_server import ServerProcess

READY_TIMEOUT_S = 600.0  # llama-server parses a 541 MB .lcs for ~90 s


def lookupkit_cmd(model: Path, port: int, threads: int, ctx: int, parallel: int, extra: list[str],
                  python: str = sys.executable) -> list[str]:
    """`lookupkit serve` as a user starts it (the installed module, not an in-process app; `python`: the
    interpreter whose lookupkit runs)."""
    return [python, "-m", "lookupkit", "serve", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-c", str(ctx), "-np", str(parallel), *extra]


class Server(ServerProcess):
    """llama_server.ServerProcess with a longer wait for ready (llama-server parses a 541 MB .lcs for ~90 s)
    and the memory of one file's mappings."""

    def __init__(self, make_cmd, log: Path | None = None, name: str = ""):
        super().__init__(make_cmd, log, name, ready_timeout=READY_TIMEOUT_S, stop_timeout=60.0)

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
