"""Turn a study's raw runs into `bench/RESULTS.md`: medians with min–max, ratios to llama.cpp,
the anchors beside them, and a plain statement of which targets are met."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

MB = 1e6

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


def stats(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not values:
        return "–"
    med, lo, hi = (v * scale for v in stats(values))
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def ratio(a: list[float], b: list[float]) -> str:
    if not a or not b:
        return "–"
    r = statistics.median(a) / statistics.median(b)
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


def render(data: dict) -> str:
    res = Results(data)
    cfg, m = data["config"], data["machine"]
    unit = res.unit
    lines = [f"# lookupkit benchmark results ({cfg['name']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, Linux {m['kernel']}, "
             f"Python {m['python']}, numpy {m['numpy']}, numba {m['numba']}. Run {data['started']} → "
             f"{data.get('finished', 'unfinished')}.", "",
             f"Corpus `{Path(cfg['corpus']).name}` prefixes ({unit}); replay of `{Path(cfg['eval_tokens']).name}` at "
             f"`-c {cfg['n_ctx']}`; every cell {cfg['runs']} runs back to back, shown as median (min–max). "
             f"llama.cpp = upstream `common/ngram-cache.cpp` "
             f"({data.get('llamacpp_version', 'not run: ' + str(data.get('llamacpp_skipped')))}) driven by "
             "`bench/llamacpp/driver.cpp` on the same token ids. Reproduce: `lookupkit bench` "
             f"({'`--quick`' if cfg['name'] == 'quick' else 'full study'}).", ""]
    lines += _build_table(res, unit) + _open_table(res, unit)
    for d in res.drafts():
        lines += _replay_table(res, unit, d)
    lines += _share_table(res) + _targets(res)
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
                       "the token store reuses the previous prefix's ids).")
        if c["kind"] == "build_end_to_end":
            r = c["runs"][0]
            out.append(f"\nEnd to end (text → .lkc, no token cache) {c['size']} {unit}: {r['total_s']:.1f} s "
                       f"(tokenize {r['tokenize_s']:.1f} s), "
                       f"peak RSS {r['peak_rss'] / 1e9:.2f} GB, file {c['file_size'] / MB:.1f} MB.")
    return out + [""]


def _open_table(res: Results, unit: str) -> list[str]:
    out = ["## Static cache open", "",
           f"| corpus ({unit}) | lookupkit warm ms | lookupkit cold ms | RSS growth after open KB | "
           "llama.cpp load ms | lookupkit (warm) ÷ llama.cpp | anchor: upstream ms | anchor: fork (M4 Pro) ms |", "|" + "---|" * 8]
    d = (res.drafts() or [8])[0]
    for s in res.sizes:
        if not s:
            continue
        warm = res.values("open_warm", "lookupkit", s, "open_s")
        cold = res.values("open_cold", "lookupkit", s, "open_s")
        growth = res.values("open_warm", "lookupkit", s, "rss_growth")
        ll = [v / 1e3 for v in res.values(f"replay_d{d}", "llama.cpp", s, "t_load_ms")]
        out.append(f"| {s} | {fmt(warm, 1e3, 3)} | {fmt(cold, 1e3, 3)} | {fmt(growth, 1 / 1024, 0)} | "
                   f"{fmt(ll, 1e3, 0)} | {ratio(warm, ll)} | {res.anchor(UPSTREAM, 'load_ms', s)} | {res.anchor(FORK, 'open_ms', s)} |")
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
    return out + [""]


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
    return out + [""]


def _targets(res: Results) -> list[str]:
    """Each target at the largest corpus, whether it is met, and lookupkit ÷ llama.cpp from the same run."""
    big = max(res.sizes) if res.sizes else 0
    d = 8 if 8 in res.drafts() else (res.drafts() or [8])[0]
    kind = f"replay_d{d}"
    ll_load = [v / 1e3 for v in res.values(kind, "llama.cpp", big, "t_load_ms")]
    rows = [  # name, lookupkit values, llama.cpp values, scale to unit, limit, unit
        ("open ≤ 1 ms", res.values("open_warm", "lookupkit", big, "open_s"), ll_load, 1e3, TARGETS["open_ms"], "ms"),
        ("RSS growth after open ≤ 1 MB", res.values("open_warm", "lookupkit", big, "rss_growth"), [], 1 / MB,
         TARGETS["rss_growth_mb"], "MB"),
        (f"static-cache memory ≤ 200 MB (d{d})", res.static_memory("lookupkit", big, d),
         res.static_memory("llama.cpp", big, d), 1 / MB, TARGETS["static_mem_mb"], "MB"),
        (f"≤ 1.0 µs per drafted token (d{d})", res.values(kind, "lookupkit", big, "us_per_drafted_token"),
         res.values(kind, "llama.cpp", big, "us_per_drafted_token"), 1, TARGETS["us_per_token"], "µs"),
    ]
    e2e = next((c for c in res.cells if c["kind"] == "build_end_to_end"), None)
    if e2e:
        r = e2e["runs"][0]
        ll_build = res.values("build", "llama.cpp", e2e["size"], "build_s")
        rows.append(("end-to-end build ≤ 4 min (text → file; llama.cpp: count + save only)", [r["total_s"]],
                     ll_build, 1, TARGETS["build_s"], "s"))
        rows.append(("build peak RSS ≤ 4 GB", [r["peak_rss"]], res.values("build", "llama.cpp", e2e["size"], "peak_rss"),
                     1e-9, TARGETS["build_peak_gb"], "GB"))
    lk, ll = res.cell("build", "lookupkit", big), res.cell("build", "llama.cpp", big)
    if lk:
        rows.append(("file ≤ 467 MB (the fork's, on the article's corpus)", [lk["file_size"]],
                     [ll["file_size"]] if ll else [], 1 / MB, TARGETS["file_mb"], "MB"))
    out = [f"## Targets at the largest corpus ({big})", "",
           "| target | lookupkit | met? | llama.cpp (same run) | lookupkit ÷ llama.cpp |", "|---|---|---|---|---|"]
    for name, lk_v, ll_v, scale, limit, unit in rows:
        if not lk_v:
            out.append(f"| {name} | not measured | – | – | – |")
            continue
        value = statistics.median(lk_v) * scale
        other = f"{statistics.median(ll_v) * scale:.4g} {unit}" if ll_v else "–"
        out.append(f"| {name} | {value:.3g} {unit} | {'yes' if value <= limit else '**no**'} | {other} | "
                   f"{ratio(lk_v, ll_v)} |")
    return out + [""]


def write_report(results_json: Path, out_md: Path) -> Path:
    out_md.write_text(render(json.loads(results_json.read_text())))
    return out_md
