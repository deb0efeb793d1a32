"""Turn a study's raw runs into `bench/RESULTS.md`: medians with min–max, ratios to llama.cpp,
the anchors beside them, and a plain statement of which targets are met."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from lookupkit.bench.harness import MB, MIN_RUNS, SHARED, median_min_max, verdict  # noqa: F401  (re-exported: the report's guards)
from lookupkit.bench.startup.report import startup_section

# anchors.md: the fork (Apple M4 Pro) and upstream llama.cpp measured on this kind of machine, 541 MB
TARGETS = {"open_ms": 1.0, "rss_growth_mb": 1.0, "static_mem_mb": 200.0, "us_per_token": 1.0,
           "build_s": 240.0, "build_peak_gb": 4.0, "file_mb": 467.264120}
FORK = {"open_ms": {25: 39, 50: 62, 100: 81, 200: 155, 541: 298},
        "us_d8": {0: 0.45, 25: 0.76, 50: 0.78, 100: 0.90, 200: 1.06, 541: 1.18},
        "static_mem_mb": {25: 47, 50: 82, 100: 139, 200: 231, 541: 467}}
# anchors.md "This machine": upstream llama.cpp's own code on this kind of machine, same ids
UPSTREAM = {"load_ms": {0: 0, 25: 1110, 50: 2211, 100: 4022, 200: 5899, 541: 14321},
            "us_d8": {0: 16.2, 25: 62.3, 50: 87.0, 100: 115.7, 200: 150.8, 541: 237.3},
            "us_d16": {0: 10.2, 25: 44.8, 50: 60.2, 100: 84.3, 200: 115.5, 541: 169.5},
            "create_s": {25: 6, 50: 15, 100: 35, 200: 71, 541: 210}}


stats = median_min_max


def fmt(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not values:
        return "–"
    med, lo, hi = (v * scale for v in stats(values))
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def ratio(a: list[float], b: list[float]) -> str:
    if not a or not b:
        return "–"
    ma, mb = statistics.median(a), statistics.median(b)
    if ma <= 0 or mb <= 0:
        return "–"
    r = ma / mb
    if r >= 1:
        return f"{r:.3g}×"
    return f"1/{1 / r:,.0f}" if 1 / r >= 10 else f"1/{1 / r:.2g}"


class Results:
    def __init__(self, data: dict):
        self.data = data
        self.cells = data["cells"]
        self.unit = "k tokens" if str(data["config"]["corpus"]).endswith(".i32") else "MB"

    def anchor(self, table: dict, key: str, size: int):
        """An anchors.md figure for this corpus size; only meaningful for the MB-sized text study."""
        return table.get(key, {}).get(size, "–") if self.unit == "MB" else "–"

    def runs(self, kind: str, impl: str, size: int) -> list[dict]:
        for c in self.cells:
            if c["kind"] == kind and c["impl"] == impl and c["size"] == size:
                return c["runs"]
        return []

    def cell(self, kind: str, impl: str, size: int) -> dict:
        return next((c for c in self.cells if c["kind"] == kind and c["impl"] == impl and c["size"] == size), {})

    def values(self, kind: str, impl: str, size: int, key: str) -> list[float]:
        out = []
        for r in self.runs(kind, impl, size):
            v = r.get(key)
            if isinstance(v, list):
                out.extend(v)
            elif v is not None:
                out.append(v)
        return out

    @property
    def sizes(self) -> list[int]:
        return sorted({c["size"] for c in self.cells if c["kind"].startswith("replay")})

    def drafts(self) -> list[int]:
        return sorted({int(c["kind"][8:]) for c in self.cells if c["kind"].startswith("replay_d")})

    def static_memory(self, impl: str, size: int, d: int) -> list[float]:
        """Peak RSS of the replay with the cache minus the median peak RSS without one (bytes)."""
        base = self.values(f"replay_d{d}", impl, 0, "peak_rss")
        with_cache = self.values(f"replay_d{d}", impl, size, "peak_rss")
        if not base or not with_cache:
            return []
        b = statistics.median(base)
        return [v - b for v in with_cache]


def _commit(data: dict) -> str:
    c = data.get("commit")
    if not c:
        return "not recorded"
    return f"`{c[:12]}`" + (" with uncommitted changes (dirty)" if data.get("dirty") else " (clean)")


def _load(m: dict) -> str:
    """The machine's load average at start and end (other jobs share these cores: noise)."""
    a, b = m.get("loadavg_at_start"), m.get("loadavg_at_end")
    if not a:
        return ""
    return (f" Load average (1 min) {a[0]:.1f} at the start" + (f", {b[0]:.1f} at the end" if b else "") +
            f" on {m.get('cores')} cores: other jobs shared the machine, so compare ratios measured side by side.")


