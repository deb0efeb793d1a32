"""The packages' public faces imported at first use (PEP 562), written once.

`import lookupkit` (and each subpackage) must load no numba: a face such as `Drafter` is imported from
its module the first time it is asked for, then kept in the package's namespace, so later lookups are
ordinary attribute reads (what that saves at import: bench/STARTUP.md).
"""

from __future__ import annotations

import importlib
import sys


def lazy_faces(package: str, where: dict[str, str]):
    """A module `__getattr__` for `package` that imports each name in `where` from its module (relative
    to the package, e.g. ".drafter") at first use and keeps it."""

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        face = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, face)
        return face

    return __getattr__
