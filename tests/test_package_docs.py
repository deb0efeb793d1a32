"""Package docstrings name every module and subpackage they hold (issue 24: lists that drift are held by a
test instead): a module added without a word in its package's docstring fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["lookupkit", "lookupkit/counts", "lookupkit/draft", "lookupkit/policy", "lookupkit/replay", "lookupkit/create",
            "lookupkit/static", "lookupkit/suffix", "lookupkit/integrations", "lookupkit/serve",
            "lookupkit/tokenizer", "formats", "corpora", "cli", "bench"]


def members(folder: Path) -> list[str]:
    mods = [p.stem for p in folder.glob("*.py") if not p.name.startswith("_")]
    subs = [p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    return sorted(mods + subs)


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_docstring_names_every_module_it_holds(package):
    folder = ROOT / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    missing = [m for m in members(folder) if not re.search(rf"(?<![\w-]){re.escape(m)}(?![\w-])", doc)]  # "memory-mapped" names no memory
    assert not missing, f"{package}/__init__.py's docstring does not name {missing}"


def test_every_package_is_checked():
    found = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/__init__.py")} | \
        {str(p.parent.relative_to(ROOT)) for p in (ROOT / "lookupkit").glob("*/__init__.py")}
    assert found - {"tests"} <= set(PACKAGES), sorted(found - set(PACKAGES))
