"""`lookupkit calibrate`: what verifying 1 + k tokens costs against 1 on your model and machine.

Acceptance (lookup-stats) says how many tokens a draft call yields; this curve says what the call
costs. Together they answer whether prompt lookup pays on that model (needs llama-cpp-python).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lookupkit.files import check_writable
from lookupkit.integrations.compare import BUSY_CORES
from lookupkit.verify_cost import save_curve
from lookupkit.rules import MAX_DRAFT, PARALLEL_MAX
from lookupkit.cli.common import guarded, print_json, progress


EXAMPLES = """Examples:

\b
  lookupkit calibrate -m gemma-3-270m -o gemma.curve.json
  lookupkit calibrate -m model.gguf --max-k 64 --threads 2 -o curve.json
  lookupkit calibrate -m gemma-3-270m --slots 4 -o gemma.curve.json   # for serve --parallel 4
  lookup-stats -f eval.txt -lcs wiki.lkc --verify-cost curve.json   # the curve in use

Needs llama-cpp-python (pip install 'lookupkit[llama]').
"""


@guarded
def calibrate(
    model: str = typer.Option(..., "-m", "--model", metavar="MODEL.gguf|NAME", help="The GGUF model to measure, or a "
                              "name `lookupkit model --list` knows (e.g. gemma-3-270m)."),
    out: Optional[Path] = typer.Option(None, "-o", "--output", metavar="CURVE.json", help="Write the curve as JSON."),
    reps: int = typer.Option(20, "--reps", min=1, max=100000, help="Repetitions per batch size (medians are kept)."),
    max_k: int = typer.Option(64, "--max-k", min=1, max=MAX_DRAFT, help="Largest number of drafted tokens measured."),
    slots: int = typer.Option(1, "--slots", min=1, max=PARALLEL_MAX, help="Also measure a server's shared step for "
                              "2..N slots (serve --parallel N): its cost by rows, which serve prices each slot's draft by."),
    position: int = typer.Option(512, "--position", min=1, help="Context position of the measured batches (tokens "
                                 "already in the KV cache)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="Threads for single tokens and batches "
                                          "alike (default: llama-cpp-python's, which differ)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole result, raw timings included, as JSON."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress bar and no estimate of the time it takes."),
) -> None:
    """Measure the cost of evaluating 1 + k tokens against 1 (k = 1..max-k) at a realistic context position."""
    from lookupkit.integrations.calibrate import calibrate as measure  # (imports llama-cpp-python)
    from lookupkit import models

    model = models.resolve(model)
    if out is not None:
        check_writable(out)  # before minutes of measuring, not after
    with progress(not (quiet or as_json)) as bar:
        task = bar.add_task(f"sweeps of 1..{max_k + 1} tokens" + (f" and steps of 2{f'..{slots}' if slots > 2 else ''} slots" if slots > 1 else ""),
                            total=reps + 1, rate="")

        def on_sweep(done: int, total: int, seconds: float) -> None:
            bar.update(task, completed=done, rate=f"{seconds / done:.2f} s/sweep")
            if done == 1 and not quiet:  # the warm-up sweep: every size measured once
                estimate = f"calibrate: the first of {total} sweeps took {_duration(seconds)}; the whole run will " \
                           f"take about {_duration(seconds * total)}"
                bar.note(estimate) if not as_json else typer.echo(estimate, err=True)

        result = measure(model, reps=reps, max_k=max_k, position=position, threads=threads, slots=slots,
                         on_sweep=on_sweep)
    if out is not None:
        save_curve(result, out)
    if as_json:
        print_json(result)
        return
    typer.echo(f"{model}: 1 token after {position} costs {result['t1_s'] * 1e3:.3f} ms "
               f"(threads {result['threads']}, batch threads {result['threads_batch']}, {reps} reps, medians)")
    typer.echo("   k  cost of 1+k / cost of 1   repeat spread (middle half of the reps)")
    spread = result["spread"]
    for k, c in result["curve"].items():
        if k:
            lo, hi = spread[k]
            typer.echo(f"{k:4d}  {c:6.3f}                   {lo:.3f}-{hi:.3f}")
    for line in falls(result["curve"], spread):
        typer.echo(line)
    for n, points in result.get("batch", {}).items():
        if n > 1:
            typer.echo(f"{n} slots, one step of R rows / 1 token: " + "  ".join(f"{r}: {c:.2f}" for r, c in points.items()))
    typer.echo(f"per drafted position: {result['per_position_cost']:.3f} (least-squares slope; the first drafted "
               f"token alone costs {result['curve'][1] - 1:.3f})")
    typer.echo(f"other processes used {result['others_cores']:.2f} cores meanwhile")
    if result["others_cores"] > BUSY_CORES:
        typer.echo(f"warning: other processes used {result['others_cores']:.2f} cores while this curve was measured: "
                   "it is not this machine's quiet cost (measure again on a quiet machine; generate calls its "
                   "verdict uncertain with such a curve)", err=True)
    if out is not None:
        typer.echo(f"wrote {out}")


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def falls(curve: dict, spread: dict) -> list[str]:
    """A line for each k where verifying one more token costs less: real (beyond both points' repeat
    spread: llama.cpp's kernels favour some batch sizes) or noise (within it: more --reps would tell)."""
    out = []
    for k in sorted(curve)[1:-1]:
        if curve[k + 1] < curve[k]:
            real = spread[k + 1][1] < spread[k][0]
            out.append(f"note: k = {k + 1} costs less than k = {k} ({curve[k + 1]:.3f} vs {curve[k]:.3f}), "
                       + ("beyond their repeat spread: the kernels favour that batch size" if real else
                          "within their repeat spread: noise (raise --reps, on a quiet machine)"))
    return out


def register(app: typer.Typer) -> None:
    app.command("calibrate", epilog=EXAMPLES)(calibrate)
