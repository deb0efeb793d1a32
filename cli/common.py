"""What every command shares: one-line errors with a non-zero exit, JSON output, progress bars."""

from __future__ import annotations

import functools
import json
import sys
import warnings
from typing import Any, Callable

import typer
from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from lookupkit.errors import LookupkitError, LookupkitWarning

EXIT_ERROR = 2


def fail(message: str, code: int = EXIT_ERROR) -> None:
    """Print `error: message` as one line on stderr and exit."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def guarded(fn: Callable) -> Callable:
    """Turn lookupkit errors (and Ctrl-C, and memory exhaustion) into one line and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", LookupkitWarning)
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except LookupkitError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except MemoryError:
            fail("out of memory")
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(1)

    return wrapper


def _show_warning(message, category, *_args, **_kwargs) -> None:
    if issubclass(category, LookupkitWarning):
        typer.echo(f"warning: {message}", err=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, *_args[:2]))


def run(app: typer.Typer) -> None:
    """Run a command as its console script: usage errors (a missing argument, `-c abc`, an unknown
    option) become one `error: ...` line and exit 2, like every other refusal."""
    try:
        from typer._click import exceptions as cx  # typer >= 0.20 vendors click
    except ImportError:  # pragma: no cover - older typer runs on click itself
        from click import exceptions as cx

    try:
        code = app(standalone_mode=False)
    except getattr(cx, "NoArgsIsHelpError", ()) as exc:
        exc.show()
        code = exc.exit_code
    except cx.UsageError as exc:
        hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        typer.echo(f"error: {exc.format_message()}{hint}", err=True)
        code = exc.exit_code
    except getattr(cx, "Abort", ()):  # (typer's vendored click has no Abort)
        typer.echo("error: interrupted", err=True)
        code = 130
    except cx.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=_jsonable))


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def progress(enabled: bool = True) -> Progress:
    """Progress of long work on stderr: on a terminal, rich's bars with the time left; anywhere else (a log
    file, a pipe, CI) one plain line per stage, when it starts; nothing when disabled (--quiet, --json). Its
    rate column is each task's `rate` field, the work's own rate (build.pipeline: rich's short-window
    estimate read many times too high); `note(text)` prints a line above the bars (or as one more plain line)."""
    console = _stderr_console()
    live = enabled and console.is_terminal and not console.is_dumb_terminal
    return Stages(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                  disable=not live, transient=False, console=console, plain=enabled and not live)


class Stages(Progress):
    """rich's Progress, or, with plain, one line per stage: a task added, or given a new description (rich
    would print its bars once, at the end)."""

    def __init__(self, *columns, plain: bool = False, **kwargs):
        super().__init__(*columns, **kwargs)
        self.plain = plain

    def add_task(self, description, *args, **kwargs):
        if self.plain:
            from rich.text import Text

            total = kwargs.get("total", args[1] if len(args) > 1 else None)
            size = f" ({total:,.0f})" if isinstance(total, (int, float)) and total else ""
            typer.echo(f"{Text.from_markup(str(description)).plain}{size} ...", err=True)
        return super().add_task(description, *args, **kwargs)

    def update(self, task_id, *args, **kwargs):
        """As rich's; with plain, a new description (a task's next stage: generate's runs) is one more line."""
        if self.plain and kwargs.get("description") not in (None, self._tasks[task_id].description):
            from rich.text import Text

            rate = kwargs.get("rate")
            typer.echo(Text.from_markup(str(kwargs["description"])).plain + (f": {rate}" if rate else ""), err=True)
        return super().update(task_id, *args, **kwargs)

    def note(self, text: str) -> None:
        if self.plain:
            typer.echo(text, err=True)
        elif not self.disable:
            self.console.print(text, markup=False, highlight=False)


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)
