"""The start-up section of RESULTS.md (bench/startup/run.py's measurements): import to first draft in fresh
processes (warm, fresh install, read-only install), private memory, and which commands pay for numba."""

from __future__ import annotations

from pathlib import Path

from lookupkit.bench.harness import MB, verdict, write_text


def _ms(summary: dict | None, scale: float = 1e3, digits: int = 0) -> str:
    if not summary or not summary.get("n"):
        return "not measured"
    return (f"{summary['median'] * scale:.{digits}f} ({summary['min'] * scale:.{digits}f}–"
            f"{summary['max'] * scale:.{digits}f})")


def _compile_log(runs: list[dict]) -> list[str]:
    """stderr lines a fresh run printed before its first draft (what the user sees while it compiles)."""
    out = []
    for r in runs:
        t_done = r.get("wall_to_result_s") or 0
        out += [f"{t:.1f} s: {ln}" for t, ln in r.get("stderr", []) if t <= t_done]
    return out


def startup_section(data: dict) -> list[str]:
    st = data.get("startup")
    if not st:
        return []
    cmd = data.get("startup_command") or "python -m lookupkit.bench.startup --cache " + Path(st["cache"]).name
    out = ["## Start-up: `import lookupkit` to the first draft, fresh processes", "",
           f"Static cache `{Path(st['cache']).name}` ({st['cache_bytes'] / MB:.0f} MB), a 512-token prompt from "
           f"`{Path(st['tokens']).name}`, `Drafter(static=cache).draft(prompt, 8)`. Wall time measured by the parent "
           "from spawning `python -c` (from an empty working directory) to the child's line after the first draft; "
           f"median (min–max) of {st['runs']} runs. Installed copy = the package laid out as pip installs it "
           "(`.py` + compiled `.pyc`, no numba cache copied), on PYTHONPATH. Command: `" + cmd + "`.", "",
           "| scenario | wall to first draft ms | import lookupkit ms | open ms | first draft ms | numba cache |",
           "|---|---|---|---|---|---|"]

    def row(name, sc, note=""):
        if not sc:
            return
        out.append(f"| {name} | {_ms(sc.get('wall_to_first_draft_s'))} | {_ms(sc.get('t_import_s'))} | "
                   f"{_ms(sc.get('t_open_s'), digits=2)} | {_ms(sc.get('t_first_draft_s'))} | {note} |")

    out.append(f"| interpreter alone (`python -c`) | {_ms(st.get('python_baseline'))} | – | – | – | – |")
    imp = st.get("import_only", {})
    out.append(f"| `import lookupkit` alone | {_ms(imp.get('wall_s'))} (to its line) | – | – | – | – |")
    row("warm, installed copy (headline)", st.get("warm_installed"), "filled, page cache warm")
    row("warm, editable repository", st.get("warm_repo"), "in-tree `__pycache__`")
    fi = st.get("fresh_install")
    if fi:
        saved = [r.get("cache_saved", 0) for r in fi["runs"]] or [0]
        row("fresh install (numba cache files deleted before each run)", fi,
            f"compiled: {min(saved)}–{max(saved)} entries saved in-tree (debug)")
        row("… the same install afterwards", fi.get("after_compile_warm"), "loaded")
    nc = st.get("fresh_numba_cache_dir")
    if nc:
        loaded = max((r.get("cache_loaded", 0) for r in nc["runs"]), default=0)
        row("repository, NUMBA_CACHE_DIR = new empty dir", nc,
            f"{'no' if loaded == 0 else loaded} entries loaded (in-tree caches {'not ' if loaded == 0 else ''}used) (debug)")
    ro = st.get("read_only")
    if ro and ro.get("measured"):
        row("read-only install (bind mount ro), first run", ro["first"],
            f"compiled: {ro.get('first_saved', '?')} entries saved in $XDG_CACHE_HOME/numba (debug)")
        row("read-only install, later runs", ro["later"],
            "loaded from " + ", ".join(f"`$XDG_CACHE_HOME/{d}`" for d in ro.get("cache_dirs_under_xdg", [])[:1]))
    elif ro:
        out.append(f"| read-only install | not measured: {ro.get('why')} | – | – | – | – |")
    logs = _compile_log((fi or {}).get("runs", []))
    out += ["", "(debug) = run with NUMBA_DEBUG_CACHE=1, which records where numba saved or loaded each kernel and "
            "slows a start by its logging; the other rows ran without it. numba tries its cache locators in order: "
            "NUMBA_CACHE_DIR if set, else the source's own `__pycache__` if writable, else the user-wide "
            "`$XDG_CACHE_HOME/numba` (`~/.cache/numba`).", "", "What a user sees during a fresh install's first draft (stderr before the draft): " +
            ("; ".join(f"`{ln}`" for ln in logs[:3]) if logs else "**nothing** (a silent pause while numba compiles)."), ""]

    mem = st.get("memory")
    if mem:
        out += ["Private memory of a process holding a Drafter over the cache (`/proc/self/smaps_rollup`, median of "
                f"{st['runs']}): Private_Dirty = Anonymous = the process's own heap; USS adds Private_Clean (file pages "
                "only this process maps: shared with any other process mapping the cache).", "",
                "| state | RSS MB | PSS MB | USS MB | Private_Dirty MB | Anonymous MB |", "|---|---|---|---|---|---|"]
        for key, name in (("import_only", "`import lookupkit` only"), ("memory_first_draft", "after the first draft"),
                          ("memory_after_2048", "after drafting along 2,048 more tokens")):
            m = mem.get(key, {})
            out.append(f"| {name} | " + " | ".join(_ms(m.get(f), 1 / MB) for f in
                                                  ("rss", "pss", "uss", "private_dirty", "anonymous")) + " |")
        out.append("")
    cmds = st.get("commands")
    if cmds:
        out += [f"Commands that need no compiled kernel (installed copy, warm; cache `{Path(cmds['cache']).name}`; "
                "kernels = numba dispatchers holding a compiled or cache-loaded signature at exit; NUMBA_DEBUG_CACHE "
                "counts the index entries loaded):", "",
                "| command | wall ms | numba imported | kernels compiled or loaded | cache entries loaded |",
                "|---|---|---|---|---|"]
        for name, c in cmds.items():
            if name == "cache":
                continue
            ks = c.get("kernels", [])
            out.append(f"| `{name}` | {_ms(c.get('wall_s'))} | {'yes' if c.get('numba_imported') else 'no'} | "
                       f"{len(ks)}{': ' + ', '.join(k.rsplit('.', 1)[-1] for k in ks[:6]) if ks else ''} | "
                       f"{c.get('cache_loaded', 0)} |")
        out.append("")
    out += _startup_targets(st)
    return out


