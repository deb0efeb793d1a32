"""Start-up: from interpreter start + `import lookupkit` to the first draft, in fresh processes.

Scenarios (each child a new `python -c` process started from an empty working directory, so no
source folder shadows the installation; times are the parent's wall clock from spawn to the child's
first-draft line, medians of >= 3 runs):

* warm: an installed copy whose numba compile cache is filled and whose files are in the page cache
  (the headline), and the editable repository the same way;
* fresh install: the package copied as pip installs it (sources + compiled .pyc, no numba cache:
  numba's in-tree `__pycache__/*.nbi|*.nbc` are never copied) into a new directory, the numba cache
  files deleted before each run; and the repository with NUMBA_CACHE_DIR pointing to a new empty
  directory (numba's locators are tried in order UserProvided (NUMBA_CACHE_DIR) → InTree (the
  source's `__pycache__`, if writable) → UserWide (~/.cache/numba or $XDG_CACHE_HOME/numba), so with
  NUMBA_CACHE_DIR set the in-tree caches are not consulted);
* read-only install: a copy bind-mounted read-only (root can write through chmod, so a mode change
  would prove nothing), XDG_CACHE_HOME in a new directory: where numba puts the cache and whether
  later runs load it;
* private memory of a process holding a Drafter over the static cache (smaps_rollup), after the
  first draft and after drafting along 2,048 tokens, with the same of `import lookupkit` alone;
* commands that need no kernel (`inspect`, `tokenize`, `convert` lkc ↔ ggngcmap): wall time, whether
  numba was imported and which kernels were compiled or loaded (numba dispatchers with signatures,
  and NUMBA_DEBUG_CACHE's lines).

    python -m lookupkit.bench.startup [--cache static-541.lkc] [--runs 3]

writes bench/results/startup-<date>-<host>.json; `lookupkit bench` runs it as part of the study.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

from lookupkit.bench.harness import (RESULTS, SHARED, bench_dir, command, git_state, loadavg, machine,
                                     source_checkout, spread, warm_file, write_text)

REPO = source_checkout() or Path(__file__).resolve().parents[2]  # copy_package copies a checkout's layout
EVAL = SHARED / "reference" / "wikitext" / "wiki.test.qwen2.i32"
TARGETS = {"warm_ms": 300.0, "fresh_s": 20.0}

CHILD = r'''
import time
t0 = time.perf_counter()
import json, os, sys
mode, cache_path, tokens_path = sys.argv[1], sys.argv[2], sys.argv[3]


def smaps():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            p = line.split()
            if p[0].endswith(":") and len(p) >= 2 and p[1].isdigit():
                out[p[0][:-1].lower()] = int(p[1]) * 1024
    out["uss"] = out.get("private_clean", 0) + out.get("private_dirty", 0)
    return out


import lookupkit
t_import = time.perf_counter()
res = {"mode": mode, "lookupkit_file": lookupkit.__file__, "numba_after_import": "numba" in sys.modules,
       "t_import_s": t_import - t0}
if mode == "import":
    res["memory"] = smaps()
    print(json.dumps(res), flush=True)
    sys.exit(0)
import numpy as np
from lookupkit import Drafter, StaticCache
ids = np.fromfile(tokens_path, dtype="<i4", count=512 + 2048)
t1 = time.perf_counter()
cache = StaticCache.open(cache_path) if cache_path != "-" else None
t_open = time.perf_counter()
drafter = Drafter(static=cache)
draft = drafter.draft(ids[:512], n_draft=8)
t_draft = time.perf_counter()
res.update(t_open_s=t_open - t1, t_first_draft_s=t_draft - t_open, t_total_in_child_s=t_draft - t0,
           draft_len=len(draft))
if mode == "memory":
    res["memory_first_draft"] = smaps()
    for i in range(512, len(ids)):
        drafter.accept(ids[i:i + 1])
        drafter.draft(None, 8)
    res["memory_after_2048"] = smaps()
print(json.dumps(res), flush=True)
'''

WRAPPER = r'''
import time
t0 = time.perf_counter()
import atexit, json, os, sys


def report():
    out = {"elapsed_s": time.perf_counter() - t0, "numba_imported": "numba" in sys.modules, "kernels": []}
    if out["numba_imported"]:
        import gc
        from numba.core.dispatcher import Dispatcher
        out["kernels"] = sorted(f"{d.py_func.__module__}.{d.py_func.__qualname__}" for d in gc.get_objects()
                                if isinstance(d, Dispatcher) and d.signatures)
    os.write(2, ("\nSTARTUP-REPORT " + json.dumps(out) + "\n").encode())


atexit.register(report)
sys.argv = ["lookupkit", *sys.argv[1:]]
from lookupkit.cli.main import main
main()
'''


def log_default(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def child_env(**extra) -> dict:
    """The caller's environment without anything that would steer numba or Python's bytecode caching."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "NUMBA_DEBUG_CACHE", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


