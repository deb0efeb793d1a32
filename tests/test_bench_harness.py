"""bench/harness.py, what every study stands on: ../shared from one place ($LOOKUPKIT_SHARED first), outputs
never beside an installed module, the spread of runs, the quiet-machine gate, the one-line error exit, and
every documented `python -m lookupkit.bench.NAME` still resolving to a module that runs."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lookupkit.bench import harness
from lookupkit.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ["calibration", "code_engines", "code_engines.report", "engines", "engines.report", "generations",
            "llama_server", "llamacpp", "models", "policy_pays", "scale", "scale.ray", "serve", "serve.overhead",
            "serve.report", "serve.restart", "startup", "startup.compare", "startup_probe", "study.pagemodel",
            "study.report", "suffix", "suffix_code_task",
            "tokenize_corpora", "tokenize_corpora.speed", "verdict"]


def test_shared_dir_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOKUPKIT_SHARED", str(tmp_path))
    assert harness.shared_dir() == tmp_path
    monkeypatch.delenv("LOOKUPKIT_SHARED")
    assert harness.shared_dir() == ROOT.parent / "shared"  # this is a source checkout


def test_outputs_go_to_the_checkout_or_the_cache(monkeypatch, tmp_path):
    assert harness.source_checkout() == ROOT and harness.output_dir() == ROOT / "bench"
    monkeypatch.setattr(harness, "source_checkout", lambda: None)  # as installed in site-packages
    monkeypatch.setenv("LOOKUPKIT_CACHE_DIR", str(tmp_path))
    assert harness.output_dir() == tmp_path / "bench" == harness.bench_dir()


def test_spread_and_guards():
    assert harness.spread([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert harness.spread([None]) is None
    assert harness.verdict(None, 1.0) == "not measured" and harness.verdict(0.5, 1.0, n_runs=2).startswith("not checked")
    assert harness.verdict(0.5, 1.0, n_runs=3) == "yes" and harness.verdict(2.0, 1.0) == "**no**"


def test_quiet_gate_warns_or_refuses(capsys):
    busy = harness.quiet_gate(max_cores=-1.0, seconds=0.05)  # any reading is "busy" against a negative limit
    assert busy >= 0 and "warning: other processes used" in capsys.readouterr().err
    with pytest.raises(InputError, match="quiet machine"):
        harness.quiet_gate(max_cores=-1.0, seconds=0.05, refuse=True)
    assert "others_cores_at_start" in harness.machine(gate=True, log=lambda m: None)


def test_entry_turns_lookupkit_errors_into_one_line():
    def fails(argv):
        raise InputError(f"no such file {argv[0]}")

    with pytest.raises(SystemExit) as exc:
        harness.entry(fails, ["x.json"])
    assert exc.value.code == "error: no such file x.json"


def test_report_entry_writes_where_asked(tmp_path, capsys):
    seen = []
    harness.report_entry("prog", lambda results, out: seen.append((results, out)) or "# md", ["r.json", "-o", str(tmp_path)])
    assert seen == [(Path("r.json"), tmp_path)] and "# md" in capsys.readouterr().out


@pytest.mark.parametrize("name", COMMANDS)
def test_documented_commands_resolve(name):
    """`python -m lookupkit.bench.NAME` finds a module (a package's __main__) for every command the docs name."""
    spec = importlib.util.find_spec(f"lookupkit.bench.{name}")
    assert spec is not None
    if spec.submodule_search_locations is not None:  # a package: it must run as one
        assert importlib.util.find_spec(f"lookupkit.bench.{name}.__main__") is not None


def test_no_machine_paths_in_bench_code():
    hits = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in (ROOT / "bench").rglob("*.py")
            for line in p.read_text().splitlines() if any(s in line for s in ("/work/", "/root/", "/home/"))]
    assert not hits, hits


@pytest.mark.parametrize("name", ["engines", "suffix", "startup.compare", "serve", "serve.restart"])
def test_help_runs(name):
    r = subprocess.run([sys.executable, "-m", f"lookupkit.bench.{name}", "--help"], capture_output=True, text=True,
                       cwd=Path("/"), timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr


def test_load_results_refuses_another_study(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"kind": "engines"}')
    assert harness.load_results(path, "engines", "an engines bench result", "w") == {"kind": "engines"}
    with pytest.raises(InputError, match="is not a code-engines result"):
        harness.load_results(path, "code-engines", "a code-engines result", "w")
    with pytest.raises(InputError, match="cannot read"):
        harness.load_results(tmp_path / "none.json", "engines", "an engines bench result", "w")


def test_a_recorded_command_runs_again_as_written():
    argv = ["--inputs", "lookup-create -f a b.txt -lcs c.lkc", "--pairs", "9"]
    line = harness.command("lookupkit.bench.verdict", argv)
    assert line.startswith("python -m lookupkit.bench.verdict ")
    assert shlex.split(line) == ["python", "-m", "lookupkit.bench.verdict", *argv]