def _cmd_line(res: "Results", kind: str, impl: str = "lookupkit", size: int | None = None) -> str:
    """The command a table's cells ran (at `size`, else the largest size), as recorded in the results."""
    cells = [c for c in res.cells if c["kind"] == kind and c["impl"] == impl and c.get("cmd")]
    if size is not None:
        cells = [c for c in cells if c["size"] == size] or cells
    if not cells:
        return "–"
    return f"`{max(cells, key=lambda c: c['size'])['cmd']}`"


def render(data: dict, calibrations: list[dict] = (), startup: dict | None = None) -> str:
    """The report of one study; `startup` (bench/startup/run.py's JSON) replaces the study's own start-up
    section, `calibrations` (bench/calibration/run.py's JSON) add the "will it pay" section."""
    if startup:
        data = {**data, "startup": startup["startup"], "startup_command": startup.get("command"),
                "startup_run": f"{startup.get('started')}, commit {str(startup.get('commit'))[:12]}"
                               f"{' (dirty)' if startup.get('dirty') else ''}"}
    res = Results(data)
    cfg, m = data["config"], data["machine"]
    unit = res.unit
    lines = [f"# lookupkit benchmark results ({cfg['name']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, Linux {m['kernel']}, "
             f"Python {m['python']}, numpy {m['numpy']}, numba {m['numba']}. Run {data['started']} → "
             f"{data.get('finished', 'unfinished')}. Commit {_commit(data)}.{_load(m)}", "",
             *([] if "commit" in data else [
                 "**These results predate the study's fixes (issue 7)**: open was timed as 7 opens in one process, "
                 "the end-to-end build once, and the cold-open probe left the file evicted before the first "
                 "`--draft 8` replay of every cached cell (run 1 read from disk). Rerun `lookupkit bench`.", ""]),
             f"Corpus `{Path(cfg['corpus']).name}` prefixes ({unit}); replay of `{Path(cfg['eval_tokens']).name}` at "
             f"`-c {cfg['n_ctx']}`; every cell {cfg['runs']} runs back to back, shown as median (min–max). "
             f"llama.cpp = upstream `common/ngram-cache.cpp` "
             f"({data.get('llamacpp_version', 'not run: ' + str(data.get('llamacpp_skipped')))}) driven by "
             "`bench/llamacpp_driver/driver.cpp` on the same token ids. Reproduce: `lookupkit bench` "
             f"({'`--quick`' if cfg['name'] == 'quick' else 'full study'}).", ""]
    lines += _build_table(res, unit) + _open_table(res, unit)
    for d in res.drafts():
        lines += _replay_table(res, unit, d)
    lines += _cold_replay_table(res, unit) + _tie_rule_section() + _share_table(res) + startup_section(data) + _targets(res)
    if calibrations:
        from lookupkit.bench.calibration.report import render_calibration

        lines += ["## Will it pay on a 0.5B model? Verify-cost curve, expected speed-up, wall clock", "",
                  "From `python -m lookupkit.bench.calibration` (its own runs, commands and dates below; not part of "
                  "`lookupkit bench`)."]
        for c in calibrations:
            lines += [""] + render_calibration(c)
    return "\n".join(lines) + "\n"


