"""Files in and out, the same way everywhere: opening inputs, atomic outputs, the cache directory; and the
process's peak memory, measured one way (peak_rss_bytes).

Inputs: `open_input` / `map_file` refuse a missing path, a directory or a non-regular file with one
wording ("<what> <path> does not exist"). Outputs: bytes go to a temp file beside the target, are
fsynced, then renamed over it; disk-full and permission errors become one-line InputErrors and the
temp file is removed on any failure. The cache directory ($LOOKUPKIT_CACHE_DIR, else
~/.cache/lookupkit) holds only what lookupkit can rebuild (token store, unpacked .lkc.zst, demo cache).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import resource
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from .errors import FormatError, InputError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first bytes: compressed corpora and .lkc.zst files


def _input_error(what: str, path: Path, exc: OSError) -> InputError:
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{what} {path} does not exist")
    if isinstance(exc, IsADirectoryError):
        return InputError(f"{what} {path} is a directory, not a file")
    if isinstance(exc, PermissionError):
        return InputError(f"cannot read {what} {path}: permission denied")
    return InputError(f"cannot read {what} {path}: {exc.strerror or exc}")


def open_input(path: str | os.PathLike, what: str) -> BinaryIO:
    """`path` opened for reading, if it is a regular file; else a one-line InputError naming `what`."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise _input_error(what, path, exc) from None
    mode = os.fstat(f.fileno()).st_mode
    if not stat.S_ISREG(mode):
        f.close()
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise InputError(f"{what} {path} is {kind}, not a file")
    return f


def map_file(path: str | os.PathLike, what: str) -> mmap.mmap:
    """The whole file mapped read-only and shared (every process mapping it shares its pages)."""
    with open_input(path, what) as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise FormatError(f"{what} {path} is empty")
        try:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise InputError(f"cannot map {what} {path}: {exc.strerror or exc}") from None


def unmap(mm: mmap.mmap) -> None:
    """Close a mapping; if views of it are still alive, it is unmapped when the last one goes."""
    try:
        mm.close()
    except BufferError:
        pass


def default_root() -> Path:
    """$LOOKUPKIT_CACHE_DIR, else ~/.cache/lookupkit."""
    return Path(os.environ.get("LOOKUPKIT_CACHE_DIR") or Path.home() / ".cache" / "lookupkit")


def ensure_dir(path: str | os.PathLike, what: str,
               hint: str = "choose another with --cache-dir or LOOKUPKIT_CACHE_DIR") -> Path:
    """Create `path` (and its parents) if missing; a one-line InputError naming `what` if that fails."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot use {path} as {what}: {exc.strerror or exc} ({hint})") from None
    return path


def _explain(path: Path, exc: OSError) -> InputError:
    if exc.errno == errno.ENOSPC:
        return InputError(f"cannot write {path}: no space left on device (nothing was written at the target)")
    if exc.errno == errno.EROFS:
        return InputError(f"cannot write {path}: {path.parent} is on a read-only file system")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return InputError(f"cannot write {path}: permission denied")
    if exc.errno == errno.ENOENT:
        if not path.parent.is_dir():
            return InputError(f"cannot write {path}: directory {path.parent} does not exist")
        return InputError(f"cannot write {path}: {path.parent} does not take new files ({exc.strerror or exc})")
    if exc.errno == errno.EISDIR:
        return InputError(f"cannot write {path}: it is a directory")
    return InputError(f"cannot write {path}: {exc.strerror or exc}")


def check_writable(path: str | os.PathLike) -> Path:
    """Refuse, before any work, an output `path` that atomic_writer could not write: a directory, a missing
    or read-only folder, no permission (a temp file is made beside it and removed)."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    os.close(fd)
    _remove(tmp)
    return path


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new temp file in path's folder (the one atomic_writer renames over path), or a one-line InputError."""
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a directory")
    try:
        return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    except OSError as exc:
        raise _explain(path, exc) from None


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Yield a binary file; on clean exit it is fsynced and renamed to `path`, else removed."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
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


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM (the high-water resident set of its own address space) rather
    than getrusage's ru_maxrss, which Linux carries from a parent across fork+exec and so overstates a small child
    of a large parent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak if sys.platform == "darwin" else peak * 1024
