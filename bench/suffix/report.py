"""The suffix study's verdicts and tables (bench.suffix.run): issue 15's targets, each met or not from the
measured numbers, bench/SUFFIX.md, and the short section of bench/RESULTS.md that links it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from lookupkit.bench.harness import replace_section, write_text

SECTION = "## Drafting from the longest match: the suffix index (issue 15)"
ROWS = {"llama.cpp": "llama.cpp's rule (--draft {rule})", "policy": "policy --orders 2-6, no suffix source",
        "policy+suffix": "policy + suffix source"}
BUILD_NAMES = {"2gram": "2-gram only", "2gram+index": "2-gram + suffix index", "o6": "orders 2-6",
               "o6+index": "orders 2-6 + suffix index"}
TARGET_COST = "0.25"
LARGEST = "541MB"
GB = 1e9


def _target(target: str, measured: str, value: float | None, op: str, limit: float) -> dict:
    met = None if value is None else (value >= limit if op == ">=" else value <= limit)
    return {"target": target, "measured": measured, "value": value, "op": op, "limit": limit, "met": met}


def _s(row: dict, c: str) -> float:
    return row["per_cost"][c]["S"]


def _code_targets(code: dict | None) -> list[dict]:
    if code is None:
        return [_target("code task targets", "not measured (no code task in this run)", None, ">=", 1.3)]
    r = code["rows"]
    w, wo = _s(r["policy+suffix"], TARGET_COST), _s(r["policy"], TARGET_COST)
    a = r["policy+suffix"]["per_cost"][TARGET_COST]["accepted_per_call"]
    b = r["llama.cpp"]["per_cost"][TARGET_COST]["accepted_per_call"]
    return [_target("code task: S(0.25) with the suffix source >= 1.3x the policy --orders 2-6 without it",
                    f"{w:.3f} vs {wo:.3f} ({w / wo:.2f}x)", w / wo, ">=", 1.3),
            _target("code task: mean accepted length (accepted per draft call, C = 0.25) >= 2x llama.cpp's rule's",
                    f"{a:.3f} vs {b:.3f}" + (f" ({a / b:.2f}x)" if b else ""), a / b if b else None, ">=", 2.0)]


def targets(result: dict) -> list[dict]:
    """Issue 15's targets from the measured numbers (value None: not measured in this run)."""
    cs = result["corpora"]
    prose = {n: c for n, c in cs.items() if c["kind"] == "prose"}
    out = _code_targets(cs.get("code"))
    if prose:
        worst = min((_s(c["rows"]["policy+suffix"], k) / _s(c["rows"]["policy"], k), n, k)
                    for n, c in prose.items() for k in c["rows"]["policy"]["per_cost"])
        out.append(_target("WikiText valid: S(C) with the source never below the no-source policy's, at any C",
                           f"lowest ratio {worst[0]:.4f} ({worst[1]}, C = {worst[2]})", worst[0], ">=", 1.0))
    else:
        out.append(_target("WikiText valid target", "not measured (no prose corpus)", None, ">=", 1.0))
    if cs:
        bpt = max((c["index"]["bytes_per_token"], n) for n, c in cs.items())
        out.append(_target("index <= 9 bytes per corpus token on disk (ids + suffix array + their tables)",
                           f"largest {bpt[0]:.3f} ({bpt[1]})", bpt[0], "<=", 9.0))
        op = max((c["open"]["fresh_process_ms"]["median"], n) for n, c in cs.items())
        out.append(_target("open <= 1 ms whatever the size (StaticCache.open(path).suffix, fresh process, median)",
                           f"slowest {op[0]:.3f} ms ({op[1]})", op[0], "<=", 1.0))
        us = max((c["rows"]["policy+suffix"]["us_per_call"]["median"], n) for n, c in cs.items())
        out.append(_target("draft call <= 5 us on average (policy + suffix source, C = 0.25, median of runs)",
                           f"slowest {us[0]:.2f} us ({us[1]})", us[0], "<=", 5.0))
    b = cs.get(LARGEST, {}).get("builds", {}).get("2gram+index")
    out.append(_target("541 MB build (2-gram + suffix index, -j 2) <= 3 min",
                       f"{b['seconds']['median']:.1f} s" if b else "not measured",
                       b and b["seconds"]["median"], "<=", 180.0))
    pss = b and b.get("peak_tree_pss")
    out.append(_target("541 MB build (2-gram + suffix index, -j 2) <= 2 GB peak (process tree PSS)",
                       f"{pss['median'] / GB:.3f} GB (tree RSS {b['peak_tree_rss']['median'] / GB:.3f} GB, driver "
                       f"{b['driver_peak_rss']['median'] / GB:.3f} GB)" if pss else "not measured",
                       pss and pss["median"] / GB, "<=", 2.0))
    return out


