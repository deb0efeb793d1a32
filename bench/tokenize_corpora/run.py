"""Gemma 3 tokenizing source code, Markdown, HTML, changelogs and prose: one core's MB/s, ids against llama.cpp.

    python -m lookupkit.bench.tokenize_corpora [--model GGUF] [--mb 5] [--prose-mb 25] [--runs 3]
        [--corpus NAME=PATH ...] [--no-llama-cpp] [--replay] [--out JSON]

Every corpus is found or made from what a fresh Linux machine has (`--corpus NAME=PATH` replaces one,
or adds one, with any text file; a corpus with no files is reported as missing):

* python: the running Python's standard library, its top-level `*.py` files sorted by name (CPython
  3.11: 168 files, 4.7 MB; issue 21's stdlib.py.txt);
* markdown: `*.md`, `*.markdown` (or `.gz`) under /usr/share/doc and the running Python's site-packages;
* html: `*.html`, `*.htm` (or `.gz`) there and in the standard library (idlelib's help, say);
* changelog: `changelog*`, `NEWS*`, `CHANGES*`, `HISTORY*` (or `.gz`) there (Debian's changelog.gz of
  every package, idlelib's NEWS.txt);
* prose: the first --prose-mb MB of ../shared/corpora/wiki541.txt.zst (not on a fresh machine: give it
  with --corpus prose=PATH, or the row is missing).

Files are taken whole in sorted path order up to --mb MB (10^6 bytes; the last one cut at a line end),
decoded as UTF-8 (invalid bytes replaced), one trailing newline stripped, and tokenized as
lookup-create does (BOS, specials parsed) by `Tokenizer.encode` in this process, --runs times: CPU
seconds (process_time: what one core delivers, on a shared machine too) and wall seconds, min/max.
Load: the 1-minute load average before and after each corpus, and how many cores other processes
kept busy during its runs (/proc/stat). Then the special-token partition alone, once, on 1M-character
pieces (`Partition.locate`; with --replay also `_replay`, llama.cpp's order replayed in Python). llama.cpp's
ids (llama-cpp-python, one `llama_tokenize` call on the same bytes) are compared exactly, once per
corpus. Results: bench/results/tokenize-corpora-<date>.json.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import sysconfig
import time
from datetime import date
from pathlib import Path

import numpy as np

from lookupkit.create.memory_budget import parse_size
from lookupkit.tokenizer import Tokenizer

from lookupkit.bench.harness import RESULTS, SHARED, command, git_state, machine, write_text
from lookupkit.bench.tokenize_corpora.speed import corpus_bytes, llama_cpp_ids, spread

DOC = Path("/usr/share/doc")
# name -> (file name patterns, where: "doc" = /usr/share/doc, "site" = site-packages, "stdlib" = all of it)
FOUND = {
    "markdown": (("*.md", "*.markdown", "*.md.gz", "*.markdown.gz"), ("doc", "site")),
    "html": (("*.html", "*.htm", "*.html.gz", "*.htm.gz"), ("doc", "stdlib")),
    "changelog": (("changelog*", "NEWS*", "CHANGES*", "HISTORY*"), ("doc", "stdlib")),
}
NAMES = ("python", "markdown", "html", "changelog", "prose")
SEGMENT = 1 << 20  # characters: the partition is timed on pieces of this size, as Tokenizer.encode cuts


def stdlib_python() -> list[Path]:
    """The running Python's top-level standard-library `*.py` files, sorted by name."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def roots(name: str) -> list[Path]:
    """Where corpus `name` (FOUND) is looked for."""
    paths = sysconfig.get_paths()
    return [{"doc": DOC, "site": Path(paths["purelib"]), "stdlib": Path(paths["stdlib"])}[w] for w in FOUND[name][1]]


def found_files(name: str) -> list[Path]:
    """The files of corpus `name` (FOUND) on this machine, sorted by path, each once."""
    out = set()
    for root in roots(name):
        for pattern in FOUND[name][0]:
            out |= {p.resolve() for p in root.rglob(pattern) if p.is_file() and p.suffix != ".py"}
    return sorted(out)


