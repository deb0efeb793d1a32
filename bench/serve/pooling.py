"""How the serving bench adds its records up: a request set's decode speed and quantiles, and a row's repeats at one
client count as one level (the bench's --repeats: single runs of a row differ by 10-25 % on these machines, so a
target is judged on all of them pooled, and their spread is shown beside it)."""

from __future__ import annotations


def pooled(levels: list[dict]) -> list[dict]:
    """One record per (row, clients), first-seen order: tokens and wall time summed (tok/s = all tokens / all
    wall time), runs concatenated with their `repeat` noted, `spread` the repeats' own tok/s, `replays` their
    replays (the per-repeat `replay`, `repeat` and `load1` are not kept). The input records are not changed."""
    out: dict = {}
    for lv in levels:
        rep = lv.get("repeat", 0)
        runs = [{**r, "repeat": rep} for r in lv.get("runs") or []]
        p = out.get((lv["row"], lv["clients"]))
        if p is None:
            first = {k: v for k, v in lv.items() if k not in ("replay", "repeat", "load1")}
            out[lv["row"], lv["clients"]] = {**first, "runs": runs, "spread": [lv["tok_per_s"]],
                                             "replays": [lv["replay"]] if lv.get("replay") else []}
            continue
        p["runs"] += runs
        p["requests"] += lv["requests"]
        p["tokens"] += lv["tokens"]
        p["wall_s"] += lv["wall_s"]
        p["tok_per_s"] = p["tokens"] / p["wall_s"]
        p["spread"].append(lv["tok_per_s"])
        if "ttft_s" in lv:
            p["ttft_s"] = p.get("ttft_s", []) + lv["ttft_s"]
        if lv.get("replay"):
            p["replays"].append(lv["replay"])
    return list(out.values())


def spread(lv: dict) -> str:
    """' (min-max)' of a pooled level's repeats, or '' for one run."""
    s = lv.get("spread") or []
    return f" ({min(s):.1f}–{max(s):.1f})" if len(s) > 1 else ""


def pct(values: list[float], q: float) -> float:
    """The q-quantile, linear between order statistics (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def decode_speed(runs: list[dict]) -> float | None:
    """Decode tokens/s: the tokens after the first over the server's generation time (prompt left out)."""
    t = sum(r["t_gen_s"] for r in runs)
    return sum(r["n_gen"] - 1 for r in runs) / t if t else None


def merged(res: dict, others: list[tuple[str, dict]]) -> dict:
    """res with the concurrency and sessions levels of other runs of the bench on the same prompts ((name, results)
    pairs) added as further repeats, for tasks res has, so that the report pools them all; res is not changed."""
    out = {**res, "args": dict(res["args"]), "pooled_with": [name for name, _ in others]}
    n_reps = lambda r: max([lv.get("repeat", 0) for part in ("concurrency", "sessions")  # noqa: E731
                            for levels in (r.get(part) or {}).values() for lv in levels], default=0) + 1
    offset = n_reps(res)
    for part in ("concurrency", "sessions"):
        out[part] = {task: list(levels) for task, levels in (res.get(part) or {}).items()}
    for _, other in others:
        for part in ("concurrency", "sessions"):
            for task, levels in (other.get(part) or {}).items():
                if task in out[part]:
                    out[part][task] += [{**lv, "repeat": lv.get("repeat", 0) + offset} for lv in levels]
        offset += n_reps(other)
    out["args"]["repeats"] = offset
    return out