def _range(c: dict | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    if c is None:
        return "–"
    m = format(c["median"] * scale, fmt)
    return m if c["runs"] == 1 else f"{m} ({format(c['min'] * scale, fmt)}–{format(c['max'] * scale, fmt)})"


def targets_table(result: dict) -> list[str]:
    verdict = {None: "n/a", True: "yes", False: "**no**"}
    return ["| target | measured | met |", "|---|---|---|",
            *(f"| {t['target']} | {t['measured']} | {verdict[t['met']]} |" for t in result["targets"])]


def _command(result: dict) -> str:
    """The run's command without its --note (a remark for the report, not a setting of the run)."""
    words = shlex.split(result["command"])
    if "--note" in words:
        at = words.index("--note")
        del words[at:at + 2]
    return shlex.join(words)


def _how(result: dict) -> list[str]:
    m, g = result["machine"], result["git"]
    return [f"`{_command(result)}`; started {result['started']}, finished {result.get('finished', '(unfinished)')}, "
            f"commit {str(g.get('commit'))[:12]}{' (dirty tree)' if g.get('dirty') else ''}; {m['cpu']}, "
            f"{m['cores']} cores, {m['mem_gib']} GiB; load average {_loads(result)} over the run."
            + (" **A --quick run on tiny inputs: not a measurement.**" if result.get("quick") else "")
            + (f" Note: {result['note']}" if result.get("note") else ""), "",
            "Every corpus is token ids (Gemma 3 for WikiText and the code task), so tokenizing is not measured. "
            "Prose: the first 25 MB / 100 MB / all 541 MB of ../shared/corpora/wiki541.txt.zst; the policy's "
            "tables learn on the WikiText-103 test split (removed from the corpus) and the rows replay "
            "WikiText-103 *valid* (`wiki.valid.tokens`, the word-level text, in Gemma ids). Code: django 4.2's "
            ".py files are the corpus (one document per file), the 5.0 files that are new or changed the text "
            "(`python -m lookupkit.bench.suffix_code_task`): tables learn on the even-indexed changed files, the "
            "rows replay the odd-indexed ones. One cache per corpus, `lookup-create --orders 2-6 --suffix-index "
            f"-j {result['jobs']}`, read by every row: llama.cpp's rule reads its 2-grams; the policy without the "
            "source uses a table learnt with the same corpus's `--orders 2-6` cache (no suffix rows, so it never "
            "drafts from the index); the policy with it, a table learnt with the cache holding the index. "
            f"Replays: `lookup-stats --json -c {result['n_ctx']}`; llama.cpp's rule with --draft "
            f"{result['rule_draft']} and its thresholds, replayed once, its S(C) computed at each C from that "
            f"replay; the policy with at most {result['policy_draft']} drafted tokens per call, replayed at each C "
            "it drafts for. S(C) = (accepted + calls) / (calls + C · drafted): the expected speed-up at a verify "
            "cost of C per drafted token."]


def _cost_tables(result: dict) -> list[str]:
    cs = result["corpora"]
    lines = ["Bytes per token: the sections suffix_text + suffix_sa + suffix_starts + suffix_second (from the .lkc "
             f"header) over the corpus's tokens. Build: `lookup-create --tokens … -j {result['jobs']} "
             f"--memory-budget {result['memory_budget']} --json`: wall seconds, and the peak memory of its process "
             "tree: PSS (each page shared by k processes counted 1/k) summed over the driver and its workers every "
             "50 ms, at least the driver's own VmHWM; in brackets the same for RSS (a page the forked workers "
             "share counted once per process: an upper bound), "
             f"{_runs(result)}.{_reused(cs)}", "",
             "| corpus | tokens | index bytes | B/token | B/position | " +
             " | ".join(f"{v}: s, peak GB" for v in BUILD_NAMES.values()) + " |", "|---" * (5 + len(BUILD_NAMES)) + "|"]
    for n, c in cs.items():
        ix = c["index"]
        lines.append(f"| {n} | {c['corpus_tokens']:,} | {ix['bytes']:,} | {ix['bytes_per_token']:.3f} | "
                     f"{ix['bytes_per_position']:.3f} | "
                     + " | ".join(_build_cell(c["builds"].get(v)) for v in BUILD_NAMES) + " |")
    lines += ["", "## Open and draft times", "",
              "Open: `StaticCache.open(path).suffix` of the cache with orders 2-6 + index, warm page cache, in fresh "
              "processes (lookupkit.suffix imported before the clock starts) and repeated in one; beside it the "
              "same fresh open of the 2-gram-only file of the same corpus (the same provenance header, no index): "
              "the header's size (one record per source document) is what the open reads. Draft call: "
              "lookup-stats' own timing, the compiled replay's time (drafting and the context updates of every "
              "token a call yields, page faults included) over its draft calls, and over the tokens the calls "
              f"yield (accepted + 1 each), drafting for C = {result['timed_cost']:g}: median (min–max) of "
              f"{result['timing_runs']} replay(s) run after the replays below, in the same process.", "",
              "| corpus | header bytes | open, fresh (ms) | open, in process (µs) | 2-gram file, fresh (ms) | "
              + " | ".join(f"µs/call {k}" for k in ROWS) + " | " + " | ".join(f"µs/token {k}" for k in ROWS) + " |",
              "|---" * (5 + 2 * len(ROWS)) + "|"]
    for n, c in cs.items():
        o = c["open"]
        lines.append(f"| {n} | {c['index']['header_bytes']:,} | {_range(o['fresh_process_ms'], fmt='.3f')} | "
                     f"{_range(o['in_process_us'], fmt='.1f')} | "
                     f"{_range(o.get('control_fresh_process_ms'), fmt='.3f')} | "
                     + " | ".join(_range(c["rows"][k]["us_per_call"]) for k in ROWS) + " | "
                     + " | ".join(_range(c["rows"][k]["us_per_token"]) for k in ROWS) + " |")
    return lines


def _replay_tables(result: dict) -> list[str]:
    lines = []
    for n, c in result["corpora"].items():
        lines += [f"**{n}** ({c['kind']}): corpus {c['corpus_tokens']:,} tokens; tables learnt on "
                  f"{c['tune_tokens']:,} held-out tokens; the rows replay {c['eval_tokens']:,}. "
                  + _gate(c["tables"]["policy+suffix"]["about"].get("suffix_gate")), "",
                  "| row | C | calls | drafted | accepted/call | tokens/verify | S(C) | "
                  "suffix source: drafted, accepted |",
                  "|---|---|---|---|---|---|---|---|"]
        for k, label in ROWS.items():
            for i, (cost, r) in enumerate(c["rows"][k]["per_cost"].items()):
                sx = (r.get("per_source") or {}).get("sx")
                name = label.format(rule=result["rule_draft"]) if i == 0 else ""
                lines.append(f"| {name} | {cost} | {r['calls']:,} | {r['n_drafted']:,} | "
                             f"{r['accepted_per_call']:.4f} | {r['tokens_per_verify']:.4f} | {r['S']:.4f} | "
                             + (f"{sx['drafted']:,}, {sx['accept']:.1f} %" if sx else "–") + " |")
        lines.append("")
    return lines


def _gate(gate: dict | None) -> str:
    """What tune-policy's suffix gate chose on the held-out ids (replay.tuning.gate_suffix)."""
    if not gate:
        return "The table with the index was learnt without a suffix gate."
    bounds = ", ".join(f"{r['min_match']}: {r['worst_bound']:.5f}" for r in gate["tried"])
    chosen = (f"drafts from the source after matches of {gate['min_match']}+ tokens" if gate["min_match"] else
              "leaves the source out (no gate's bound above 1: the no-source tables)")
    return (f"Suffix gate (tune-policy, on the held-out halves; min match: worst bound {bounds}): the table "
            f"{chosen}.")


def render(result: dict, json_name: str) -> str:
    """bench/SUFFIX.md: how it was run, the targets, the index's costs, open and draft times, the replays."""
    return "\n".join(["# The suffix index: what it costs and what drafting from it pays (issue 15)", "",
                      f"Results: [`results/{json_name}`](results/{json_name}).", "", *_how(result), "",
                      "## Targets", "", *targets_table(result), "", "## The index: size and build", "",
                      *_cost_tables(result), "", "## Replays", "", *_replay_tables(result),
                      "## Commands", "", "Each step's command is in the results JSON (`builds.*.command`, "
                      "`tables.*.command`, `rows.*.command`). To run it again (caches and tables are reused when "
                      "their sidecar JSON says the same command made them from the same inputs; `--rebuild` makes "
                      "them again):", "", "```", _command(result), "```", ""])


def _build_cell(b: dict | None) -> str:
    if b is None:
        return "not built"
    pss = b.get("peak_tree_pss")
    rss = _range(b["peak_tree_rss"], 1 / GB, ".3f")
    return f"{_range(b['seconds'], fmt='.1f')}, " + (f"{_range(pss, 1 / GB, '.3f')} ({rss})" if pss else rss)


def _reused(cs: dict) -> str:
    old = sorted({f"{n} {v} ({b['date']})" for n, c in cs.items() for v, b in c["builds"].items() if b.get("reused")})
    return f" Builds measured by an earlier run and reused (same command, same inputs): {', '.join(old)}." * bool(old)


def _loads(result: dict) -> str:
    xs = [result["machine"]["loadavg_at_start"][0]] + [x for c in result["corpora"].values()
                                                       for x in (c["load_before"], c["load_after"])]
    return f"{min(xs):.2f}–{max(xs):.2f}"


def _note(result: dict) -> str:
    return f"; {result['note']}" if result.get("note") else ""


def _runs(result: dict) -> str:
    n = result["build_runs"]
    return "one build per variant" if n == 1 else f"median (min–max) of {n} builds"


def section(result: dict, json_name: str) -> str:
    """The short section at the end of bench/RESULTS.md: how to run it, the targets, a link to SUFFIX.md."""
    costs = ", ".join(f"{c:g}" for c in result["costs"])
    return "\n".join([SECTION, "", f"`{_command(result)}` ({', '.join(result['corpora'])}; results "
                      f"[`results/{json_name}`](results/{json_name}), commit {str(result['git'].get('commit'))[:12]}, "
                      f"load {_loads(result)}{_note(result)}): the suffix index's size, build, open and draft times, "
                      "and llama.cpp's rule, the policy --orders 2-6 and the policy with the suffix source replayed "
                      f"at C = {costs}. Every table and how it was measured: [SUFFIX.md](SUFFIX.md).", "",
                      *targets_table(result), ""])


def write(result: dict, json_path: Path, suffix_md: Path, results_md: Path) -> None:
    name = os.path.basename(json_path)
    result = {**result, "targets": targets(result)}
    write_text(suffix_md, render(result, name))
    old = results_md.read_text() if results_md.exists() else ""
    write_text(results_md, replace_section(old, SECTION, section(result, name)))
    print(f"wrote {suffix_md} and the section of {results_md}")
