"""The limits beside each row of the serving bench (issue 31): what the same calls would have given had every
drafted token been accepted, and what drafting the exact continuation at the measured curve's best k would give,
so that the gap to the limit is a number beside each row; and the rows and targets the report judges them by."""

from __future__ import annotations

from pathlib import Path

from lookupkit.bench.serve.pooling import spread

BASE, PLAIN, RIVAL = "server:none", "lk:plain", "server:ngram-mod"
# The issues' targets the report judges: a drafting row over ngram-mod (issues 22, 30, 31); lk:plain within 5 % of
# llama-server none (22, 31); the share of the exact-continuation bound on copy and retried turns (31); learning
# over learning off on the agent sessions, and a retry over its first run (23, 30); the replay within 15 % (23, 31);
# start-up with the 541 MB cache within 1 s of the model's and two processes' PSS within 1.1x one (22); a source
# over the context alone (23).
TARGET_RIVAL, TARGET_PLAIN, TARGET_BOUND, TARGET_LEARN, TARGET_REPLAY = 1.2, 0.05, 0.9, 1.5, 0.15
TARGET_READY_S, TARGET_PSS, TARGET_OWN = 1.0, 1.1, 1.1


def all_accepted(runs: list[dict]) -> float | None:
    """How much faster the same calls would have been had every drafted token been accepted: a call's time follows
    what it drafted, not what was accepted, and it yields accepted + 1 tokens, so (n − accepted + drafted) / n."""
    n, drafted = sum(r["n_gen"] for r in runs), sum(r["drafted"] or 0 for r in runs)
    return (n - sum(r["accepted"] or 0 for r in runs) + drafted) / n if drafted and n else None


def exact_bound(cost, slots: int = 1, max_k: int = 256) -> tuple[float, int] | None:
    """(speed-up, k): the best over plain decoding of every busy slot drafting the exact continuation, k tokens a
    step, each step priced by the measured curve (its surface for `slots`: VerifyCost.step); None without a curve."""
    if cost is None:
        return None
    base, best = cost.step(slots, slots), (1.0, 0)
    for k in range(1, max_k + 1):
        step = cost.step(slots, slots * (1 + k))
        if not step < float("inf"):
            break
        best = max(best, ((1 + k) * base / step, k))
    return best


def exact_share(speed: float, plain: float | None, cost, slots: int = 1) -> float | None:
    """The share of the exact-continuation bound a speed reaches: its server's plain speed times the exact bound's
    speed-up at `slots` busy slots; None without a plain speed or a curve."""
    exact = exact_bound(cost, slots)
    return speed / (plain * exact[0]) if plain and exact else None


def curve_of(res: dict):
    """The policy rows' --verify-cost curve the run used (a VerifyCost), if its file is still there."""
    from lookupkit.verify_cost import VerifyCost

    path = res.get("args", {}).get("curve")
    return VerifyCost.parse(path) if path and Path(path).is_file() else None


def with_bounds(stats: dict, by_row: dict, cost, slots: int = 1) -> dict:
    """Each row's limits beside its speed: its calls with every draft accepted, and the exact continuation at the
    best k over its own server's plain row (lk:plain for lookupkit's rows, server:none for llama-server's)."""
    exact = exact_bound(cost, slots)
    for row, s in stats.items():
        factor = all_accepted(by_row[row])
        s["bound_accepted"] = s["tok_per_s"] * factor if factor else None
        plain = stats.get(PLAIN if row.startswith("lk:") else BASE)
        s["bound_exact"] = plain["tok_per_s"] * exact[0] if plain and exact else None
        s["bound_k"] = exact[1] if exact else None
    return stats


def level_cell(lv: dict, levels: list[dict], cost) -> str:
    """A concurrency cell: aggregate tok/s (a pooled level: its repeats' min-max), the share of its exact bound
    (its server's plain row at the same client count), accepted / drafted."""
    runs = lv.get("runs") or []
    plain = next((r for r in levels if r["clients"] == lv["clients"]
                  and r["row"] == (PLAIN if lv["row"].startswith("lk:") else BASE)), None)
    share = exact_share(lv["tok_per_s"], plain and plain["tok_per_s"], cost, lv["clients"])
    share = f" ({share:.0%})" if share is not None else ""
    drafted = sum(r.get("drafted") or 0 for r in runs)
    acc = f"; {sum(r.get('accepted') or 0 for r in runs):,} / {drafted:,}" if drafted else ""
    return f"{lv['tok_per_s']:.1f}{spread(lv)}{share}{acc}"


def bound(limit: float | None, speed: float | None = None) -> str:
    """A bound's cell: its tok/s, and with `speed` the share of it reached."""
    if limit is None:
        return "—"
    return f"{limit:.1f}" + (f" ({speed / limit:.0%})" if speed is not None else "")