def spawn(code: str, args: list[str], env: dict, cwd: Path, timeout: float = 600) -> dict:
    """Run `python -c code args`; wall time to its JSON line (from the parent), its stderr lines with the
    time each arrived, NUMBA_DEBUG_CACHE lines (stdout lines starting with [cache])."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=cwd)
    err: list[tuple[float, str]] = []
    pump = threading.Thread(target=lambda: err.extend((time.perf_counter() - t0, ln.rstrip("\n")) for ln in p.stderr),
                            daemon=True)
    pump.start()
    result, cache_lines, other = None, [], []
    t_line = None
    for line in p.stdout:
        if line.startswith("{") and result is None:
            t_line = time.perf_counter() - t0
            result = json.loads(line)
        elif line.startswith("[cache]"):
            cache_lines.append(line.strip())
        else:
            other.append(line.rstrip("\n"))
    p.wait(timeout=timeout)
    wall = time.perf_counter() - t0
    pump.join()
    report = next((json.loads(ln.split(" ", 1)[1]) for _, ln in err if ln.startswith("STARTUP-REPORT ")), None)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(args)}\n" + "\n".join(ln for _, ln in err)[-2000:])
    out = {"wall_s": wall, "wall_to_result_s": t_line, "result": result, "report": report,
           "stderr": [(round(t, 3), ln) for t, ln in err if ln and not ln.startswith("STARTUP-REPORT")][:20],
           "cache_saved": sum("data saved" in ln for ln in cache_lines),
           "cache_loaded": sum("data loaded" in ln for ln in cache_lines),
           "cache_dirs": sorted({ln.split(" to " if "saved" in ln else " from ")[-1].strip("'\"").rsplit("/", 1)[0]
                                 for ln in cache_lines if "data saved" in ln or "data loaded" in ln})[:6]}
    return out


def copy_package(dest: Path, repo: Path = REPO) -> Path:
    """The package of the checkout `repo` as `pip install` lays it out (its pyproject's package-dir map,
    package data, .pyc compiled), without any __pycache__ of the source tree (so no numba cache).
    Returns the sys.path entry."""
    conf = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = conf.get("package-dir", {})
    data = conf.get("package-data", {})
    for pkg in conf["packages"]:
        parent = next((p for p in sorted(dirs, key=len, reverse=True) if pkg == p or pkg.startswith(p + ".")), None)
        src = repo / dirs[parent] / Path(*pkg[len(parent) + 1:].split(".")) if parent and pkg != parent else \
            repo / dirs.get(pkg, pkg.replace(".", "/"))
        dst = dest / Path(*pkg.split("."))
        dst.mkdir(parents=True, exist_ok=True)
        for f in src.glob("*.py"):
            shutil.copy2(f, dst / f.name)
        for pattern in data.get(pkg, []):
            for f in src.glob(pattern):
                if f.is_file():
                    (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, dst / f.relative_to(src))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest)], check=True)
    return dest


def purge_numba_cache(root: Path) -> int:
    n = 0
    for pattern in ("*.nbi", "*.nbc"):
        for f in root.rglob(pattern):
            f.unlink()
            n += 1
    return n


def summary(values: list[float]) -> dict:
    return spread(values) or {"n": 0}


def _first_draft_runs(n: int, args: list[str], env: dict, cwd: Path, before=None) -> list[dict]:
    runs = []
    for _ in range(n):
        if before:
            before()
        runs.append(spawn(CHILD, ["first-draft", *args], env, cwd))
    return runs


def _scenario(runs: list[dict]) -> dict:
    return {"wall_to_first_draft_s": summary([r["wall_to_result_s"] for r in runs]),
            "t_import_s": summary([r["result"]["t_import_s"] for r in runs]),
            "t_open_s": summary([r["result"].get("t_open_s") for r in runs]),
            "t_first_draft_s": summary([r["result"].get("t_first_draft_s") for r in runs]),
            "runs": runs}


def _memory(mem: list[dict], imp: list[dict]) -> dict:
    fields = ("rss", "pss", "uss", "private_dirty", "private_clean", "anonymous", "shared_clean")
    out = {k: {f: summary([r["result"][k].get(f) for r in mem]) for f in fields}
           for k in ("memory_first_draft", "memory_after_2048")}
    if imp:
        out["import_only"] = {f: summary([r["result"]["memory"].get(f) for r in imp]) for f in fields}
    return out


def run_startup(cache: Path, runs: int = 3, tokens: Path = EVAL, log=log_default, quick: bool = False,
                commands: bool = True) -> dict:
    """Every start-up measurement; `quick` keeps only the warm scenarios and the memory figure."""
    cache, tokens = Path(cache), Path(tokens)
    out: dict = {"cache": str(cache), "cache_bytes": cache.stat().st_size, "tokens": str(tokens), "runs": runs,
                 "python": sys.executable, "env_removed": ["NUMBA_CACHE_DIR", "NUMBA_DEBUG_CACHE",
                                                           "PYTHONDONTWRITEBYTECODE", "PYTHONPATH"]}
    args = [str(cache), str(tokens)]
    with tempfile.TemporaryDirectory(prefix="lookupkit-startup-") as tmp_s:
        tmp = Path(tmp_s)
        cwd = tmp / "cwd"
        cwd.mkdir()
        if quick:  # the pipeline only: the running installation, warm, and its memory
            log("start-up (quick): warm, this installation")  # the study's replays have filled the compile cache
            out["warm_repo"] = _scenario(_first_draft_runs(runs, args, child_env(), cwd))
            mem = [spawn(CHILD, ["memory", *args], child_env(), cwd)]
            out["memory"] = _memory(mem, [])
            return out
        installed = copy_package(tmp / "installed")
        env_inst = child_env(PYTHONPATH=installed)

        # warm: fill the compile cache (untimed), then time
        log("start-up: warm (installed copy and repository)")
        spawn(CHILD, ["first-draft", *args], env_inst, cwd)
        inst = _first_draft_runs(runs, args, env_inst, cwd)
        out["warm_installed"] = _scenario(inst)
        spawn(CHILD, ["first-draft", *args], child_env(), cwd)
        out["warm_repo"] = _scenario(_first_draft_runs(runs, args, child_env(), cwd))
        imp = [spawn(CHILD, ["import", *args], env_inst, cwd) for _ in range(runs)]
        out["import_only"] = {"wall_s": summary([r["wall_to_result_s"] for r in imp]), "runs": imp}
        out["python_baseline"] = summary([spawn("import json; print('{}')", [], env_inst, cwd)["wall_to_result_s"]
                                          for _ in range(runs)])
        out["installed_from"] = inst[0]["result"]["lookupkit_file"]

        log("start-up: private memory of a process holding a Drafter")
        out["memory"] = _memory([spawn(CHILD, ["memory", *args], env_inst, cwd) for _ in range(runs)], imp)

        log(f"start-up: fresh install (empty numba cache), {runs} runs")
        fresh_root = copy_package(tmp / "fresh")
        env_fresh = child_env(PYTHONPATH=fresh_root, NUMBA_DEBUG_CACHE=1)
        fresh = _first_draft_runs(runs, args, env_fresh, cwd, before=lambda: purge_numba_cache(fresh_root))
        out["fresh_install"] = _scenario(fresh)
        # warm again afterwards: timed without NUMBA_DEBUG_CACHE (its logging slows a start), one run with it
        env_fresh_quiet = child_env(PYTHONPATH=fresh_root)
        out["fresh_install"]["after_compile_warm"] = _scenario(_first_draft_runs(runs, args, env_fresh_quiet, cwd))
        out["fresh_install"]["after_compile_diagnostic"] = spawn(CHILD, ["first-draft", *args], env_fresh, cwd)

        log(f"start-up: repository with NUMBA_CACHE_DIR = a new empty directory, {runs} runs")
        nc_runs = []
        for i in range(runs):
            nc = tmp / f"numba-cache-{i}"
            nc.mkdir()
            nc_runs.append(spawn(CHILD, ["first-draft", *args], child_env(NUMBA_CACHE_DIR=nc, NUMBA_DEBUG_CACHE=1), cwd))
        out["fresh_numba_cache_dir"] = _scenario(nc_runs)

        out["read_only"] = read_only_install(tmp, args, runs, cwd, log)
        if commands:
            out["commands"] = command_costs(tmp, cache, runs, env_inst, cwd, log)
    return out


def read_only_install(tmp: Path, args: list[str], runs: int, cwd: Path, log) -> dict:
    """A copy mounted read-only; numba must fall back to a user-wide cache. Is it kept between runs?"""
    ro = copy_package(tmp / "readonly")
    xdg = tmp / "xdg-cache"
    xdg.mkdir()
    mounted = False
    try:
        subprocess.run(["mount", "--bind", str(ro), str(ro)], check=True, capture_output=True)
        mounted = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        if mounted:
            subprocess.run(["umount", str(ro)], capture_output=True)
        msg = getattr(exc, "stderr", b"") or str(exc)
        return {"measured": False, "why": f"cannot mount the copy read-only (needs root): {msg!r}"}
    try:
        probe = ro / "lookupkit" / "__pycache__" / "probe"
        try:
            probe.write_text("x")
            return {"measured": False, "why": "the read-only mount accepted a write"}
        except OSError:
            pass
        log(f"start-up: read-only install, 1 compiling run + {runs} runs")
        env = child_env(PYTHONPATH=ro, NUMBA_DEBUG_CACHE=1, XDG_CACHE_HOME=xdg)
        first = spawn(CHILD, ["first-draft", *args], env, cwd)
        later = _first_draft_runs(runs, args, child_env(PYTHONPATH=ro, XDG_CACHE_HOME=xdg), cwd)  # timed, quiet
        check = [spawn(CHILD, ["first-draft", *args], env, cwd)]  # where it loaded from (NUMBA_DEBUG_CACHE)
        where = sorted({str(p.parent.relative_to(xdg)) for p in xdg.rglob("*.nbi")})
        return {"measured": True, "mount": "bind,ro", "xdg_cache_home": str(xdg), "first": _scenario([first]),
                "later": _scenario(later), "diagnostic": check[0],
                "cache_files_under_xdg": sum(1 for _ in xdg.rglob("*.nb*")), "cache_dirs_under_xdg": where[:5],
                "first_saved": first["cache_saved"],
                "cache_kept": first["cache_saved"] > 0 and all(r["cache_saved"] == 0 and r["cache_loaded"] > 0
                                                               for r in check)}
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


def command_costs(tmp: Path, cache: Path, runs: int, env: dict, cwd: Path, log) -> dict:
    """Commands that need no compiled kernel: do they import numba, compile or load kernels?"""
    text = tmp / "small.txt"
    raw = SHARED / "corpora" / "wiki.test.raw"
    text.write_bytes(raw.read_bytes()[:200_000] if raw.exists() else b"a small text to tokenize\n" * 4000)
    vocab = SHARED / "vocab" / "ggml-vocab-qwen2.gguf"
    small = cache.parent / "static-25.lkc"
    src = small if small.exists() else cache
    cmds = {
        "python -c 'import lookupkit'": None,
        "lookupkit inspect CACHE.lkc": ["inspect", str(src)],
        "lookupkit tokenize -f small.txt -m qwen2 -o ids.i32": ["tokenize", "-f", str(text),
                                                               *(["-m", str(vocab)] if vocab.exists() else []),
                                                               "-o", str(tmp / "ids.i32")],
        "lookupkit convert CACHE.lkc b.ggngcmap": ["convert", str(src), str(tmp / "b.ggngcmap")],
        "lookupkit convert b.ggngcmap c.lkc (keys recovered)": ["convert", str(tmp / "b.ggngcmap"), str(tmp / "c.lkc")],
    }
    out = {"cache": str(src)}
    env = {**env, "NUMBA_DEBUG_CACHE": "1"}
    for name, argv in cmds.items():
        log(f"start-up: {name}")
        rs = []
        for _ in range(runs):
            if argv is None:
                rs.append(spawn("import lookupkit, json, sys; print(json.dumps({'numba': 'numba' in sys.modules}))",
                                [], env, cwd))
            else:
                for f in (tmp / "c.lkc",):
                    f.unlink(missing_ok=True)
                rs.append(spawn(WRAPPER, argv, env, cwd))
        rep = [r["report"] or {} for r in rs]
        out[name] = {"wall_s": summary([r["wall_s"] for r in rs]),
                     "numba_imported": (rs[0]["result"] or {}).get("numba") if argv is None
                     else any(x.get("numba_imported") for x in rep),
                     "kernels": sorted({k for x in rep for k in x.get("kernels", [])}),
                     "cache_loaded": max(r["cache_loaded"] for r in rs), "cache_saved": max(r["cache_saved"] for r in rs)}
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.startup")
    default = bench_dir()
    p.add_argument("--cache", type=Path, help="static cache (default: the study's largest static-*.lkc)")
    p.add_argument("--tokens", type=Path, default=EVAL)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    cache = a.cache
    if cache is None:
        found = sorted(default.glob("static-*.lkc"), key=lambda f: f.stat().st_size)
        if not found:
            sys.exit(f"no static cache under {default}: pass --cache")
        cache = found[-1]
    warm_file(cache)
    data = {"machine": machine(gate=True), **git_state(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": command("lookupkit.bench.startup", argv),
            "startup": run_startup(cache, a.runs, a.tokens, quick=a.quick)}
    data["startup_command"] = data["command"]
    data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    data["machine"]["loadavg_at_end"] = loadavg()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    out = a.out_dir / f"startup-{datetime.datetime.now():%Y-%m-%d}-{socket.gethostname()}.json"
    write_text(out, json.dumps(data, indent=1))
    print(out)


if __name__ == "__main__":
    main()
