"""The study: static caches from corpus prefixes, built, opened and replayed by lookupkit and by
upstream llama.cpp's own code on the same token ids, every cell run several times back to back.

Raw runs go to `bench/results/<date>-<host>.json`; `report.py` and `plots.py` turn them into
`bench/RESULTS.md` and `bench/plots/*.png`.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from lookupkit.bench import llamacpp
from lookupkit.errors import LookupkitError
from lookupkit.rules import DEFAULT_CTX
from lookupkit.bench.measure import python_module, run, script
from lookupkit.bench.harness import RESULTS, SHARED, bench_dir, git_state, loadavg, machine, warm_file



@dataclass
class StudyConfig:
    """What to measure. `sizes` are MB of corpus text (10^6 B), or thousands of tokens for a token corpus."""

    corpus: Path
    eval_tokens: Path
    vocab: Path | None
    sizes: list[int]
    drafts: list[int] = field(default_factory=lambda: [8, 16])
    n_ctx: int = DEFAULT_CTX
    runs: int = 3
    open_runs: int = 7
    share: list[int] = field(default_factory=lambda: [1, 2, 4])
    llamacpp: bool = True
    end_to_end: bool = True
    startup: bool = True
    workdir: Path = bench_dir()
    name: str = "full"
    results_dir: Path = RESULTS

    @classmethod
    def full(cls, **kw) -> "StudyConfig":
        return cls(corpus=SHARED / "corpora" / "wiki541.txt.zst",
                   eval_tokens=SHARED / "reference" / "wikitext" / "wiki.test.qwen2.i32",
                   vocab=SHARED / "vocab" / "ggml-vocab-qwen2.gguf", sizes=[0, 25, 50, 100, 200, 541], **kw)

    @classmethod
    def quick(cls, **kw) -> "StudyConfig":
        """Reference data only, token sizes in thousands; well under a minute."""
        kw.setdefault("workdir", cls.workdir / "quick")
        return cls(corpus=SHARED / "reference" / "zipf.corpus.i32", eval_tokens=SHARED / "reference" / "zipf.eval.i32",
                   vocab=None, sizes=[0, 100, 200], drafts=[8], n_ctx=1024, runs=2, open_runs=3, share=[1, 2],
                   end_to_end=False, name="quick", **kw)


class Study:
    def __init__(self, cfg: StudyConfig, log: Callable[[str], None] = print, on_stage=None):
        self.cfg = cfg
        self.log = log
        self.on_stage = on_stage or (lambda description, stages: None)  # each stage as it begins, and how many
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d")
        cfg.results_dir.mkdir(parents=True, exist_ok=True)
        self.out = cfg.results_dir / f"{stamp}-{socket.gethostname()}{'' if cfg.name == 'full' else '-' + cfg.name}.json"
        self.data = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
                     "machine": machine(), **git_state(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "cells": []}
        self.driver = None
        if cfg.llamacpp:
            try:
                self.driver = llamacpp.build_driver()
                why = llamacpp.NO_COMPILER
            except LookupkitError as exc:
                why = f"llama.cpp side skipped: {exc}"
            if self.driver is None:
                self.log(why)
                self.data["llamacpp_skipped"] = why
            else:
                self.data["llamacpp_version"] = f"llama-cpp-python {llamacpp.PINNED_VERSION} vendor/llama.cpp"

    # -- cells --------------------------------------------------------------------------------
    def record(self, **cell) -> None:
        self.data["cells"].append(cell)
        self.out.write_text(json.dumps(self.data, indent=1))

    def prefix_ids(self, size: int) -> Path:
        """Token ids of the corpus prefix (tokenized once per size by lookupkit, as llama.cpp would)."""
        cfg = self.cfg
        ids = cfg.workdir / f"prefix-{size}.i32"
        if cfg.corpus.suffix == ".i32":
            np.fromfile(cfg.corpus, dtype="<i4")[: size * 1000].tofile(ids)
            return ids
        if not ids.exists():
            cmd = script("lookupkit", "tokenize", "-f", str(cfg.corpus), "-m", str(cfg.vocab),
                         "--max-bytes", f"{size}MB", "--cut", "byte", "-o", str(ids), "--json")
            r = run(cmd)
            self.record(kind="tokenize", impl="lookupkit", size=size, cmd=_cmd(cmd), runs=[_run(r)])
        return ids

    def build(self, size: int, ids: Path) -> Path:
        cfg = self.cfg
        lkc = cfg.workdir / f"static-{size}.lkc"
        vocab = ["-m", str(cfg.vocab)] if cfg.vocab else []  # token corpora without a vocab: the bundled default
        cmd = script("lookup-create", "--tokens", str(ids), *vocab, "-lcs", str(lkc), "--json", "--quiet")
        runs = [run(cmd) for _ in range(cfg.runs)]
        self.record(kind="build", impl="lookupkit", size=size, file_size=lkc.stat().st_size, cmd=_cmd(cmd),
                    runs=[_build_run(r) for r in runs])
        cmd = script("lookupkit", "inspect", str(lkc), "--json")
        r = run(cmd)
        cdf = r.output.get("stats", {}).get("followers_cdf") or r.output.get("followers_cdf") or []
        self.record(kind="followers", impl="lookupkit", size=size, runs=[], cmd=_cmd(cmd),
                    followers=[c["followers"] for c in cdf], cdf=[c["keys"] for c in cdf])
        if self.driver:
            lcs = cfg.workdir / f"static-{size}.lcs"
            runs = [_llama(llamacpp.run_create(self.driver, ids, lcs)) for _ in range(cfg.runs)]
            self.record(kind="build", impl="llama.cpp", size=size, file_size=lcs.stat().st_size,
                        cmd=f"{self.driver.name} create {ids} {lcs}", runs=runs)
        return lkc

    def end_to_end(self, size: int) -> None:
        """Text to .lkc with no token cache, `runs` times (the headline build figure)."""
        cfg = self.cfg
        out = cfg.workdir / f"e2e-{size}.lkc"
        cmd = script("lookup-create", "-f", str(cfg.corpus), "-m", str(cfg.vocab), "--max-bytes", f"{size}MB",
                     "--cut", "byte", "--no-token-cache", "-lcs", str(out), "--json", "--quiet")
        runs = []
        for i in range(cfg.runs):
            self.log(f"   end to end {size} MB, run {i + 1}/{cfg.runs}")
            runs.append(_build_run(run(cmd)))
        self.record(kind="build_end_to_end", impl="lookupkit", size=size, file_size=out.stat().st_size,
                    cmd=_cmd(cmd), runs=runs)
        out.unlink()

    def open_cache(self, size: int, lkc: Path) -> None:
        """Open time, each run in its own fresh process: warm (the file in the page cache) and cold
        (evicted before the process's first open). The file is read back into the page cache afterwards,
        so the replays that follow are warm (cold replays are their own row)."""
        for cold in (False, True):
            if not cold:
                warm_file(lkc)
            cmd = python_module("lookupkit.bench.startup_probe", "open", str(lkc), "--runs", str(self.cfg.open_runs),
                                *(["--cold"] if cold else []))
            runs = [_run(run(cmd)) for _ in range(self.cfg.runs)]
            self.record(kind="open_cold" if cold else "open_warm", impl="lookupkit", size=size, cmd=_cmd(cmd),
                        runs=runs)
        warm_file(lkc)

    def replay(self, size: int, lkc: Path | None) -> None:
        """Warm replays (the file read into the page cache first), then cold ones (evicted in each child
        before it opens the cache) as a separate row; the file is warmed again afterwards."""
        cfg = self.cfg
        for d in cfg.drafts:
            args = [str(cfg.eval_tokens), "--ctx", str(cfg.n_ctx), "--draft", str(d)] + (["--lcs", str(lkc)] if lkc else [])
            if lkc:
                warm_file(lkc)
            cmd = python_module("lookupkit.bench.startup_probe", "replay", *args)
            runs = [run(cmd) for _ in range(cfg.runs)]
            self.record(kind=f"replay_d{d}", impl="lookupkit", size=size, cmd=_cmd(cmd), page_cache="warm",
                        runs=[_run(r) for r in runs])
            if self.driver:
                lcs = cfg.workdir / f"static-{size}.lcs" if lkc else None
                runs = [_llama(llamacpp.run_stats(self.driver, cfg.eval_tokens, cfg.n_ctx, d, lcs=lcs))
                        for _ in range(cfg.runs)]
                self.record(kind=f"replay_d{d}", impl="llama.cpp", size=size, runs=runs,
                            cmd=f"{self.driver.name} stats {cfg.eval_tokens} {cfg.n_ctx} {d} {lcs or '-'} -")
            if lkc and d == cfg.drafts[0] and (cfg.name != "quick" or size == cfg.sizes[-1]):  # quick: largest only
                cmd = python_module("lookupkit.bench.startup_probe", "replay", *args, "--cold")
                runs = [run(cmd) for _ in range(cfg.runs)]
                self.record(kind=f"replay_cold_d{d}", impl="lookupkit", size=size, cmd=_cmd(cmd), page_cache="cold",
                            runs=[_run(r) for r in runs])
                warm_file(lkc)

    def share(self, size: int, lkc: Path) -> None:
        from lookupkit.bench.study.sharing import measure_sharing

        warm_file(lkc)
        for n in self.cfg.share:
            res = measure_sharing(n, self.cfg.eval_tokens, lkc, self.cfg.n_ctx, self.cfg.drafts[0])
            self.record(kind="share", impl="lookupkit", size=size, n_procs=n, runs=[res],
                        cmd=f"{n} x python -m lookupkit.bench.startup_probe replay {self.cfg.eval_tokens} --lcs {lkc} "
                            f"--ctx {self.cfg.n_ctx} --draft {self.cfg.drafts[0]} --hold")

    def startup(self, size: int, lkc: Path) -> None:
        """Start-up: import to first draft (warm), fresh install, read-only install, private memory."""
        from lookupkit.bench.startup.run import run_startup

        warm_file(lkc)
        quick = self.cfg.name == "quick"
        self.data["startup"] = run_startup(lkc, runs=max(self.cfg.runs, 3) if not quick else self.cfg.runs,
                                           tokens=self.cfg.eval_tokens, log=self.log, quick=quick)
        self.data["startup_command"] = (f"lookupkit bench{' --quick' if quick else ''} (start-up part; alone: "
                                        f"python -m lookupkit.bench.startup --cache {lkc}{' --quick' if quick else ''})")
        self.out.write_text(json.dumps(self.data, indent=1))

    def run_all(self) -> Path:
        cfg = self.cfg
        lkc = None
        last = (1 + cfg.startup + cfg.end_to_end) * bool(cfg.sizes and cfg.sizes[-1])  # after the last size
        stages = len(cfg.sizes) + last
        for size in cfg.sizes:
            unit = 'k tokens' if cfg.corpus.suffix == '.i32' else 'MB'
            self.on_stage(f"{size} {unit}: build, open, replay", stages)
            self.log(f"== {size} {unit}")
            lkc = None
            if size:
                ids = self.prefix_ids(size)
                lkc = self.build(size, ids)
                self.open_cache(size, lkc)
            self.replay(size, lkc)
        if lkc is not None:
            self.on_stage("sharing one mapping", stages)
            self.share(cfg.sizes[-1], lkc)
            if cfg.startup:
                self.on_stage("start-up", stages)
                self.startup(cfg.sizes[-1], lkc)
            if cfg.end_to_end:
                self.on_stage("end to end", stages)
                self.end_to_end(cfg.sizes[-1])
        self.data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.data["machine"]["loadavg_at_end"] = loadavg()
        self.out.write_text(json.dumps(self.data, indent=1))
        return self.out


def _cmd(cmd: list[str]) -> str:
    """A command line as a user would type it (the console script's name, not its full path)."""
    import shlex

    parts = list(cmd)
    if parts and parts[0] == sys.executable:
        parts[0] = "python"
    elif parts and os.path.dirname(parts[0]) == os.path.dirname(sys.executable):
        parts[0] = os.path.basename(parts[0])
    return shlex.join(parts)


def _run(r) -> dict:
    return {"wall_s": r.seconds, "peak_rss": r.peak_rss, **r.output}


def _build_run(r) -> dict:
    """A lookup-create run: count + write seconds (what llama.cpp's create times) and its own peak RSS."""
    sec = r.output["seconds"]
    return {"wall_s": r.seconds, "build_s": sec["count"] + sec["write"], "tokenize_s": sec["tokenize"],
            "total_s": sec["total"], "peak_rss": r.output["peak_rss_bytes"], "n_tokens": r.output["n_tokens"],
            "n_keys": r.output["n_2grams"], "n_pairs": r.output["n_pairs"]}


def _llama(result: dict) -> dict:
    """The driver's JSON with lookupkit's names: bytes for memory, build_s for create."""
    out = {**result, "peak_rss": result["peak_rss_kb"] * 1024}
    if "seconds" in out:
        out["build_s"] = out.pop("seconds")
    return out
