"""The server's counters and gauges, updated by the engine thread and the handlers, served at /metrics in
Prometheus' text format (0.0.4). Plain Python under one lock: a step updates a handful of them, so a
client library would add a dependency and nothing a scrape needs."""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque

PREFIX = "lookupkit_"
RATE_WINDOW_S = 10.0  # tokens_per_second covers the tokens generated in the last this many seconds

METRICS = {  # name: (type, help)
    "requests_total": ("counter", "Requests by outcome: eos, word (stop string), limit (max_tokens), ctx (context "
                                  "full), cancelled, shutdown, error, rejected (503), invalid (4xx), unauthorized (401)"),
    "prompt_tokens_total": ("counter", "Prompt tokens decoded"),
    "prompt_tokens_reused_total": ("counter", "Prompt tokens a slot's cache already held (not decoded again)"),
    "generated_tokens_total": ("counter", "Tokens generated"),
    "decode_calls_total": ("counter", "llama_decode calls (one verifies the drafts of every busy slot)"),
    "verify_calls_total": ("counter", "Slot verify steps (a slot's [last token] + draft in a decode)"),
    "decode_seconds_total": ("counter", "Seconds spent in llama_decode"),
    "drafted_tokens_total": ("counter", "Drafted tokens by source (lookupkit.rules.SOURCE_LEGEND)"),
    "accepted_tokens_total": ("counter", "Drafted tokens accepted into the output, by source"),
    "draft_refused_tokens_total": ("counter", "Drafted ids outside the model's vocabulary, cut before decoding "
                                              "(a damaged cache: check it with lookupkit verify)"),
    "queue_depth": ("gauge", "Requests waiting for a slot"),
    "slots_busy": ("gauge", "Slots generating or decoding a prompt"),
    "slots_total": ("gauge", "Slots (--parallel)"),
    "tokens_per_second": ("gauge", f"Tokens generated per second over the last {RATE_WINDOW_S:.0f} s"),
    "history_tokens": ("gauge", "Positions (tokens and one separator per sequence) the tenants' histories hold "
                                "(--learn history; at most --history-budget)"),
    "history_tenants": ("gauge", "Tenants with a history of their own (--learn history; at most --history-budget / "
                                 "--tenant-budget, 1 with --learn-scope global)"),
}
LABELLED = {"requests_total", "drafted_tokens_total", "accepted_tokens_total"}  # no sample until one happens


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self._values: dict = defaultdict(float)  # (name, ((label, value), ...)) -> value
        self._recent: deque = deque()  # (time, tokens) of the last RATE_WINDOW_S seconds

    def inc(self, name: str, by: float = 1, **labels) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] += by

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._values[(name, ())] = value

    def tokens(self, n: int) -> None:
        """n tokens were generated now (for tokens_per_second)."""
        now = time.monotonic()
        with self._lock:
            self._recent.append((now, n))
            self._trim(now)

    def value(self, name: str, **labels) -> float:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def render(self) -> str:
        now = time.monotonic()
        with self._lock:
            self._trim(now)
            self._values[("tokens_per_second", ())] = sum(n for _, n in self._recent) / RATE_WINDOW_S
            values = dict(self._values)
        lines = []
        for name, (kind, help_) in METRICS.items():
            lines += [f"# HELP {PREFIX}{name} {help_}", f"# TYPE {PREFIX}{name} {kind}"]
            samples = sorted((labels, v) for (n, labels), v in values.items() if n == name)
            if not samples and name not in LABELLED:
                samples = [((), 0.0)]
            for labels, v in samples:
                tag = "{" + ",".join(f'{k}="{val}"' for k, val in labels) + "}" if labels else ""
                lines.append(f"{PREFIX}{name}{tag} {v:g}")
        return "\n".join(lines) + "\n"

    def _trim(self, now: float) -> None:
        while self._recent and self._recent[0][0] < now - RATE_WINDOW_S:
            self._recent.popleft()
