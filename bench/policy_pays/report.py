"""The policy study's tables (bench/policy_pays/run.py's JSON): per cache size and for code, each policy's
accepted tokens per call, tokens per verify, expected speed-up S(C) at the recorded verify costs and drafting
time per call; then issue 9's targets at 541 MB, met or not. `python -m lookupkit.bench.policy_pays --report
RESULTS.json` prints them again from a results file."""

from __future__ import annotations


def report(result: dict) -> str:
    """The markdown section of bench/RESULTS.md: one table per cache size, then the targets, met or not."""
    costs = result["costs"]
    lines = [f"Commit {result['commit'][:12]}, {result['date']}; `python -m lookupkit.bench.policy_pays` "
             f"(WikiText-103 test, qwen2 ids, -c {result['n_ctx']}, at most {result['n_draft']} drafted per call). "
             "S(C) = expected speed-up at verify cost C; `lookupkit C=c` drafts for cost c. us/call: median (min-max) "
             "of the runs, drafting and context updates inside the compiled replay."]
    head = "| policy | accepted/call | tok/verify | " + " | ".join(f"S({c:g})" for c in costs) + " | us/call |"
    for size, cell in result["wiki"].items():
        lines += ["", f"**{size} MB**" + (f" — .lkc orders 2: {cell['build_o2']['bytes'] / 1e6:.1f} MB, orders 2-6: "
                                         f"{cell['build_o6']['bytes'] / 1e6:.1f} MB" if "build_o2" in cell else ""),
                  "", head, "|" + "---|" * (4 + len(costs))]
        lines += [_row(name, r, costs) for name, r in cell["replay"].items()]
    if "code" in result:
        c = result["code"]
        lines += ["", f"**code**: the stdlib cache (gpt-2, orders 2-6, {c['bytes_o6'] / 1e6:.1f} MB) replaying "
                      f"{c['package']}'s own sources ({c['tokens']:,} tokens)", "", head, "|" + "---|" * (4 + len(costs))]
        lines += [_row(name, r, costs) for name, r in c["replay"].items()]
    lines += ["", *targets(result)]
    return "\n".join(lines)


def _row(name: str, r: dict, costs: list[float]) -> str:
    us = r["us_per_call"]
    s = " | ".join(f"{r['expected_speedup'][f'{c:g}']:.3f}" for c in costs)
    return (f"| {name} | {r['accepted_per_call']:.4f} | {r['tokens_per_verify']:.4f} | {s} | "
            f"{us['median']:.2f} ({us['min']:.2f}-{us['max']:.2f}) |")


def targets(result: dict) -> list[str]:
    """Issue 9's targets at 541 MB, each met or not, from the measured cells (absent: not measured)."""
    cell = result["wiki"].get("541")
    if not cell:
        return ["Targets: not measured (no 541 MB cell)."]
    rep = cell["replay"]
    base = rep["llama.cpp"]["accepted_per_call"]
    free = rep["lookupkit C=0"]["accepted_per_call"]
    costs = result["costs"]
    own = {c: rep[f"lookupkit C={c:g}"]["expected_speedup"][f"{c:g}"] for c in costs}
    size = cell["build_o6"]["bytes"] / cell["build_o2"]["bytes"]
    build = cell["build_o6"]["seconds"]["median"] / cell["build_o2"]["seconds"]["median"]
    slowest = max(r["us_per_call"]["median"] for name, r in rep.items() if name != "llama.cpp")
    rows = [("accepted per call at C = 0 >= 1.5x llama.cpp's", f"{free:.4f} vs {base:.4f} ({free / base:.2f}x)", free >= 1.5 * base),
            ("S(C) >= 1.0 at C = 0.05, 0.1, 0.25, 0.5, 1.0", ", ".join(f"{own[c]:.3f}" for c in costs[1:]),
             all(own[c] >= 1.0 for c in costs[1:])),
            ("S(0.25) >= 1.15", f"{own[0.25]:.3f} (llama.cpp: {rep['llama.cpp']['expected_speedup']['0.25']:.3f})",
             own[0.25] >= 1.15),
            ("file with orders 2-6 <= 2x the 2-gram file", f"{size:.2f}x", size <= 2),
            ("build <= 2x the 2-gram build (lookup-create --tokens, -j 1)", f"{build:.2f}x", build <= 2),
            ("drafting <= 2 us per call on average (slowest C)", f"{slowest:.2f} us", slowest <= 2)]
    return ["| target (541 MB) | measured | met |", "|---|---|---|",
            *(f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in rows)]
