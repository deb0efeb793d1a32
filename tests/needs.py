"""What a test needs from outside the repository, asked for in one way: skip with one wording, fail under CI.

../shared (reference vectors, vocabularies, corpora) sits next to a checkout on these machines and in CI,
never in a fresh clone; optional engines come with extras. Outside CI a missing one skips the test with
what would provide it; under CI (CI set) it fails, because CI installs and provides everything.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def missing(why: str):
    """Skip (fail under CI) because `why` is missing."""
    if os.environ.get("CI"):
        pytest.fail(f"CI: {why}")
    pytest.skip(why, allow_module_level=True)  # also at import, as `ray = needs.module("ray", ...)` does


def shared(rel: str) -> Path:
    """../shared/<rel>, or skip: 'needs ../shared/<rel> (not in a fresh clone; CI provides it)'."""
    path = SHARED / rel
    if not path.exists():
        missing(f"needs ../shared/{rel} (not in a fresh clone; CI provides it)")
    return path


def has_shared(rel: str) -> bool:
    """For skipif marks: whether ../shared/<rel> exists (use `shared_mark` to get the mark itself)."""
    return (SHARED / rel).exists()


def shared_mark(rel: str):
    """A skipif mark with the same wording as `shared` (under CI the missing path fails at collection)."""
    if os.environ.get("CI") and not has_shared(rel):
        raise RuntimeError(f"CI: needs ../shared/{rel}")
    return pytest.mark.skipif(not has_shared(rel), reason=f"needs ../shared/{rel} (not in a fresh clone; CI provides it)")


def module(name: str, install: str):
    """The imported module, or skip: 'needs <name>: <install>'."""
    if importlib.util.find_spec(name) is None:
        missing(f"needs {name}: {install}")
    return importlib.import_module(name)
