"""Upstream llama.cpp's own n-gram cache code, built beside lookupkit and run without a model.

The benchmark compares lookupkit with llama.cpp on the same token ids, so it needs llama.cpp's real
`common/ngram-cache.cpp`: `fetch_source` takes it from the llama-cpp-python sdist on PyPI (pip), into a
cache directory outside the repository (llama.cpp's code and binaries are never committed);
`build_driver` compiles it with our own `llamacpp_driver/driver.cpp`, which runs the lookup-create and
lookup-stats loops on int32 token files; `run_create` / `run_stats` run that driver and return its
JSON line. Peak RSS is the driver's own VmHWM: the rusage a parent gets back (wait4, RUSAGE_CHILDREN)
includes the parent's own peak, because exec keeps it, so it is wrong whenever the caller is large.

    python -m lookupkit.bench.llamacpp      # fetch + build, print the driver's path and version
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from lookupkit.errors import FormatError, InputError

PINNED_VERSION = "0.3.36"  # llama-cpp-python release whose vendor/llama.cpp is measured
CXX_FLAGS = ("-O2", "-std=c++17")
NO_COMPILER = "no C++ compiler found (install g++ or set CXX): skipping the llama.cpp side by side"

_HERE = Path(__file__).resolve().with_name("llamacpp_driver")  # the C++ sources of the driver
_DRIVER_SOURCES = (_HERE / "driver.cpp", _HERE / "shim" / "common.h", _HERE / "shim" / "log.h")
_VENDOR = "vendor/llama.cpp/"
_NEEDED_PREFIXES = ("common/ngram-cache.", "include/llama.h", "ggml/include/", "LICENSE")
_EXIT_ASSERT = 3  # driver.cpp: a llama.cpp GGML_ASSERT failed (corrupt cache file)


def default_cache_dir() -> Path:
    """$LOOKUPKIT_CACHE_DIR/llamacpp, else $XDG_CACHE_HOME (or ~/.cache)/lookupkit/llamacpp."""
    root = os.environ.get("LOOKUPKIT_CACHE_DIR")
    if root:
        return Path(root) / "llamacpp"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lookupkit" / "llamacpp"


def find_compiler() -> str | None:
    """$CXX if set, else g++ on PATH; None when there is none."""
    return shutil.which(os.environ.get("CXX") or "g++")


def cached_source(cache_dir: Path | None = None, version: str = PINNED_VERSION) -> Path | None:
    """The extracted source of `version` if a previous fetch_source completed, else None."""
    src = Path(cache_dir or default_cache_dir()) / f"llama-cpp-python-{version}"
    return src if (src / "source.json").is_file() else None


def fetch_source(cache_dir: Path | None = None, version: str = PINNED_VERSION) -> Path:
    """Download the llama-cpp-python sdist with pip and keep only the files the driver compiles.

    Returns the directory holding common/ngram-cache.{h,cpp}, include/llama.h, ggml/include/*.h and
    source.json (version, sdist name and sha256). The sdist itself (~75 MB) is not kept.
    """
    cache_dir = Path(cache_dir or default_cache_dir())
    done = cached_source(cache_dir, version)
    if done:
        return done
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create cache directory {cache_dir}: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".fetch-") as tmp:
        sdist = _pip_download(Path(tmp), version)
        staged = Path(tmp) / "src"
        files = _extract_needed(sdist, staged)
        meta = {"package": "llama-cpp-python", "version": version, "sdist": sdist.name,
                "sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(), "files": files}
        (staged / "source.json").write_text(json.dumps(meta, indent=1) + "\n")
        dest = cache_dir / f"llama-cpp-python-{version}"
        shutil.rmtree(dest, ignore_errors=True)  # an earlier fetch that died before source.json
        try:
            os.replace(staged, dest)
        except OSError as exc:
            if cached_source(cache_dir, version) is None:  # else a concurrent fetch won the race
                raise InputError(f"cannot store the llama.cpp source in {dest}: {exc.strerror}") from None
    return dest


def _pip_download(into: Path, version: str) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
           "--disable-pip-version-check", "-d", str(into), f"llama-cpp-python=={version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"pip download of llama-cpp-python {version} did not run: {exc}") from None
    sdists = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if proc.returncode != 0 or len(sdists) != 1:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR:")] or lines or [f"exit {proc.returncode}"]
        why = errors[0]
        raise InputError(f"could not download the llama-cpp-python {version} sdist with pip "
                         f"(offline, or no pip?): {why}")
    return sdists[0]


def _extract_needed(sdist: Path, dest: Path) -> list[str]:
    """Copy the vendored files the driver needs into dest, keeping their vendor/llama.cpp/ paths."""
    files = []
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                top, _, rest = member.name.partition("/")
                if not (member.isfile() and rest.startswith(_VENDOR)):
                    continue
                rel = rest[len(_VENDOR):]
                if not rel.startswith(_NEEDED_PREFIXES) or ".." in rel.split("/"):
                    continue
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
                files.append(rel)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"cannot unpack {sdist.name}: {exc}") from None
    if not {"common/ngram-cache.cpp", "common/ngram-cache.h", "include/llama.h"} <= set(files):
        raise InputError(f"{sdist.name} has no vendor/llama.cpp/common/ngram-cache.cpp; "
                         "this llama-cpp-python release cannot be used")
    return sorted(files)


def source_version(src: Path) -> str:
    """The llama-cpp-python version a fetched source directory came from."""
    return json.loads((Path(src) / "source.json").read_text())["version"]


def build_driver(cache_dir: Path | None = None, version: str = PINNED_VERSION) -> Path | None:
    """Compile driver.cpp + llama.cpp's ngram-cache.cpp (fetching it first), or None without a compiler.

    The binary lives in the source's build/ directory, named by a hash of everything that goes into
    it (our sources, llama.cpp's, the flags, the compiler's version), so edits rebuild and reruns don't.
    """
    cxx = find_compiler()
    if cxx is None:
        return None
    src = fetch_source(cache_dir, version)
    ngram_cpp = src / "common" / "ngram-cache.cpp"
    digest = hashlib.sha256()
    for path in (*_DRIVER_SOURCES, ngram_cpp, src / "common" / "ngram-cache.h"):
        digest.update(path.read_bytes())
    digest.update(" ".join((*CXX_FLAGS, _compiler_version(cxx))).encode())
    exe = src / "build" / f"driver-{digest.hexdigest()[:16]}"
    if exe.is_file():
        return exe
    exe.parent.mkdir(exist_ok=True)
    staged = exe.with_name(f"{exe.name}.tmp{os.getpid()}")
    cmd = [cxx, *CXX_FLAGS, f"-I{_HERE / 'shim'}", f"-I{src / 'include'}", f"-I{src / 'ggml' / 'include'}",
           f"-I{src / 'common'}", str(_HERE / "driver.cpp"), str(ngram_cpp), "-o", str(staged)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"could not run {cxx}: {exc}") from None
    if proc.returncode != 0:
        errors = ([ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines()
                  or [f"{cxx} exited with status {proc.returncode}"])
        staged.unlink(missing_ok=True)
        raise InputError(f"compiling the llama.cpp driver failed: {errors[0].strip()}")
    os.replace(staged, exe)
    for stale in exe.parent.glob("driver-*"):
        if stale != exe and ".tmp" not in stale.name:  # leave concurrent builds alone
            stale.unlink(missing_ok=True)
    return exe


def _compiler_version(cxx: str) -> str:
    proc = subprocess.run([cxx, "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return proc.stdout.splitlines()[0] if proc.stdout else cxx


def run_create(driver: Path, tokens_path: Path, out_path: Path) -> dict:
    """llama-lookup-create on an int32 token file: writes out_path (legacy format) atomically.

    Returns the driver's JSON (n_tokens, n_ngrams, n_pairs, file_bytes, seconds = count + save,
    update_s, save_s, peak_rss_kb) plus wall_s measured from outside.
    """
    out_path = Path(out_path)
    staged = out_path.with_name(f"{out_path.name}.tmp{os.getpid()}")
    try:
        result = _run([str(driver), "create", str(tokens_path), str(staged)])
        os.replace(staged, out_path)
    finally:
        staged.unlink(missing_ok=True)
    return result


def run_stats(driver: Path, tokens_path: Path, n_ctx: int, n_draft: int,
              lcs: Path | None = None, lcd: Path | None = None) -> dict:
    """llama-lookup-stats on an int32 token file, with optional static (lcs) / dynamic (lcd) caches.

    Returns the driver's JSON: n_predict, n_drafted, n_accept, t_load_ms (t_draft_flat), t_draft_ms
    (draft + context updates, as lookup-stats' t_draft), us_per_drafted_token, static_ngrams,
    peak_rss_kb; plus wall_s measured from outside.
    """
    return _run([str(driver), "stats", str(tokens_path), str(n_ctx), str(n_draft),
                 str(lcs) if lcs else "-", str(lcd) if lcd else "-"])


def _run(args: list[str]) -> dict:
    """Run the driver as a child (killed on Ctrl-C), parse its JSON line, turn failures into errors."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(args, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise InputError(f"cannot run the llama.cpp driver {args[0]}: {exc.strerror}") from None
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        why = lines[-1].removeprefix("error: ") if lines else f"exit status {proc.returncode}"
        if proc.returncode < 0:
            why = f"killed by signal {-proc.returncode} (out of memory?)"
        error = FormatError if proc.returncode == _EXIT_ASSERT else InputError
        raise error(f"llama.cpp driver {args[1]} failed: {why}")
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise InputError(f"llama.cpp driver {args[1]} printed no result: {proc.stdout[:200]!r}") from None
    result["wall_s"] = wall
    return result


def main() -> int:
    """Fetch and build; print {"driver", "version", "cache_dir"} as JSON, or one error line."""
    cache_dir = default_cache_dir()
    try:
        driver = build_driver(cache_dir)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if driver is None:
        print(f"error: {NO_COMPILER}", file=sys.stderr)
        return 2
    print(json.dumps({"driver": str(driver), "version": source_version(driver.parent.parent),
                      "cache_dir": str(cache_dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
