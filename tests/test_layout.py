"""The package's shape: no import cycles (imports inside functions included), the load/draft path free of
the CLI, the benchmarks and the corpus readers, modules of a readable size, `python -m lookupkit`.

MAX_LINES is the project's one line limit for a module: it is stated here and nowhere else (a module over it
is split along a job boundary, not squeezed)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"lookupkit": "lookupkit", "cli": "lookupkit.cli", "formats": "lookupkit.formats",
            "corpora": "lookupkit.corpora", "bench": "lookupkit.bench"}  # pyproject's package-dir mapping
MAX_LINES = 420


def modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the lookupkit modules it imports anywhere in its body, plus the packages those imply."""
    mods = modules()
    graph = {}
    for name, (path, is_package) in mods.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = (".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
                          if node.level else node.module or "")
                deps |= {f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        deps = {d for d in deps if d in mods and d != name}
        implied = {".".join(d.split(".")[:i]) for d in deps for i in range(1, d.count(".") + 1)}
        graph[name] = deps | {p for p in implied if p in mods and not name.startswith(p + ".") and p != name}
    return graph


def reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or not (itself left out)."""
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    return seen - {start}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("start", ["lookupkit", "lookupkit.draft", "lookupkit.policy", "lookupkit.static", "lookupkit.formats",
                                   "lookupkit.tokenizer", "lookupkit.replay"])
def test_the_load_and_draft_path_never_reaches_cli_bench_or_corpora(start):
    bad = sorted(m for m in reach(import_graph(), start) if m.split(".")[1:2] in (["cli"], ["bench"], ["corpora"]))
    assert bad == [], f"{start} imports {bad}"


def test_modules_stay_readable():
    long = {name: n for name, (path, _) in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_package_folder_is_installed():
    """A folder missing from pyproject's package list would vanish from a non-editable install."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    present = {name for name, (_, is_package) in modules().items() if is_package}
    assert present == listed


def test_python_dash_m_lookupkit_runs_the_umbrella_command():
    r = subprocess.run([sys.executable, "-m", "lookupkit", "--help"], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stderr
    assert "inspect" in r.stdout and "demo" in r.stdout


# Rooms a room never imports (issue 24): the cache is below the policy, the policy below the Drafter, and
# the replay, which replays both and tunes the policy's tables, above all three.
BELOW = {"lookupkit.static": ("policy", "draft", "replay"), "lookupkit.policy": ("draft", "replay"),
         "lookupkit.draft": ("replay",)}


@pytest.mark.parametrize("room", sorted(BELOW))
def test_a_room_never_imports_the_rooms_above_it(room):
    graph = import_graph()
    above = {f"lookupkit.{r}" for r in BELOW[room]}
    bad = sorted(f"{m} -> {d}" for m, deps in graph.items() if m == room or m.startswith(room + ".")
                 for d in deps if ".".join(d.split(".")[:2]) in above)
    assert not bad, bad