def _startup_targets(st: dict) -> list[str]:
    """Each start-up target: a timing against its limit (through `verdict`), or a yes/no observation."""
    out = ["Start-up targets:", "", "| target | measured | met? | rests on |", "|---|---|---|---|"]

    def timed(name, summary, limit_s, source):
        value = (summary or {}).get("median")
        shown = "not measured" if not value or value <= 0 else (f"{value * 1e3:.0f} ms" if value < 10 else f"{value:.1f} s")
        out.append(f"| {name} | {shown} | {verdict(value, limit_s)} | {source} |")

    def flag(name, ok: bool | None, shown, source):
        out.append(f"| {name} | {shown} | {'not measured' if ok is None else ('yes' if ok else '**no**')} | {source} |")

    timed("import to first draft ≤ 300 ms (warm)", (st.get("warm_installed") or {}).get("wall_to_first_draft_s"),
          0.3, "scenario \"warm, installed copy\"")
    fi = st.get("fresh_install")
    timed("first compile ≤ 20 s (fresh install)", (fi or {}).get("wall_to_first_draft_s"), 20.0,
          "scenario \"fresh install\"")
    logs = _compile_log(fi["runs"]) if fi else None
    flag("first compile visible (a log line or progress)", None if fi is None else bool(logs),
         "not measured" if fi is None else (f"`{logs[0]}`" if logs else "nothing on stderr before the draft"),
         "stderr of the fresh-install runs")
    ro = st.get("read_only")
    measured = bool(ro and ro.get("measured"))
    flag("compile cache kept with a read-only package dir", ro.get("cache_kept") if measured else None,
         f"later runs {_ms(ro['later']['wall_to_first_draft_s'])} ms, cache in `$XDG_CACHE_HOME/numba`" if measured
         else "not measured" + (f": {ro.get('why')}" if ro else ""), "scenario \"read-only install\" (NUMBA_DEBUG_CACHE)")
    for name, c in (st.get("commands") or {}).items():
        if name.startswith("lookupkit ") and "keys recovered" not in name:
            ks = c.get("kernels", [])
            flag(f"`{name}` pays for no kernel", not ks,
                 f"{len(ks)} kernels; numba imported: {'yes' if c.get('numba_imported') else 'no'}",
                 "commands table")
    return out + [""]


