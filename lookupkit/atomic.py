"""Write outputs so that a failure never leaves a partial file at the target.

Bytes go to a temp file beside the target, are fsynced, then renamed over it. Disk-full and
permission errors become one-line InputErrors; the temp file is removed on any failure.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from .errors import InputError


def _explain(path: Path, exc: OSError) -> InputError:
    if exc.errno == errno.ENOSPC:
        return InputError(f"cannot write {path}: no space left on device (nothing was written at the target)")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return InputError(f"cannot write {path}: permission denied")
    if exc.errno == errno.ENOENT:
        return InputError(f"cannot write {path}: directory {path.parent} does not exist")
    if exc.errno == errno.EISDIR:
        return InputError(f"cannot write {path}: it is a directory")
    return InputError(f"cannot write {path}: {exc.strerror or exc}")


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Yield a binary file; on clean exit it is fsynced and renamed to `path`, else removed."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as exc:
        raise _explain(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp creates 0600; give what open() would
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise _explain(path, exc) from None
    except BaseException:
        _remove(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)
