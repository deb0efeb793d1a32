"""The serving bench's harness without llama-server: its client against `lookupkit serve` on the tiny
exact-arithmetic model (tokens, TTFT, concurrency, nothing lost), a server process's readiness and memory,
a file mapping's Rss/Pss, the report's target verdicts on hand-made results, and its refusals."""

from __future__ import annotations

import mmap
import os

import pytest

import needs

needs.module("gguf", "pip install 'lookupkit[dev]' (gguf writes the tiny model)")
llama_cpp = needs.module("llama_cpp", "pip install 'lookupkit[llama]'")
needs.module("uvicorn", "pip install 'lookupkit[serve]'")

from lookupkit.bench.serve import client, report, run  # noqa: E402
from lookupkit.bench.serve.servers import Server, file_memory, lookupkit_cmd  # noqa: E402
from lookupkit.errors import InputError  # noqa: E402
from lookupkit.integrations.llama_generate import generate  # noqa: E402
from lookupkit.serve.startup import open_server  # noqa: E402
from serve_helpers import running  # noqa: E402
from tiny_models import tiny_gguf  # noqa: E402,F401


@pytest.fixture(scope="module")
def prompts(tiny_gguf):
    llm = llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, verbose=False)
    ids = [llm.tokenize(t.encode(), add_bos=True) for t in ("The quick brown fox", "Once upon a time", "1, 2, 3,")]
    want = [generate(llm, p, 48, stop_at_eos=False).tokens for p in ids]
    llm.close()
    return ids, want


def test_the_client_gets_greedy_tokens_and_times_them(tiny_gguf, prompts):
    ids, want = prompts
    served = open_server(tiny_gguf, n_draft=16, parallel=2, n_ctx=2048, threads=1)
    try:
        with running(served) as url:
            port = int(url.rsplit(":", 1)[1])
            one = client.complete(port, ids[0], 48)
            assert one["tokens"] == want[0] and one["n_gen"] == 48
            assert 0 < one["ttft_s"] <= one["wall_s"] and one["drafted"] >= one["accepted"] >= 0
            many = client.concurrent(port, ids * 2, 48, clients=2)
            assert [r["tokens"] for r in many["runs"]] == want * 2  # every answer, in prompt order, none lost
            assert many["tokens"] == 6 * 48 and many["tok_per_s"] == pytest.approx(many["tokens"] / many["wall_s"])
            with pytest.raises(InputError, match="answered 400"):
                client.complete(port, [], 4)
    finally:
        served.llm.close()


def test_a_server_process_is_timed_to_ready_and_stopped(tiny_gguf, tmp_path):
    s = Server(lambda port: lookupkit_cmd(tiny_gguf, port, 1, 512, 1, ["--draft", "0"]), tmp_path / "log", "lk")
    with s:
        assert s.t_ready_s > 0 and s.memory_ready["VmRSS"] > 0
        assert client.complete(s.port, [1, 2, 3], 4)["n_gen"] == 4
    assert s.proc.poll() is not None
    bad = Server(lambda port: lookupkit_cmd(tmp_path / "missing.gguf", port, 1, 512, 1, []), tmp_path / "bad", "lk")
    with pytest.raises(InputError, match="exited with"):
        bad.__enter__()


def test_file_memory_counts_the_pages_of_one_files_mappings(tmp_path):
    path = tmp_path / "cache.bin"
    path.write_bytes(os.urandom(64 * 4096))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        before = file_memory(os.getpid(), path)
        sum(m[i] for i in range(0, 32 * 4096, 4096))  # touch 32 pages
        after = file_memory(os.getpid(), path)
    assert before["mappings"] == after["mappings"] == 1
    assert after["rss"] >= 32 * 4096 and after["pss"] <= after["rss"]
    assert file_memory(os.getpid(), tmp_path / "other")["mappings"] == 0


