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


def _pss(pid: int) -> int:
    """A process's proportional set size (bytes): each page shared by k processes counts 1/k (Linux)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration, ValueError):
        return 0


def run_tree(cmd: list[str], cwd: str | os.PathLike, interval: float = 0.05) -> dict:
    """Run cmd; wall seconds, the peak RSS and the peak PSS of its process tree (each summed over the processes
    every `interval` s: RSS counts a page the forked workers share once per process, PSS once in all) and its
    JSON output. Raises on a failure. (Not wait4's ru_maxrss: a child started by this process inherits this
    process's own high-water mark across fork + exec.)"""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = [], []
    pumps = [threading.Thread(target=lambda s=s, d=d: d.extend(s), daemon=True)
             for s, d in ((proc.stdout, out), (proc.stderr, err))]
    for th in pumps:
        th.start()
    root, tree_peak, pss_peak = psutil.Process(proc.pid), 0, 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            tree_peak = max(tree_peak, sum(p.memory_info().rss for p in tree))
            pss_peak = max(pss_peak, sum(_pss(p.pid) for p in tree))
        except psutil.Error:  # a worker (or the driver) ended between listing and reading
            pass
        time.sleep(interval)
    seconds = time.perf_counter() - t0
    for th in pumps:
        th.join()
    if proc.returncode:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{''.join(err)[-2000:]}")
    return {"seconds": seconds, "sampled_tree_rss": tree_peak, "sampled_tree_pss": pss_peak,
            "output": last_json("".join(out))}
