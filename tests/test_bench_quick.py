"""`lookupkit bench --quick`: the whole study pipeline (build, open, replay, sharing, start-up, report,
plots) on ../shared/reference data, as a user runs it; and the report's guards against nonsense
(a target is met only by a real measurement, at the size it is defined for, from enough runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lookupkit.bench.study.report import MIN_RUNS, render, verdict
import needs


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    needs.shared("reference/zipf.corpus.i32")
    tmp_path = tmp_path_factory.mktemp("bench-quick")
    r = subprocess.run([sys.executable, "-c", "from lookupkit.cli.main import main; main()", "bench", "--quick", "--no-llamacpp",
                        "--out-dir", str(tmp_path)], capture_output=True, text=True,
                       env={"LOOKUPKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin",
                            "HOME": str(Path.home())}, timeout=900)
    assert r.returncode == 0, r.stderr
    results = json.loads(next((tmp_path / "results").glob("*.json")).read_text())
    return tmp_path, results, (tmp_path / "RESULTS-quick.md").read_text()


def test_quick_bench_writes_results_report_and_plots(quick):
    tmp_path, results, report = quick
    kinds = {(c["kind"], c["impl"]) for c in results["cells"]}
    assert {("build", "lookupkit"), ("open_warm", "lookupkit"), ("open_cold", "lookupkit"),
            ("replay_d8", "lookupkit"), ("replay_cold_d8", "lookupkit"), ("share", "lookupkit")} <= kinds
    replays = [c for c in results["cells"] if c["kind"] == "replay_d8" and c["impl"] == "lookupkit"]
    assert all(len(c["runs"]) >= 2 for c in replays)
    # the replay of the largest cache is the reference case zipf_c1024_d8 (llama.cpp's own numbers)
    last = replays[-1]["runs"][0]
    assert (last["n_drafted"], last["n_accept"]) == (38181, 9715)
    assert "## Replay `--draft 8`" in report and "## Targets" in report
    for name in ("open_time", "static_memory", "peak_rss", "us_per_token", "acceptance", "followers_cdf"):
        assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 10_000


def test_quick_bench_records_commit_commands_and_separate_processes(quick):
    _, results, report = quick
    assert "commit" in results and "dirty" in results  # None only outside a git checkout
    n_runs = int(results["config"]["runs"])
    for c in results["cells"]:
        if c["kind"] != "followers":
            assert c.get("cmd"), c["kind"]
    for kind in ("open_warm", "open_cold"):
        cells = [c for c in results["cells"] if c["kind"] == kind]
        assert cells
        for c in cells:  # one fresh process per run, each timing its own first open
            assert len(c["runs"]) == n_runs
            assert all(r["first_open_s"] > 0 and r["cold"] == (kind == "open_cold") for r in c["runs"])
    # the cold probes no longer leave the file evicted for the warm replays: cold replays are their own row
    for c in results["cells"]:
        if c["kind"] == "replay_d8" and c["impl"] == "lookupkit" and c["size"]:
            assert c["page_cache"] == "warm" and not any(r["cold"] for r in c["runs"])
        if c["kind"] == "replay_cold_d8":
            assert c["page_cache"] == "cold" and all(r["cold"] for r in c["runs"])
    assert "## Replay `--draft 8`, cold page cache" in report
    assert results["startup"]["warm_repo"]["wall_to_first_draft_s"]["n"] == n_runs
    assert "## Start-up" in report and "Commands:" in report


def test_quick_bench_checks_no_target_away_from_its_size(quick):
    _, _, report = quick
    targets = report.split("## Targets", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in targets.splitlines() if ln.startswith("| ") and not ln.startswith("| target")]
    assert rows and "file ≤ 467 MB" in targets
    for row in rows:  # a quick study (k tokens, no 541 MB) meets and misses nothing
        assert row.split(" | ")[2] in ("not checked", "not measured"), row


# -- the guards, on synthetic results (no ../shared needed) -------------------------------------------

def test_verdict_needs_a_real_measurement_at_its_size_from_enough_runs():
    for nonsense in (None, -5.0, 0, float("nan"), "12"):
        assert verdict(nonsense, 200.0) == "not measured"
    assert verdict(2.2, 467.0, size_ok=False) == "not checked"
    assert verdict(100.0, 200.0, n_runs=1).startswith("not checked")
    assert verdict(100.0, 200.0, n_runs=MIN_RUNS) == "yes"
    assert verdict(300.0, 200.0, n_runs=MIN_RUNS) == "**no**"


def _study(sizes, unit="MB", peak_with=900e6, peak_without=400e6, file_size=100e6, e2e_runs=3, commit="abc123"):
    corpus = "wiki541.txt.zst" if unit == "MB" else "zipf.corpus.i32"
    cells = []
    for s in sizes:
        replay = {"us_per_drafted_token": 0.5, "peak_rss": peak_with if s else peak_without, "n_drafted": 100,
                  "n_accept": 20, "accept": 20.0, "coverage": 0.3, "cold": False}
        cells.append({"kind": "replay_d8", "impl": "lookupkit", "size": s, "cmd": f"replay {s}", "runs": [replay] * 3})
        if s:
            cells.append({"kind": "build", "impl": "lookupkit", "size": s, "file_size": file_size, "cmd": f"build {s}",
                          "runs": [{"build_s": 1.0, "peak_rss": 5e8, "n_tokens": 10, "n_keys": 5, "n_pairs": 7}] * 3})
            for kind in ("open_warm", "open_cold"):
                cells.append({"kind": kind, "impl": "lookupkit", "size": s, "cmd": f"{kind} {s}",
                              "runs": [{"first_open_s": 2e-4, "first_rss_growth": 131072, "repeat_open_s": [1e-4]}] * 3})
    cells.append({"kind": "build_end_to_end", "impl": "lookupkit", "size": sizes[-1], "file_size": file_size,
                  "cmd": "lookup-create -f ...", "runs": [{"total_s": 50.0, "tokenize_s": 30.0, "peak_rss": 3e9}] * e2e_runs})
    data = {"config": {"corpus": corpus, "eval_tokens": "eval.i32", "n_ctx": 4096, "runs": 3, "name": "full"},
            "machine": {"cpu": "cpu", "cores": 2, "mem_gib": 23.5, "kernel": "6", "python": "3.11", "numpy": "2",
                        "numba": "0.6"}, "started": "then", "finished": "now", "cells": cells}
    if commit:
        data.update(commit=commit, dirty=False)
    return data


def _target(report: str, name: str) -> list[str]:
    row = next(ln for ln in report.splitlines() if ln.startswith(f"| {name}"))
    return row.split(" | ")


def test_report_never_meets_a_target_with_a_negative_memory_figure():
    report = render(_study([0, 541], peak_with=300e6, peak_without=400e6))  # with the cache < without: nonsense
    row = _target(report, "static-cache memory")
    assert row[1] == "not measured" and row[2] == "not measured"
    assert _target(report, "open ≤ 1 ms")[2] == "yes"  # the guard does not hide real figures


def test_report_checks_the_file_target_only_at_541_mb():
    small = render(_study([0, 25], file_size=2e6))  # a 2 MB file is not "≤ 467 MB met"
    assert _target(small, "file ≤ 467 MB")[2] == "not checked"
    assert "which this study does not have" in small
    big = render(_study([0, 541], file_size=554e6))
    assert _target(big, "file ≤ 467 MB")[2] == "**no**"


def test_report_wants_three_runs_for_a_headline_and_flags_old_results():
    report = render(_study([0, 541], e2e_runs=1))
    assert _target(report, "end-to-end build")[2].startswith("not checked (1 run")
    assert "commit `abc123`" in report.replace("Commit", "commit")
    old = render(_study([0, 541], commit=None))
    assert "predate" in old


def test_report_startup_targets_are_not_met_by_absent_scenarios():
    data = _study([0, 541])
    data["startup"] = {"cache": "static-541.lkc", "cache_bytes": 554e6, "tokens": "eval.i32", "runs": 3,
                       "warm_repo": {"wall_to_first_draft_s": {"median": 0.5, "min": 0.4, "max": 0.6, "n": 3}}}
    report = render(data)
    assert _target(report, "import to first draft ≤ 300 ms")[2] == "not measured"  # no installed-copy figure
    assert _target(report, "first compile ≤ 20 s")[2] == "not measured"
    assert _target(report, "compile cache kept")[2] == "not measured"


@pytest.mark.parametrize("quick", [True, False])
def test_runs_overrides_either_preset(tmp_path, monkeypatch, quick):
    """`lookupkit bench [--quick] --runs N` sets N (it once collided with the quick preset's own runs)."""
    from typer.testing import CliRunner

    import lookupkit.bench.study.run as study
    from lookupkit.cli.main import app
    from lookupkit.errors import LookupkitError

    seen = []

    class Stop(study.Study):
        def __init__(self, cfg, log, on_stage=None):
            seen.append(cfg)

        def run_all(self):
            raise LookupkitError("stopped before measuring")

    monkeypatch.setattr(study, "Study", Stop)
    monkeypatch.setattr(study, "SHARED", tmp_path)  # exists: the shared-data check passes
    args = ["bench", "--runs", "5", "--out-dir", str(tmp_path)] + (["--quick"] if quick else [])
    r = CliRunner().invoke(app, args)
    assert "stopped before measuring" in r.output and "Traceback" not in r.output
    assert [c.runs for c in seen] == [5] and seen[0].name == ("quick" if quick else "full")
