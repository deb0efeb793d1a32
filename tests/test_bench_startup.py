"""The start-up and calibration benchmarks' own machinery: the fresh-install copy carries no compile
cache and imports from where it was put; the report's start-up targets; the Qwen-shaped GGUF writer
(on a tiny shape) loads in llama-cpp-python with the qwen2 vocabulary."""

from __future__ import annotations

import json
import subprocess
import sys

from lookupkit.bench.startup.report import startup_section
from lookupkit.bench.startup.run import CHILD, child_env, copy_package, spawn, summary
import needs


def test_fresh_install_copy_has_no_compile_cache_and_imports_from_itself(tmp_path):
    root = copy_package(tmp_path / "site")
    assert (root / "lookupkit" / "cli" / "main.py").is_file() and (root / "lookupkit" / "formats").is_dir()
    assert list((root / "lookupkit" / "data").glob("*.gguf"))  # package data as pip installs it
    assert not list(root.rglob("*.nbi")) and not list(root.rglob("*.nbc"))
    assert list(root.rglob("*.pyc"))  # compiled as pip compiles at install
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    r = spawn(CHILD, ["import", "-", "-"], child_env(PYTHONPATH=root), cwd)
    assert r["result"]["lookupkit_file"].startswith(str(root))
    assert r["wall_to_result_s"] > 0 and r["result"]["memory"]["private_dirty"] > 0


