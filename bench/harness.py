"""What every study of bench/ stands on, written once: where and on what a result was measured
(machine, git state, load average), where its inputs are (../shared) and its outputs go, whether the
machine is quiet enough to measure, the spread of repeated runs, the report's guards, and the
entry point (argparse -> LookupkitError -> one `error:` line).

Outputs: a study takes an explicit path; its default is the repository's bench/ only when this is a
source checkout (`source_checkout()`), else the bench cache dir (`bench_dir()`), never the folder a
module is installed in (site-packages).
"""

from __future__ import annotations

import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MB = 1e6
MIN_RUNS = 3  # a headline rests on at least this many runs


# -- where: inputs, outputs, the cache -------------------------------------------------------------------

def source_checkout() -> Path | None:
    """The repository root when bench/ runs from a source checkout (an editable install), else None."""
    root = HERE.parent
    return root if HERE.name == "bench" and (root / "pyproject.toml").is_file() else None


def bench_dir() -> Path:
    """The bench cache: models, builds and work files ($LOOKUPKIT_CACHE_DIR/bench, else ~/.cache/lookupkit/bench)."""
    root = os.environ.get("LOOKUPKIT_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "lookupkit") / "bench"


def shared_dir() -> Path:
    """The project's read-only data: $LOOKUPKIT_SHARED, else ../shared beside the checkout (or the cache)."""
    env = os.environ.get("LOOKUPKIT_SHARED")
    if env:
        return Path(env)
    root = source_checkout()
    return (root.parent if root else bench_dir()) / "shared"


def output_dir() -> Path:
    """Where reports (markdown, plots) go by default: the repo's bench/ in a checkout, else the bench cache."""
    return HERE if source_checkout() else bench_dir()


SHARED = shared_dir()
RESULTS = output_dir() / "results"  # raw results JSON by default


# -- on what: provenance ---------------------------------------------------------------------------------

def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, as every study records them."""
    return [round(x, 2) for x in os.getloadavg()]


def machine(gate: bool = False, log=None) -> dict:
    """The machine and its load; with gate, also the quiet-machine gate's reading (it warns when busy)."""
    import numba
    import numpy as np

    out = {"host": socket.gethostname(), "cpu": _cpu_model(), "cores": os.cpu_count(),
           "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
           "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
           "kernel": platform.release(), "loadavg_at_start": loadavg()}
    if gate:
        out["others_cores_at_start"] = round(quiet_gate(log=log), 3)
    return out


def command(module: str, argv=None) -> str:
    """The command line a study was run with, quoted so that it runs again as written (argv: sys.argv[1:])."""
    import shlex

    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def replace_section(text: str, heading: str, new: str) -> str:
    """A markdown text with the section that starts at `heading` (up to the next '## ' heading or the end)
    replaced by `new`, or `new` appended: how a study updates its section of RESULTS.md."""
    at = text.find(heading)
    if at < 0:
        return text.rstrip("\n") + "\n\n" + new
    nxt = text.find("\n## ", at + len(heading))
    return text[:at] + new + ("\n" + text[nxt + 1:] if nxt >= 0 else "")


def write_text(path: Path, text: str) -> None:
    """A study's output, written whole or not at all (files.atomic_writer): an interrupted study never leaves
    half a results file, nor loses the runs one already held."""
    from lookupkit.files import atomic_writer

    with atomic_writer(path) as f:
        f.write(text.encode())


def git_state(repo: Path | None = None) -> dict:
    """The commit the study ran on and whether the work tree had changes ({"commit": None} outside git)."""
    import subprocess

    repo = repo or source_checkout() or HERE

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


# -- whether: the quiet-machine gate ---------------------------------------------------------------------

def others_cpu(seconds: float = 1.0) -> float:
    """How many cores other processes used over `seconds` (psutil, via integrations.compare.CpuSampler)."""
    from lookupkit.integrations.compare import CpuSampler

    s = CpuSampler()
    s.start()
    time.sleep(seconds)
    return s.stop()


def quiet_gate(max_cores: float = 0.25, seconds: float = 1.0, refuse: bool = False, log=None) -> float:
    """Measure other processes' CPU for a moment; above max_cores warn (or, with refuse, raise InputError:
    a timing taken beside a busy neighbour is not a result). Returns the cores measured."""
    busy = others_cpu(seconds)
    if busy > max_cores:
        msg = (f"other processes used {busy:.2f} cores (> {max_cores}) while the bench checked the machine: "
               "timings will be noisy")
        if refuse:
            from lookupkit.errors import InputError

            raise InputError(msg + "; wait for a quiet machine")
        (log or _stderr)(f"warning: {msg}")
    return busy


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


# -- how much: spread of repeated runs -------------------------------------------------------------------

def median_min_max(values) -> tuple[float, float, float]:
    values = list(values)
    return statistics.median(values), min(values), max(values)


def spread(values) -> dict | None:
    """{median, min, max, n} of the values that are not None (None if there are none)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    med, lo, hi = median_min_max(values)
    return {"median": med, "min": lo, "max": hi, "n": len(values)}


# -- the report's guards ---------------------------------------------------------------------------------

def verdict(value, limit: float, size_ok: bool = True, n_runs: int | None = None) -> str:
    """"yes" / "**no**" only for a real measurement (> 0), at the size the target is defined for, from
    at least MIN_RUNS runs (when n_runs is given); else "not measured" or "not checked", never "met"."""
    if value is None or not isinstance(value, (int, float)) or value != value or value <= 0:
        return "not measured"
    if not size_ok:
        return "not checked"
    if n_runs is not None and n_runs < MIN_RUNS:
        return f"not checked ({n_runs} run{'s' if n_runs != 1 else ''} < {MIN_RUNS})"
    return "yes" if value <= limit else "**no**"


# -- the entry point -------------------------------------------------------------------------------------

def entry(run, argv=None) -> None:
    """Call run(argv); a LookupkitError (bad input, missing data) is one `error:` line and exit status 1."""
    from lookupkit.errors import LookupkitError

    try:
        run(sys.argv[1:] if argv is None else argv)
    except LookupkitError as exc:
        sys.exit(f"error: {exc}")


def load_results(path: Path, kind: str, what: str, writer: str) -> dict:
    """One study's results JSON: InputError when it cannot be read or another study wrote it (its "kind")."""
    import json

    from lookupkit.errors import InputError

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {kind} results {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise InputError(f"{path} is not {what} ({writer} writes one)")
    return data


def report_entry(prog: str, render, argv=None) -> None:
    """`python -m lookupkit.bench.STUDY.report RESULTS.json [-o DIR]`: render(results, out_dir) writes the
    study's markdown (and plots) into DIR, default output_dir(), and returns the markdown, printed here."""
    import argparse

    def run(args):
        ap = argparse.ArgumentParser(prog=prog, description="Render one results JSON of the study as markdown.")
        ap.add_argument("results", type=Path, help="the study's results JSON (bench/results/...)")
        ap.add_argument("-o", "--out-dir", type=Path, default=output_dir(),
                        help=f"where the markdown and plots go (default {output_dir()}: the repo's bench/ in a "
                             "source checkout, else the bench cache)")
        a = ap.parse_args(args)
        print(render(a.results, a.out_dir))

    entry(run, argv)

