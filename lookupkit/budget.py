"""How a build divides its memory budget, and the checks that turn impossible budgets into one line.

`--memory-budget` bounds what counting and writing hold on top of each process's fixed cost (Python,
numba, the vocabulary): the counters of the `jobs` processes share it equally (each spills its
sorted runs to the work directory beyond its share, `counts.spill`), and the write phase needs
CONSTMAP_BYTES_PER_KEY per distinct 2-gram for the constmap (checked before it starts).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil

from .counts.spill import chunk_tokens_for
from .errors import InputError
from .formats.lkc_stream import CONSTMAP_BYTES_PER_KEY

DEFAULT_BUDGET = 1 << 30
MIN_PER_JOB = 16 << 20  # one chunk of 2^16 tokens and its runs, with room to merge
MAX_JOBS = 256


@dataclass(frozen=True)
class Plan:
    jobs: int
    total: int  # bytes
    per_job: int
    chunk_tokens: int
    ranges: int  # key ranges merged in parallel


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def plan(jobs: int, memory_budget: int | None, chunk_tokens: int) -> Plan:
    """Check `jobs` and the budget; the per-process share and the counting chunk size."""
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    if jobs > MAX_JOBS:
        raise InputError(f"--jobs {jobs} is more than {MAX_JOBS} processes; this machine has {os.cpu_count()} cores")
    total = DEFAULT_BUDGET if memory_budget is None else memory_budget
    if not isinstance(total, int) or total <= 0:
        raise InputError(f"--memory-budget must be a positive size, got {memory_budget!r}")
    ram = psutil.virtual_memory().total
    if total > ram:
        raise InputError(f"--memory-budget {_mb(total)} exceeds this machine's memory ({_mb(ram)})")
    if total < jobs * MIN_PER_JOB:
        raise InputError(f"--memory-budget {_mb(total)} is too small to make progress with {jobs} job(s): "
                         f"the minimum is {_mb(jobs * MIN_PER_JOB)} ({_mb(MIN_PER_JOB)} per job)")
    per_job = total // jobs
    return Plan(jobs, total, per_job, chunk_tokens_for(per_job, chunk_tokens), ranges=jobs if jobs > 1 else 1)


def check_write(plan: Plan, n_keys: int) -> None:
    """The write phase builds the constmap in memory: refuse a budget that cannot hold it."""
    need = n_keys * CONSTMAP_BYTES_PER_KEY
    if need > plan.total:
        raise InputError(f"--memory-budget {_mb(plan.total)} is too small to write {n_keys:,} 2-grams: the "
                         f"constmap needs {_mb(need)}; the minimum for this corpus is {_mb(need)}")


@contextlib.contextmanager
def work_dir(temp_dir: str | os.PathLike | None) -> Iterator[str]:
    """A fresh directory for spilled runs and merged parts, removed afterwards whatever happens."""
    parent = Path(temp_dir) if temp_dir is not None else Path(tempfile.gettempdir())
    if not parent.is_dir():
        raise InputError(f"temporary directory {parent} does not exist")
    try:
        path = tempfile.mkdtemp(prefix="lookupkit-build-", dir=parent)
    except OSError as exc:
        raise InputError(f"cannot create a work directory in {parent}: {exc.strerror or exc}") from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def disk_errors(path: str) -> Iterator[None]:
    """A full disk under the work directory as one line (the directory is removed by work_dir)."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise InputError(f"no space left on device for temporary files in {os.path.dirname(path)} "
                             "(temporary files removed; free space or set --temp-dir/TMPDIR to a larger disk)") from None
        raise


def children_peak_rss() -> int:
    """The largest peak RSS among this process's finished children (worker processes)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
