"""A build's output file (checked writable before the long work by files.check_writable), kept as a success once complete.

Outputs are written atomically (`lookupkit.files.atomic_writer`: a temp file renamed over the target).
A Ctrl-C that lands after the rename finds the work done: the file at the path is complete and valid,
and whatever was there before is already gone. `kept_if_complete` therefore reports such a build as a
success (exit 0, with a note) instead of "interrupted": removing the file would throw away a correct
result without restoring the old one, and reporting a failure would say a finished file was not
written. A Ctrl-C before the rename still interrupts (the temp file is removed, the target untouched).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator



def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None if there is none: the rename gives the output a new inode."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@dataclass
class Completion:
    interrupted_after_write: bool = False


@contextlib.contextmanager
def kept_if_complete(path: str | os.PathLike) -> Iterator[Completion]:
    """Run a build that writes `path`; a KeyboardInterrupt after its rename is absorbed (the file is
    complete) and recorded in the yielded Completion, one before it propagates."""
    path = Path(path)
    before, done = _identity(path), Completion()
    try:
        yield done
    except KeyboardInterrupt:
        if _identity(path) in (before, None):
            raise
        done.interrupted_after_write = True
