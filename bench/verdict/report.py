"""What the verdict bench's runs mean (bench/verdict/run.py's rows): every window of k consecutive pairs of a
prompt judged on its spread as `lookupkit generate` judges it, against all its pairs (analyse), the summary
over all rows and the smallest window that never answers otherwise (summarise), and the section of
bench/RESULTS.md from every recorded run (report, write_report)."""

from __future__ import annotations

import statistics
from pathlib import Path

from lookupkit.bench.harness import replace_section, write_text
from lookupkit.integrations.compare import RUNS

WINDOWS = (1, 3, 5, 7)
COMMAND = "python -m lookupkit.bench.verdict"
OLD_COMMAND = "python -m lookupkit.bench.generate_verdict"  # this runner's name in runs recorded before issue 24
SECTION = "## `lookupkit generate`: how many pairs of runs a verdict needs (issue 21)"


def windows(ratios: list, k: int) -> list[list]:
    return [ratios[i:i + k] for i in range(len(ratios) - k + 1)]


def answer(ratios: list, timed: int) -> str:
    """generate's answer on these pairs from their spread alone (load and prediction left out: they are the
    same for every window of a row); one pair: its band (judge calls it uncertain for want of a spread)."""
    from lookupkit.integrations.compare import band, judge

    return judge(ratios, others=0.0, predicted=None, timed=timed).answer if len(ratios) > 1 else band(ratios[0])


def analyse(row: dict) -> dict:
    """Per window size k: the largest relative distance of a k-window's median from all pairs' median, the
    share of k-windows whose answer differs from all pairs' answer, and the share that are uncertain."""
    from lookupkit.integrations.compare import judge

    ratios, timed = row["ratios"], row["timed"]
    full = judge(ratios, others=row["others"], predicted=row["predicted"], timed=timed)
    spread_answer = answer(ratios, timed)
    med = statistics.median(ratios)
    out = {}
    for k in WINDOWS:
        ws = windows(ratios, k)
        if not ws:
            continue
        answers = [answer(w, timed) for w in ws]
        out[str(k)] = {"windows": len(ws), "max_dev": max(abs(statistics.median(w) / med - 1) for w in ws),
                       "differs": sum(a != spread_answer for a in answers) / len(ws),
                       "uncertain": sum(a == "uncertain" for a in answers) / len(ws)}
    return {"answer": full.answer, "verdict": full.text, "spread_answer": spread_answer, "median": med, "by_k": out}


def summarise(rows: list) -> dict:
    """Over all rows, per k: the worst distance from all pairs' median and the share of windows whose
    answer differs; `enough`: the smallest k whose windows never answer otherwise than all pairs."""
    by_k = {}
    for k in map(str, WINDOWS):
        got = [r["by_k"][k] for r in rows if k in r["by_k"]]
        if got:
            n = sum(g["windows"] for g in got)
            by_k[k] = {"max_dev": max(g["max_dev"] for g in got),
                       "differs": sum(g["differs"] * g["windows"] for g in got) / n}
    enough = next((int(k) for k, v in by_k.items() if v["differs"] == 0), None)
    return {"by_k": by_k, "enough": enough, "others_max": max((r["others"] for r in rows), default=None)}


def report(docs: list) -> str:
    """The RESULTS.md section: one table per run (configuration), then the summary over all their rows."""
    lines = [SECTION, ""]
    for doc in docs:
        how = "lookupkit's policy" if doc.get("policy", "lookupkit") == "lookupkit" else "llama.cpp's rule"
        command = doc["command"].replace(OLD_COMMAND, COMMAND, 1)  # the same run, rerunnable as it is written
        lines += [f"`{command}` ({doc['date']}, {doc['machine']['cpu']}, {doc['threads']} threads, "
                  f"{doc['n']} tokens per run, --draft {doc['draft']}, {how}, "
                  f"{'cache ' + Path(doc['cache']).name if doc['cache'] else 'context only'}"
                  f"{', prediction from ' + Path(doc['curve']).name if doc.get('curve') else ''}"
                  f"{'; inputs made by ' + ' and '.join(f'`{c}`' for c in doc['inputs']) if doc.get('inputs') else ''}):", "",
                  "| prompt | task | all pairs: median (min-max) | predicted | answer | others (cores) | " +
                  " | ".join(f"{k} pair{'s' if k > 1 else ''}: max dev / differs" for k in WINDOWS) + " |",
                  "|---|---|---|---|---|---|" + "---|" * len(WINDOWS)]
        for r in doc["rows"]:
            cells = [f"{r['by_k'][str(k)]['max_dev']:.1%} / {r['by_k'][str(k)]['differs']:.0%}" if str(k) in r["by_k"]
                     else "-" for k in WINDOWS]
            pred = f"{r['predicted']:.2f}x" if r.get("predicted") else "-"
            lines.append(f"| {r['prompt']} | {r['task']} | {r['median']:.2f}x ({min(r['ratios']):.2f}-{max(r['ratios']):.2f}) "
                         f"| {pred} | {r['answer']} | {r['others']:.2f} | " + " | ".join(cells) + " |")
        lines.append("")
    s = summarise([r for doc in docs for r in doc["rows"]])
    lines += ["max dev: the farthest a window's median lies from all pairs' median; differs: the share of windows "
              "whose answer (from their spread) is not all pairs' answer. Over all rows: " +
              "; ".join(f"{k} pair{'s' if k != '1' else ''}: medians within {v['max_dev']:.1%}, "
                        f"{v['differs']:.0%} of windows answer otherwise" for k, v in s["by_k"].items()) +
              f". The smallest window that never answers otherwise: {s['enough'] or 'none'} pairs; "
              f"generate's default --runs is {RUNS} (integrations.compare.RUNS, whose docstring says why).", ""]
    return "\n".join(lines)


def write_report(docs: list, results_md: Path) -> None:
    text = results_md.read_text(encoding="utf-8") if results_md.is_file() else "# Results\n"
    write_text(results_md, replace_section(text, SECTION, report(docs)))