def concatenated(files: list[Path], limit: int) -> tuple[bytes, int]:
    """Whole files in order up to `limit` bytes, the last one cut at a line end; (bytes, files used)."""
    parts, size = [], 0
    for path in files:
        try:
            data = path.read_bytes()
            data = gzip.decompress(data) if path.suffix == ".gz" else data
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        parts.append(data)
        size += len(data)
        if size >= limit:
            break
    data = b"".join(parts)
    if len(data) > limit:
        data = data[:data.rfind(b"\n", 0, limit) + 1]
    return data, len(parts)


def corpus(name: str, given: dict, mb: float, prose_mb: float) -> dict:
    """{"text", "made", "files"} of one corpus, or {"missing": why}."""
    if name in given:
        path = Path(given[name])
        data = corpus_bytes(path, parse_size(f"{prose_mb if name == 'prose' else mb}MB"))
        return {"text": data.decode("utf-8", "replace"), "made": f"--corpus {name}={path}", "files": 1}
    if name == "prose":
        path = SHARED / "corpora" / "wiki541.txt.zst"
        if not path.exists():
            return {"missing": f"{path} is absent: give --corpus prose=PATH"}
        data = corpus_bytes(path, parse_size(f"{prose_mb}MB"))
        return {"text": data.decode("utf-8", "replace"), "made": f"first {prose_mb} MB of {path}", "files": 1}
    files = stdlib_python() if name == "python" else found_files(name)
    if not files:
        return {"missing": f"no {name} files on this machine (--corpus {name}=PATH)"}
    data, used = concatenated(files, parse_size(f"{mb}MB"))
    where = [sysconfig.get_paths()["stdlib"] + " (top level)"] if name == "python" else roots(name)
    made = f"{used} of {len(files)} files {' '.join(FOUND.get(name, (('*.py',),))[0])} under {', '.join(map(str, where))}"
    text = data.decode("utf-8", "replace")
    return {"text": text[:-1] if text.endswith("\n") else text, "made": made, "files": used}


def _busy_cores() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat ((0, 0) elsewhere)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, sum(ticks) / hz


def measure(tok: Tokenizer, text: str, runs: int, replay: bool) -> tuple[dict, np.ndarray]:
    """--runs encodes of `text`: MB/s of CPU and wall time, min/max, the load around them, the ids;
    then the special-token partition alone (and, with --replay, llama.cpp's order replayed)."""
    mb = len(text.encode("utf-8")) / 1e6
    load0, busy0, wall0, cpu0 = os.getloadavg(), _busy_cores()[0], time.perf_counter(), time.process_time()
    cpus, walls, ids = [], [], None
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        ids = tok.encode(text)
        walls.append(mb / (time.perf_counter() - w))
        cpus.append(mb / (time.process_time() - c))
        print(f"  {cpus[-1]:.2f} MB/s CPU, {walls[-1]:.2f} MB/s wall", flush=True)
    wall = time.perf_counter() - wall0
    others = (_busy_cores()[0] - busy0 - (time.process_time() - cpu0)) / wall
    row = {"mb": round(mb, 3), "n_tokens": len(ids), "mb_s_cpu": spread(cpus), "mb_s_wall": spread(walls),
           "loadavg_before": load0, "loadavg_after": os.getloadavg(), "other_cores_busy": round(max(others, 0.0), 2)}
    if hasattr(tok._partition, "locate"):  # (not in a tokenizer before issue 21, measured for comparison)
        segments = [text[i:i + SEGMENT] for i in range(0, len(text), SEGMENT)]
        for name, find in (("partition", tok._partition.locate), ("replay", tok._partition._replay))[:1 + replay]:
            c = time.process_time()
            for segment in segments:
                find(segment, True)
            row[f"{name}_mb_s_cpu"] = round(mb / (time.process_time() - c), 2)
    return row, ids


