"""PNG plots of a study: each metric against corpus size, lookupkit and llama.cpp on the same axes,
median with min–max error bars; and the followers-per-2-gram CDF of each cache."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from matplotlib.ticker import FuncFormatter

from lookupkit.bench.study.report import MB, Results, open_values

COLORS = {"lookupkit": "tab:blue", "llama.cpp": "tab:red"}


def _series(res: Results, impl: str, getter) -> tuple[list, list, list, list]:
    xs, med, lo, hi = [], [], [], []
    for s in res.sizes:
        v = getter(impl, s)
        if v:
            xs.append(s)
            med.append(statistics.median(v))
            lo.append(statistics.median(v) - min(v))
            hi.append(max(v) - statistics.median(v))
    return xs, med, lo, hi


def _metric_plot(res: Results, ax, getter, ylabel: str, title: str, log: bool) -> None:
    for impl in ("lookupkit", "llama.cpp"):
        xs, med, lo, hi = _series(res, impl, getter)
        if xs:
            ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=4, label=impl, color=COLORS[impl])
    ax.set_xlabel(f"static corpus size ({res.unit})")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def make_plots(results_json: Path, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(results_json.read_text())
    res = Results(data)
    d = 8 if 8 in res.drafts() else (res.drafts() or [8])[0]
    kind = f"replay_d{d}"
    out_dir.mkdir(parents=True, exist_ok=True)

    def load_ms(impl, s):
        if impl == "lookupkit":
            return [v * 1e3 for v in open_values(res, "open_warm", s)] if s else []
        return res.values(kind, impl, s, "t_load_ms") if s else []

    specs = [
        ("open_time", load_ms, "open / load time (ms, log)", "Static cache open time", True),
        ("static_memory", lambda i, s: [v / MB for v in res.static_memory(i, s, d)] if s else [],
         "static-cache memory (MB)", f"Static-cache memory (peak RSS with − without, d{d})", False),
        ("peak_rss", lambda i, s: [v / MB for v in res.values(kind, i, s, "peak_rss")], "peak RSS (MB)",
         f"Peak RSS of the replay (d{d})", False),
        ("us_per_token", lambda i, s: res.values(kind, i, s, "us_per_drafted_token"), "µs per drafted token (log)",
         f"Drafting time per drafted token (d{d})", True),
        ("acceptance", lambda i, s: [r["n_accept"] / r["n_drafted"] * 100 for r in res.runs(kind, i, s)
                                     if r.get("n_drafted")], "acceptance (%)", f"Acceptance (d{d})", False),
    ]
    paths = []
    for name, getter, ylabel, title, log in specs:
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        _metric_plot(res, ax, getter, ylabel, title, log)
        fig.tight_layout()
        p = out_dir / f"{name}.png"
        fig.savefig(p)
        plt.close(fig)
        paths.append(p)
    cdf = [c for c in res.cells if c["kind"] == "followers"]
    if cdf:
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        for c in cdf:
            ax.plot(c["followers"], c["cdf"], drawstyle="steps-post", label=f"{c['size']} {res.unit}")
        ax.set_xscale("log")
        ax.set_xlabel("followers per 2-gram (log)")
        ax.set_ylabel("share of 2-grams with ≤ x followers")
        ax.set_title("Followers-per-2-gram CDF")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        p = out_dir / "followers_cdf.png"
        fig.savefig(p)
        plt.close(fig)
        paths.append(p)
    return paths
