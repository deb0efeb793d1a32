"""The engines bench's harness logic, without a model run: llama-server's request and response, the
prompt selection, divergence and acceptance counting, the report's figures and its target verdicts."""

from __future__ import annotations

import json

import pytest

from lookupkit.bench import llama_server
from lookupkit.bench.engines import rows as engine_rows
from lookupkit.bench.engines import run as engines
from lookupkit.bench.engines import report as rep
from lookupkit.bench.engines.runners import accepted_of, record
from lookupkit.errors import InputError
import needs


def test_completion_request_is_greedy_fixed_length_and_fresh():
    body = llama_server.completion_body([2, 10, 11], 256)
    assert body["prompt"] == [2, 10, 11] and body["n_predict"] == 256
    assert body["temperature"] == 0 and body["top_k"] == 1 and body["ignore_eos"] is True
    assert body["cache_prompt"] is False and body["return_tokens"] is True


def test_completion_response_parsed_with_and_without_draft_counters():
    resp = {"tokens": [5, 6, 7], "timings": {"prompt_n": 300, "prompt_ms": 400.0, "predicted_n": 3,
                                            "predicted_ms": 60.0, "predicted_per_second": 50.0,
                                            "draft_n": 9, "draft_n_accepted": 4}}
    r = llama_server.parse_completion(resp, 0.5)
    assert r["tokens"] == [5, 6, 7] and r["n_gen"] == 3 and r["t_prompt_s"] == pytest.approx(0.4)
    assert r["t_gen_s"] == pytest.approx(0.06) and (r["drafted"], r["accepted"]) == (9, 4)
    resp["timings"].update(predicted_n=256, draft_n=200, draft_n_accepted=150)
    assert llama_server.parse_completion(resp, 0.5)["calls"] == 256 - 1 - 150
    del resp["timings"]["draft_n"], resp["timings"]["draft_n_accepted"]
    assert llama_server.parse_completion(resp, 0.5)["drafted"] is None
    with pytest.raises(InputError, match="return_tokens"):
        llama_server.parse_completion({"timings": {}}, 0.1)