def _build_table(res: Results, unit: str) -> list[str]:
    out = ["## Build (count + write from token ids) and files", "",
           f"| corpus ({unit}) | tokens | 2-grams | pairs | .lkc MB | llama.cpp .lcs MB | lookupkit s | llama.cpp s | "
           "lookupkit ÷ llama.cpp | lookupkit peak RSS MB | llama.cpp peak RSS MB | anchor: upstream create s |", "|" + "---|" * 12]
    for s in res.sizes:
        if not s:
            continue
        lk = res.cell("build", "lookupkit", s)
        ll = res.cell("build", "llama.cpp", s)
        r0 = (lk.get("runs") or [{}])[0]
        lk_s, ll_s = res.values("build", "lookupkit", s, "build_s"), res.values("build", "llama.cpp", s, "build_s")
        out.append(f"| {s} | {r0.get('n_tokens', '–'):,} | {r0.get('n_keys', '–'):,} | {r0.get('n_pairs', '–'):,} | "
                   f"{lk.get('file_size', 0) / MB:.1f} | {ll.get('file_size', 0) / MB:.1f} | {fmt(lk_s)} | {fmt(ll_s)} | "
                   f"{ratio(lk_s, ll_s)} | {fmt(res.values('build', 'lookupkit', s, 'peak_rss'), 1 / MB, 0)} | "
                   f"{fmt(res.values('build', 'llama.cpp', s, 'peak_rss'), 1 / MB, 0)} | "
                   f"{res.anchor(UPSTREAM, 'create_s', s)} |")
    for c in res.cells:
        if c["kind"] == "tokenize":
            r = c["runs"][0]
            out.append(f"\nTokenize {c['size']} {unit}: {r['seconds']:.1f} s ({r.get('tokens', 0):,} tokens; incremental: "
                       "the token store reuses the previous prefix's ids" +
                       (f"; `seconds` of `{c['cmd']}`" if c.get("cmd") else "") + ").")
        if c["kind"] == "build_end_to_end":
            runs = c["runs"]
            out.append(f"\nEnd to end (text → .lkc, no token cache) {c['size']} {unit}, {len(runs)} run(s): "
                       f"{fmt([r['total_s'] for r in runs], digits=1)} s (tokenize "
                       f"{fmt([r['tokenize_s'] for r in runs], digits=1)} s), peak RSS "
                       f"{fmt([r['peak_rss'] for r in runs], 1e-9)} GB, file {c['file_size'] / MB:.1f} MB "
                       f"(`total_s` of `{c.get('cmd', 'lookup-create -f ... --no-token-cache')}`).")
    out += ["", f"Commands: lookupkit {_cmd_line(res, 'build')} ({res.data['config']['runs']} runs; `build_s` = "
            "count + write seconds, `peak_rss_bytes`); llama.cpp " + _cmd_line(res, "build", "llama.cpp") +
            " (its own count + save seconds and VmHWM)."]
    return out + [""]


def open_values(res: "Results", kind: str, size: int, key: str = "first_open_s") -> list[float]:
    """Per fresh process: its first open (or its RSS growth); older results (one process, N opens) give []."""
    return [r[key] for r in res.runs(kind, "lookupkit", size) if r.get(key) is not None]


def _open_table(res: Results, unit: str) -> list[str]:
    n = len(open_values(res, "open_warm", max(res.sizes) if res.sizes else 0))
    out = ["## Static cache open", "",
           *([] if n else ["Old results: no first open per fresh process was recorded; the repeat column holds "
                           "what was measured then (7 opens in one process).", ""]),
           f"Each figure: the first `StaticCache.open` in a fresh process (after `import lookupkit`), median "
           f"(min–max) of {n} processes. Warm: the file was read into the page cache first; cold: each process "
           "evicted it (`posix_fadvise(DONTNEED)`) just before opening. Repeat opens: the same process opening "
           "again (what a second open costs, not what an engine pays at start).", "",
           f"| corpus ({unit}) | warm ms | cold ms | repeat opens (warm) ms | RSS growth of the first open KB | "
           "llama.cpp load ms | lookupkit (warm) ÷ llama.cpp | anchor: upstream ms | anchor: fork (M4 Pro) ms |",
           "|" + "---|" * 9]
    d = (res.drafts() or [8])[0]
    for s in res.sizes:
        if not s:
            continue
        warm = open_values(res, "open_warm", s)
        cold = open_values(res, "open_cold", s)
        repeat = res.values("open_warm", "lookupkit", s, "repeat_open_s") or res.values("open_warm", "lookupkit", s, "open_s")
        growth = open_values(res, "open_warm", s, "first_rss_growth")
        ll = [v / 1e3 for v in res.values(f"replay_d{d}", "llama.cpp", s, "t_load_ms")]
        out.append(f"| {s} | {fmt(warm, 1e3, 3)} | {fmt(cold, 1e3, 3)} | {fmt(repeat, 1e3, 3)} | {fmt(growth, 1 / 1024, 0)} | "
                   f"{fmt(ll, 1e3, 0)} | {ratio(warm, ll)} | {res.anchor(UPSTREAM, 'load_ms', s)} | {res.anchor(FORK, 'open_ms', s)} |")
    out += ["", f"Commands: warm {_cmd_line(res, 'open_warm')}, cold {_cmd_line(res, 'open_cold')} (fields "
            "`first_open_s`, `repeat_open_s`, `first_rss_growth`); llama.cpp: `t_load_ms` of its lookup-stats run."]
    return out + [""]


