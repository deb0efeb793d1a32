"""bench.verdict's analysis on made-up pairs: windows, their distance from all pairs' median, how
often a window answers otherwise, the smallest window that never does, and the report."""

from __future__ import annotations

import pytest

from lookupkit.bench.verdict.report import SECTION, analyse, report, summarise, windows, write_report


def row(ratios, others=0.0, predicted=None, timed=256):
    r = {"prompt": 0, "task": "wiki", "ratios": ratios, "others": others, "predicted": predicted, "timed": timed}
    r.update(analyse(r))
    return r


def test_windows_and_their_answers():
    assert windows([1, 2, 3, 4], 3) == [[1, 2, 3], [2, 3, 4]] and windows([1, 2], 3) == []
    steady = row([2.0, 2.1, 1.9, 2.0, 2.05, 1.95, 2.0])
    assert steady["answer"] == steady["spread_answer"] == "pays"
    assert all(v["differs"] == 0 for v in steady["by_k"].values())
    assert steady["by_k"]["1"]["max_dev"] == pytest.approx(0.05)
    # one slow pair: single pairs and 3-windows around it may answer otherwise, 5-windows do not
    bumpy = row([1.3, 1.3, 0.9, 1.3, 1.3, 1.3, 1.3])
    assert bumpy["by_k"]["1"]["differs"] == pytest.approx(1 / 7)
    assert bumpy["by_k"]["5"]["differs"] == 0 and bumpy["by_k"]["7"]["differs"] == 0
    # a busy machine makes the row's own verdict uncertain, not the windows' spread-only answers
    busy = row([2.0, 2.1, 1.9], others=1.0)
    assert busy["answer"] == "uncertain" and busy["spread_answer"] == "pays"


def test_summary_picks_the_smallest_window_that_never_answers_otherwise(tmp_path):
    rows = [row([2.0, 2.1, 1.9, 2.0, 2.05, 1.95, 2.0]), row([1.3, 1.3, 0.9, 1.3, 1.3, 1.3, 1.3])]
    s = summarise(rows)
    assert s["by_k"]["1"]["differs"] == pytest.approx(1 / 14) and s["by_k"]["3"]["differs"] == pytest.approx(3 / 10)
    assert s["enough"] == 5
    doc = {"command": "python -m lookupkit.bench.verdict", "date": "2026-12-03", "machine": {"cpu": "x"},
           "threads": 2, "n": 256, "draft": 16, "cache": None, "file": "f.json", "rows": rows, "summary": s}
    text = report([doc, {**doc, "policy": "llama.cpp"}])
    assert report([{**doc, "command": "python -m lookupkit.bench.generate_verdict --pairs 9"}]).count(
        "`python -m lookupkit.bench.verdict --pairs 9`") == 1  # a run recorded under the runner's old name
    assert text.startswith(SECTION) and "| 0 | wiki | 2.00x (1.90-2.10) | - | pays | 0.00 |" in text
    assert "lookupkit's policy" in text and "llama.cpp's rule" in text and "never answers otherwise: 5 pairs" in text
    md = tmp_path / "RESULTS.md"
    md.write_text("# Results\n\n## Earlier\n\nkept\n")
    write_report([doc], md)
    write_report([doc], md)  # replaces its own section, keeps the others
    out = md.read_text()
    assert out.count(SECTION) == 1 and "## Earlier\n\nkept" in out
