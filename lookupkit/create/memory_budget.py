"""Sizes on the command line, how a build or merge divides its memory budget, and the checks that turn
impossible budgets into one line.

`parse_size` reads every size flag (`--max-bytes`, which bounds the text: `corpora.stream.TextBudget`;
`--memory-budget`, which bounds memory: `plan_memory`).

`--memory-budget` bounds what counting and writing hold on top of each process's fixed cost (Python,
numba, the vocabulary): the counters of the `jobs` processes share it equally (each spills its
sorted runs to the work directory beyond its share, `counts.spill`), and the write phase needs
CONSTMAP_BYTES_PER_KEY per distinct 2-gram for the constmap (checked before it starts).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import resource
import shutil
import tempfile
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Iterator

import psutil

from lookupkit.errors import InputError
from lookupkit.formats.constmap import CONSTMAP_BYTES_PER_KEY

DEFAULT_MEMORY_BUDGET = 1 << 30
MIN_PER_JOB = 16 << 20  # one chunk of 2^16 tokens and its runs, with room to merge
MAX_JOBS = 256

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*")


def parse_size(text: str) -> int:
    """'25MB' -> 25*10^6, '25MiB' -> 25*2^20, '25000000' -> 25000000; anything else is an InputError."""
    m = _SIZE.fullmatch(str(text))
    unit = m and _UNITS.get(m.group(2).lower())
    if not unit:
        raise InputError(f"cannot read size {text!r}: use a positive number of bytes like 25000000, 25MB or 25MiB")
    try:
        value = Decimal(m.group(1)) * unit
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        raise InputError(f"cannot read size {text!r}") from None
    if value != value.to_integral_value() or value <= 0:
        raise InputError(f"size {text!r} must be a positive whole number of bytes")
    return int(value)


def size_text(n: int) -> str:
    """A size as parse_size reads it back, in the largest binary unit that divides it: 1073741824 -> '1GiB'."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n % _UNITS[unit.lower()] == 0:
            return f"{n // _UNITS[unit.lower()]}{unit}"
    return str(n)


def parse_memory_budget(text: str | None) -> int | None:
    """--memory-budget SIZE in bytes (None: the default); a negative size is refused with an example."""
    if text is None:
        return None
    if text.strip().startswith("-"):
        raise InputError(f"--memory-budget {text} is negative; give a size like 1GiB or 800MB")
    return parse_size(text)


@dataclass(frozen=True)
class MemoryPlan:
    jobs: int
    total: int  # bytes
    per_job: int
    chunk_tokens: int
    ranges: int  # key ranges merged in parallel


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def plan_memory(jobs: int, memory_budget: int | None, chunk_tokens: int) -> MemoryPlan:
    """Check `jobs` and the budget; the per-process share and the counting chunk size."""
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    if jobs > MAX_JOBS:
        raise InputError(f"--jobs {jobs} is more than {MAX_JOBS} processes; this machine has {os.cpu_count()} cores")
    total = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    if not isinstance(total, int) or total <= 0:
        raise InputError(f"--memory-budget must be a positive size, got {memory_budget!r}")
    ram = psutil.virtual_memory().total
    if total > ram:
        raise InputError(f"--memory-budget {_mb(total)} exceeds this machine's memory ({_mb(ram)})")
    if total < jobs * MIN_PER_JOB:
        raise InputError(f"--memory-budget {_mb(total)} is too small to make progress with {jobs} job(s): "
                         f"the minimum is {_mb(jobs * MIN_PER_JOB)} ({_mb(MIN_PER_JOB)} per job)")
    per_job = total // jobs
    from lookupkit.counts.spill import chunk_tokens_for  # numba's: imported when a build plans its memory

    return MemoryPlan(jobs, total, per_job, chunk_tokens_for(per_job, chunk_tokens), ranges=jobs if jobs > 1 else 1)


def check_write(plan: MemoryPlan, n_keys: int) -> None:
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
