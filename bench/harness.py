"""Where and on what a result was measured: the machine, the git commit (and whether the tree was dirty),
the results folder, ../shared, and warming a file's pages; shared by every benchmark of bench/."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def machine() -> dict:
    import numba

    return {"host": socket.gethostname(), "cpu": _cpu_model(), "cores": os.cpu_count(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
            "kernel": platform.release(), "loadavg_at_start": os.getloadavg()}


def git_state(repo: Path = Path(__file__).resolve().parents[1]) -> dict:
    """The commit the study ran on and whether the work tree had changes ({"commit": None} outside git)."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return {"commit": None, "dirty": None}
        status = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()),
                "dirty_files": status.stdout.splitlines()[:20] if status.stdout.strip() else []}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def warm_file(path: Path) -> None:
    """Read the whole file once, so its pages are in the page cache (a warm open or replay)."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass
