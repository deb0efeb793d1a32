"""bench.policy_pays's tables from its recorded run (bench/results/policy-2026-12-01.json): a table per cache
size and for code, S(C) at the recorded costs, and issue 9's targets judged from the 541 MB cell."""

from __future__ import annotations

import json
from pathlib import Path

from lookupkit.bench.policy_pays.report import report, targets

RECORD = Path(__file__).resolve().parents[1] / "bench" / "results" / "policy-2026-12-01.json"


def test_the_recorded_run_renders():
    result = json.loads(RECORD.read_text())
    text = report(result)
    assert text.startswith("Commit c05ccc080489") and "`python -m lookupkit.bench.policy_pays`" in text
    assert "-c 4096, at most 8 drafted per call" in text  # the run's own recorded n_ctx and n_draft
    assert "| policy | accepted/call | tok/verify | S(0) | S(0.05) | S(0.1) | S(0.25) | S(0.5) | S(1) | us/call |" in text
    assert "| llama.cpp | 0.2546 | 1.2546 | 1.255 | 1.176 | 1.106 | 0.940 | 0.751 | 0.536 | 1.78 (1.53-3.01) |" in text
    assert "**code**: the stdlib cache" in text
    assert "| S(0.25) >= 1.15 | 1.124 (llama.cpp: 0.940) | **no** |" in targets(result)


def test_targets_without_the_541_mb_cell():
    assert targets({"wiki": {}, "costs": [0.0]}) == ["Targets: not measured (no 541 MB cell)."]
