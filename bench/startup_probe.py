"""Child-process probes: each measurement runs in a fresh interpreter so RSS and page state are its own.

`python -m lookupkit.bench.startup_probe open PATH --runs N [--cold]` and
`python -m lookupkit.bench.startup_probe replay TOKENS [--lcs PATH] --ctx C --draft D [--cold] [--hold]` print one
JSON line. The study runs each probe in several fresh processes; a cold probe evicts the file from the
page cache in its own process, and the study reads it back in before the next warm measurement.
With --hold, the replay probe then prints "ready" and waits for a line on stdin, so a parent can read
every process's /proc/PID/smaps_rollup while all of them are alive (the sharing measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def memory() -> dict:
    """RSS, PSS and USS (private) of this process in bytes, from /proc/self/smaps_rollup."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:", "Private_Clean:", "Private_Dirty:"):
                out[parts[0][:-1].lower()] = int(parts[1]) * 1024
    out["uss"] = out.pop("private_clean") + out.pop("private_dirty")
    return out


def evict(path: str) -> None:
    """Drop the file's pages from the page cache (cold open)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def probe_open(path: str, runs: int, cold: bool) -> dict:
    """This process's first StaticCache.open (the one an engine pays at start, after `import lookupkit`),
    then `runs` - 1 more opens of the same file (each evicted first when cold)."""
    from lookupkit import StaticCache

    times, rss_growth = [], []
    for _ in range(max(runs, 1)):
        if cold:
            evict(path)
        before = memory()["rss"]
        t = time.perf_counter()
        cache = StaticCache.open(path)
        times.append(time.perf_counter() - t)
        rss_growth.append(memory()["rss"] - before)
        cache.close()
    return {"first_open_s": times[0], "first_rss_growth": rss_growth[0], "repeat_open_s": times[1:],
            "repeat_rss_growth": rss_growth[1:], "cold": cold}


def probe_replay(tokens: str, lcs: str | None, n_ctx: int, n_draft: int, hold: bool, cold: bool = False) -> dict:
    from lookupkit import StaticCache
    from lookupkit.files import peak_rss_bytes
    from lookupkit.corpora import read_token_file
    from lookupkit.replay import replay

    ids = read_token_file(tokens)
    if cold and lcs:
        evict(lcs)  # the replay reads the static cache from disk as it drafts
    rss_base = memory()["rss"]
    t = time.perf_counter()
    static = StaticCache.open(lcs) if lcs else None
    t_open = time.perf_counter() - t
    rss_open = memory()["rss"]
    trace, _ = replay(ids, n_ctx=n_ctx, n_draft=n_draft, static=static, engine="fast")
    s = trace.summary()
    result = {k: s[k] for k in ("n_drafted", "n_accept", "accept", "t_draft_ms", "us_per_drafted_token",
                                "draft_calls", "drafted_steps", "coverage")}
    result.update(open_s=t_open, cold=bool(cold and lcs), rss_base=rss_base, rss_after_open=rss_open, peak_rss=peak_rss_bytes(), **memory())
    if hold:
        print(json.dumps(result), flush=True)
        print("ready", flush=True)
        sys.stdin.readline()
        return {}
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="lookupkit.bench.startup_probe")
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("open")
    o.add_argument("path")
    o.add_argument("--runs", type=int, default=3)
    o.add_argument("--cold", action="store_true")
    r = sub.add_parser("replay")
    r.add_argument("tokens")
    r.add_argument("--lcs")
    r.add_argument("--ctx", type=int, help="replay chunk size (default: lookupkit.rules.DEFAULT_CTX)")
    r.add_argument("--draft", type=int, default=8)
    r.add_argument("--hold", action="store_true")
    r.add_argument("--cold", action="store_true", help="evict the static cache from the page cache first")
    a = p.parse_args(argv)
    if a.cmd == "open":
        res = probe_open(a.path, a.runs, a.cold)
    else:
        from lookupkit.rules import DEFAULT_CTX  # not at the top: the open probe imports only what its timed open needs

        res = probe_replay(a.tokens, a.lcs, DEFAULT_CTX if a.ctx is None else a.ctx, a.draft, a.hold, a.cold)
    if res:
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