def _runs(row, speeds, task="prose"):
    return [{"row": row, "task": task, "prompt": i, "n_gen": 100, "wall_s": 100 / v, "ttft_s": 0.1, "drafted": 10,
             "accepted": 5, "load1": 0.1} for i, v in enumerate(speeds)]


def _results(lk_policy, lk_plain=(60, 60)):
    runs = (_runs("server:none", (60, 60)) + _runs("server:ngram-mod", (80, 80)) + _runs("lk:plain", lk_plain)
            + _runs("lk:policy", lk_policy))
    ready = {r: {"t_ready_s": 1.0} for r in ("server:none", "server:ngram-mod", "lk:plain", "lk:policy")}
    return {"command": "x", "date": "d", "git": {"commit": "abc"}, "machine": {"cpu": "c", "cores": 2},
            "args": {"n_new": 100, "clients": [1, 4]}, "tasks": {"prose": {"runs": runs, "ready": ready}},
            "concurrency": {"prose": [{"row": "server:ngram-mod", "clients": 4, "tok_per_s": 100.0},
                                      {"row": "lk:policy", "clients": 4, "tok_per_s": 99.0}]},
            "startup": {"runs": [{"row": "lk:model", "cache": None, "t_ready_s": 1.0},
                                 {"row": "lk:policy-static", "cache": "541MB", "t_ready_s": 2.5}],
                        "sharing": {"requests": 4, "alone": {"rss": 10, "pss": 10}, "two": [{"pss": 5}, {"pss": 6}],
                                    "pss_total_two": 11, "ratio": 1.1}}}


def _verdict(results, fragment):
    found = [ok for what, ok, _ in report.targets(results) if fragment in what]
    assert len(found) == 1, fragment
    return found[0]


def test_the_report_judges_each_target_from_the_numbers():
    good, worse = _results((96, 96)), _results((90, 94), lk_plain=(55, 55))
    assert _verdict(good, ">= 1.2x ngram-mod") is True  # 96 / 80 = 1.2
    assert _verdict(worse, ">= 1.2x ngram-mod") is False  # 1.15x
    assert _verdict(good, "not below llama-server none") is True
    assert _verdict(_results((50, 50), lk_plain=(58, 58)), "not below llama-server none") is False
    assert _verdict(good, "lk:plain within 5 %") is True and _verdict(worse, "lk:plain within 5 %") is False
    assert _verdict(good, "4 clients") is False  # 0.99x
    assert _verdict(good, "start-up with the 541 MB cache") is False  # +1.5 s
    assert _verdict(good, "one copy") is True  # 1.1x
    text = report.markdown(good)
    assert "| lk:policy | 96.0 | 1.60 | 1.20 |" in text and "NOT met" in text


def test_the_report_judges_each_source_against_the_context_alone():
    res = _results((96, 96))
    res["tasks"]["prose"]["runs"] += (_runs("lk:policy-static", (96, 96)) + _runs("lk:policy-learn-history", (90, 92))
                                      + _runs("lk:policy-own", (106, 106)) + _runs("lk:policy-static-learn-dynamic", (1, 1)))
    assert _verdict(res, "lk:policy-static not below the context alone") is True  # 96 / 96
    assert _verdict(res, "lk:policy-learn-history not below") is False  # 0.95x
    assert _verdict(res, "lk:policy-own >= 1.1x the context alone") is True  # 1.104x
    assert not [what for what, _, _ in report.targets(res) if "static-learn-dynamic" in what and "context" in what]


def test_the_bench_refuses_what_it_cannot_run(tmp_path):
    with pytest.raises(InputError, match="--caches"):
        run.parse_args([])
    with pytest.raises(InputError, match="unknown task"):
        run.parse_args(["--caches", str(tmp_path), "--tasks", "poetry"])
    with pytest.raises(InputError, match="--curve"):
        run.parse_args(["--caches", str(tmp_path), "--curve", str(tmp_path / "none.json")])
    with pytest.raises(InputError, match="--cache-rows"):
        run.cache_rows(run.CURVE, 16, tmp_path, ["missing"])