TARGET_ADDED_S = 0.05  # what lookupkit may add to model load -> first draft (issue 14)
IMPORT_FACTOR = 2.0  # `import lookupkit` within this many times numpy's own import (issue 14)
COMPARE_ROWS = (("import numpy", "`import numpy` (the reference)"), ("import lookupkit", "`import lookupkit`"),
                ("import → first draft (warm)", "`import lookupkit` → first draft, warm, small cache"),
                ("engine", "model load alone (`llama_cpp.Llama` + tokenize the prompt)"),
                ("generate", "`open_model` → first draft (`Drafter(static=...)`)"),
                ("generate-inline", "… the same, warm-up inline (no thread)"),
                ("hook", "`LookupDraftModel` + `Llama(draft_model=...)` → first draft"),
                ("hook-inline", "… the same, warm-up inline (no thread)"))


def compare_section(data: dict) -> list[str]:
    """bench/startup/compare.py's before/after table and its two targets."""
    cmp = data["compare"]
    trees = cmp["trees"]
    names = list(trees)
    m = data.get("machine", {})
    load = f"load {m.get('loadavg_at_start', ['?'])[0]:.2f} at start, {m.get('loadavg_at_end', ['?'])[0]:.2f} at end" \
        if m.get("loadavg_at_end") else ""
    th = cmp.get("threads", 2)
    out = [f"## Start-up before/after, the model on {th} thread{'s' if th != 1 else ''}", "",
           f"Fresh `python -c` processes, each tree laid out as pip installs it, its numba cache filled first; "
           f"times inside the child, median (min–max) of {cmp['runs']} interleaved rounds; {m.get('cores')} cores, "
           f"{load}. Static cache `{Path(cmp['cache']).name}` ({cmp['cache_bytes'] / MB:.0f} MB); model "
           f"`{Path(cmp['model']).name if cmp.get('model') else 'not measured'}`. "
           + ", ".join(f"{n} = `{t.get('commit', '?')[:10]}`{' (dirty)' if t.get('dirty') else ''}" for n, t in trees.items())
           + f". Command: `{data.get('command')}`.", "",
           "| measure | " + " | ".join(f"{n} ms" for n in names) + " | " + " | ".join(f"{n}: lookupkit adds ms" for n in names)
           + " | numba loaded by `import lookupkit` |", "|---" * (1 + 2 * len(names) + 1) + "|"]
    for key, label in COMPARE_ROWS:
        rows = [trees[n]["probes"].get(key) for n in names]
        if not any(rows):
            continue
        cells = [_ms(r["t_s"]) if r else "–" for r in rows]
        added = [_ms(r["added_s"]) if r and "added_s" in r else "–" for r in rows]
        numba = ", ".join(f"{n}: {'yes' if r['numba'] else 'no'}" for n, r in zip(names, rows) if r and key.startswith("import"))
        out.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(added) + f" | {numba or '–'} |")
    first = trees[names[0]]["probes"]
    ref = (first.get("import numpy") or {}).get("t_s", {}).get("median")
    out += ["", "Targets (the first tree):", "", "| target | measured | met? |", "|---|---|---|"]
    imp = (first.get("import lookupkit") or {}).get("t_s", {}).get("median")
    out.append(f"| `import lookupkit` ≤ {IMPORT_FACTOR:g}× `import numpy` and no numba | "
               + (f"{imp * 1e3:.1f} ms vs {ref * 1e3:.1f} ms, numba {'yes' if first['import lookupkit']['numba'] else 'no'}"
                  if imp and ref else "not measured") + " | "
               + ("not measured" if not (imp and ref) else
                  verdict(imp, IMPORT_FACTOR * ref) if not first["import lookupkit"]["numba"] else "**no**") + " |")
    for key in ("generate", "hook"):
        added = (first.get(key) or {}).get("added_s", {}).get("median")
        out.append(f"| {key}: lookupkit adds ≤ {TARGET_ADDED_S * 1e3:.0f} ms to model load → first draft | "
                   + (f"{added * 1e3:.0f} ms" if added is not None else "not measured") + " | "
                   + (verdict(added, TARGET_ADDED_S) if added is not None and added > 0 else
                      ("yes" if added is not None else "not measured")) + " |")
    return out + [""]


def write_compare(runs: list[dict], path: Path) -> None:
    """bench/STARTUP.md from startup.compare results, one section each (written atomically)."""
    text = "\n".join(["# Start-up", "", "Written by `python -m lookupkit.bench.startup.compare` "
                      "(bench/results/startup-compare-*.json).", "", *(ln for d in runs for ln in compare_section(d))])
    write_text(path, text)