def _replay_table(res: Results, unit: str, d: int) -> list[str]:
    kind = f"replay_d{d}"
    out = [f"## Replay `--draft {d}`", "",
           f"| corpus ({unit}) | µs/drafted token lookupkit | llama.cpp | lookupkit ÷ llama.cpp | static-cache memory MB lookupkit | "
           "llama.cpp | peak RSS MB lookupkit | llama.cpp | accept % lookupkit | llama.cpp | drafted / accepted lookupkit | "
           "coverage | anchor: upstream µs | anchor: fork µs (M4 Pro, d8) |", "|" + "---|" * 14]
    for s in res.sizes:
        lk_us = res.values(kind, "lookupkit", s, "us_per_drafted_token")
        ll_us = res.values(kind, "llama.cpp", s, "us_per_drafted_token")
        run0 = (res.runs(kind, "lookupkit", s) or [{}])[0]
        ll0 = (res.runs(kind, "llama.cpp", s) or [{}])[0]
        acc_ll = f"{ll0['n_accept'] / ll0['n_drafted'] * 100:.3f}" if ll0.get("n_drafted") else "–"
        out.append(f"| {s} | {fmt(lk_us)} | {fmt(ll_us, digits=1)} | {ratio(lk_us, ll_us)} | "
                   f"{fmt(res.static_memory('lookupkit', s, d), 1 / MB, 0) if s else '–'} | "
                   f"{fmt(res.static_memory('llama.cpp', s, d), 1 / MB, 0) if s else '–'} | "
                   f"{fmt(res.values(kind, 'lookupkit', s, 'peak_rss'), 1 / MB, 0)} | "
                   f"{fmt(res.values(kind, 'llama.cpp', s, 'peak_rss'), 1 / MB, 0)} | "
                   f"{run0.get('accept', 0):.3f} | {acc_ll} | {run0.get('n_drafted', 0):,} / {run0.get('n_accept', 0):,} | "
                   f"{run0.get('coverage', 0):.3f} | {res.anchor(UPSTREAM, f'us_d{d}', s)} | "
                   f"{res.anchor(FORK, 'us_d8', s) if d == 8 else '–'} |")
    out += ["", f"Warm page cache (the cache file read in before the runs). Commands: lookupkit {_cmd_line(res, kind)} "
            "(fields `us_per_drafted_token`, `peak_rss`, `n_drafted`, `n_accept`); llama.cpp "
            f"{_cmd_line(res, kind, 'llama.cpp')}. Static-cache memory = peak RSS with the cache − median peak RSS "
            "of the same command without one (size 0)."]
    return out + [""]


def _tie_rule_section() -> list[str]:
    """What "acceptance identical to llama.cpp's code under lookupkit's tie rule" rests on: llama.cpp's own
    code run with the smallest-id tie rule on ../shared/reference (cases.json), beside unmodified llama.cpp."""
    cases = SHARED / "reference" / "cases.json"
    try:
        rows = json.loads(cases.read_text())
    except (OSError, ValueError):
        return []
    out = ["## Acceptance: lookupkit's tie rule against llama.cpp's code", "",
           "The accept % columns above differ from llama.cpp's by hundredths of a point because unmodified llama.cpp "
           "breaks ties between equally counted followers in hash-map iteration order. With lookupkit's rule "
           "(smallest token id; windows before position 0 miss) llama.cpp's own code gives the figures below "
           "(`../shared/reference/cases.json`), which lookupkit's replay reproduces call for call "
           "(`pytest tests/test_conformance.py`; the quick study replays `zipf_c1024_d8` and "
           "`tests/test_bench_quick.py` checks its 38,181 / 9,715).", "",
           "| case | llama.cpp, smallest-id ties: drafted / accepted | unmodified llama.cpp: drafted / accepted |",
           "|---|---|---|"]
    for c in rows:
        u = c.get("llamacpp_unmodified") or {}
        out.append(f"| {c['case']} | {c['n_drafted']:,} / {c['n_accept']:,} | "
                   f"{u.get('n_drafted', 0):,} / {u.get('n_accept', 0):,} |")
    return out + [""]


