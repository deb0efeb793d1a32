"""Run one command as a child and measure it: wall time, its own peak RSS (wait4), its JSON output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass


@dataclass
class Run:
    seconds: float
    peak_rss: int  # bytes, the child's own maximum resident set
    output: dict


def run(cmd: list[str], env: dict | None = None, timeout: float = 3600) -> Run:
    """Run `cmd` to completion; raise RuntimeError with its stderr tail if it fails."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    out, err = [], []
    pumps = [threading.Thread(target=lambda s=s, d=d: d.extend(s), daemon=True)
             for s, d in ((proc.stdout, out), (proc.stderr, err))]
    for th in pumps:
        th.start()
    deadline = time.monotonic() + timeout
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            raise RuntimeError(f"timed out after {timeout:.0f} s: {' '.join(cmd)}")
        time.sleep(0.005)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    for th in pumps:
        th.join()
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{''.join(err).strip()[-2000:]}")
    return Run(seconds, rusage.ru_maxrss * 1024, last_json("".join(out)))


def last_json(text: str) -> dict:
    """The whole output as a JSON object, else its last line that parses as one ({} if none)."""
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            return obj
    except ValueError:
        pass
    for line in reversed(text.strip().splitlines()):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def script(name: str, *args: str) -> list[str]:
    """A lookupkit console script, run from the same interpreter's bin directory."""
    return [os.path.join(os.path.dirname(sys.executable), name), *args]
