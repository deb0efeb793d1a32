"""Progress of long work (issue 34, cli.common.progress): on a terminal rich's bars with the time left; off one
(a log, a pipe) one plain line per stage on stderr; nothing when disabled (-q, --json)."""

from __future__ import annotations

import io

from rich.console import Console

from lookupkit.cli import common


def run_stages(enabled: bool = True):
    with common.progress(enabled) as bar:
        task = bar.add_task("[bold]counting", total=10, rate="")
        bar.update(task, advance=5, rate="2.0 M tok/s")  # the same stage: no line
        bar.update(task, advance=5, description="writing", rate="9.1 MB/s")  # the next stage
        bar.note("calibrate: about 3 min")
        other = bar.add_task("opening", total=None, rate="")
        bar.update(other, completed=1)


def test_off_a_terminal_each_stage_is_one_plain_line(capsys):
    run_stages()
    assert capsys.readouterr().err.splitlines() == ["counting (10) ...", "writing: 9.1 MB/s",
                                                    "calibrate: about 3 min", "opening ..."]


def test_disabled_it_prints_nothing(capsys):
    run_stages(enabled=False)
    assert capsys.readouterr() == ("", "")


def test_on_a_terminal_it_is_richs_bar_with_the_time_left(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(common, "_stderr_console", lambda: Console(file=out, force_terminal=True, width=120))
    run_stages()
    text = out.getvalue()
    assert "━" in text and "writing" in text and "calibrate: about 3 min" in text
    assert "counting (10) ..." not in text  # no plain lines
    assert "-:--:--" in text or "0:00:00" in text  # the time-left column
