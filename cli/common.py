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
    """A rich progress display on stderr; silent when disabled (--quiet, --json). Its rate column is each
    task's `rate` field, the work's own rate (build.pipeline: rich's short-window estimate read 20x high)."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
                    TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), disable=not enabled, transient=False,
                    console=_stderr_console())


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)
