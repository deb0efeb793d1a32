"""Start-up before/after: what `import lookupkit` costs against numpy's own import, import → first draft,
and what lookupkit adds to a real model's "load → first draft", for this checkout and (`--tree`) another.

Each tree is laid out as pip installs it (bench.startup.copy_package: sources + .pyc, no numba cache),
its numba cache filled by untimed runs first, then every probe runs `--runs` times in fresh
`python -c` processes from an empty working directory, the trees and probes interleaved (run 1 of
every probe of every tree, then run 2, ...) so that a change of machine load hits all alike. Times
are taken inside the child (perf_counter from its first line), so the interpreter's own start is out:

* `import numpy`, `import lookupkit` (and whether numba was imported);
* import → first draft: `Drafter(static=small cache).draft(512 tokens, 8)`, warm (bench.startup.CHILD);
* model load → first draft, Gemma 3 270M (`lookupkit.models.path("gemma-3-270m")`), llama_cpp
  imported before the clock starts in every probe: `engine` = `llama_cpp.Llama(...)` with open_model's
  settings + tokenizing the prompt (the engine alone); `generate` = `open_model` + `StaticCache.open` +
  `Drafter(static=...)` + generate()'s vocabulary check + the first draft; `hook` =
  `LookupDraftModel(static=...)` + `Llama(draft_model=...)` + `bind` + its first draft; `*-inline` (this
  tree only) = the same with every lookupkit warm-up run inline instead of in a thread. What lookupkit
  adds = the probe minus `engine` of the same round, median over rounds.

    python -m lookupkit.bench.startup.compare --tree ../lookupkit-before --runs 7

writes bench/results/startup-compare-<date>-<host>-t<threads>.json and bench/STARTUP.md (bench.startup.report:
one section per --threads run of that day).
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

from lookupkit.bench.harness import RESULTS, command, git_state, loadavg, machine, output_dir, warm_file, write_text
from lookupkit.bench.startup.run import CHILD, EVAL, REPO, SHARED, child_env, copy_package, log_default, spawn, summary

PROMPT_TEXT = SHARED / "corpora" / "wiki.test.raw"

IMPORT = r'''
import time
t0 = time.perf_counter()
import json, sys
mod = sys.argv[1]
__import__(mod)
t = time.perf_counter() - t0
print(json.dumps({"t_s": t, "numba": "numba" in sys.modules, "n_modules": len(sys.modules)}), flush=True)
'''

MODEL = r'''
import json, sys, threading, time
import numpy as np
import llama_cpp
mode, model_path, cache_path, prompt_path, threads = sys.argv[1:6]
text = open(prompt_path, encoding="utf-8").read()
kw = dict(n_ctx=2048, n_threads=int(threads), n_threads_batch=int(threads), flash_attn=True, swa_full=False,
          verbose=False)
t0 = time.perf_counter()
if mode.endswith("-inline"):
    from lookupkit import warmup

    class Inline(warmup.Warmup):
        def __init__(self, fn, name=""):
            self.error = self.seconds = self.value = None
            self._done = threading.Event()
            self._run(fn)

    warmup.Warmup = Inline
if mode == "engine":
    llm = llama_cpp.Llama(model_path=model_path, **kw)
    prompt = llm.tokenize(text.encode(), add_bos=True, special=True)
    draft = []
elif mode.startswith("generate"):
    from lookupkit.integrations.llama_cpp import open_model
    from lookupkit.integrations.llama_generate import check_drafter
    from lookupkit import Drafter, StaticCache
    llm = open_model(model_path, n_ctx=kw["n_ctx"], threads=kw["n_threads"])  # the same settings as kw
    prompt = llm.tokenize(text.encode(), add_bos=True, special=True)
    drafter = Drafter(static=StaticCache.open(cache_path))
    check_drafter(drafter, llm)
    draft = drafter.draft(prompt, 8)
else:  # hook
    from lookupkit.integrations.llama_cpp import LookupDraftModel
    d = LookupDraftModel(static=cache_path, n_draft=8)
    llm = llama_cpp.Llama(model_path=model_path, draft_model=d, **kw)
    d.bind(llm)
    prompt = llm.tokenize(text.encode(), add_bos=True, special=True)
    draft = d(np.array(prompt, np.intc))
t = time.perf_counter() - t0
print(json.dumps({"t_s": t, "draft_len": len(draft), "prompt_len": len(prompt)}), flush=True)
'''


def prepare_trees(tmp: Path, trees: dict[str, Path], log) -> dict[str, dict]:
    """Each tree laid out as installed (no numba cache); its environment for the probes."""
    out = {}
    for name, repo in trees.items():
        root = copy_package(tmp / name, repo)
        out[name] = {"repo": str(repo), "root": str(root), "env": child_env(PYTHONPATH=root),
                     **{k: v for k, v in git_state(repo).items() if k != "dirty_files"}}
        log(f"start-up compare: {name} = {repo} ({out[name].get('commit')}) laid out in {root}")
    return out


def probes(trees: dict, cache: Path, tokens: Path, model: Path | None, prompt: Path, threads: int) -> list[tuple]:
    """(tree, probe, code, args) for every measurement; the engine alone once (no lookupkit in it)."""
    first = next(iter(trees))
    out = [(first, "import numpy", IMPORT, ["numpy"])]
    for name in trees:
        out += [(name, "import lookupkit", IMPORT, ["lookupkit"]),
                (name, "import → first draft (warm)", CHILD, ["first-draft", str(cache), str(tokens)])]
    if model is not None:
        margs = [str(model), str(cache), str(prompt), str(threads)]
        out.append((first, "engine", MODEL, ["engine", *margs]))
        for name in trees:
            out += [(name, "generate", MODEL, ["generate", *margs]), (name, "hook", MODEL, ["hook", *margs])]
        out += [(first, "generate-inline", MODEL, ["generate-inline", *margs]),
                (first, "hook-inline", MODEL, ["hook-inline", *margs])]
    return out


def run_compare(trees: dict[str, Path], runs: int, cache: Path, tokens: Path = EVAL, model: Path | None = None,
                threads: int = 2, log=log_default) -> dict:
    with tempfile.TemporaryDirectory(prefix="lookupkit-startup-compare-") as tmp_s:
        tmp = Path(tmp_s)
        cwd = tmp / "cwd"
        cwd.mkdir()
        prompt = tmp / "prompt.txt"
        text = PROMPT_TEXT.read_text(encoding="utf-8", errors="replace")[:6000] if PROMPT_TEXT.exists() else \
            "The Roman Empire was the post-Republican state of ancient Rome. " * 40
        prompt.write_text(text, encoding="utf-8")
        info = prepare_trees(tmp, trees, log)
        plan = probes(info, cache, tokens, model, prompt, threads)
        log("start-up compare: filling each tree's numba cache (untimed)")
        for tree, name, code, args in plan:
            if not name.startswith("import "):
                spawn(code, args, info[tree]["env"], cwd)
        results: dict[str, dict[str, list]] = {t: {} for t in info}
        for r in range(runs):
            log(f"start-up compare: round {r + 1}/{runs} (load {loadavg()[0]:.2f})")
            for tree, name, code, args in plan:
                res = spawn(code, args, info[tree]["env"], cwd)["result"]
                t = res.get("t_s", res.get("t_total_in_child_s"))  # (CHILD: interpreter start to the first draft)
                results[tree].setdefault(name, []).append({**res, "t_s": t, "load1": loadavg()[0]})
    first = next(iter(info))
    engine = [x["t_s"] for x in results[first].get("engine", [])]
    out = {"runs": runs, "cache": str(cache), "cache_bytes": cache.stat().st_size, "tokens": str(tokens),
           "model": str(model) if model else None, "threads": threads, "prompt_chars": len(text), "trees": {}}
    for tree, probes_ in results.items():
        rows = {}
        for name, xs in probes_.items():
            ts = [x["t_s"] for x in xs]
            row = {"t_s": summary(ts), "numba": any(x.get("numba") or x.get("numba_after_import") for x in xs),
                   "runs": xs}
            if name in ("generate", "hook", "generate-inline", "hook-inline") and engine:
                row["added_s"] = summary([t - e for t, e in zip(ts, engine)])
            rows[name] = row
        out["trees"][tree] = {k: v for k, v in info[tree].items() if k != "env"} | {"probes": rows}
    return out


def default_model() -> Path | None:
    try:
        from lookupkit import models

        return Path(models.path("gemma-3-270m"))
    except Exception as exc:  # no model package: the model rows are left out, saying why
        log_default(f"start-up compare: no model rows ({exc})")
        return None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.startup.compare")
    p.add_argument("--tree", type=Path, help="another checkout to measure beside this one (the before tree)")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--cache", type=Path, required=True, help="a small static cache of the model's vocabulary "
                   "(lookup-create -m gemma-3-270m -f wiki541.txt.zst --max-bytes 25MB -lcs small.lkc)")
    p.add_argument("--tokens", type=Path, default=EVAL)
    p.add_argument("--no-model", action="store_true", help="leave out the model load → first draft rows")
    p.add_argument("--threads", type=int, default=2, help="the model's threads (2 = every core here: the load then "
                   "leaves no core to a background warm-up)")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--report", type=Path, default=output_dir() / "STARTUP.md")
    a = p.parse_args(argv)
    if not a.cache.exists():
        sys.exit(f"no static cache {a.cache}: pass --cache (lookup-create -m $(lookupkit model gemma-3-270m) "
                 f"-f wiki.test.raw -lcs small.lkc)")
    trees = {"after": REPO, **({"before": a.tree.resolve()} if a.tree else {})}
    warm_file(a.cache)
    data = {"machine": machine(gate=True), **git_state(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": command("lookupkit.bench.startup.compare", argv),
            "compare": run_compare(trees, a.runs, a.cache, a.tokens, None if a.no_model else default_model(), a.threads)}
    data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    data["machine"]["loadavg_at_end"] = loadavg()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"startup-compare-{datetime.datetime.now():%Y-%m-%d}-{socket.gethostname()}"
    out = a.out_dir / f"{stem}-t{a.threads}.json"
    write_text(out, json.dumps(data, indent=1))
    from lookupkit.bench.startup.report import write_compare

    write_compare([json.loads(f.read_text()) for f in sorted(a.out_dir.glob(f"{stem}-t*.json"))], a.report)
    print(out)
    print(a.report)


if __name__ == "__main__":
    main()
