"""formats/ below the core (issue 24): a module that reads a format imports nothing of lookupkit's rooms,
so counts, static, suffix, policy and draft can import it; only the writers (a file from a counts table)
stand on the counts; nothing in formats/ reaches static, policy, draft, replay or the rooms above them."""

from __future__ import annotations

import subprocess
import sys

from test_layout import import_graph, reach

WRITERS = {"lkc_write", "llama", "zst", "streamed", "registry"}  # they write, or read into, counts' tables
LEAVES = {"lookupkit", "lookupkit._version", "lookupkit._lazy", "lookupkit.errors", "lookupkit.files",
          "lookupkit.kernels", "lookupkit.compile_notice"}
ABOVE = ("static", "policy", "draft", "replay", "suffix", "create", "serve", "integrations", "tokenizer", "cli", "bench",
         "corpora")


def formats_modules(graph):
    return sorted(m for m in graph if m.startswith("lookupkit.formats."))


def test_a_format_reader_reaches_nothing_of_lookupkit_but_the_leaves():
    graph = import_graph()
    readers = [m for m in formats_modules(graph) if m.rsplit(".", 1)[1] not in WRITERS]
    assert "lookupkit.formats.lkc_read" in readers and "lookupkit.formats.spans" in readers
    bad = {m: sorted(d for d in reach(graph, m) if not d.startswith("lookupkit.formats") and d not in LEAVES)
           for m in readers}
    assert {m: d for m, d in bad.items() if d} == {}


def test_no_format_module_reaches_a_room_above_the_counts():
    graph = import_graph()
    bad = {m: sorted(d for d in reach(graph, m) if d.split(".")[1:2] and d.split(".")[1] in ABOVE)
           for m in formats_modules(graph)}
    assert {m: d for m, d in bad.items() if d} == {}


def test_opening_a_format_loads_no_counts():
    """At run time too: the package's face imports its registry (and the writers, and the counts) at first
    use only, so the counts' own import of formats.spans and the policy's of formats.lkc_orders stay below."""
    code = ("import sys; import lookupkit.formats; from lookupkit.formats import constmap_probe, ggngcmap, lkc_read, "
            "lkc_orders, lkc_suffix, spans, history_state, token_store; "
            "print(sorted(m for m in sys.modules if m.startswith('lookupkit.') and m.split('.')[1] != 'formats'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(eval(out.stdout.strip().splitlines()[-1]))
    assert loaded <= LEAVES, sorted(loaded - LEAVES)