def test_server_flags_keep_amx_out_and_build_only_the_server():
    flags = set(llama_server.CMAKE_FLAGS)
    assert {"-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= flags
    assert {"-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"} <= flags


def test_accepted_counts_what_the_final_sequence_agrees_with():
    seq = [1, 2, 3, 4, 5, 6]
    assert accepted_of([(3, [4, 5, 9]), (5, [6, 7]), (2, []), (6, [1])], seq) == [2, 1, 0, 0]
    r = record([4, 5], 0.1, 0.2, [3, 2], [2, 1])
    assert (r["calls"], r["drafted"], r["accepted"]) == (2, 5, 3) and r["n_gen"] == 2


def test_first_divergence():
    assert rep.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert rep.first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert rep.first_divergence([1, 2], [1, 2, 3]) == 2


def test_caches_found_and_missing(tmp_path):
    (tmp_path / "gemma-wiki25.lkc").write_bytes(b"x")
    found, missing = engines.find_caches(tmp_path)
    assert list(found) == ["25MB"] and missing == ["100MB", "541MB", "541MB-o6"]
    assert engines.find_caches(None) == ({}, list(engine_rows.CACHES))
    assert engine_rows.cache_command("541MB-o6").endswith("-j 1 --orders 2-6 -lcs gemma-wiki541-o6.lkc")
    assert engine_rows.rule_cache("541MB-o6") == "541MB" and engine_rows.rule_cache("ctx") == "ctx"


def test_bad_arguments_are_one_line_errors(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(InputError, match="unknown engine"):
        engines.parse_args(["-m", str(model), "--engines", "vllm"])
    with pytest.raises(InputError, match="unknown task"):
        engines.parse_args(["-m", str(model), "--tasks", "chat"])
    with pytest.raises(InputError, match="does not exist"):
        engines.parse_args(["-m", str(tmp_path / "absent.gguf")])
    a = engines.parse_args(["-m", str(model), "--quick"])
    assert (a.prompts, a.n_new, a.reps) == (2, 32, 1)


def test_prompts_are_a_fixed_seeded_selection():
    needs.shared("corpora/wiki.valid.tokens")
    a = engines.select_paragraphs(engines.VALID, 8, 13)
    assert a == engines.select_paragraphs(engines.VALID, 8, 13) and len(set(a)) == 8
    assert all(len(p.split()) >= 250 for p in a)
    copy = engines.prompt_text(a[0], "copy")
    assert copy.startswith(engines.prompt_text(a[0], "wiki") + "\n\n")
    assert copy.split("\n\n")[1].split() == a[0].split()[:12]


# -- the report, on synthetic results --------------------------------------------------------------

def _run(row, task, prompt, rep_, tokens, t_gen, drafted=None, accepted=None, cost=None):
    r = {"row": row, "task": task, "prompt": prompt, "rep": rep_, "tokens": tokens, "n_gen": len(tokens),
         "t_prompt_s": 0.1, "t_gen_s": t_gen, "calls": None, "drafted": drafted, "accepted": accepted}
    if drafted is not None:
        r.update(calls=10)
    if cost is not None:
        r.update(cost_units=cost, replay_equal=True)
    return r


def _results(mod_t_gen=1.0, policy_t_gen=0.5, floor_diverges=True):
    rows = [{"name": "server:none", "engine": "llama-server", "plain": True},
            {"name": "server:ngram-mod", "engine": "llama-server"},
            {"name": "lcpp:plain", "engine": "llama-cpp-python", "plain": True},
            {"name": "lcpp:plain-b32", "engine": "llama-cpp-python", "floor": True},
            {"name": "lk:rule-ctx", "engine": "llama-cpp-python"},
            {"name": "lk:policy-ctx-n16", "engine": "llama-cpp-python", "rule_row": "lk:rule-ctx"}]
    toks = list(range(100))
    alt = toks[:40] + [7] * 60
    runs = []
    for task in ("wiki", "copy"):
        for p in range(2):
            for r in range(2):
                runs += [_run("server:none", task, p, r, toks, 2.0),
                         _run("server:ngram-mod", task, p, r, toks, mod_t_gen, 50, 40),
                         _run("lcpp:plain", task, p, r, toks, 2.0, cost=99.0),
                         _run("lcpp:plain-b32", task, p, r, alt if floor_diverges and p == 0 else toks, 2.0, cost=99.0),
                         _run("lk:rule-ctx", task, p, r, toks, 0.8, 30, 20, cost=40.0),
                         _run("lk:policy-ctx-n16", task, p, r, alt if p == 0 else toks, policy_t_gen, 60, 50, cost=25.0)]
    return {"kind": "engines", "date": "2026-12-01", "wall_s": 60.0, "git": {"commit": "abc"},
            "machine": {"cpu": "x", "cores": 2}, "versions": {"lookupkit": "0"}, "args": {"prompts": 2},
            "loadavg": {"before_runs": [1.0], "now": [1.0]}, "complete": True, "caches": {}, "caches_missing": ["25MB"],
            "calibration": {"source": "c.json", "t1_s": 0.02, "curve": {0: 1.0, 1: 1.2}},
            "rows": rows, "runs": runs, "lcs_load": [], "lookupkit_open": [], "command": "python -m x"}


def test_summary_figures():
    figs = rep.summarise(_results())
    f = figs[("wiki", "lk:policy-ctx-n16")]
    assert f["tok_s"] == pytest.approx(200 / 1.0) and f["speedup"] == pytest.approx(200 / 50)
    assert (f["drafted"], f["accepted"], f["calls"]) == (120, 100, 20)
    assert f["pred_gen_s"] == pytest.approx(0.02 * 50) and f["pred_ratio"] == pytest.approx(1.0)
    assert (f["diverged"], f["compared"], f["first_div"]) == (2, 4, [40, 40])
    assert figs[("wiki", "lcpp:plain")]["vs"].startswith("itself")
    assert figs[("wiki", "lcpp:plain")]["diverged"] == 0


def test_targets_met_and_not_met():
    data = _results()
    verdicts = {t: v for t, _, v in rep.targets(data, rep.summarise(data))}
    assert verdicts["WikiText: lookupkit's best row >= llama-server ngram-mod tok/s"] == "met"
    assert verdicts["policy never loses to plain at any cache size, never slower than llama.cpp's rule"] == "met"
    assert verdicts["drafting diverges from plain no more often than the plain-vs-plain floor"] == "met"
    assert next(v for t, v in verdicts.items() if t.startswith("replay")) == "met"  # worst: plain 1.98 s vs 2 s
    data = _results(mod_t_gen=0.1, policy_t_gen=3.0, floor_diverges=False)
    verdicts = {t: v for t, _, v in rep.targets(data, rep.summarise(data))}
    assert verdicts["WikiText: lookupkit's best row >= llama-server ngram-mod tok/s"] == "**not met**"
    assert verdicts["policy never loses to plain at any cache size, never slower than llama.cpp's rule"] == "**not met**"
    assert verdicts["drafting diverges from plain no more often than the plain-vs-plain floor"] == "**not met**"
    assert next(v for t, v in verdicts.items() if t.startswith("replay")) == "**not met**"  # 0.5 s vs 3 s


def test_missing_rows_are_not_measured():
    data = _results()
    data["rows"] = [r for r in data["rows"] if r["name"] != "server:ngram-mod"]
    data["runs"] = [r for r in data["runs"] if r["row"] != "server:ngram-mod"]
    verdicts = {t: v for t, _, v in rep.targets(data, rep.summarise(data))}
    assert verdicts["copying task: lookupkit's best row >= llama-server ngram-mod tok/s"] == "not measured"


def test_render_writes_markdown_and_plot(tmp_path):
    path = tmp_path / "engines.json"
    path.write_text(json.dumps(_results()))
    md = rep.render(path, tmp_path / "ENGINES.md", tmp_path / "engines.png")
    assert "| llama-cpp-python `policy-ctx-n16` |" in md and "### Targets" in md
    assert (tmp_path / "engines.png").stat().st_size > 1000
    path.write_text(json.dumps({"kind": "other"}))
    with pytest.raises(InputError, match="not an engines bench result"):
        rep.load(path)


def test_policy_slower_than_the_rule_is_not_met_even_when_it_beats_plain():
    data = _results(policy_t_gen=1.0)  # rule-ctx: 0.8 s, plain: 2 s
    verdicts = {t: v for t, _, v in rep.targets(data, rep.summarise(data))}
    assert verdicts["policy never loses to plain at any cache size, never slower than llama.cpp's rule"] == "**not met**"


def test_deadline_and_planned_runs(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(InputError, match="HH:MM"):
        engines.parse_args(["-m", str(model), "--deadline", "late"])
    a = engines.parse_args(["-m", str(model), "--deadline", "22:05", "--prompts", "8", "--hf-prompts", "4", "--reps", "2"])
    assert a.deadline > 0
    rows = [{"engine": "llama-server"}, {"engine": "transformers"}]
    assert engines.expected_runs(a, rows) == (8 + 4) * 2 * 2
