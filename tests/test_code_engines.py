"""The code-task engines bench (bench/code_engines/run.py, issue 15): which files become prompts, the rows (the
policy without the suffix source makes no suffix lookup, with it drafts from it), the greedy check's
re-derivation of emitted tokens, the report on synthetic results; and a --quick run on the real model over a
tiny code task made from hand-made wheels (no download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from lookupkit.bench.code_engines import run as ce
from lookupkit.bench.code_engines import report as rep
from lookupkit.policy import confidence
from lookupkit.policy.chain import SRC_SUFFIX
from lookupkit.errors import InputError
from lookupkit.verify_cost import VerifyCost, save_curve
import needs
from test_policy import random_tables
from test_policy_suffix import code_task, suffix_tables, with_suffix


# -- prompts ---------------------------------------------------------------------------------------

def _eval_npz(path: Path, lengths) -> Path:
    np.savez(path, **{f"{i:06d}": np.arange(i * 1000, i * 1000 + n, dtype=np.int32) for i, n in enumerate(lengths)})
    return path


def test_prompts_are_odd_indexed_long_enough_files_seeded(tmp_path):
    npz = _eval_npz(tmp_path / "eval.npz", [500, 500, 90, 100, 500, 99, 30, 400, 100, 99, 100, 101])
    chosen = ce.select_prompts(npz, 4, 13, 64, 36)
    assert sorted(p["index"] for p in chosen) == [1, 3, 7, 11]  # odd and >= 64 + 36 ids (3: exactly 100)
    assert chosen == ce.select_prompts(npz, 4, 13, 64, 36)
    p = next(p for p in chosen if p["index"] == 7)
    assert p["ids"] == list(range(7000, 7064)) and p["key"] == "000007" and p["n_tokens"] == 400
    assert {p["index"] for p in ce.select_prompts(npz, 2, 1, 64, 36)} <= {1, 3, 7, 11}
    with pytest.raises(InputError, match="odd-indexed files hold >= 64 \\+ 36 ids, 6 asked for"):
        ce.select_prompts(npz, 6, 13, 64, 36)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="cannot read"):
        ce.select_prompts(tmp_path / "bad.npz", 1, 13, 64, 36)


# -- rows ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_rows(tmp_path_factory):
    """The lookupkit rows over a cache with a suffix index, tables learnt with (strong) and without it."""
    d = tmp_path_factory.mktemp("rows")
    docs, seq = code_task(7)
    rng = np.random.default_rng(7)
    table, agree = random_tables(rng)
    table[SRC_SUFFIX:] = 0.0  # as a table learnt on a cache without the index
    tables = {"nosx": confidence.save((table, agree), d / "nosx.json"),
              "sx": confidence.save(suffix_tables(rng, strong=True), d / "sx.json")}
    statics = {"ctx": None, ce.LABEL_2: with_suffix(docs), ce.LABEL_SX: with_suffix(docs)}
    return ce.code_rows(statics, tables, VerifyCost.of(0.1), [16, 32], 8), seq, statics, tables


def test_rows_pair_the_policy_with_and_without_the_suffix_source(tiny_rows):
    rows = {r["name"]: r for r in tiny_rows[0]}
    assert list(rows) == ["lcpp:plain", "lk:rule-code2", "lk:policy-nosx-n16", "lk:policy-sx-n16",
                          "lk:policy-nosx-n32", "lk:policy-sx-n32"]
    for n in (16, 32):
        on, off = rows[f"lk:policy-sx-n{n}"], rows[f"lk:policy-nosx-n{n}"]
        assert on["pair"] == off["name"] and off["pair"] == on["name"] and on["suffix"] and not off["suffix"]
        assert on["cache"] == off["cache"] == ce.LABEL_SX and on["n_draft"] == off["n_draft"] == n
        assert on["policy_table"] != off["policy_table"]
    assert rows["lk:rule-code2"]["cache"] == ce.LABEL_2 and rows["lk:rule-code2"]["policy"] == "llama.cpp"


def test_the_row_without_the_suffix_source_makes_no_suffix_lookup(tiny_rows):
    rows, seq, _, _ = tiny_rows
    by = {r["name"]: r for r in rows}
    sources = {}
    for name in ("lk:policy-nosx-n16", "lk:policy-sx-n16"):
        d = by[name]["drafter"]()
        counted = ce.counting_sources(d)
        for i in range(8, len(seq), 5):
            d.draft(seq[:i], 16)
        sources[name] = counted
        sx = d._pol.suffix
        if name == "lk:policy-nosx-n16":  # no index handed to the policy, and its lookup state never moved
            assert sx.text.size == 0 and not sx.state.any()
        else:
            assert sx.text.size > 0 and sx.state[0] > 0
    assert sources["lk:policy-nosx-n16"]["sx"] == 0 and sources["lk:policy-sx-n16"]["sx"] > 20


def test_tables_that_do_not_make_the_difference_are_refused(tiny_rows):
    _, _, statics, tables = tiny_rows
    with pytest.raises(InputError, match="has learnt the suffix source"):
        ce.code_rows(statics, {"nosx": tables["sx"], "sx": tables["sx"]}, VerifyCost.of(0.1), [16], 8)
    with pytest.raises(InputError, match="has not learnt the suffix source"):
        ce.code_rows(statics, {"nosx": tables["nosx"], "sx": tables["nosx"]}, VerifyCost.of(0.1), [16], 8)
    docs, _ = code_task(7)
    from lookupkit import StaticCache
    from lookupkit.counts.bigrams import count_static

    no_index = {**statics, ce.LABEL_SX: StaticCache.from_table(count_static(docs, 1024))}
    with pytest.raises(InputError, match="has no suffix index"):
        ce.code_rows(no_index, tables, VerifyCost.of(0.1), [16], 8)


def test_missing_task_files_are_one_line_errors(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(InputError, match="not prepared: .*eval.npz.*code-2.lkc missing") as exc:
        ce.parse_args(["-m", str(model), "--data", str(tmp_path), "--caches", str(tmp_path)])
    assert "\n" not in str(exc.value)
    for name in (ce.EVAL, ce.TABLE_SX, ce.TABLE_NOSX, ce.CACHE_SX, ce.CACHE_2):
        (tmp_path / name).write_bytes(b"x")
    a = ce.parse_args(["-m", str(model), "--data", str(tmp_path), "--caches", str(tmp_path), "--quick"])
    assert (a.prompts, a.n_new, a.reps, a.policy_drafts, a.tasks) == (2, 32, 1, [16, 32], ["code"])
    with pytest.raises(InputError, match="--policy-drafts"):
        ce.parse_args(["-m", str(model), "--data", str(tmp_path), "--caches", str(tmp_path), "--policy-drafts", "x"])
    with pytest.raises(InputError, match="unknown engine"):
        ce.parse_args(["-m", str(model), "--data", str(tmp_path), "--caches", str(tmp_path), "--engines", "vllm"])


# -- the greedy check ------------------------------------------------------------------------------

def test_emitted_tokens_are_rederived_from_each_batchs_argmax():
    batches = [(9, [5], [7]),                     # the prompt's last row: first token 7
               (10, [7, 8, 9, 4], [8, 9, 6, 1]),  # drafts 8 9 accepted, 4 rejected: 6 emitted
               (13, [6], [2]),                    # nothing drafted
               (14, [2, 3], [3, 5])]              # all accepted, plus 5
    assert ce.greedy_emitted(10, batches) == ([7, 8, 9, 6, 2, 3, 5], True)
    broken = batches[:2] + [(12, [6], [2])]  # a batch that does not start at the last emitted token
    assert ce.greedy_emitted(10, broken)[1] is False
    assert ce.greedy_emitted(10, [(9, [5], [7]), (10, [1], [2])])[1] is False  # nor with the emitted token


# -- the report, on synthetic results --------------------------------------------------------------

def _run(row, prompt, rep_, t_gen, tokens, drafted=None, accepted=None, calls=None, load=1.0):
    return {"row": row, "task": "code", "prompt": prompt, "rep": rep_, "tokens": tokens, "n_gen": len(tokens),
            "t_prompt_s": 0.1, "t_gen_s": t_gen, "drafted": drafted, "accepted": accepted, "calls": calls,
            "load1": load, **({"replay_equal": True} if drafted is not None and row.startswith("lk:") else {})}


def _results(sx_t=(0.5, 0.4, 0.25), leak=False):
    rows = [{"name": "server:none", "engine": "llama-server", "plain": True},
            {"name": "server:ngram-mod", "engine": "llama-server"},
            {"name": "lcpp:plain", "engine": "llama-cpp-python", "plain": True},
            {"name": "lk:policy-nosx-n16", "engine": "llama-cpp-python", "suffix": False, "pair": "lk:policy-sx-n16",
             "n_draft": 16},
            {"name": "lk:policy-sx-n16", "engine": "llama-cpp-python", "suffix": True, "pair": "lk:policy-nosx-n16",
             "n_draft": 16}]
    toks = list(range(101))
    runs = []
    for p in range(3):
        for r in range(2):
            runs += [_run("server:none", p, r, 2.0, toks), _run("server:ngram-mod", p, r, 1.0, toks, 80, 60, 40),
                     _run("lcpp:plain", p, r, 2.0, toks),
                     _run("lk:policy-nosx-n16", p, r, 1.0, toks if p else toks[:50] + [0] * 51, 60, 50, 50),
                     _run("lk:policy-sx-n16", p, r, sx_t[p], toks, 90, 80, 20)]
    checks = [{"row": n, "prompt": p, "batches": 10, "greedy": True, "same_as_timed": p != 2,
               "sources": {"s3": 40, **({"sx": 5} if "-sx-" in n or leak else {})}}
              for n in ("lcpp:plain", "lk:policy-nosx-n16", "lk:policy-sx-n16") for p in range(3)]
    for c in checks:
        if c["row"] == "lcpp:plain":
            c["sources"] = {}
    return {"kind": "code-engines", "date": "2026-12-02", "wall_s": 600.0, "git": {"commit": "abc"}, "quick": False,
            "machine": {"cpu": "x", "cores": 2}, "versions": {"lookupkit": "0"}, "complete": True,
            "args": {"prompts": 3, "seed": 13, "prompt_tokens": 256, "n_new": 100, "threads": 2, "reps": 2},
            "loadavg": {"before_runs": [1.0], "now": [1.2]}, "command": "python -m lookupkit.bench.code_engines",
            "files": {"eval": "/d/eval.npz", "code-o6-sx": "/c/code-o6-sx.lkc", "code-2": "/c/code-2.lkc",
                      "sx": "/d/table-sx.json", "nosx": "/d/table-nosx.json"},
            "caches": {"code-o6-sx": {"bytes": 9e6}, "code-2": {"bytes": 1e6}},
            "calibration": {"source": "c.json", "t1_s": 0.02},
            "prompts": [{"index": 2 * i + 1, "head": f"# file: django/f{i}.py"} for i in range(3)],
            "rows": rows, "runs": runs, "greedy_checks": checks}


def test_report_figures_pair_generations_of_the_same_round():
    data = _results()
    figs = rep.summarise(data)
    sx, nosx = figs["lk:policy-sx-n16"], figs["lk:policy-nosx-n16"]
    assert sx["tok_s"] == {"median": 101 / 0.4, "min": 101 / 0.5, "max": 101 / 0.25, "n": 3}
    assert sx["speedup"]["median"] == pytest.approx(5.0) and nosx["speedup"]["median"] == pytest.approx(2.0)
    assert sx["accepted_per_call"] == pytest.approx(4.0) and sx["tokens_per_verify"] == pytest.approx(5.0)
    assert figs["server:ngram-mod"]["tokens_per_verify"] == pytest.approx(2.5)
    assert figs["lcpp:plain"]["tokens_per_verify"] == 1.0 and "diverged" not in figs["lcpp:plain"]
    assert nosx["diverged"] == (2, 6) and sx["diverged"] == (0, 6) and sx["replay_equal"] == (6, 6)
    (effect,) = rep.suffix_effect(data, figs)
    assert effect["ratio"] == {"median": pytest.approx(2.5), "min": pytest.approx(2.0), "max": pytest.approx(4.0),
                               "n": 3}


def test_report_states_the_ratio_the_greedy_check_and_any_leak(tmp_path):
    path = tmp_path / "code.json"
    path.write_text(json.dumps(_results()))
    md = rep.render(path, tmp_path / "ENGINES_CODE.md")
    assert (tmp_path / "ENGINES_CODE.md").read_text() == md
    assert "the suffix source makes the policy **2.50×** as fast (median over 3 prompts of the paired ratio, " \
           "min 2.00, max 4.00" in md
    assert "| `policy-sx-n16` | 3 | 3/3 | 2/3 | s3 120, sx 15 |" in md
    assert "Rows without the suffix source that drafted from it: none." in md
    assert "load average 1.0 before the timed rows, 1.2 after" in md and "`django/f1.py`" in md
    path.write_text(json.dumps(_results(leak=True)))
    assert "drafted from it: lk:policy-nosx-n16." in rep.render(path, tmp_path / "ENGINES_CODE.md")
    path.write_text(json.dumps({"kind": "engines"}))
    with pytest.raises(InputError, match="not a code-engines result"):
        rep.load(path)


# -- --quick on the real model, over a tiny code task -------------------------------------------------

def _wheel(path: Path, files: dict) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, body in files.items():
            z.writestr(name, body)


def _tiny_task(tmp: Path, gguf: Path) -> tuple[Path, Path]:
    """Two releases of a package made of standard-library modules (the later one edits each), the code task
    written by bench.suffix_code_task, its cache (lookup-create --orders 2-6 --suffix-index; code-2.lkc is a
    link to it: llama.cpp's rule reads its 2-grams alone), two tables (the bundled Gemma table, learnt without
    any index, and the same with its suffix rows set) and a made-up cost curve."""
    import bisect, colorsys, heapq, textwrap  # noqa: E401  small pure-Python modules of every Python

    from lookupkit.bench import suffix_code_task

    mods = {m.__name__: Path(m.__file__).read_text() for m in (bisect, colorsys, heapq, textwrap)}
    (tmp / "wheels").mkdir()
    _wheel(tmp / "wheels" / "pkg-1.0-py3-none-any.whl", {f"pkg/{n}.py": s for n, s in mods.items()})
    _wheel(tmp / "wheels" / "pkg-2.0-py3-none-any.whl",
           {f"pkg/{n}.py": s.replace("def ", "def _", 1) for n, s in mods.items()})
    suffix_code_task.main(["--package", "pkg", "--earlier", "1.0", "--later", "2.0", "--cache", str(tmp),
                           "-m", str(gguf)])
    data = tmp / "pkg-1.0-2.0"
    r = subprocess.run([sys.executable, "-c", "from lookupkit.cli.create import main; main()", "-m", str(gguf),
                        "-f", str(data / "corpus.txt"), "--orders", "2-6", "--suffix-index",
                        "-lcs", str(data / ce.CACHE_SX)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    (data / ce.CACHE_2).symlink_to(data / ce.CACHE_SX)
    table, agree = confidence.load(confidence.for_model("gemma-3-270m"))
    confidence.save((table, agree), data / ce.TABLE_NOSX)
    table = table.copy()
    table[SRC_SUFFIX] = 0.95
    table[SRC_SUFFIX + 1] = 0.6
    confidence.save((table, agree), data / ce.TABLE_SX)
    curve = save_curve({"curve": {str(k): 1.0 + 0.05 * k for k in range(65)}, "t1_s": 0.02}, tmp / "curve.json")
    return data, curve


def test_quick_run_on_the_real_model(tmp_path):
    """--quick with lookupkit's rows only (llama-server's rows are the engines bench's, and four servers
    starting would triple this test's time): every row ran, every emitted token is greedy in its batch."""
    from lookupkit import models

    needs.module(models.get("gemma-3-270m").module, f"pip install 'lookupkit[{models.EXTRA}]'")
    needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
    gguf = models.path("gemma-3-270m")
    data, curve = _tiny_task(tmp_path, gguf)
    out = tmp_path / "code.json"
    r = subprocess.run([sys.executable, "-m", "lookupkit.bench.code_engines", "-m", str(gguf), "--data", str(data),
                        "--caches", str(data), "--curve", str(curve), "--quick", "--prompt-tokens", "64",
                        "--engines", "llama-cpp-python", "--policy-drafts", "16", "-o", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env={**os.environ, "LOOKUPKIT_CACHE_DIR": str(tmp_path / "cache")})  # the bench's work files
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["complete"] and {p["index"] % 2 for p in res["prompts"]} == {1}
    names = [row["name"] for row in res["rows"]]
    assert names == ["lcpp:plain", "lk:rule-code2", "lk:policy-nosx-n16", "lk:policy-sx-n16"]
    assert len(res["runs"]) == 2 * len(names) and all(r["n_gen"] == 32 for r in res["runs"])
    checks = res["greedy_checks"]
    assert {c["row"] for c in checks} == set(names) and all(c["greedy"] and c["same_as_timed"] for c in checks)
    assert not any(c["sources"].get("sx") for c in checks if "-nosx-" in c["row"])
    assert all(r.get("replay_equal") is not False for r in res["runs"])
    md = rep.render_markdown(res, out.name)
    assert "### The suffix source" in md and "| `policy-sx-n16` | 2 | 2/2 | 2/2 |" in md