def _cold_replay_table(res: Results, unit: str) -> list[str]:
    kinds = sorted({c["kind"] for c in res.cells if c["kind"].startswith("replay_cold_d")})
    out = []
    for kind in kinds:
        d = int(kind[len("replay_cold_d"):])
        out += [f"## Replay `--draft {d}`, cold page cache", "",
                "Each run evicts the cache file from the page cache in its own process before opening it, so "
                "drafting reads the pages it needs from disk; the warm row is the table above.", "",
                f"| corpus ({unit}) | µs/drafted token cold | warm | cold ÷ warm | peak RSS MB cold |", "|---|---|---|---|---|"]
        for s in res.sizes:
            cold = res.values(kind, "lookupkit", s, "us_per_drafted_token")
            if not cold:
                continue
            warm = res.values(f"replay_d{d}", "lookupkit", s, "us_per_drafted_token")
            out.append(f"| {s} | {fmt(cold)} | {fmt(warm)} | {ratio(cold, warm)} | "
                       f"{fmt(res.values(kind, 'lookupkit', s, 'peak_rss'), 1 / MB, 0)} |")
        out += ["", f"Command: {_cmd_line(res, kind)}.", ""]
    return out


def _share_table(res: Results) -> list[str]:
    rows = [c for c in res.cells if c["kind"] == "share"]
    if not rows:
        return []
    out = ["## Sharing one mapped cache across processes", "",
           "| processes | total PSS MB | USS per process MB | RSS per process MB | N × single-process RSS MB |",
           "|---|---|---|---|---|"]
    single = None
    for c in rows:
        r = c["runs"][0]
        if c["n_procs"] == 1:
            single = r["rss"][0]
        out.append(f"| {c['n_procs']} | {r['pss_total'] / MB:.0f} | {fmt(r['uss'], 1 / MB, 0)} | "
                   f"{fmt(r['rss'], 1 / MB, 0)} | {c['n_procs'] * single / MB:.0f} |" if single else "")
    cmd = _cmd_line(res, "share").split(" x ", 1)[-1]
    out += ["", f"Command: N × `{cmd.strip('`')}` (all N alive at once; `/proc/PID/smaps_rollup` read by the parent)."]
    return out + [""]


TARGET_SIZE_MB = 541  # every size-dependent target is defined at 541 MB of the text corpus


