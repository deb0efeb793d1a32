"""Issue 15's suffix index: what it costs and what drafting from it pays (run, report -> SUFFIX.md), what it
would draft over a text (replay), and the suffix-array builders judged (candidates). The membership filter
in front of it was measured and left out; its study is retired (the record: SUFFIX_FILTER.md)."""
