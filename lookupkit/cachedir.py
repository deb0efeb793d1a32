"""The one directory where lookupkit keeps what it can rebuild (token store, unpacked .lkc.zst, demo cache).

$LOOKUPKIT_CACHE_DIR, else ~/.cache/lookupkit; it can be emptied at any time.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError


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
