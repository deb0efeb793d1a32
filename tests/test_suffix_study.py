"""bench.suffix.run --quick end to end on small made-up corpora (a prose-like id stream and a two-release
"code task" of .npz documents): its JSON agrees with itself (S(C) from the totals, the verdicts from the
numbers, the index's bytes from its sections), caches are reused on a second run, and the report renders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lookupkit.bench.suffix import report as report_suffix
from lookupkit.bench.suffix import run as suffix_study
from lookupkit.replay import tuning

pytestmark = pytest.mark.filterwarnings("ignore")


def _stream(rng, phrases, n_tokens: int) -> np.ndarray:
    """Phrases drawn with Zipf-like weights until n_tokens: long repeats, as in real text and code."""
    w = 1.0 / np.arange(1, len(phrases) + 1)
    picks = rng.choice(len(phrases), size=n_tokens, p=w / w.sum())
    out, n = [], 0
    for i in picks:
        out.append(phrases[i])
        n += len(phrases[i])
        if n >= n_tokens:
            break
    return np.concatenate(out)[:n_tokens].astype("<i4")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("suffix-study")
    rng = np.random.default_rng(15)
    phrases = [rng.integers(0, 3000, rng.integers(3, 40)) for _ in range(300)]
    _stream(rng, phrases, 60_000).tofile(d / "prose.i32")
    _stream(rng, phrases, 12_000).tofile(d / "tune.i32")
    _stream(rng, phrases, 12_000).tofile(d / "eval.i32")
    code = d / "code"
    code.mkdir()
    files = [_stream(rng, phrases, int(rng.integers(600, 1400))) for _ in range(40)]
    np.savez(code / "corpus.npz", **{f"{i:06d}": f for i, f in enumerate(files)})
    changed = [np.concatenate([f[:300], _stream(rng, phrases, 200), f[300:]]) for f in files[:24]]
    np.savez(code / "eval.npz", **{f"{i:06d}": f for i, f in enumerate(changed)})
    return d


def _run(inputs, out, code=True):
    d = inputs
    suffix_study.main(["--quick", "--prose", f"tiny={d / 'prose.i32'}", "--prose-tune", str(d / "tune.i32"),
                       "--prose-eval", str(d / "eval.i32"), "--code", str(d / "code") if code else "none",
                       "--work", str(d / "work"), "-o", str(out)])
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def result(inputs):
    return _run(inputs, inputs / "r1.json")


def test_each_row_says_the_same_in_totals_and_in_S(result):
    assert set(result["corpora"]) == {"tiny", "code"}
    for corpus, c in result["corpora"].items():
        assert set(c["rows"]) == set(report_suffix.ROWS)
        rule = c["rows"]["llama.cpp"]["per_cost"]
        assert len({(r["calls"], r["n_drafted"], r["n_accept"]) for r in rule.values()}) == 1  # one replay
        for name, row in c["rows"].items():
            assert list(row["per_cost"]) == [f"{x:g}" for x in suffix_study.COSTS]
            assert row["us_per_call"]["runs"] == result["timing_runs"] and row["us_per_call"]["median"] > 0
            for cost, r in row["per_cost"].items():
                assert r["replayed_at"] == (None if name == "llama.cpp" else float(cost))
                x = float(cost)
                assert r["S"] == pytest.approx((r["n_accept"] + r["calls"]) / (r["calls"] + x * r["n_drafted"]))
                assert r["accepted_per_call"] == pytest.approx(r["n_accept"] / r["calls"])
                assert r["tokens_per_verify"] == pytest.approx(1 + r["accepted_per_call"])
        no_source = c["rows"]["policy"]["per_cost"].values()
        assert all("sx" not in r["per_source"] for r in no_source)  # a table without suffix rows never drafts from it
        drafted = any("sx" in r["per_source"] for r in c["rows"]["policy+suffix"]["per_cost"].values())
        gate = c["tables"]["policy+suffix"]["about"]["suffix_gate"]  # tune-policy's choice on the held-out ids
        assert (gate["min_match"] is not None or not drafted) and len(gate["tried"]) == len(tuning.GATE_BINS)
        assert drafted or corpus != "code"  # (on the made-up code task the source pays)


def test_index_builds_and_open_are_recorded(result):
    for c in result["corpora"].values():
        ix = c["index"]
        assert ix["bytes"] == sum(ix["sections"].values())
        assert ix["bytes_per_token"] == pytest.approx(ix["bytes"] / c["corpus_tokens"])
        assert set(c["builds"]) == set(suffix_study.QUICK_VARIANTS)
        for b in c["builds"].values():
            assert b["n_tokens"] == c["corpus_tokens"] and b["seconds"]["median"] > 0
            assert b["peak_tree_rss"]["median"] >= b["runs"][0]["driver_peak_rss"] > 0
        assert c["open"]["fresh_process_ms"]["runs"] >= 1 and c["open"]["in_process_us"]["median"] > 0
    assert result["corpora"]["code"]["builds"]["o6+index"]["n_documents"] == 40
    assert result["corpora"]["code"]["index"]["documents"] == 40


def test_verdicts_follow_the_numbers(result):
    ts = result["targets"]
    assert ts == report_suffix.targets(result)
    for t in ts:
        if t["value"] is None:
            assert t["met"] is None
        else:
            assert t["met"] == (t["value"] >= t["limit"] if t["op"] == ">=" else t["value"] <= t["limit"])
    rows = result["corpora"]["code"]["rows"]
    ratio = rows["policy+suffix"]["per_cost"]["0.25"]["S"] / rows["policy"]["per_cost"]["0.25"]["S"]
    assert ts[0]["value"] == pytest.approx(ratio)
    assert ts[-1]["met"] is None  # no 541 MB corpus in this run


def test_second_run_reuses_caches_and_report_renders(inputs, result, tmp_path):
    again = _run(inputs, tmp_path / "r2.json", code=False)
    assert list(again["corpora"]) == ["tiny"] and all(b["reused"] for b in again["corpora"]["tiny"]["builds"].values())
    assert again["corpora"]["tiny"]["builds"] == {k: {**v, "reused": True} for k, v in
                                                  result["corpora"]["tiny"]["builds"].items()}
    md, res_md = tmp_path / "SUFFIX.md", tmp_path / "RESULTS.md"
    res_md.write_text("# Results\n\n## Earlier\n\nkept\n")
    for _ in range(2):  # the section is replaced, not appended twice
        suffix_study.main(["--from", str(inputs / "r1.json"), "--suffix-md", str(md), "--results-md", str(res_md)])
    text = res_md.read_text()
    assert text.startswith("# Results\n\n## Earlier\n\nkept\n\n" + report_suffix.SECTION)
    assert text.count(report_suffix.SECTION) == 1 and "SUFFIX.md" in text
    page = md.read_text()
    assert "--quick run" in page and "| tiny |" in page and "| code |" in page and "## Targets" in page
