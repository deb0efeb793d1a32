"""`lookupkit bench --quick`: the whole study pipeline (build, open, replay, sharing, report, plots)
on ../shared/reference data, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def test_quick_bench_writes_results_report_and_plots(tmp_path):
    if not (SHARED / "reference" / "zipf.corpus.i32").exists():
        pytest.skip("../shared/reference is absent (a fresh clone has no shared data)")
    r = subprocess.run([sys.executable, "-c", "from lookupkit.cli.main import main; main()", "bench", "--quick", "--no-llamacpp",
                        "--out-dir", str(tmp_path)], capture_output=True, text=True,
                       env={"LOOKUPKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin",
                            "HOME": str(Path.home())}, timeout=600)
    assert r.returncode == 0, r.stderr
    results = json.loads(next((tmp_path / "results").glob("*.json")).read_text())
    kinds = {(c["kind"], c["impl"]) for c in results["cells"]}
    assert {("build", "lookupkit"), ("open_warm", "lookupkit"), ("open_cold", "lookupkit"),
            ("replay_d8", "lookupkit"), ("share", "lookupkit")} <= kinds
    replays = [c for c in results["cells"] if c["kind"] == "replay_d8" and c["impl"] == "lookupkit"]
    assert all(len(c["runs"]) >= 2 for c in replays)
    # the replay of the largest cache is the reference case zipf_c1024_d8 (llama.cpp's own numbers)
    last = replays[-1]["runs"][0]
    assert (last["n_drafted"], last["n_accept"]) == (38181, 9715)
    report = (tmp_path / "RESULTS-quick.md").read_text()
    assert "## Replay `--draft 8`" in report and "## Targets" in report
    for name in ("open_time", "static_memory", "peak_rss", "us_per_token", "acceptance", "followers_cdf"):
        assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 10_000
