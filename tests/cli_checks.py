"""What every CLI test asserts about bad input: exit 2, one `error: ...` line on stderr, no traceback."""

from __future__ import annotations


def assert_one_line_error(result, *fragments, after_progress: bool = False):
    """`result` of a typer CliRunner call. With after_progress, progress bars of finished phases may
    precede the error line on stderr (it must still be the only error line, and the last)."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    if after_progress:
        assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    else:
        assert len(lines) == 1 and errors == lines, result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
