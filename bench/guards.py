"""The report's guards: a target is met only by a real measurement, at the size it is defined for,
from enough runs. Anything else is "not measured" or "not checked", never "met"."""

from __future__ import annotations

MB = 1e6
MIN_RUNS = 3  # a headline rests on at least this many runs


def verdict(value, limit: float, size_ok: bool = True, n_runs: int | None = None) -> str:
    """"yes" / "**no**" only for a real measurement (> 0), at the size the target is defined for, from
    at least MIN_RUNS runs (when n_runs is given); else "not measured" or "not checked", never "met"."""
    if value is None or not isinstance(value, (int, float)) or value != value or value <= 0:
        return "not measured"
    if not size_ok:
        return "not checked"
    if n_runs is not None and n_runs < MIN_RUNS:
        return f"not checked ({n_runs} run{'s' if n_runs != 1 else ''} < {MIN_RUNS})"
    return "yes" if value <= limit else "**no**"