def _targets(res: Results) -> list[str]:
    """Each target at the size it is defined for, whether it is met, the figure and command it rests on,
    and lookupkit ÷ llama.cpp from the same run."""
    big = max(res.sizes) if res.sizes else 0
    at_target_size = res.unit == "MB" and TARGET_SIZE_MB in res.sizes
    size = TARGET_SIZE_MB if at_target_size else big
    d = 8 if 8 in res.drafts() else (res.drafts() or [8])[0]
    kind = f"replay_d{d}"
    ll_load = [v / 1e3 for v in res.values(kind, "llama.cpp", size, "t_load_ms")]
    rows = [  # name, lookupkit values, llama.cpp values, scale to unit, limit, unit, defined at 541 MB?, rests on
        ("open ≤ 1 ms (first open, fresh process, warm)", open_values(res, "open_warm", size), ll_load, 1e3,
         TARGETS["open_ms"], "ms", True, f"Static cache open, warm ms; {_cmd_line(res, 'open_warm', size=size)}"),
        ("RSS growth after open ≤ 1 MB", open_values(res, "open_warm", size, "first_rss_growth"), [], 1 / MB,
         TARGETS["rss_growth_mb"], "MB", True, f"Static cache open, RSS growth; {_cmd_line(res, 'open_warm', size=size)}"),
        (f"static-cache memory ≤ 200 MB (d{d})", res.static_memory("lookupkit", size, d),
         res.static_memory("llama.cpp", size, d), 1 / MB, TARGETS["static_mem_mb"], "MB", True,
         f"Replay `--draft {d}`, static-cache memory (peak RSS − peak RSS at size 0); {_cmd_line(res, kind, size=size)}"),
        (f"≤ 1.0 µs per drafted token (d{d}, warm)", res.values(kind, "lookupkit", size, "us_per_drafted_token"),
         res.values(kind, "llama.cpp", size, "us_per_drafted_token"), 1, TARGETS["us_per_token"], "µs", True,
         f"Replay `--draft {d}`, µs/drafted token; {_cmd_line(res, kind, size=size)}"),
    ]
    e2e = next((c for c in res.cells if c["kind"] == "build_end_to_end"), None)
    if e2e:
        ll_build = res.values("build", "llama.cpp", e2e["size"], "build_s")
        e2e_ok = res.unit == "MB" and e2e["size"] == TARGET_SIZE_MB
        rows.append(("end-to-end build ≤ 4 min (text → file; llama.cpp: count + save only)",
                     [r["total_s"] for r in e2e["runs"]], ll_build, 1, TARGETS["build_s"], "s", e2e_ok,
                     f"End to end, `total_s`; `{e2e.get('cmd', '–')}`"))
        rows.append(("build peak RSS ≤ 4 GB", [r["peak_rss"] for r in e2e["runs"]],
                     res.values("build", "llama.cpp", e2e["size"], "peak_rss"), 1e-9, TARGETS["build_peak_gb"], "GB",
                     e2e_ok, f"End to end, `peak_rss_bytes`; `{e2e.get('cmd', '–')}`"))
    lk, ll = res.cell("build", "lookupkit", size), res.cell("build", "llama.cpp", size)
    if lk:
        rows.append(("file ≤ 467 MB (the fork's, on the article's corpus)", [lk.get("file_size")],
                     [ll["file_size"]] if ll else [], 1 / MB, TARGETS["file_mb"], "MB", True,
                     f"Build table, .lkc MB; {_cmd_line(res, 'build', size=size)}"))
    where = (f"{TARGET_SIZE_MB} MB" if at_target_size else
             f"{TARGET_SIZE_MB} MB of text, which this study does not have (largest: {big} {res.unit}): "
             "figures are shown at the largest size and not checked")
    out = [f"## Targets (defined at {where})", "",
           "A target is checked only at the size it is defined for, and only against a real (positive) "
           "measurement; anything else is \"not measured\" or \"not checked\", never met.", "",
           "| target | lookupkit | met? | llama.cpp (same run) | lookupkit ÷ llama.cpp | rests on |",
           "|---|---|---|---|---|---|"]
    for name, lk_v, ll_v, scale, limit, unit, sized, source in rows:
        lk_v = [v for v in lk_v if v is not None]
        value = statistics.median(lk_v) * scale if lk_v else None
        v = verdict(value, limit, sized and at_target_size, None if name.startswith("file ") else len(lk_v))
        shown = f"{value:.3g} {unit}" if value is not None and v != "not measured" else "not measured"
        if lk_v and len(lk_v) > 1 and v != "not measured":
            shown += f" ({min(lk_v) * scale:.3g}–{max(lk_v) * scale:.3g}, n = {len(lk_v)})"
        other = f"{statistics.median(ll_v) * scale:.4g} {unit}" if ll_v else "–"
        out.append(f"| {name} | {shown} | {v} | {other} | {ratio(lk_v, ll_v) if v != 'not measured' else '–'} | "
                   f"{source} |")
    return out + [""]


def write_report(results_json: Path, out_md: Path, calibrations: list[Path] = (), startup: Path | None = None) -> Path:
    out_md.write_text(render(json.loads(results_json.read_text()), [json.loads(Path(c).read_text()) for c in calibrations],
                             json.loads(Path(startup).read_text()) if startup else None))
    return out_md


def main(argv=None) -> None:
    """python -m lookupkit.bench.study.report --study S.json [--startup X.json] [--calibration C.json ...] -o RESULTS.md"""
    import argparse

    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.study.report")
    p.add_argument("--study", type=Path, required=True)
    p.add_argument("--startup", type=Path)
    p.add_argument("--calibration", type=Path, action="append", default=[])
    p.add_argument("--append", type=Path, action="append", default=[],
                   help="a markdown section written by another study (e.g. policy_pays --report), appended verbatim")
    p.add_argument("-o", "--out", type=Path, required=True)
    a = p.parse_args(argv)
    out = write_report(a.study, a.out, a.calibration, a.startup)
    for extra in a.append:
        out.write_text(out.read_text() + "\n" + extra.read_text().rstrip() + "\n")
    print(out)


if __name__ == "__main__":
    main()
