"""Installs that a new upstream release cannot break: the engines lookupkit drives through private parts are
bounded above by the newest versions the tests ran, CI installs exactly the versions of its last green run
(.ci/constraints.txt, written by `.ci/deps.py lock`), and property tests draw fixed examples under CI."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import tomllib
from pathlib import Path

import pytest
from hypothesis import settings
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"


def pins() -> dict[str, str]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            out[name.lower().replace("_", "-")] = version
    return out


def requirement(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    (req,) = {str(r): r for r in reqs if r.name == name}.values()  # one requirement, however many extras name it
    return req


def transformers_tested() -> tuple:
    tree = ast.parse((ROOT / "lookupkit" / "integrations" / "transformers.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "TESTED_VERSIONS")
    return ast.literal_eval(node.value)


def test_every_line_of_the_constraints_is_one_exact_version():
    lines = [x for x in CONSTRAINTS.read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert len(lines) > 50 and all(x.count("==") == 1 and " " not in x for x in lines)
    assert {"numpy", "numba", "transformers", "llama-cpp-python", "torch", "hypothesis", "uvicorn"} <= set(pins())
    assert "lookupkit" not in pins()


@pytest.mark.parametrize("name, next_release", [
    ("transformers", lambda v: Version(f"{v.major}.{v.minor + 1}.0")),            # a minor brings API changes
    ("llama-cpp-python", lambda v: Version(f"{v.major}.{v.minor}.{v.micro + 1}")),  # so does each 0.3.x
])
def test_each_engine_admits_the_version_ci_ran_and_nothing_newer(name, next_release):
    req, ran = requirement(name), Version(pins()[name])
    assert req.specifier.contains(ran), f"{req} refuses {name} {ran}, the version CI ran"
    assert not req.specifier.contains(next_release(ran)), (
        f"{req} admits {name} {next_release(ran)}, which no test ran: bound it below that, or run "
        f"python3 .ci/deps.py newest and raise the pin with the bound")


def test_transformers_is_bounded_by_the_newest_tested_minor():
    tested = sorted(Version(v) for v in transformers_tested())
    req = requirement("transformers")
    assert Version(pins()["transformers"]).release[:2] == tested[-1].release
    assert all(req.specifier.contains(Version(f"{v}.0")) for v in tested)
    assert not req.specifier.contains(Version(f"{tested[-1].major}.{tested[-1].minor + 1}.0"))


def test_ci_installed_exactly_the_pinned_versions():
    if not os.environ.get("CI"):
        pytest.skip("outside CI the environment is the developer's own; CI installs .ci/constraints.txt")
    wrong = {}
    for name, version in pins().items():
        try:
            got = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            got = None
        if got != version:
            wrong[name] = (version, got)
    assert not wrong, f"installed versions differ from .ci/constraints.txt (pinned, installed): {wrong}"


def test_property_tests_draw_fixed_examples_under_ci():
    import conftest

    want = os.environ.get("LOOKUPKIT_HYPOTHESIS") or ("ci" if os.environ.get("CI") else "explore")
    assert conftest.PROFILE == want
    assert settings.default.derandomize == (want == "ci") and (settings.default.database is None) == (want == "ci")


def test_fastconstmap_is_a_test_requirement_that_no_shipped_module_imports():
    """fastconstmap is the reference tests hold lookupkit's VMAP0001 bytes against (test_constmap_build,
    test_formats): it belongs to the dev extra, and nothing lookupkit installs may import it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(Requirement(r).name == "fastconstmap" for r in project["dependencies"])
    assert any(Requirement(r).name == "fastconstmap" for r in project["optional-dependencies"]["dev"])
    importers = []
    for folder in ("lookupkit", "cli", "formats", "corpora", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n.split(".")[0] == "fastconstmap" for n in names):
                    importers.append(str(path.relative_to(ROOT)))
    assert not importers, importers
