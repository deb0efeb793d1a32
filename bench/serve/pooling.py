"""A row's repeats at one client count as one level (the bench's --repeats): single runs of a row differ by ~10 %
on these machines, so a target is judged on all of them pooled, and their spread is shown beside it."""

from __future__ import annotations


def pooled(levels: list[dict]) -> list[dict]:
    """One record per (row, clients), first-seen order: tokens and wall time summed (tok/s = all tokens / all
    wall time), runs concatenated with their `repeat` noted, `spread` the repeats' own tok/s, `replays` their
    replays. A run without repeats comes back as it was, with a spread of one."""
    out: dict = {}
    for lv in levels:
        rep = lv.get("repeat", 0)
        runs = [{**r, "repeat": rep} for r in lv.get("runs") or []]
        p = out.get((lv["row"], lv["clients"]))
        if p is None:
            out[lv["row"], lv["clients"]] = {**lv, "runs": runs, "spread": [lv["tok_per_s"]],
                                             "replays": [lv["replay"]] if lv.get("replay") else []}
            continue
        p["runs"] += runs
        p["requests"] += lv["requests"]
        p["tokens"] += lv["tokens"]
        p["wall_s"] += lv["wall_s"]
        p["tok_per_s"] = p["tokens"] / p["wall_s"]
        p["spread"].append(lv["tok_per_s"])
        if "ttft_s" in lv:
            p["ttft_s"] = p["ttft_s"] + lv["ttft_s"]
        if lv.get("replay"):
            p["replays"].append(lv["replay"])
    return list(out.values())


def spread(lv: dict) -> str:
    """' (min-max)' of a pooled level's repeats, or '' for one run."""
    s = lv.get("spread") or []
    return f" ({min(s):.1f}–{max(s):.1f})" if len(s) > 1 else ""
