"""Issue 15's suffix index: what it costs and what drafting from it pays (run, report -> SUFFIX.md), what it
would draft over a text (replay), the suffix-array builders judged (candidates), and the membership filter
in front of it that was left out (filter, filter_build, filter_kernels -> SUFFIX_FILTER.md)."""
