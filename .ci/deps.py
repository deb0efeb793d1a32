"""What the suite runs on, installed one way: CI from exact versions, a refresh of them, and a trial of what is new.

    python3 .ci/deps.py install    # into this Python, every version from .ci/constraints.txt (what .ci/run does)
    python3 .ci/deps.py lock       # a fresh venv, the newest releases pyproject's bounds allow, the whole suite;
                                   # if it passes, its exact versions become .ci/constraints.txt
    python3 .ci/deps.py newest     # a fresh venv, the newest releases with the engines' upper bounds lifted, the
                                   # engine and serve tests: what broke (run it before raising a bound)

Why: an untested upstream release (transformers 5.25 renamed what its private loop reads) must never reach
CI or a user's install; pyproject bounds the engines by the newest versions the tests ran, CI installs exactly
what the last green run had, and `newest` says what moving a bound would break before anyone moves it.
torch stays the CPU build these machines keep on disk (a bare requirement could pull a CUDA build of GBs).
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"
EXTRAS = "dev,llama,transformers,ray,model,serve"
TORCH = "torch==2.13.0"
# On the Intel CPUs here that report AMX, a default llama-cpp-python build (GGML_NATIVE) segfaults in llama_decode
# on Q4_K and Q8_0 models (Gemma 3 270M Q4_K_M among them); AVX2/AVX-512 kernels run everywhere.
CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
              "-DGGML_AMX_BF16=OFF")
ENGINES = ("transformers", "llama-cpp-python")  # driven through private parts: bounded by the tested versions
ENGINE_TESTS = ["tests/test_integration_transformers.py", "tests/test_integration_llama_cpp.py",
                "tests/test_generate.py", "tests/test_real_model.py", "tests/test_serve.py",
                "tests/test_serve_faults.py", "tests/test_serve_history.py", "tests/test_serve_sampling.py"]
HEADER = ("# Exact versions of every package the suite ran on, green (python3 .ci/deps.py lock wrote it; .ci/run\n"
          "# installs from it). Refresh: python3 .ci/deps.py lock. Before raising an engine's bound in pyproject.toml:\n"
          "# python3 .ci/deps.py newest.\n")


def run(cmd: list, **kw) -> int:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], cwd=ROOT, **kw).returncode


def pip(python: str, *args) -> None:
    env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
    if run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args], env=env):
        sys.exit(f"deps: pip install {' '.join(args)} failed")


def has_amx(python: str) -> bool:
    code = "import llama_cpp, sys; sys.exit('AMX' not in llama_cpp.llama_print_system_info().decode())"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def install(python: str, constraints: list[str], requirements: list[str] | None = None) -> None:
    """torch's CPU build first, then the project with every extra the suite needs (or `requirements`, and the
    project without its own), then a llama-cpp-python built with AMX kernels (pip's cache) rebuilt without."""
    pip(python, *constraints, TORCH)
    if requirements is None:
        pip(python, *constraints, "-e", f".[{EXTRAS}]")
    else:
        pip(python, *constraints, *requirements)
        pip(python, "--no-deps", "-e", ".")
    if has_amx(python):
        pip(python, *constraints, "--no-cache-dir", "--force-reinstall", "--no-deps", "llama-cpp-python")


def requirements(lift_engines: bool) -> list[str]:
    """pyproject's dependencies and the suite's extras, the engines' upper bounds lifted if asked."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS.split(","):
        reqs += project["optional-dependencies"][extra]
    out = []
    for r in reqs:
        name = re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]
        if lift_engines and name in ENGINES:
            r = name + ",".join(re.findall(r">=[^,]+", r))
        out.append(r)
    return out


def fresh_venv(where: str | None) -> str:
    folder = Path(where or tempfile.mkdtemp(prefix="lookupkit-deps-"))
    if run([sys.executable, "-m", "venv", "--clear", folder]):
        sys.exit(f"deps: could not make a venv in {folder}")
    return str(folder / "bin" / "python")


def freeze(python: str) -> dict[str, str]:
    out = subprocess.run([python, "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True).stdout
    pins = {}
    for line in out.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[name.lower().replace("_", "-")] = version.strip()
    return pins


def pinned() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[name.lower().replace("_", "-")] = version.strip()
    return pins


def suite(python: str, tests: list[str]) -> int:
    """The tests as CI runs them (CI set: nothing may be missing, property tests draw CI's fixed examples), so
    that what fails is what the versions changed."""
    env = {**os.environ, "CI": "true", "PATH": f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run([python, "-m", "lookupkit.bench.llamacpp"], env=env)  # the upstream driver some tests compare with
    return run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], env=env)


def write_constraints(pins: dict[str, str]) -> None:
    replace(HEADER + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))


def replace(text: str) -> None:
    """The constraints file replaced whole (temp file, then rename): an interrupt never leaves half of it."""
    tmp = CONSTRAINTS.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, CONSTRAINTS)


def restore(old: str | None) -> None:
    if old is None:
        CONSTRAINTS.unlink(missing_ok=True)
    else:
        replace(old)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python3 .ci/deps.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["install", "lock", "newest"])
    ap.add_argument("--venv", help="the fresh venv's folder (lock, newest; default: a new temporary folder)")
    a = ap.parse_args()
    if a.mode == "install":
        if not CONSTRAINTS.is_file():
            sys.exit(f"deps: {CONSTRAINTS} is missing: python3 .ci/deps.py lock writes it")
        install(sys.executable, ["-c", str(CONSTRAINTS)])
        return
    python = fresh_venv(a.venv)
    install(python, [], requirements(lift_engines=a.mode == "newest"))
    got = freeze(python)
    before = pinned() if CONSTRAINTS.is_file() else {}
    moved = {n: (before.get(n), v) for n, v in got.items() if before.get(n) != v}
    for n, (old, new) in sorted(moved.items()):
        print(f"  {n}: {old or '(new)'} -> {new}")
    if a.mode == "lock":  # the suite checks the file against pyproject's bounds: it must see the candidate
        old = CONSTRAINTS.read_text() if CONSTRAINTS.is_file() else None
        write_constraints(got)
        code = suite(python, [])
        if code:
            restore(old)
            sys.exit(f"deps: the suite failed on these versions (exit {code}): {CONSTRAINTS} is as it was")
        print(f"deps: {CONSTRAINTS} now holds the {len(got)} versions the suite passed on")
    else:
        code = suite(python, ENGINE_TESTS)
        engines = ", ".join(f"{n} {got.get(n)}" for n in ENGINES)
        print(f"deps: the engine and serve tests {'passed' if code == 0 else 'FAILED (above: what broke)'} on {engines}")
        sys.exit(code)


if __name__ == "__main__":
    main()
