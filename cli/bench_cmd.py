"""`lookupkit bench`: the load-time, memory and latency study, side by side with llama.cpp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from lookupkit.files import ensure_dir
from lookupkit.errors import InputError
from lookupkit.cli.common import guarded, progress


EXAMPLES = """Examples:

\b
  lookupkit bench --quick --no-llamacpp   # the pipeline on ../shared/reference data
  lookupkit bench                         # the full study (../shared/corpora; long)
  lookupkit bench --report bench/results/2026-12-01-vm.json --out-dir /tmp/report   # re-render report and plots
"""


@guarded
def bench(
    quick: bool = typer.Option(False, "--quick", help="A small study on ../shared/reference data (under a minute)."),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="Corpus prefixes, comma-separated (MB of text; "
                                        "thousands of tokens with --quick); 0 = no static cache."),
    runs: Optional[int] = typer.Option(None, "--runs", min=1, max=50, help="Runs per cell (default: the study's own, fewer with --quick)."),
    no_llamacpp: bool = typer.Option(False, "--no-llamacpp", help="Skip the llama.cpp side."),
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="Where results JSON, RESULTS.md and plots go "
                                           "(default: the repo's bench/ for the full study)."),
    report_only: Optional[Path] = typer.Option(None, "--report", metavar="RESULTS.json",
                                               help="Only re-render the report and plots from a results file."),
    calibration: Optional[list[Path]] = typer.Option(None, "--calibration", metavar="CALIBRATION.json",
                                                     help="Add a `python -m lookupkit.bench.calibration` result to the "
                                                          "report (repeatable)."),
    startup: Optional[Path] = typer.Option(None, "--startup", metavar="STARTUP.json",
                                           help="Report this `python -m lookupkit.bench.startup` result instead of "
                                                "the study's own start-up section."),
    no_startup: bool = typer.Option(False, "--no-startup", help="Skip the start-up measurements."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bar and no log of the study's steps."),
) -> None:
    """Build, open and replay static caches of several corpus sizes; write results, report and plots."""
    from lookupkit.bench.study.plots import make_plots
    from lookupkit.bench.study.report import write_report
    from lookupkit.bench.study.run import SHARED, Study, StudyConfig

    here = Path(__file__).resolve().parents[1] / "bench"
    base = ensure_dir(out_dir or (here if not quick else Path.cwd() / "lookupkit-bench-quick"),
                      "the benchmark's output directory", "choose another with --out-dir")
    if report_only is None:
        size_list = _sizes(sizes) if sizes is not None else None
        if not SHARED.is_dir():
            raise InputError(f"the benchmark reads its corpora from {SHARED}, which does not exist")
        kw = {"llamacpp": not no_llamacpp, "results_dir": base / "results", "startup": not no_startup}
        cfg = StudyConfig.quick(**kw) if quick else StudyConfig.full(**kw)
        if runs:  # set after the preset, which fixes its own runs (passing it in collided with the quick one's)
            cfg.runs = runs
        if size_list is not None:
            cfg.sizes = size_list
        with progress(not quiet) as bar:
            task_id = None

            def on_stage(description: str, stages: int) -> None:
                nonlocal task_id
                if task_id is None:
                    task_id = bar.add_task(description, total=stages, rate="")
                else:
                    bar.update(task_id, advance=1, description=description)

            results = Study(cfg, log=lambda m: None if quiet else typer.echo(m, err=True), on_stage=on_stage).run_all()
            if task_id is not None:
                bar.update(task_id, advance=1)
    else:
        results = _results_file(report_only)
    extra = [_results_file(c, "--calibration") for c in calibration or []]
    md = write_report(results, base / ("RESULTS.md" if not quick else "RESULTS-quick.md"), extra,
                      _results_file(startup, "--startup") if startup else None)
    plots = make_plots(results, base / "plots")
    typer.echo(f"results {results}\nreport  {md}\nplots   {', '.join(str(p) for p in plots)}")


def _sizes(text: str) -> list[int]:
    """--sizes: comma-separated whole numbers >= 0 (0 = no static cache)."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 0:
        raise InputError(f"--sizes takes comma-separated whole numbers >= 0, got {text!r}")
    return sizes


def _results_file(path: Path, flag: str = "--report") -> Path:
    """--report / --calibration / --startup: an existing results JSON file (checked here, so a typo is one
    line, not a traceback)."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{flag} {path} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{flag} {path} is a directory, not a results file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{flag} {path} is not a readable results JSON file ({exc})") from None
    return path


def register(app: typer.Typer) -> None:
    app.command("bench", epilog=EXAMPLES)(bench)