def test_child_env_drops_what_steers_numba_and_bytecode(monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/somewhere")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = child_env(XDG_CACHE_HOME="/x")
    assert "NUMBA_CACHE_DIR" not in env and "PYTHONDONTWRITEBYTECODE" not in env and env["XDG_CACHE_HOME"] == "/x"


def _sc(v):
    return {"wall_to_first_draft_s": summary([v] * 3), "t_import_s": summary([v / 2] * 3), "t_open_s": summary([1e-4] * 3),
            "t_first_draft_s": summary([v / 3] * 3), "runs": []}


def test_startup_targets_rest_on_measurements():
    st = {"cache": "static-541.lkc", "cache_bytes": 554e6, "tokens": "t.i32", "runs": 3,
          "warm_installed": _sc(0.25),
          "fresh_install": {**_sc(12.0), "runs": [{"wall_to_result_s": 12.0, "stderr": [], "cache_saved": 9}] * 3},
          "read_only": {"measured": True, "first": _sc(12.0), "later": _sc(0.3), "cache_kept": True,
                        "cache_dirs_under_xdg": ["numba/x"]},
          "commands": {"cache": "static-25.lkc",
                       "lookupkit inspect CACHE.lkc": {"wall_s": summary([0.4] * 3), "numba_imported": True,
                                                       "kernels": [], "cache_loaded": 0},
                       "lookupkit convert CACHE.lkc b.ggngcmap": {"wall_s": summary([0.9] * 3), "numba_imported": True,
                                                                  "kernels": ["m._gather_runs"], "cache_loaded": 2}}}
    text = "\n".join(startup_section({"startup": st}))
    rows = {ln.split(" | ")[0][2:]: ln.split(" | ") for ln in text.splitlines() if ln.startswith("| ")}
    assert rows["import to first draft ≤ 300 ms (warm)"][2] == "yes"
    assert rows["first compile ≤ 20 s (fresh install)"][2] == "yes"
    assert rows["first compile visible (a log line or progress)"][2] == "**no**"  # a silent pause is not "visible"
    assert rows["compile cache kept with a read-only package dir"][2] == "yes"
    assert rows["`lookupkit inspect CACHE.lkc` pays for no kernel"][2] == "yes"
    assert rows["`lookupkit convert CACHE.lkc b.ggngcmap` pays for no kernel"][2] == "**no**"
    st["warm_installed"] = _sc(0.45)
    st["fresh_install"]["runs"] = [{"wall_to_result_s": 12.0, "stderr": [(0.5, "compiling kernels (first run only)")]}]
    text = "\n".join(startup_section({"startup": st}))
    assert "| import to first draft ≤ 300 ms (warm) | 450 ms | **no** |" in text
    assert "first compile visible (a log line or progress) | `0.5 s: compiling kernels (first run only)` | yes" in text


def test_qwen2_shaped_gguf_writer_loads_in_llama_cpp(tmp_path):
    qwen2 = needs.shared("vocab/ggml-vocab-qwen2.gguf")
    needs.module("gguf", "pip install 'lookupkit[dev]'")
    needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
    from lookupkit.bench.models import Shape, write_qwen2_gguf

    path = write_qwen2_gguf(tmp_path / "tiny-qwen2.gguf", Shape(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=1,
                                                                head_dim=32, n_ctx=256), qtype="Q8_0")
    code = ("import json, sys, llama_cpp; m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, verbose=False); "
            "print(json.dumps({'n_vocab': m.n_vocab(), 'arch': m.metadata.get('general.architecture'), "
            "'ids': m.tokenize(b'Hello world', add_bos=False)}))")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["n_vocab"] == 151936 and out["arch"] == "qwen2"
    from lookupkit import Tokenizer

    assert out["ids"] == Tokenizer.from_file(qwen2).encode("Hello world", add_special=False).tolist()


def _probe(ms, numba=False, added=None):
    row = {"t_s": summary([ms / 1e3] * 3), "numba": numba, "runs": []}
    if added is not None:
        row["added_s"] = summary([added / 1e3] * 3)
    return row


def test_the_before_after_table_and_its_targets_rest_on_the_measurements(tmp_path):
    from lookupkit.bench.startup.report import compare_section, write_compare

    after = {"import numpy": _probe(65), "import lookupkit": _probe(2), "import → first draft (warm)": _probe(290),
             "engine": _probe(400), "generate": _probe(430, added=30), "generate-inline": _probe(900, added=500),
             "hook": _probe(520, added=120)}
    before = {"import lookupkit": _probe(330, numba=True), "import → first draft (warm)": _probe(560),
              "generate": _probe(1200, added=800), "hook": _probe(1300, added=900)}
    data = {"command": "python -m lookupkit.bench.startup.compare --tree B", "machine": {"cores": 2},
            "compare": {"runs": 3, "cache": "/x/small.lkc", "cache_bytes": 5e7, "model": "/m/gemma.gguf",
                        "trees": {"after": {"commit": "a" * 40, "probes": after},
                                  "before": {"commit": "b" * 40, "probes": before}}}}
    text = "\n".join(compare_section(data))
    assert "| `import lookupkit` | 2 (2–2) | 330 (330–330) | – | – | after: no, before: yes |" in text
    assert "| `open_model` → first draft (`Drafter(static=...)`) | 430 (430–430) | 1200 (1200–1200) | 30 (30–30) | 800" in text
    targets = {c[0]: c[2] for ln in text.split("Targets")[1].splitlines()
               if ln.startswith("| ") and "---" not in ln and (c := ln.strip("| ").split(" | "))[0] != "target"}
    assert targets == {"`import lookupkit` ≤ 2× `import numpy` and no numba": "yes",
                       "generate: lookupkit adds ≤ 50 ms to model load → first draft": "yes",
                       "hook: lookupkit adds ≤ 50 ms to model load → first draft": "**no**"}
    after["import lookupkit"] = _probe(2, numba=True)  # fast but it imported numba: not met
    assert "vs 65.0 ms, numba yes | **no** |" in "\n".join(compare_section(data))
    one = {**data, "compare": {**data["compare"], "threads": 1}}
    write_compare([data, one], tmp_path / "STARTUP.md")
    text = (tmp_path / "STARTUP.md").read_text()
    assert text.startswith("# Start-up") and "model on 2 threads" in text and "model on 1 thread" in text