def compare(model: Path, text: str, ids: np.ndarray) -> dict:
    data = text.encode("utf-8")
    ref, seconds = llama_cpp_ids(model, data)
    n = min(len(ref), len(ids))
    bad = np.flatnonzero(ref[:n] != ids[:n])
    first = int(bad[0]) if len(bad) else (None if len(ref) == len(ids) else n)
    return {"identical": first is None, "first_difference": first, "n_tokens": len(ref),
            "seconds": round(seconds, 1), "mb_s": round(len(data) / seconds / 1e6, 3)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.tokenize_corpora", description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="GGUF (default: lookupkit.models gemma-3-270m)")
    ap.add_argument("--mb", type=float, default=5, help="MB of each found corpus (default 5)")
    ap.add_argument("--prose-mb", type=float, default=25, help="MB of the prose corpus (default 25)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--corpus", action="append", default=[], metavar="NAME=PATH",
                    help="a text file (.zst too) as corpus NAME, instead of the found one or besides them")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip the comparison with llama.cpp's ids")
    ap.add_argument("--replay", action="store_true", help="also time the partition's replay of llama.cpp's order")
    ap.add_argument("--out", type=Path, default=RESULTS / f"tokenize-corpora-{date.today()}.json")
    args = ap.parse_args(argv)
    given = dict(c.split("=", 1) for c in args.corpus)
    if args.model is None:
        from lookupkit import models

        args.model = models.path("gemma-3-270m")
    import lookupkit

    result = {"machine": machine(gate=True), "git": git_state(), "lookupkit": str(Path(lookupkit.__file__).parent),
              "model": str(args.model), "command": command("lookupkit.bench.tokenize_corpora", argv),
              "corpora": {}}
    start = time.process_time()
    tok = Tokenizer.from_file(args.model)
    result["load_s_cpu"] = round(time.process_time() - start, 2)
    for name in [*NAMES, *(n for n in given if n not in NAMES)]:
        c = corpus(name, given, args.mb, args.prose_mb)
        print(f"{name}: {c.get('missing') or c['made']}", flush=True)
        if "missing" in c:
            result["corpora"][name] = c
            continue
        row, ids = measure(tok, c["text"], args.runs, args.replay)
        row.update(made=c["made"], files=c["files"], sha256=hashlib.sha256(c["text"].encode()).hexdigest())
        if not args.no_llama_cpp:
            row["llama_cpp"] = compare(args.model, c["text"], ids)
            print(f"  llama.cpp: {row['llama_cpp']}", flush=True)
        result["corpora"][name] = row
    result["loadavg_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"wrote {args.out}")
    return result


def table(result: dict) -> str:
    """The markdown table of RESULTS.md's section."""
    lines = ["| corpus | MB | tokens | MB/s CPU, one core (min-max) | MB/s wall | partition alone (replay) MB/s "
             "| other cores busy | load before/after | llama.cpp ids |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in result["corpora"].items():
        if "missing" in r:
            lines.append(f"| {name} | missing: {r['missing']} | | | | | | | |")
            continue
        ref = r.get("llama_cpp")
        part = f"{r.get('partition_mb_s_cpu', '-')}" + (f" ({r['replay_mb_s_cpu']})" if "replay_mb_s_cpu" in r else "")
        same = "not compared" if ref is None else ("identical" if ref["identical"] else f"differ at {ref['first_difference']}")
        lines.append(f"| {name} | {r['mb']:.1f} | {r['n_tokens']:,} | {r['mb_s_cpu']['min']:.1f}-{r['mb_s_cpu']['max']:.1f} "
                     f"| {r['mb_s_wall']['min']:.1f}-{r['mb_s_wall']['max']:.1f} | {part} | {r['other_cores_busy']} "
                     f"| {r['loadavg_before'][0]:.2f}/{r['loadavg_after'][0]:.2f} | {same} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
